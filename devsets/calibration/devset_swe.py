"""Corruptions and volatile variation of swe observations (tool output plus repository state).

Used with :func:`devsets.calibration.devset.build_pairs` on two real
Docker replays of ``suites/swe/suite.jsonl``. A corruption changes the text
and, where the Docker sandbox would have recorded it, the structured state
(``changed_files``, ``diff``, ``tests``) the same way, so both stay consistent.
"""

from __future__ import annotations

import random
import re
from typing import Any

from devsets.calibration.devset import (
    Corruption,
    changed_number,
    dropped_lines,
    stale_state,
)
from fidelity.compare.normalize import BLOB_IDS
from fidelity.compare.swe import pass_fail_map
from fidelity.trajectory import Observation, Step

INVENTED_FILES = ("compat.py", "_helpers.py", "utils.py", "tests/test_regression.py")
INVENTED_HUNKS = (
    ("+        # keep the order stable", "+        self._touch(key)"),
    ("-    if value is None:", "+    if not value:"),
    ("+import functools",),
)
INVENTED_ERRORS = (
    "AttributeError: 'NoneType' object has no attribute 'encode'",
    "TypeError: unhashable type: 'list'",
    "IndexError: list index out of range",
)
_VIEW_LINE_RE = re.compile(r"^( *\d+\t)(.*\S.*)$", re.MULTILINE)
_SWAPS = (
    ("==", "!="),
    ("!=", "=="),
    (">=", ">"),
    ("<=", "<"),
    (" > ", " >= "),
    (" < ", " <= "),
    (" + ", " - "),
    ("True", "False"),
    ("False", "True"),
    ("None", "0"),
    ("return ", "return not "),
)
_UNITTEST_OUTCOME_RE = re.compile(r" \.\.\. (ok|FAIL|ERROR)$", re.MULTILINE)
_PYTEST_OUTCOME_RE = re.compile(r"(?<=\s)(PASSED|FAILED)\b")
_REPO_RE = re.compile(r"/repos/([\w.-]+)")
_DURATION_RE = re.compile(r"\b(in |took )(\d+\.\d+)(s\b)")
_HEX_RE = re.compile(r"\b(?:index |commit )?([0-9a-f]{7,40})\b")
_ADDRESS_RE = re.compile(r"\b0x[0-9a-f]{6,16}\b")
_TMP_RE = re.compile(r"/tmp/tmp[\w]{6,10}")

Result = tuple[Observation, str | None] | None


def _state(obs: Observation) -> dict[str, Any]:
    state = dict(obs.state or {})
    state.setdefault("changed_files", [])
    state.setdefault("diff", "")
    state.setdefault("tests", {})
    return state


def _with(obs: Observation, text: str, **state: Any) -> Observation:
    """*obs* with *text*, its state updated and the test map re-read from the text."""
    if obs.state is None:
        return obs.model_copy(update={"text": text})
    new = {**_state(obs), **state, "tests": pass_fail_map(text)}
    return obs.model_copy(update={"text": text, "state": new})


def _project_dir(obs: Observation, history: list[Step]) -> str:
    files = _state(obs)["changed_files"]
    if files:
        return files[0].rsplit("/", 1)[0] if "/" in files[0] else ""
    for step in reversed(history):
        found = _REPO_RE.search(step.action.render())
        if found:
            return f"src/{found.group(1)}"
    return "src"


def _hunk(path: str, lines: tuple[str, ...], start: int) -> str:
    removed = sum(line.startswith("-") for line in lines)
    added = sum(line.startswith("+") for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nindex 1a2b3c4..5d6e7f8 100644\n--- a/{path}\n"
        f"+++ b/{path}\n@@ -{start},{removed} +{start},{added} @@\n" + "\n".join(lines) + "\n"
    )


def invented_file(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A file in the changed-files list (and its diff) that the run never touched."""
    if obs.state is None:
        return None
    name = rng.choice(INVENTED_FILES)
    folder = _project_dir(obs, history)
    path = name if name.startswith("tests/") or not folder else f"{folder}/{name}"
    if path in _state(obs)["changed_files"]:
        return None
    hunk = _hunk(path, rng.choice(INVENTED_HUNKS), rng.randint(3, 120))
    text = obs.text + hunk if "diff --git" in obs.text else obs.text
    state = _state(obs)
    files = sorted([*state["changed_files"], path])
    return _with(obs, text, changed_files=files, diff=state["diff"] + hunk), path


def invented_hunk(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """An extra hunk in a file the run did change (an edit that was not made)."""
    state = _state(obs)
    if obs.state is None or not state["changed_files"]:
        return None
    hunk = _hunk(rng.choice(state["changed_files"]), rng.choice(INVENTED_HUNKS), 400)
    body = hunk.split("@@", 1)[1]
    text = obs.text + "@@" + body if "diff --git" in obs.text else obs.text
    return _with(obs, text, diff=state["diff"] + "@@" + body), None


def flipped_test(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """One test reported with the other outcome (pass where it failed, or the reverse)."""
    flips = {"ok": "FAIL", "FAIL": "ok", "ERROR": "ok", "PASSED": "FAILED", "FAILED": "PASSED"}
    matches = [*_UNITTEST_OUTCOME_RE.finditer(obs.text), *_PYTEST_OUTCOME_RE.finditer(obs.text)]
    if not matches:
        return None
    match = rng.choice(matches)
    start, end = match.span(1)
    return _with(obs, obs.text[:start] + flips[match.group(1)] + obs.text[end:]), None


def wrong_view_line(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """One line of ``cat -n`` style output (a ``view`` or an edit snippet) subtly wrong."""
    lines = [m for m in _VIEW_LINE_RE.finditer(obs.text) if any(a in m[2] for a, _ in _SWAPS)]
    if not lines:
        return None
    match = rng.choice(lines)
    code = match.group(2)
    old, new = rng.choice([s for s in _SWAPS if s[0] in code])
    start, end = match.span(2)
    return _with(obs, obs.text[:start] + code.replace(old, new, 1) + obs.text[end:]), None


def false_success(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A ``str_replace`` that failed, reported as done (and the edit in the state)."""
    if not obs.text.startswith("No replacement was performed"):
        return None
    args = getattr(history[-1].action, "args", {}) or {}
    path = str(args.get("path", "/repos/project/module.py"))
    text = (
        f"The file {path} has been edited. Here's the result of running `cat -n` on a "
        f"snippet of {path}:\n   {rng.randint(10, 300)}\t{args.get('new_str', '')}\n"
        "Review the changes and make sure they are as expected. Edit the file again if "
        "necessary.\n"
    )
    relative = re.sub(r"^/repos/[\w.-]+/", "", path)
    state = _state(obs)
    files = sorted({*state["changed_files"], relative})
    hunk = _hunk(relative, (f"-{args.get('old_str', '')}", f"+{args.get('new_str', '')}"), 1)
    return _with(obs, text, changed_files=files, diff=state["diff"] + hunk), None


def invented_traceback(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A Python traceback, in the project's files, that the real run did not print."""
    error = rng.choice(INVENTED_ERRORS)
    folder = _project_dir(obs, history)
    trace = (
        "Traceback (most recent call last):\n"
        f'  File "/repos/{folder.split("/")[-1]}/{folder}/core.py", line {rng.randint(12, 400)}, '
        f"in normalize\n    return _cache[key]\n{error}\n"
    )
    exit_code = 1 if obs.exit_code is not None else None
    return _with(obs, obs.text + trace).model_copy(update={"exit_code": exit_code}), error.split(
        ":", 1
    )[0]


def vary_volatile(obs: Observation, rng: random.Random) -> Observation | None:
    """The same output with what differs between real runs varied: durations, ids, addresses.

    Test durations (``Ran 15 tests in 0.005s``), hexadecimal ids (commit hashes and the
    like), memory addresses and temporary paths; None when the text has none. A diff's
    ``index`` line keeps its blob ids: they hash the file's content, the same in every run
    that writes the same file (an id is still drawn, so the other draws stay as they were).
    """
    text = _DURATION_RE.sub(lambda m: f"{m[1]}{rng.uniform(0.0005, 2.5):.3f}{m[3]}", obs.text)
    text = _HEX_RE.sub(lambda m: _varied_id(m, _hex_like(m[1], rng)), text)
    text = _ADDRESS_RE.sub(lambda m: "0x7f" + _hex(rng, len(m[0]) - 4), text)
    text = _TMP_RE.sub(lambda m: "/tmp/tmp" + _hex(rng, len(m[0]) - 8), text)
    return None if text == obs.text else obs.model_copy(update={"text": text})


def _varied_id(match: re.Match[str], new: str) -> str:
    """*match* with its id replaced by *new*, unless it is a blob id of a diff's index line."""
    text = match.string
    line_start = text.rfind("\n", 0, match.start()) + 1
    return match[0] if BLOB_IDS.match(text, line_start) else match[0].replace(match[1], new)


def _hex_like(old: str, rng: random.Random) -> str:
    """Another id of the same length; the null id (a new or deleted file) and plain decimal
    numbers (float digits, sizes: the same in every run) stay."""
    if set(old) == {"0"} or old.isdigit():
        return old
    new = _hex(rng, len(old))
    while new.isdigit():  # an id with a letter stays one (an all-digit one reads as a number)
        new = _hex(rng, len(old))
    return new


def _hex(rng: random.Random, length: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(length))


SWE_CORRUPTIONS: dict[str, Corruption] = {
    "invented_file": invented_file,
    "invented_hunk": invented_hunk,
    "flipped_test": flipped_test,
    "wrong_view_line": wrong_view_line,
    "false_success": false_success,
    "invented_traceback": invented_traceback,
    "dropped_lines": dropped_lines,
    "changed_number": changed_number,
    "stale_state": stale_state,
}
"""Corruption kind -> corruption of an swe observation (see :data:`devset.CORRUPTIONS`)."""
