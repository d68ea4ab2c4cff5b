"""A labeled development set for calibrating and benchmarking the terminal comparator.

Faithful pairs are two real replays of the same actions (they differ only in
volatile content). Drifted pairs take the second replay and apply one
seeded, realistic corruption (:data:`CORRUPTIONS`); each drifted pair records
the entity it injected (when it injects one) so hallucination detection can be
scored. Everything is deterministic given the replays and the seed.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from fidelity.compare.base import CompareContext
from fidelity.compare.normalize import normalize
from fidelity.trajectory import Observation, Step, Trajectory

INVENTED_FILES = ("helpers_v2.py", "settings.local.yaml", "cache_utils.py", "migrate_db.sh")
INVENTED_URLS = (
    "https://docs.logstats.dev/troubleshooting",
    "https://pypi.org/project/logstats-extras/",
    "https://github.com/logstats/logstats/issues/42",
)
INVENTED_ERRORS = (
    "KeyError: 'window_size'",
    "AttributeError: 'Report' object has no attribute 'rows'",
)
WRONG_MESSAGES = {
    "No such file or directory": "Permission denied",
    "Permission denied": "No such file or directory",
    "command not found": "Permission denied",
    "Is a directory": "Not a directory",
}
# A number that is not part of a date, time, version or word (those are volatile or not numbers).
_NUMBER_RE = re.compile(r"(?<![\w.<:/+-])\d+(?![\w.>:/-])")
_FILE_RE = re.compile(r"(?<![\w/.-])[\w-]+\.(?:py|csv|log|json|md|sh|txt|toml|cfg)(?![\w.])")


@dataclass(frozen=True)
class Pair:
    """One labeled (real, sim) step of the development set."""

    trajectory_id: str
    depth: int
    real: Observation
    sim: Observation
    context: CompareContext
    drift: bool
    kind: str
    injected: str | None = None


Corruption = Callable[
    [Observation, list[Step], random.Random], tuple[Observation, str | None] | None
]

Volatile = Callable[[Observation, random.Random], Observation | None]
"""Volatile-only variation of a real observation (``None`` when it has nothing volatile)."""


def _with(obs: Observation, text: str, **update: object) -> Observation:
    return obs.model_copy(update={"text": text, **update})


def invented_entry(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """A file name or list entry the real output does not have, in the style of its lines."""
    lines = obs.text.split("\n")
    candidates = [i for i, line in enumerate(lines) if _FILE_RE.search(line)]
    name = rng.choice(INVENTED_FILES)
    if not candidates:
        return None
    index = rng.choice(candidates)
    new = _FILE_RE.sub(name, lines[index], count=1)
    lines.insert(index + 1, new)
    return _with(obs, "\n".join(lines)), name


def changed_number(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """One meaningful number of the output replaced by another (never one inside a date or id)."""
    matches = list(_NUMBER_RE.finditer(obs.text))
    rng.shuffle(matches)
    before = normalize(obs.text)[0]
    for match in matches:
        value = int(match.group())
        new = str(
            value + rng.choice([1, 2, 7, 10, 13]) if value < 5 or rng.random() < 0.5 else value * 2
        )
        text = obs.text[: match.start()] + new + obs.text[match.end() :]
        if normalize(text)[0] != before:
            return _with(obs, text), new
    return None


def flipped_outcome(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """The command succeeds where it failed, or fails where it succeeded."""
    if obs.exit_code is None:
        return None
    return _with(obs, obs.text, exit_code=1 if obs.exit_code == 0 else 0), None


def wrong_error_message(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """A standard error message swapped for another, or an error class renamed."""
    for message, other in WRONG_MESSAGES.items():
        if message in obs.text:
            return _with(obs, obs.text.replace(message, other, 1)), None
    match = re.search(r"\b([A-Z]\w*(?:Error|Exception))\b", obs.text)
    if match:
        other = "ValueError" if match.group(1) != "ValueError" else "TypeError"
        return _with(obs, obs.text.replace(match.group(1), other)), other
    return None


def dropped_lines(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """A third of the lines (at least one) missing."""
    lines = [line for line in obs.text.split("\n") if line.strip()]
    if len(lines) < 3:
        return None
    drop = set(rng.sample(range(len(lines)), max(1, len(lines) // 3)))
    return _with(obs, "\n".join(line for i, line in enumerate(lines) if i not in drop) + "\n"), None


def invented_traceback(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """A Python traceback the real run did not print."""
    error = rng.choice(INVENTED_ERRORS)
    module = rng.choice(["cache", "window", "export"])
    trace = (
        "Traceback (most recent call last):\n"
        f'  File "/workspace/src/logstats/{module}.py", line {rng.randint(12, 140)}, in load\n'
        f"    return self._rows[key]\n{error}\n"
    )
    return _with(obs, obs.text + trace, exit_code=1), error.split(":", 1)[0]


def stale_state(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """The output an earlier run of the same command gave, before an edit changed the state.

    The current action is the last step of *history* (the corruption sees the
    real history including the step itself).
    """
    *earlier, current = history
    for step in reversed(earlier):
        if step.action != current.action or step.observation is None:
            continue
        if step.observation.text != obs.text:
            return _with(obs, step.observation.text, exit_code=step.observation.exit_code), None
    return None


def invented_url(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """A URL the real output never showed."""
    url = rng.choice(INVENTED_URLS)
    text = obs.text.rstrip("\n") + f"\nSee {url} for details.\n"
    return _with(obs, text), url


CORRUPTIONS: dict[str, Corruption] = {
    "invented_entry": invented_entry,
    "changed_number": changed_number,
    "flipped_outcome": flipped_outcome,
    "wrong_error_message": wrong_error_message,
    "dropped_lines": dropped_lines,
    "invented_traceback": invented_traceback,
    "stale_state": stale_state,
    "invented_url": invented_url,
}
"""Corruption kind -> ``(obs, real history up to this step, rng) -> (obs, injected) | None``."""


def build_pairs(
    first: list[Trajectory],
    second: list[Trajectory],
    seed: int,
    corruptions: Mapping[str, Corruption] = CORRUPTIONS,
    volatile: Volatile | None = None,
) -> Iterator[Pair]:
    """Faithful and corrupted pairs from two real replays of the same suite.

    Real is *first*; sim is *second* as it ran (faithful), with *volatile*
    content varied when given (kind ``volatile``, not drifted), and once per
    corruption that applies to the step (its random choices seeded by *seed*).
    The context is the real history (teacher-forced).
    """
    rng = random.Random(seed)
    others = {t.id: t for t in second}
    for real in first:
        sim = others.get(real.id)
        if sim is None:
            continue
        yield from _trajectory_pairs(real, sim, rng, corruptions, volatile)


def _trajectory_pairs(
    real: Trajectory,
    sim: Trajectory,
    rng: random.Random,
    corruptions: Mapping[str, Corruption],
    volatile: Volatile | None,
) -> Iterator[Pair]:
    description = real.env.description or ""
    for index, (r_step, s_step) in enumerate(zip(real.steps, sim.steps, strict=False)):
        if r_step.observation is None or s_step.observation is None:
            continue
        if r_step.observation.failed or s_step.observation.failed:
            continue
        history = real.steps[:index]
        context = CompareContext(
            action=r_step.action, history=history, env_description=description, depth=index + 1
        )
        base = dict(
            trajectory_id=real.id, depth=index + 1, real=r_step.observation, context=context
        )
        yield Pair(**base, sim=s_step.observation, drift=False, kind="faithful")  # type: ignore[arg-type]
        varied = volatile(s_step.observation, rng) if volatile else None
        if varied is not None and varied != s_step.observation:
            yield Pair(**base, sim=varied, drift=False, kind="volatile")  # type: ignore[arg-type]
        # stale_state looks for an earlier run of this action in the history plus this step
        seen = [*history, Step(action=s_step.action, observation=s_step.observation)]
        for kind, corrupt in corruptions.items():
            done = corrupt(s_step.observation, seen, rng)
            if done is not None and done[0] != s_step.observation:
                obs, injected = done
                yield Pair(**base, sim=obs, drift=True, kind=kind, injected=injected)  # type: ignore[arg-type]
