"""Shared parts of the structured comparators (web, android, mcp/JSON, search, swe, os).

These comparators parse both observations into structures (nodes, elements,
key paths, results), score the overlap, and name the entities one side has
and the other lacks. Web and swe verdicts are calibrated on real replays
(``calibration/web.json``, ``swe.json``); the other domains have no real
sandbox to build calibration data from, so their thresholds are fixed and
documented in each module. :class:`ItemComparator` is the skeleton of those
that parse each side into a list of items (android, search, web).

Drift rule shared by all of them: the score is below the threshold, or a hard
mismatch was found (a flipped test outcome, a changed value…), or any entity
is hallucinated or omitted. Entities the model had been shown (action,
history, environment description) are reported as ``stale``, not as
hallucinations.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Hashable, Iterable
from typing import Generic, Protocol, TypeVar

from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.config import CompareConfig
from fidelity.compare.normalize import Normalizer, merge_counts, normalizer_for
from fidelity.compare.terminal import MAX_LISTED, TerminalComparator, context_texts
from fidelity.trajectory import Observation

Item = TypeVar("Item")


class Keyed(Protocol):
    """An item matched to the other side's by its key (a node, a UI element)."""

    @property
    def key(self) -> str: ...


KeyedItem = TypeVar("KeyedItem", bound=Keyed)

DEFAULT_STRUCTURED_THRESHOLD = 0.9
"""Fixed drift threshold of the structured domains (no calibration data for them)."""


def value_normalizer(config: CompareConfig) -> Normalizer:
    """The configured regex and whitespace rules (no truncation, no line sorting) for values."""
    return normalizer_for(config.rules(), 1 << 62, config.whole_text(()))


def overlap(real: Counter[Hashable], sim: Counter[Hashable]) -> tuple[float, float, float]:
    """``(precision, recall, f1)`` of the *sim* multiset against the *real* one.

    Two empty multisets agree perfectly (1, 1, 1).
    """
    if not real and not sim:
        return 1.0, 1.0, 1.0
    common = sum((real & sim).values())
    precision = common / sum(sim.values()) if sim else 0.0
    recall = common / sum(real.values()) if real else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def matched_pairs(real: list[KeyedItem], sim: list[KeyedItem]) -> list[tuple[KeyedItem, KeyedItem]]:
    """Items of both sides matched by key and, among items sharing a key (the checkboxes of
    a list's rows), by their order; keys one side lacks and surplus repeats are left out."""
    grouped: dict[str, list[KeyedItem]] = {}
    for item in sim:
        grouped.setdefault(item.key, []).append(item)
    taken: dict[str, int] = {}
    pairs = []
    for item in real:
        at = taken.get(item.key, 0)
        others = grouped.get(item.key, ())
        if at < len(others):
            pairs.append((item, others[at]))
            taken[item.key] = at + 1
    return pairs


def entity_value(entity: str) -> str:
    """The part of ``kind:value`` (``ui:role:name`` → ``name``) a model would have seen written."""
    kind, _, value = entity.partition(":")
    if kind == "ui":
        return value.partition(":")[2] or value
    if kind == "key":
        return value.rsplit(".", 1)[-1].rstrip("[]") or value
    return value


def shown(candidates: Iterable[str], context: CompareContext) -> set[str]:
    """The *candidates* whose value occurs in what the model was shown (action, history, env)."""
    pending = {e: entity_value(e) for e in candidates}
    pending = {e: v for e, v in pending.items() if v}
    found: set[str] = set()
    for text, _ in context_texts(context):
        found.update(e for e, v in pending.items() if v in text)
        if len(found) == len(pending):
            break
    return found


def verdict(
    *,
    score: float,
    threshold: float,
    metrics: dict[str, float],
    sim_only: set[str],
    real_only: set[str],
    context: CompareContext,
    normalizations: dict[str, int],
    mismatches: list[str] | None = None,
) -> StepComparison:
    """The :class:`StepComparison` of a structured comparison (the shared drift rule)."""
    score = min(1.0, max(0.0, score))
    stale = shown(sim_only, context) if sim_only else set()
    hallucinations, omissions = sorted(sim_only - stale), sorted(real_only)
    reasons = [f"score {score:.2f} < {threshold:.2f}"] if score < threshold else []
    reasons += mismatches or []
    reasons += listed("hallucinated", hallucinations) + listed("omitted", omissions)
    return StepComparison(
        score=score,
        drift=bool(reasons),
        metrics=metrics,
        hallucinations=hallucinations,
        omissions=omissions,
        stale=sorted(stale),
        normalizations=normalizations,
        reasons=reasons,
    )


def listed(verb: str, entities: list[str]) -> list[str]:
    """Reasons naming the first :data:`MAX_LISTED` *entities*, then a count of the rest."""
    reasons = [f"{verb} {e}" for e in entities[:MAX_LISTED]]
    if len(entities) > MAX_LISTED:
        reasons.append(f"{verb} {len(entities) - MAX_LISTED} more")
    return reasons


def infra_failure(real: Observation, sim: Observation) -> StepComparison | None:
    """The verdict when either side failed to produce an observation, else None."""
    if not (real.failed or sim.failed):
        return None
    sides = [
        f"{name} side failed: {obs.error}"
        for name, obs in (("real", real), ("sim", sim))
        if obs.error is not None
    ]
    return StepComparison(score=0.0, drift=False, infra_failure=True, reasons=sides)


def threshold_of(domain: str, config: CompareConfig, threshold: float | None) -> float:
    """An explicit *threshold*, else the configured one, else the fixed default."""
    value = (
        config.threshold(domain, DEFAULT_STRUCTURED_THRESHOLD) if threshold is None else threshold
    )
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"threshold must be in [0, 1], got {value}")
    return value


class ItemComparator(ABC, Generic[Item]):
    """A comparator that parses each side into a list of items (elements, results, nodes).

    It holds the shared parts: the threshold (explicit, configured, or the fixed
    default), the value normalizer, a terminal comparator for text that holds
    no items, the entities of one observation, and the order of a comparison:
    an infrastructure failure first, plain text when neither side has
    structure, else the subclass's :meth:`score_items`.
    """

    domain: str

    def __init__(self, threshold: float | None = None, *, config: CompareConfig | None = None):
        config = config or CompareConfig()
        self.threshold = threshold_of(self.domain, config, threshold)
        self.normalizer: Normalizer = value_normalizer(config)
        self.text = TerminalComparator(self.threshold, config=config, calibrated=False)

    @abstractmethod
    def parse(self, observation: Observation) -> tuple[list[Item], dict[str, int]]:
        """The items of *observation* and the normalizations that fired."""

    @abstractmethod
    def item_entities(self, items: list[Item]) -> set[str]:
        """The entities named by *items*."""

    @abstractmethod
    def score_items(
        self,
        real: list[Item],
        sim: list[Item],
        context: CompareContext,
        normalizations: dict[str, int],
    ) -> StepComparison:
        """The verdict on two parsed sides, at least one of them structured."""

    def structured(self, real: list[Item], sim: list[Item], normalizations: dict[str, int]) -> bool:
        """Whether the step is compared item by item (else as plain text): a side has items."""
        return bool(real or sim)

    def entities(self, observation: Observation, context: CompareContext) -> set[str]:
        """The entities of one observation (for cross-turn consistency)."""
        return self.item_entities(self.parse(observation)[0])

    def compare(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> StepComparison:
        """Score *sim* against *real* for the step described by *context*."""
        failed = infra_failure(real, sim)
        if failed is not None:
            return failed
        (real_items, real_counts), (sim_items, sim_counts) = self.parse(real), self.parse(sim)
        counts = merge_counts(real_counts, sim_counts)
        if not self.structured(real_items, sim_items, counts):
            return self.text.compare(real, sim, context)
        return self.score_items(real_items, sim_items, context, counts)
