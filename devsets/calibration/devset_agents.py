"""A development set from real public agent runs (mini-swe-agent and SWE-agent trajectories).

The runs are read where they lie (``../shared/agent-trajectories`` beside the
checkout; never copied into the project) with the importers of
:mod:`fidelity.formats`. Every step with an observation yields:

- ``faithful``: the real observation against an untouched copy;
- ``second_run``: the real observation against the same output with what
  really varies between two runs varied (:func:`second_run`: durations,
  hexadecimal ids, memory addresses, temporary and pip folders, test-runner
  seeds, ``PYTHONHASHSEED``, dates, PIDs where the action prints one, and the order
  pytest-xdist reports failures in: the order its workers finish them);
- one drifted pair per corruption that applies (:data:`AGENT_CORRUPTIONS`):
  the kinds world models make, each recording the entity it invents when it
  invents one (for invented-entity recall).

Each trajectory carries its source group (the SWE-bench repository, or the
CTF category) so fits are cross-validated by group: never fit and score on the
same repository.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from devsets.calibration.devset import (
    CORRUPTIONS,
    Corruption,
    Pair,
    changed_number,
    dropped_lines,
    flipped_outcome,
    invented_entry,
    invented_url,
    stale_state,
    wrong_error_message,
)
from devsets.calibration.devset_swe import (
    Result,
    flipped_test,
    vary_volatile,
    wrong_view_line,
)
from fidelity.compare.base import CompareContext
from fidelity.compare.commands import printing_program
from fidelity.trajectory import Observation, Step, Trajectory

SHARED = Path(__file__).resolve().parents[3] / "shared" / "agent-trajectories"
"""Where the public runs lie beside a checkout (``../shared/agent-trajectories``)."""

INVENTED_FUNCTIONS = (
    "_resolve_cached",
    "normalize_header_rows",
    "_legacy_dispatch",
    "validate_units_strict",
    "to_compat_frame",
)
INVENTED_ERRORS = (
    ("AttributeError", "'NoneType' object has no attribute '_meta_cache'", "_meta_cache"),
    ("KeyError", "'header_rows'", None),
    ("ImportError", "cannot import name 'compat_shim'", None),
)
_CODE_LINE_RE = re.compile(r"^( *\d+\t| *\d+[:-]|[\w/.-]+\.py:\d+:)( *)(\S.*)$", re.MULTILINE)
_LINE_NO_RE = re.compile(r"(?:, line |^ *|\.py:)(\d+)(?=[\t:,]|$)", re.MULTILINE)
_SEED_RE = re.compile(r"(random seed: +|PYTHONHASHSEED=|randomly-seed=)(\d+)")
_PIP_TMP_RE = re.compile(r"(/tmp/pip-[a-z]+(?:-[a-z]+)*-)([a-z0-9_]{8})")
_ISO_RE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d[ T][0-2]\d:[0-5]\d:[0-5]\d")
_PID_COMMAND_RE = re.compile(r"\$!|\$\$|getpid\(\)")
_BARE_NUMBER_RE = re.compile(r"^(\d{2,7})$", re.MULTILINE)
_VIEWERS = frozenset({"cat", "sed", "nl", "head", "tail", "grep", "less", "awk", "find", "ls"})
_LISTERS = frozenset(
    {"ls", "find", "grep", "rg", "fd", "du", "git status", "git branch", "pip list", "pip freeze"}
)
"""Programs whose output is a listing (:func:`reordered_lines` reorders it)."""
_XDIST_RE = re.compile(r"\bpytest\b.*\s(?:-n\s*\w+|--numprocesses)")
_FAILURES_RE = re.compile(r"^=+ FAILURES =+$", re.MULTILINE)
_BANNER_RE = re.compile(r"^=+ .* =+$", re.MULTILINE)
_SECTION_RE = re.compile(r"^_{3,} (\S+) _{3,}$", re.MULTILINE)
_FAILED_RE = re.compile(r"^FAILED \S*::(\S+).*$", re.MULTILINE)
_EDIT_RE = re.compile(r"\bsed -i\b|\bpatch\b|open\([^)]*['\"]w|\.write_text\(|> *[\w/.-]+\.py\b")


@dataclass(frozen=True)
class Run:
    """One public agent run: the source group it is held out by and its trajectory."""

    group: str
    trajectory: Trajectory


def load_runs(root: Path = SHARED) -> list[Run]:
    """The mini-swe-agent and SWE-agent runs under *root* (ids made distinct), sorted by id."""
    from fidelity.formats.convert import distinct_ids
    from fidelity.formats.mini_swe_agent import read_mini_swe_agent
    from fidelity.formats.swe_agent import read_swe_agent

    mini = distinct_ids(
        [read_mini_swe_agent(p) for p in sorted(root.glob("mini-swe-agent/*.json"))]
    )
    ctf = distinct_ids([read_swe_agent(p) for p in sorted(root.glob("swe-agent-ctf/*.traj"))])
    runs = [Run(t.id.split("__", 1)[0], t) for t in mini]
    runs += [Run("ctf-" + t.id.split("__", 1)[0], t) for t in ctf]
    return sorted(runs, key=lambda r: r.trajectory.id)


def second_run(obs: Observation, action: str, rng: random.Random) -> Observation | None:
    """*obs* as a second real run of *action* would print it; None when nothing would vary."""
    # file contents do not change between runs: a file view keeps its ids and numbers
    viewer = printing_program(action) in _VIEWERS
    varied = obs if viewer else vary_volatile(obs, rng) or obs
    text = _SEED_RE.sub(lambda m: m[1] + str(rng.randint(10**6, 2**31)), varied.text)
    text = _PIP_TMP_RE.sub(lambda m: m[1] + _word(rng, 8), text)
    text = _ISO_RE.sub(
        lambda m: (
            f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
            f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        ),
        text,
    )
    if _PID_COMMAND_RE.search(action):
        text = _BARE_NUMBER_RE.sub(lambda m: str(rng.randint(300, 4_000_000)), text)
    if _XDIST_RE.search(action):
        text = completion_order(text, rng)
    return None if text == obs.text else obs.model_copy(update={"text": text})


def completion_order(text: str, rng: random.Random) -> str:
    """*text*, a pytest-xdist run's output, with its failures in another order.

    xdist reports each failure when a worker finishes it (pytest-xdist's docs: "the
    order of tests is not guaranteed"), so another real run may list the sections of
    the FAILURES block, and the summary's ``FAILED`` lines with them, in another order.
    """
    banner = _FAILURES_RE.search(text)
    if banner is None:
        return text
    end = _BANNER_RE.search(text, banner.end())
    stop = end.start() if end else len(text)
    heads = list(_SECTION_RE.finditer(text, banner.end(), stop))
    if len(heads) < 2:
        return text
    bounds = [h.start() for h in heads] + [stop]
    sections = [(h[1], text[a:b]) for h, a, b in zip(heads, bounds, bounds[1:], strict=False)]
    shuffled = rng.sample(sections, len(sections))
    if shuffled == sections:
        shuffled.reverse()
    rank = {name: i for i, (name, _) in enumerate(shuffled)}
    body = text[: bounds[0]] + "".join(part for _, part in shuffled) + text[stop:]
    failed = list(_FAILED_RE.finditer(body))
    ordered = sorted(failed, key=lambda m: rank.get(m[1], len(rank)))
    for slot, line in reversed(list(zip(failed, ordered, strict=True))):
        body = body[: slot.start()] + line[0] + body[slot.end() :]
    return body


def _word(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(n))


def _with(obs: Observation, text: str, **update: object) -> Observation:
    return obs.model_copy(update={"text": text, **update})


def invented_function(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A ``def`` the file does not have, in a file view or grep hit, in the style of its lines."""
    lines = list(_CODE_LINE_RE.finditer(obs.text))
    if not lines:
        return None
    match = rng.choice(lines)
    name = rng.choice(INVENTED_FUNCTIONS)
    if name in obs.text:
        return None
    prefix, indent = match[1], match[2]
    new = f"{prefix}{indent}def {name}(self, value):"
    end = match.end()
    return _with(obs, obs.text[:end] + "\n" + new + obs.text[end:]), name


def changed_line_number(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A line number of a traceback frame, a numbered file view or a grep hit shifted."""
    matches = list(_LINE_NO_RE.finditer(obs.text))
    if not matches:
        return None
    match = rng.choice(matches)
    value = int(match[1])
    new = str(value + rng.choice([-3, -1, 1, 2, 5, 11]) if value > 11 else value + 7)
    start, end = match.span(1)
    return _with(obs, obs.text[:start] + new + obs.text[end:]), None


def invented_traceback(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A Python traceback through a function the repository does not have."""
    error, message, attribute = rng.choice(INVENTED_ERRORS)
    function = rng.choice(INVENTED_FUNCTIONS)
    if function in obs.text:
        return None
    trace = (
        "Traceback (most recent call last):\n"
        f'  File "/testbed/reproduce.py", line {rng.randint(3, 40)}, in <module>\n'
        f"    main()\n"
        f'  File "/testbed/reproduce.py", line {rng.randint(41, 90)}, in {function}\n'
        f"    return table.meta[key]\n{error}: {message}\n"
    )
    exit_code = 1 if obs.exit_code is not None else None
    return _with(
        obs, obs.text.rstrip("\n") + "\n" + trace, exit_code=exit_code
    ), attribute or function


def dropped_line(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """One non-trivial line (a word, 12+ characters) missing."""
    lines = obs.text.split("\n")
    candidates = [
        i
        for i, line in enumerate(lines)
        if len(line.strip()) >= 12 and re.search(r"[A-Za-z]{2}", line) and lines.count(line) == 1
    ]
    if len(lines) < 3 or not candidates:
        return None
    index = rng.choice(candidates)
    return _with(obs, "\n".join(lines[:index] + lines[index + 1 :])), None


def reordered_lines(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A listing (``ls``, ``find``, grep hits, ``git status``) with the same lines in
    another order: one line moved, or a run of lines shuffled. Its lines are the
    non-blank ones the text holds once; the others stay where they are."""
    command = history[-1].action.render() if history else ""
    if printing_program(command) not in _LISTERS:
        return None
    lines = obs.text.split("\n")
    counts = Counter(lines)
    listed = [i for i, line in enumerate(lines) if line.strip() and counts[line] == 1]
    if len(listed) < 3:
        return None
    order = list(listed)
    if rng.random() < 0.5:  # one line moved elsewhere
        source, target = rng.sample(range(len(order)), 2)
        order.insert(target, order.pop(source))
    else:  # a run of two lines or more shuffled
        start = rng.randrange(len(order) - 1)
        end = rng.randint(start + 2, len(order))
        order[start:end] = rng.sample(order[start:end], end - start)
    if order == listed:
        return None
    new = list(lines)
    for slot, source in zip(listed, order, strict=True):
        new[slot] = lines[source]
    return _with(obs, "\n".join(new)), None


def failed_edit_done(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """An edit command that failed (exit code not 0) reported as a silent success."""
    command = history[-1].action.render() if history else ""
    if not obs.exit_code or not _EDIT_RE.search(command):
        return None
    return _with(obs, "", exit_code=0), None


AGENT_CORRUPTIONS: dict[str, Corruption] = {
    "invented_entry": invented_entry,
    "invented_function": invented_function,
    "invented_traceback": invented_traceback,
    "invented_url": invented_url,
    "changed_number": changed_number,
    "changed_line_number": changed_line_number,
    "flipped_test": flipped_test,
    "flipped_outcome": flipped_outcome,
    "wrong_view_line": wrong_view_line,
    "wrong_error_message": wrong_error_message,
    "dropped_lines": dropped_lines,
    "dropped_line": dropped_line,
    "stale_state": stale_state,
    "failed_edit_done": failed_edit_done,
    "reordered_lines": reordered_lines,
}
"""Corruption kind -> corruption of a recorded agent observation."""

if set(CORRUPTIONS) - set(AGENT_CORRUPTIONS) - {"invented_traceback"}:
    raise RuntimeError("every generic corruption must be part of the agent set")


@dataclass(frozen=True)
class GroupedPair:
    """A labeled pair and the source group (repository, CTF category) it came from."""

    group: str
    pair: Pair


def agent_pairs(
    runs: list[Run],
    seed: int,
    corruptions: Mapping[str, Corruption] = AGENT_CORRUPTIONS,
    max_chars: int = 20_000,
    per_step: int = 3,
) -> Iterator[GroupedPair]:
    """Faithful, second-run and corrupted pairs of every step of *runs* (seeded).

    Each step gets at most *per_step* corruptions, drawn at random among those
    that apply (so the kinds that apply everywhere do not swamp the rest).
    Steps whose observation is longer than *max_chars* are left out (a few
    whole-file dumps would dominate the time and not the figures).
    """
    rng = random.Random(seed)
    for run in runs:
        trajectory = run.trajectory
        for index, step in enumerate(trajectory.steps):
            obs = step.observation
            if obs is None or obs.failed or len(obs.text) > max_chars:
                continue
            history = trajectory.steps[:index]
            context = CompareContext(action=step.action, history=history, depth=index + 1)
            base = dict(trajectory_id=trajectory.id, depth=index + 1, real=obs, context=context)
            yield GroupedPair(run.group, Pair(**base, sim=obs, drift=False, kind="faithful"))  # type: ignore[arg-type]
            varied = second_run(obs, step.action.render(), rng)
            if varied is not None:
                pair = Pair(**base, sim=varied, drift=False, kind="second_run")  # type: ignore[arg-type]
                yield GroupedPair(run.group, pair)
            seen = [*history, step]
            drifted = []
            for kind, corrupt in corruptions.items():
                done = corrupt(obs, seen, rng)
                if done is None or done[0] == obs:
                    continue
                sim, injected = done
                pair = Pair(**base, sim=sim, drift=True, kind=kind, injected=injected)  # type: ignore[arg-type]
                drifted.append(GroupedPair(run.group, pair))
            yield from rng.sample(drifted, min(per_step, len(drifted)))
