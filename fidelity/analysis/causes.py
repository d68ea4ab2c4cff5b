"""Why a step drifted, in one word: drifting steps grouped by cause.

Each drifting step (an infrastructure failure is never drift) gets exactly one cause, the
first of :data:`CAUSES` that its comparison shows, so the causes of a run's drifting steps
add up to its drifting steps. What a cause is read from is what the comparators record
(:class:`~fidelity.compare.base.StepComparison`): the reasons, the hallucinated and omitted
entities (``kind:value``, :mod:`fidelity.compare.entities`) and the stale ones.

=====================  =========================================================================
cause                  the step's comparison shows
=====================  =========================================================================
``wrong_exit_code``    the exit code (or the timed-out flag) differs (``exit_code 0 != 1``)
``invented_name``      a name in sim that real lacks and the model was never shown: a path,
                       file, URL, package, error class or message, test, identifier, UI element,
                       JSON key, search result (``hallucinated file:notes.txt``)
``stale_state``        what the model had been shown earlier and is no longer so (``stale``)
``lost_state``         something an earlier step created is missing (``inconsistent …``)
``wrong_number``       the only invented entities are numbers (``number:71`` for ``17``)
``wrong_test_outcome`` a test's outcome differs (swe: ``test t: passed != failed``)
``wrong_value``        a field of a structured observation differs: a UI element's properties,
                       flags, text or states, a JSON value's type, length or value
``wrong_diff``         the predicted change (swe's ``git diff``) differs in its hunks
``omitted_lines``      real content missing from sim, nothing invented (omissions only)
``reordered_output``   the same lines in another order (``lines reordered``, ``moved:``)
``format_whitespace``  only blank lines or the spacing of lines differ
``changed_text``       lines differ with no telling entity in them (``line:``/``word:`` only)
``other``              the score alone fell below the threshold (or the calibrated probability
                       rose above its cut-off) with nothing more specific recorded
=====================  =========================================================================
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from fidelity import store_queries as queries
from fidelity.analysis.models import CauseExample, CauseRow, DepthCount

if TYPE_CHECKING:
    from fidelity.store import Store

CAUSES: Final = (
    "wrong_exit_code",
    "invented_name",
    "stale_state",
    "lost_state",
    "wrong_number",
    "wrong_test_outcome",
    "wrong_value",
    "wrong_diff",
    "omitted_lines",
    "reordered_output",
    "format_whitespace",
    "changed_text",
    "other",
)
"""Every cause, in the order they are tried (the first that applies is the step's)."""

EXAMPLES: Final = 3
"""Examples kept per domain and cause."""

_TEXT_KINDS: Final = frozenset({"line", "word"})
_NUMBER = re.compile(r"[-+]?\d[\d.,:%]*[A-Za-z]{0,3}")
_VALUE_REASONS: Final = ("prop ", "flags ", "text of ", "states of ", "type ", "length ", "value ")


@dataclass(frozen=True)
class Drifting:
    """What the store holds of one drifting step's comparison."""

    reasons: Sequence[str]
    hallucinations: Sequence[str]
    omissions: Sequence[str]
    stale: Sequence[str]


def kind(entity: str) -> str:
    """The kind of a ``kind:value`` entity (``number`` for a JSON ``value:`` that is one)."""
    name, _, value = entity.partition(":")
    if name == "value" and _NUMBER.fullmatch(value.strip()):
        return "number"
    return name


def cause_of(step: Drifting) -> tuple[str, str]:
    """``(cause, what shows it)``: the step's cause and the reason or entity that names it."""
    reasons = list(step.reasons)
    for reason in reasons:
        if reason.startswith(("exit_code ", "timed_out ")):
            return "wrong_exit_code", reason
    kinds = [(kind(e), e) for e in step.hallucinations]
    names = [e for k, e in kinds if k not in _TEXT_KINDS and k not in ("number", "moved")]
    if names:
        return "invented_name", f"hallucinated {names[0]}"
    if step.stale:
        return "stale_state", f"stale {step.stale[0]}"
    for reason in reasons:
        if reason.startswith("inconsistent "):
            return "lost_state", reason
    numbers = [e for k, e in kinds if k == "number"]
    if numbers:
        return "wrong_number", f"hallucinated {numbers[0]}"
    for reason in reasons:
        if reason.startswith("test ") and " != " in reason:
            return "wrong_test_outcome", reason
    for reason in reasons:
        if reason.startswith(_VALUE_REASONS):
            return "wrong_value", reason
    for reason in reasons:
        if reason.startswith("diff hunks "):
            return "wrong_diff", reason
    changed = [e for k, e in kinds if k in _TEXT_KINDS]
    if step.omissions and not changed:
        return "omitted_lines", f"omitted {step.omissions[0]}"
    moved = [e for k, e in kinds if k == "moved"]
    for reason in reasons:
        if reason.startswith("lines reordered"):
            return "reordered_output", reason
    if moved:
        return "reordered_output", f"moved {moved[0][len('moved:') :]}"
    for reason in reasons:
        if reason.startswith("blank lines differ"):
            return "format_whitespace", reason
    if changed and _spacing_only(changed, step.omissions):
        return "format_whitespace", f"hallucinated {changed[0]}"
    if changed or step.omissions:
        shown = changed[0] if changed else step.omissions[0]
        return "changed_text", f"{'hallucinated' if changed else 'omitted'} {shown}"
    return "other", reasons[0] if reasons else "drift"


def _spacing_only(added: Sequence[str], omitted: Sequence[str]) -> bool:
    """Whether the added and dropped lines are the same lines but for their spacing."""

    def squeezed(entities: Iterable[str]) -> list[str]:
        return sorted(" ".join(e.partition(":")[2].split()) for e in entities if kind(e) == "line")

    lines_added = squeezed(added)
    return bool(lines_added) and lines_added == squeezed(omitted)


@dataclass
class CauseTally:
    """The drifting steps of one domain and cause: how many, at which depths, examples."""

    steps: int = 0
    depths: dict[int, int] = field(default_factory=dict)
    examples: list[tuple[str, int, str]] = field(default_factory=list)

    def add(self, trajectory_id: str, depth: int, shown: str) -> None:
        self.steps += 1
        self.depths[depth] = self.depths.get(depth, 0) + 1
        if len(self.examples) < EXAMPLES:
            self.examples.append((trajectory_id, depth, shown))


def tally(
    rows: Iterable[tuple[str, str, int, Drifting]],
) -> dict[str, dict[str, CauseTally]]:
    """Per domain, per cause, the tally of *rows* ``(domain, trajectory id, depth, step)``."""
    found: dict[str, dict[str, CauseTally]] = {}
    for domain, trajectory_id, depth, step in rows:
        cause, shown = cause_of(step)
        found.setdefault(domain, {}).setdefault(cause, CauseTally()).add(
            trajectory_id, depth, shown
        )
    return found


def cause_rows(store: Store, run_id: str, mode: str | None) -> list[CauseRow]:
    """The drifting steps of *run_id* (in *mode*; every mode when None) by domain and cause,
    the causes of a domain in :data:`CAUSES` order."""
    rows = (
        (domain, tid, depth, Drifting(reasons, hallucinations, omissions, stale))
        for domain, tid, depth, reasons, hallucinations, omissions, stale in queries.stream(
            store, "causes_drifting_steps", [run_id, mode, mode]
        )
    )
    found = tally(rows)
    out = []
    for domain in sorted(found):
        causes = found[domain]
        total = sum(t.steps for t in causes.values())
        for cause in CAUSES:
            counted = causes.get(cause)
            if counted is None:
                continue
            out.append(
                CauseRow(
                    domain=domain,
                    cause=cause,
                    steps=counted.steps,
                    share=counted.steps / total,
                    examples=[
                        CauseExample(trajectory_id=t, depth=d, detail=shown)
                        for t, d, shown in counted.examples
                    ],
                    by_depth=[
                        DepthCount(depth=d, steps=n) for d, n in sorted(counted.depths.items())
                    ],
                )
            )
    return out
