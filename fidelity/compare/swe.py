"""The swe comparator: tool output as terminal text, plus repository state when shown.

The whole observation is first compared by the calibrated terminal comparator
(its verdict, metrics and entities are kept). When the text holds a
``git diff`` or test-run output, the structure is compared too:

- diff: ``diff_file_f1`` over the changed files (``diff --git a/x b/x``) and
  ``hunk_sim``, the Indel similarity of the added/removed lines in order;
- tests: the pass/fail map parsed from ``pytest -v`` lines
  (``tests/test_a.py::test_x PASSED``), pytest's short summary
  (``FAILED tests/test_a.py::test_y - AssertionError``) and unittest verbose
  lines (``test_x (pkg.TestA.test_x) ... ok``); ``test_agreement`` is the share
  of tests in either map with the same outcome.

When both observations carry structured repository state
(``Observation.state`` with ``changed_files``, ``diff`` and ``tests``, as the
Docker SWE sandbox records after every step), that state is compared instead
of what the text shows: the changed file sets, the hunks of the cumulative
diff and the pass/fail maps. A step whose text is identical can still drift
when the repository behind it differs (an edit the model forgot).

Entities add ``test:<node id>`` and ``file:<changed path>``; ``tests_flipped``
counts the tests whose outcome differs.

Drift, calibrated (the default): a flipped test outcome, a different exit code
or timed-out flag, recorded repository state (both sides' ``Observation.state``)
with a changed file or test on one side only or hunks below
:data:`HUNK_THRESHOLD`, or the drift probability of the shipped logistic regression
(``calibration/swe.json``, fitted by ``benchmarks/agent_devset.py --domain swe
--write`` on public mini-swe-agent runs and seeded corruptions, every weight
non-negative) over the terminal features and
the diff, hunk and test gaps reaching its cutoff (the ``drift_p`` metric).
Fixed rules (an explicit threshold, a ``[thresholds]`` entry, or no
calibration file), on top of the terminal verdict: a flipped test outcome, a
test only one side ran, a file changed on one side only, or ``hunk_sim`` below
:data:`HUNK_THRESHOLD` flag drift.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, NamedTuple

from rapidfuzz.distance import Indel

from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.calibration.apply import calibration_for
from fidelity.compare.config import CompareConfig
from fidelity.compare.entities import MAX_ENTITIES
from fidelity.compare.structured import listed, overlap, shown
from fidelity.compare.terminal import (
    TerminalComparator,
    blank_lines_changed,
    hard_mismatches,
    reorder_reasons,
)
from fidelity.trajectory import Observation

HUNK_THRESHOLD = 0.8
"""Below this similarity of the added/removed diff lines, a diff drifts."""

_DIFF_FILE_RE = re.compile(r"^diff --git a/(\S+) b/(\S+)", re.MULTILINE)
_HUNK_LINE_RE = re.compile(r"^[+-](?![+-]{2} )(.*)$", re.MULTILINE)
_PYTEST_RE = re.compile(
    r"^(\S+::\S+)\s+(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b|"
    r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+::\S+)",
    re.MULTILINE,
)
_UNITTEST_RE = re.compile(
    r"^(test\w*) \(([\w.]+)\)(?:\s*\n?.*?)? \.\.\. (ok|FAIL|ERROR|skipped|expected failure)",
    re.MULTILINE,
)
_UNITTEST_STATUS = {
    "ok": "PASSED",
    "FAIL": "FAILED",
    "ERROR": "ERROR",
    "skipped": "SKIPPED",
    "expected failure": "XFAIL",
}


def pass_fail_map(text: str) -> dict[str, str]:
    """The pass/fail map of a test run: test id → PASSED/FAILED/ERROR/SKIPPED/XFAIL/XPASS."""
    outcomes: dict[str, str] = {}
    if "::" in text:  # every pytest outcome names a node id
        for match in _PYTEST_RE.finditer(text):
            name, status = (match[1], match[2]) if match[1] else (match[4], match[3])
            outcomes[name] = status
    if " ... " not in text:  # every unittest outcome follows one
        return outcomes
    for match in _UNITTEST_RE.finditer(text):
        where = match[2] if match[2].endswith(match[1]) else f"{match[2]}.{match[1]}"
        outcomes[where] = _UNITTEST_STATUS[match[3]]
    return outcomes


def diff_files(text: str) -> set[str]:
    """The files a ``git diff`` in *text* changes."""
    return {b for _, b in _DIFF_FILE_RE.findall(text)}


def hunk_lines(text: str) -> list[str]:
    """The added and removed lines of a ``git diff`` in *text*, in order, with their sign."""
    if "diff --git" not in text:
        return []
    return [m[0] for m in _HUNK_LINE_RE.finditer(text)]


class RepoView(NamedTuple):
    """What one observation says about the repository: changed files, diff hunks, tests."""

    files: set[str]
    hunks: list[str]
    tests: dict[str, str]


def text_view(observation: Observation) -> RepoView:
    """The repository as the observation's text shows it (a printed diff, a test run)."""
    text = observation.text
    return RepoView(diff_files(text), hunk_lines(text), pass_fail_map(text))


def state_view(state: dict[str, Any]) -> RepoView:
    """The repository as structured state records it; malformed fields count as empty."""
    files = state.get("changed_files")
    diff = state.get("diff")
    tests = state.get("tests")
    return RepoView(
        {f for f in files if isinstance(f, str)} if isinstance(files, list) else set(),
        hunk_lines(diff) if isinstance(diff, str) else [],
        {str(k): str(v) for k, v in tests.items()} if isinstance(tests, dict) else {},
    )


def repo_views(real: Observation, sim: Observation) -> tuple[RepoView, RepoView]:
    """Both sides' views: from state when both have it, else from text."""
    if real.state is not None and sim.state is not None:
        return state_view(real.state), state_view(sim.state)
    return text_view(real), text_view(sim)


class SweComparator:
    """Compares swe tool output (the ``swe`` domain): terminal verdict plus diff and tests."""

    domain = "swe"

    def __init__(
        self,
        threshold: float | None = None,
        *,
        config: CompareConfig | None = None,
        calibrated: bool = True,
    ) -> None:
        config = config or CompareConfig()
        self.calibration = calibration_for(self.domain, threshold, config, calibrated)
        if threshold is None and self.domain in config.thresholds:
            threshold = config.thresholds[self.domain]
        # with its own calibration the terminal part only supplies metrics and entities
        own = self.calibration is not None
        self.terminal = TerminalComparator(threshold, config=config, calibrated=not own)
        self.threshold = self.terminal.threshold

    def entities(self, observation: Observation, context: CompareContext) -> set[str]:
        """Test ids and changed files of one observation (for cross-turn consistency)."""
        view = state_view(observation.state) if observation.state else text_view(observation)
        return {"test:" + t for t in view.tests} | {"file:" + f for f in view.files}

    def compare(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> StepComparison:
        """Score *sim* against *real* for the step described by *context*."""
        base = self.terminal.compare(real, sim, context)
        if base.infra_failure:
            return base
        metrics = dict(base.metrics)
        real_view, sim_view = repo_views(real, sim)
        diff_reasons, sim_only, real_only = _compare_diffs(real_view, sim_view, metrics)
        flips, sim_tests, real_tests = _compare_tests(real_view, sim_view, metrics)
        sim_only, real_only = sim_only | sim_tests, real_only | real_tests
        reasons = diff_reasons + flips
        stale = shown(sim_only, context) if sim_only else set()
        hallucinated, omitted = sorted(sim_only - stale), sorted(real_only)
        reasons += listed("hallucinated", hallucinated) + listed("omitted", omitted)
        # the terminal part's ranking stands (rank's tiers would undo it)
        named_h, more_h = _split([*hallucinated, *base.hallucinations], base.more_hallucinations)
        named_o, more_o = _split([*omitted, *base.omissions], base.more_omissions)
        result = base.model_copy(
            update={
                "drift": base.drift or bool(reasons),
                "metrics": metrics,
                "hallucinations": named_h,
                "omissions": named_o,
                "more_hallucinations": more_h,
                "more_omissions": more_o,
                "stale": sorted({*base.stale, *stale}),
                "reasons": [*base.reasons, *reasons],
            }
        )
        if self.calibration is None:
            return result
        hard = hard_mismatches(real, sim) + flips + blank_lines_changed(metrics)
        if real.state is not None and sim.state is not None:
            # recorded repository state is not volatile: a diff it disagrees on is real drift
            hard += diff_reasons + listed("one side only:", sorted(sim_only | real_only))
        findings = [*diff_reasons, *reorder_reasons(metrics)]
        findings += reasons[len(diff_reasons) + len(flips) :]
        findings += listed("hallucinated", base.hallucinations) + listed("omitted", base.omissions)
        return self.calibration.decide(result, hard, findings)


def _split(entities: list[str], more: list[str]) -> tuple[list[str], list[str]]:
    """*entities* without repeats, in order, capped at :data:`MAX_ENTITIES` (the named ones),
    and those past the cap followed by *more* (the rest, for machine outputs)."""
    unique = list(dict.fromkeys(entities))
    named = unique[:MAX_ENTITIES]
    return named, list(dict.fromkeys(e for e in [*unique[MAX_ENTITIES:], *more] if e not in named))


Found = tuple[list[str], set[str], set[str]]
"""``(mismatch reasons, sim-only entities, real-only entities)``."""


def _compare_diffs(real: RepoView, sim: RepoView, metrics: dict[str, float]) -> Found:
    real_files, sim_files = real.files, sim.files
    if not real_files and not sim_files:
        return [], set(), set()
    _, _, metrics["diff_file_f1"] = overlap(Counter(real_files), Counter(sim_files))
    hunks = metrics["hunk_sim"] = Indel.normalized_similarity(real.hunks, sim.hunks)
    reasons = [f"diff hunks {hunks:.2f} < {HUNK_THRESHOLD:.2f}"] if hunks < HUNK_THRESHOLD else []
    added = {"file:" + f for f in sim_files - real_files}
    return reasons, added, {"file:" + f for f in real_files - sim_files}


def _compare_tests(real: RepoView, sim: RepoView, metrics: dict[str, float]) -> Found:
    real_map, sim_map = real.tests, sim.tests
    if not real_map and not sim_map:
        return [], set(), set()
    names = sorted(real_map.keys() | sim_map.keys())
    same = sum(real_map.get(n) == sim_map.get(n) for n in names)
    metrics["test_agreement"] = same / len(names)
    flipped = [n for n in names if n in real_map and n in sim_map and real_map[n] != sim_map[n]]
    metrics["tests_flipped"] = float(len(flipped))
    reasons = [f"test {n}: {real_map[n]} != {sim_map[n]}" for n in flipped]
    return (
        reasons,
        {"test:" + n for n in sim_map.keys() - real_map.keys()},
        {"test:" + n for n in real_map.keys() - sim_map.keys()},
    )
