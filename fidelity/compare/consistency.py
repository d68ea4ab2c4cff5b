"""Cross-turn consistency: what the simulator created must persist where reality keeps it.

An entity is *created* by the simulator at step t when it first appears in
the simulated observations at t and real has it at t too. Wherever real shows
it again at a later step t+k, sim must show it too; otherwise step t+k gets
the reason ``inconsistent file:x (created at step t)``, the metric
``inconsistent`` (how many such entities) and is flagged as drift.

Only stateful kinds count (:data:`STATEFUL_KINDS`: files, paths, URLs, UI
labels, resource ids, JSON key paths, tests, packages, result titles):
numbers and error messages are expected to come and go. Steps where either
side failed (infrastructure) are skipped.

Propagated inventions: an entity the simulator invented (a hallucination at
step t) that it repeats at a later step is found in what the model was shown
(its own earlier output), so the comparator reports it as ``stale``. Unless a
real observation up to that step has shown it, it is moved to the step's
hallucinations with the reason ``hallucinated x (propagated from step t)``
and counted in the ``propagated`` metric: ``stale`` stays for state the real
environment showed once and has since changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.entities import named_once
from fidelity.trajectory import Observation

STATEFUL_KINDS = frozenset(
    {"file", "path", "url", "ui", "resource", "key", "test", "package", "title"}
)
MAX_LISTED = 5


@runtime_checkable
class EntitySource(Protocol):
    """A comparator that can list the entities of one observation."""

    def entities(self, observation: Observation, context: CompareContext) -> set[str]:
        """The ``kind:value`` entities of *observation*."""
        ...


@runtime_checkable
class LineLocalEntitySource(EntitySource, Protocol):
    """An :class:`EntitySource` that answers narrower questions without extracting everything."""

    def entity_difference(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> set[str]:
        """``entities(real) - entities(sim)``."""
        ...

    def entities_among(
        self, observation: Observation, context: CompareContext, candidates: set[str]
    ) -> set[str]:
        """``entities(observation) & candidates``."""
        ...


def stateful(entities: set[str]) -> set[str]:
    """The entities of a kind that describes state (see :data:`STATEFUL_KINDS`)."""
    return {e for e in entities if e.partition(":")[0] in STATEFUL_KINDS}  # kind_of, inlined


class _Entities:
    """Entity questions about one trajectory, answered with as little extraction as it takes.

    Most steps ask only which entities real has and sim lacks (nothing, when
    the two agree); earlier steps are looked at only for those candidates.
    """

    def __init__(
        self,
        source: EntitySource,
        real: Sequence[Observation],
        sim: Sequence[Observation],
        contexts: Sequence[CompareContext],
    ) -> None:
        self.source, self.contexts = source, contexts
        self.sides = {"real": real, "sim": sim}
        self.narrow = _narrow(source)
        self._all: dict[tuple[str, int], set[str]] = {}

    def real_only(self, index: int) -> set[str]:
        """``entities(real) - entities(sim)`` at step *index*."""
        real, sim = self.sides["real"][index], self.sides["sim"][index]
        if self.narrow is not None:
            return self.narrow.entity_difference(real, sim, self.contexts[index])
        if real == sim:  # a faithful step: nothing to extract
            return set()
        return self.every("real", index) - self.every("sim", index)

    def among(self, side: str, index: int, candidates: set[str]) -> set[str]:
        """The *candidates* that *side*'s observation at step *index* holds."""
        if not candidates:
            return set()
        if self.narrow is not None and (side, index) not in self._all:
            observation = self.sides[side][index]
            return self.narrow.entities_among(observation, self.contexts[index], candidates)
        return self.every(side, index) & candidates

    def every(self, side: str, index: int) -> set[str]:
        """All entities of *side*'s observation at step *index* (extracted once)."""
        key = (side, index)
        if key not in self._all:
            self._all[key] = self.source.entities(self.sides[side][index], self.contexts[index])
        return self._all[key]


_LINE_LOCAL_METHODS = ("entities", "entity_difference", "entities_among")


def entity_source(comparator: object) -> EntitySource | None:
    """*comparator* when it is an :class:`EntitySource`, else None.

    A class that defines ``entities`` passes without the (slow) protocol check.
    """
    if callable(getattr(type(comparator), "entities", None)):
        return cast(EntitySource, comparator)
    return comparator if isinstance(comparator, EntitySource) else None


def _narrow(source: EntitySource) -> LineLocalEntitySource | None:
    """*source* when it is a :class:`LineLocalEntitySource`, else None.

    A class that defines every method passes without the (slow) protocol check.
    """
    if all(callable(getattr(type(source), name, None)) for name in _LINE_LOCAL_METHODS):
        return cast(LineLocalEntitySource, source)
    return source if isinstance(source, LineLocalEntitySource) else None


class _FirstSeen:
    """The first compared step at which one side showed an entity (searched lazily, remembered)."""

    def __init__(self, entities: _Entities, side: str) -> None:
        self.entities, self.side = entities, side
        self.found: dict[str, int] = {}
        self.searched: dict[str, int] = {}  # entity -> how many compared steps hold no trace of it

    def first(self, candidates: set[str], compared: Sequence[int]) -> dict[str, int]:
        """Candidate -> index of the first of the *compared* steps that holds it (if any does)."""
        pending = {e for e in candidates if e not in self.found}
        since = {e: self.searched.get(e, 0) for e in pending}
        start = min(since.values(), default=len(compared))
        late = max(since.values(), default=0)  # from here on every pending entity is asked
        for position in range(start, len(compared)):
            if not pending:
                break
            asking = pending if position >= late else {e for e in pending if since[e] <= position}
            for entity in self.entities.among(self.side, compared[position], asking):
                self.found[entity] = compared[position]
                pending.discard(entity)
        for entity in pending:
            self.searched[entity] = len(compared)
        return {e: self.found[e] for e in candidates if e in self.found}


def check_consistency(
    source: EntitySource,
    real: Sequence[Observation],
    sim: Sequence[Observation],
    contexts: Sequence[CompareContext],
    comparisons: list[StepComparison],
) -> list[StepComparison]:
    """*comparisons* with cross-turn inconsistencies added (reasons, metric, drift).

    An entity was created at the first compared step whose simulated
    observation shows it, provided the real one shows it there too.
    """
    entities = _Entities(source, real, sim, contexts)
    in_sim, in_real = _FirstSeen(entities, "sim"), _FirstSeen(entities, "real")
    compared: list[int] = []
    invented: dict[str, int] = {}
    result = []
    for index, comparison in enumerate(comparisons):
        if comparison.infra_failure:
            result.append(comparison)
            continue
        candidates = stateful(entities.real_only(index))
        created = _created(candidates, compared, in_sim, entities) if candidates else {}
        compared.append(index)
        flagged = _flag(comparison, sorted(created), created) if created else comparison
        repeated = {e for e in flagged.stale if e in invented}
        shown_real = set(in_real.first(repeated, compared)) if repeated else set()
        flagged = _propagated(flagged, invented, shown_real)
        for entity in flagged.hallucinations:
            invented.setdefault(entity, index + 1)
        result.append(flagged)
    return result


def _created(
    candidates: set[str], compared: Sequence[int], in_sim: _FirstSeen, entities: _Entities
) -> dict[str, int]:
    """Candidate -> depth at which the simulator created it (first shown by sim, with real)."""
    created: dict[str, int] = {}
    by_step: dict[int, set[str]] = {}
    for entity, index in in_sim.first(candidates, compared).items():
        by_step.setdefault(index, set()).add(entity)
    for index, group in by_step.items():
        created.update((e, index + 1) for e in entities.among("real", index, group))
    return created


def _propagated(
    comparison: StepComparison, invented: dict[str, int], seen_in_real: set[str]
) -> StepComparison:
    """*comparison* with repeated inventions moved from ``stale`` to ``hallucinations``."""
    if not comparison.stale:
        return comparison
    repeated = sorted(e for e in comparison.stale if e in invented and e not in seen_in_real)
    if not repeated:
        return comparison
    reasons = [
        f"hallucinated {e} (propagated from step {invented[e]})" for e in repeated[:MAX_LISTED]
    ]
    return comparison.model_copy(
        update={
            "drift": True,
            "stale": [e for e in comparison.stale if e not in set(repeated)],
            # the propagated inventions first; a listed line naming one of them goes
            "hallucinations": named_once([*repeated, *comparison.hallucinations]),
            "metrics": {**comparison.metrics, "propagated": float(len(repeated))},
            "reasons": [*comparison.reasons, *reasons],
        }
    )


def _flag(
    comparison: StepComparison, missing: list[str], created: dict[str, int]
) -> StepComparison:
    reasons = [f"inconsistent {e} (created at step {created[e]})" for e in missing[:MAX_LISTED]]
    if len(missing) > MAX_LISTED:
        reasons.append(f"inconsistent {len(missing) - MAX_LISTED} more")
    return comparison.model_copy(
        update={
            "drift": True,
            "metrics": {**comparison.metrics, "inconsistent": float(len(missing))},
            "reasons": [*comparison.reasons, *reasons],
        }
    )
