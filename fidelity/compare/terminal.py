"""The terminal comparator: normalized text similarity, exit codes, entities.

Scoring (all metrics in [0, 1], computed on the normalized texts):

- ``line_sim``: rapidfuzz Indel similarity over the lists of lines;
- ``token_sim``: the same over whitespace tokens;
- ``char_sim``: the same over characters (equal to ``fuzz.ratio / 100``);
- ``text_sim`` = 0.5 × line + 0.25 × token + 0.25 × char;
- ``score`` = ``text_sim``, halved when the exit codes differ.

Identical normalized observations score exactly 1.0.

The amount of difference (calibration features, :func:`~fidelity.compare.textdiff.amount`):
``lines_changed`` (lines one side has and the other lacks, as multisets: a reordered but
equal set changes none), ``changed_share`` (that count over both sides' lines) and
``chars_changed`` (the character Indel distance between the changed lines of each side).
The order of the lines both sides share (:func:`~fidelity.compare.textdiff.reordered`, on
the texts before the ``unordered_lines`` sort, which makes similarity and entities ignore
order): of the lines each side holds exactly once, ``lines_reordered`` is how many are out
of order and ``order_gap`` that count over those lines (both only when some are, ``lines
reordered: k of n`` among the reasons of a drifted step).

Entities (:func:`~fidelity.compare.ranking.line_entities`), ranked most telling first and
capped at :data:`~fidelity.compare.entities.MAX_ENTITIES` per side: the extracted entities
and the identifier-like tokens of added or changed lines that the real text
lacks, then every added or changed line itself (``line:``), then the other
words of those lines that the real text lacks (``word:``); omissions the same
from the real side. When lines are out of order, the sim lines off the longest run
that keeps real's order follow (``moved:``, :func:`~fidelity.compare.textdiff.moved_lines`)
as far as the cap allows: what a reader names of a reordered listing (they are not counted
as invented content by the calibration's entity count, ``lines_reordered`` counts them).

Drift, calibrated (the default): the exit codes or the timed-out flags differ,
or the drift probability of the shipped logistic regression
(``calibration/terminal.json``, fitted by ``benchmarks/calibrate.py`` on real
replays and seeded corruptions) over the similarity gaps and the entity
counts reaches its cutoff; the probability is the ``drift_p`` metric.

Drift, fixed rule (an explicit ``threshold``, a ``[thresholds]`` entry in the
compare config, or no calibration file): the score is below the threshold
(``DEFAULT_THRESHOLD`` = 0.9), or the exit codes differ, or the timed-out
flags differ, or any entity is hallucinated, omitted or stale. One changed line in twenty scores about 0.97;
a score under 0.9 takes roughly one line in five changed after
normalization, or a different exit code (the score is then at most 0.5). The
threshold is deliberately lenient because the entity checks catch the small
but meaningful changes (a size, a count, a file name, an error class) that a
similarity score forgives.

This module holds the comparator and its verdict; its parts live beside it: the text
metrics in :mod:`fidelity.compare.textdiff`, the entity differences in
:mod:`fidelity.compare.entitydiff`, the ranking of a step's entities in
:mod:`fidelity.compare.ranking`, what the model had been shown in
:mod:`fidelity.compare.shown`. The names of theirs that other modules use are importable
from here too.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence

from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.calibration import Calibration, features, load_calibration
from fidelity.compare.commands import volatile_order
from fidelity.compare.config import CompareConfig
from fidelity.compare.entities import (
    MAX_ENTITIES,
    extract,
    invented,
    kind_of,
)
from fidelity.compare.entitydiff import _keys_of, exact_entity_diff, search_key
from fidelity.compare.entitydiff import entities_held as entities_held
from fidelity.compare.entitydiff import entity_diff as entity_diff
from fidelity.compare.entitydiff import lines_holding as lines_holding
from fidelity.compare.normalize import TRUNCATE_AT, merge_counts, normalizer_for
from fidelity.compare.ranking import LINE_CHARS, _cut, every_line_entity, line_entities
from fidelity.compare.ranking import with_hex as with_hex
from fidelity.compare.rules import (
    DEFAULT_RULES,
    GIT_ID_RULE,
    ORDER_RULE,
    PID_OUTPUT_RULE,
    TRUNCATE_RULE,
    Rule,
)
from fidelity.compare.shown import _name_mentioned as _name_mentioned
from fidelity.compare.shown import _plain_mentioned as _plain_mentioned
from fidelity.compare.shown import context_texts as context_texts
from fidelity.compare.shown import lines_named, shown_entities, unshown
from fidelity.compare.textdiff import amount, order
from fidelity.compare.textdiff import changed_lines as changed_lines
from fidelity.compare.textdiff import moved_lines as moved_lines
from fidelity.compare.textdiff import reorder_reasons as reorder_reasons
from fidelity.compare.textdiff import reordered as reordered
from fidelity.compare.textdiff import similarity as similarity
from fidelity.trajectory import Observation

DEFAULT_THRESHOLD = 0.9
"""Terminal drift threshold: a step scoring below it drifts."""

EXIT_PENALTY = 0.5
"""Factor applied to the score when the exit codes differ."""

MAX_LISTED = 5
"""Entities named per kind of finding in ``reasons`` (the lists hold them all)."""


class TerminalComparator:
    """Compares terminal observations (the ``terminal`` domain).

    Stateless apart from its settings; safe to share between threads.
    """

    domain = "terminal"

    def __init__(
        self,
        threshold: float | None = None,
        *,
        rules: Sequence[Rule] = DEFAULT_RULES,
        limit: int = TRUNCATE_AT,
        exit_penalty: float = EXIT_PENALTY,
        config: CompareConfig | None = None,
        calibrated: bool = True,
    ) -> None:
        config = config or CompareConfig()
        if threshold is None and self.domain in config.thresholds:
            threshold = config.thresholds[self.domain]
        if threshold is not None and not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        if not 0.0 <= exit_penalty <= 1.0:
            raise ValueError(f"exit_penalty must be in [0, 1], got {exit_penalty}")
        self.calibration: Calibration | None = (
            load_calibration(self.domain) if calibrated and threshold is None else None
        )
        self.threshold = DEFAULT_THRESHOLD if threshold is None else threshold
        self.exit_penalty = exit_penalty
        whole_text = config.whole_text((GIT_ID_RULE, ORDER_RULE, PID_OUTPUT_RULE))
        limit = limit if config.enabled(TRUNCATE_RULE) else sys.maxsize
        self.normalizer = normalizer_for(config.rules(rules), limit, whole_text)
        # the same rules without the sort: the order feature sees the lines as printed
        self.unsorted = normalizer_for(config.rules(rules), limit, whole_text - {ORDER_RULE})

    def compare(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> StepComparison:
        """Score *sim* against *real* for the step described by *context*."""
        if real.failed or sim.failed:
            return _infra_failure(real, sim)
        command = context.action.render()
        real_text, real_counts = self.normalizer.cached(real.text, command)
        sim_text, sim_counts = self.normalizer.cached(sim.text, command)
        metrics = similarity(real_text, sim_text)
        exit_match = _exit_match(real, sim)
        factor = self.exit_penalty if exit_match is False else 1.0
        score = min(1.0, max(0.0, metrics["text_sim"] * factor))
        metrics.update(amount(real_text, sim_text))
        every_moved: Sequence[str] = ()
        if not volatile_order(command):  # else another real run prints another order
            sorted_ = ORDER_RULE in real_counts or ORDER_RULE in sim_counts
            texts = self._as_printed(real, sim, command) if sorted_ else (real_text, sim_text)
            metrics.update(order(*texts))
            if "lines_reordered" in metrics:
                every_moved = moved_lines(*texts)
        moved = list(every_moved[:MAX_ENTITIES])
        sim_side, real_side = line_entities(real_text, sim_text, command)
        found, stale = unshown(sim_side, context, self.normalizer)
        if stale:  # a listed name shown before: the listing's line is this step's
            found += lines_named(stale, changed_lines(real_text, sim_text)[0])
        hallucinations = with_hex(found[:MAX_ENTITIES], sim.text)
        room = MAX_ENTITIES - len(hallucinations)
        hallucinations += ["moved:" + line.strip()[:LINE_CHARS] for line in moved[:room]]
        omissions = with_hex(real_side[:MAX_ENTITIES], real.text)
        more_h: list[str] = []
        more_o: list[str] = []
        if (
            len(found) >= MAX_ENTITIES  # the named ones may not be all
            or len(real_side) > MAX_ENTITIES
            or len(every_moved) > room
            or (real_text != sim_text and _cut(sim_side, real_side, real_text, sim_text))
        ):
            more_h, more_o = self._beyond_cap(
                (real, sim, real_text, sim_text, command), context, found, stale, every_moved[room:]
            )
        shown = sorted(stale)
        hard = self._mismatches(score, exit_match, real, sim) + blank_lines_changed(metrics)
        if self.calibration is None:
            reasons = [*hard, *_findings(hallucinations, omissions, shown)]
            reasons += reorder_reasons(metrics) if reasons else []
        else:
            vector = features(
                metrics, exit_match, invented(hallucinations), len(omissions), len(stale)
            )
            p = metrics["drift_p"] = self.calibration.probability(vector)
            cutoff = self.calibration.cutoff
            calibrated = [f"drift probability {p:.2f} >= {cutoff:.2f}"] if p >= cutoff else []
            findings = [*reorder_reasons(metrics), *_findings(hallucinations, omissions, shown)]
            found = findings if hard or calibrated else []
            reasons = [*hard, *calibrated, *found]
        return StepComparison(
            score=score,
            drift=bool(reasons),
            exit_match=exit_match,
            metrics=metrics,
            hallucinations=hallucinations,
            omissions=omissions,
            more_hallucinations=more_h,
            more_omissions=more_o,
            stale=shown,
            normalizations=merge_counts(real_counts, sim_counts),
            reasons=reasons,
        )

    def _beyond_cap(
        self,
        sides: tuple[Observation, Observation, str, str, str],
        context: CompareContext,
        found: list[str],
        stale: set[str],
        moved: Sequence[str],
    ) -> tuple[list[str], list[str]]:
        """``(hallucinations, omissions)`` past the first :data:`MAX_ENTITIES` of each side, in
        rank order: the rest of the ranking over every changed line (:func:`every_line_entity`),
        without what the model had been shown, then the rest of the moved lines. The verdict
        and the reasons use the first ones only; machine outputs list both."""
        real, sim, real_text, sim_text, command = sides
        if real_text == sim_text:
            return [], []
        sim_all, real_all = line_entities(real_text, sim_text, command)
        if _cut(sim_all, real_all, real_text, sim_text):  # else nothing was left out
            sim_all, real_all = every_line_entity(real_text, sim_text, command)
        listed = set(found[:MAX_ENTITIES]) | stale
        rest = [e for e in sim_all if e not in listed]
        names = {e for e in rest if not e.startswith("line:")}
        if names:  # only a name whose key occurs in what was shown can have been shown
            seen = "\n".join(text for text, _ in context_texts(context))
            names = {e for e in names if search_key(e) in seen}
        shown = shown_entities(names, context, self.normalizer) if names else set()
        tail = [*found[MAX_ENTITIES:], *(e for e in rest if e not in shown and e not in found)]
        more_h = with_hex(list(dict.fromkeys(tail)), sim.text)
        more_h += ["moved:" + line.strip()[:LINE_CHARS] for line in moved]
        more_o = with_hex(list(real_all[MAX_ENTITIES:]), real.text)
        return more_h, more_o

    def _as_printed(self, real: Observation, sim: Observation, command: str) -> tuple[str, str]:
        """Both texts normalized without the ``unordered_lines`` sort (for :func:`order`)."""
        return (
            self.unsorted.cached(real.text, command)[0],
            self.unsorted.cached(sim.text, command)[0],
        )

    def entities(self, observation: Observation, context: CompareContext) -> set[str]:
        """The entities of one normalized observation (for cross-turn consistency)."""
        command = context.action.render()
        text = self.normalizer.cached(observation.text, command)[0]
        if len(text) > _MEMO_LIMIT:
            return extract(text, command)
        return set(_cached_extract(text, command))

    def entity_difference(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> set[str]:
        """``entities(real) - entities(sim)``, extracting only the lines they do not share."""
        command = context.action.render()
        real_text = self.normalizer.cached(real.text, command)[0]
        sim_text = self.normalizer.cached(sim.text, command)[0]
        return set(exact_entity_diff(real_text, sim_text, command).real_only)

    def entities_among(
        self, observation: Observation, context: CompareContext, candidates: set[str]
    ) -> set[str]:
        """``entities(observation) & candidates``, extracting only lines with a candidate's key."""
        command = context.action.render()
        text = self.normalizer.cached(observation.text, command)[0]
        keys, numbers = _keys_of(frozenset(candidates))
        for key in (*keys, *numbers):
            if key in text:
                return entities_held(text, candidates, command)
        return set()  # no line holds a key (the consistency check asks step after step)

    def _mismatches(
        self, score: float, exit_match: bool | None, real: Observation, sim: Observation
    ) -> list[str]:
        reasons: list[str] = []
        if self.calibration is None and score < self.threshold:
            reasons.append(f"score {score:.2f} < {self.threshold:.2f}")
        return reasons + hard_mismatches(real, sim)


def blank_lines_changed(metrics: dict[str, float]) -> list[str]:
    """``blank lines differ: n`` when the normalized texts differ only in empty lines
    (a leading or inner blank line: the trailing ones are normalized away), which the
    rubric calls drift and no amount of changed characters shows."""
    lines = metrics.get("lines_changed", 0.0)
    if lines and not metrics.get("chars_changed", 0.0) and not metrics.get("lines_reordered"):
        return [f"blank lines differ: {lines:.0f}"]
    return []


_MEMO_LIMIT = 65_536
"""Normalized texts up to this long have their entities remembered (4,096 of them at most)."""


@functools.lru_cache(maxsize=4096)
def _cached_extract(text: str, command: str) -> frozenset[str]:
    """:func:`extract`, remembered: a faithful step's two sides normalize to one text."""
    return frozenset(extract(text, command))


def hard_mismatches(real: Observation, sim: Observation) -> list[str]:
    """Mismatches that drift whatever the scores say: exit codes or timed-out flags differ."""
    reasons: list[str] = []
    if _exit_match(real, sim) is False:
        reasons.append(f"exit_code {real.exit_code} != {sim.exit_code}")
    if real.timed_out != sim.timed_out:
        reasons.append(f"timed_out {real.timed_out} != {sim.timed_out}")
    return reasons


def _exit_match(real: Observation, sim: Observation) -> bool | None:
    if real.exit_code is None or sim.exit_code is None:
        return None
    return real.exit_code == sim.exit_code


def _findings(hallucinations: list[str], omissions: list[str], stale: list[str]) -> list[str]:
    """The reasons naming what the entity checks found (each list sorted)."""
    return [
        *_listed("hallucinated", hallucinations),
        *_listed("omitted", omissions),
        *_listed("stale", stale),
    ]


def _listed(verb: str, entities: list[str]) -> list[str]:
    reasons = [f"{verb} {e}" for e in entities[:MAX_LISTED]]
    if len(entities) > MAX_LISTED:
        kinds = ", ".join(sorted({kind_of(e) for e in entities}))
        reasons.append(f"{verb} {len(entities) - MAX_LISTED} more (kinds: {kinds})")
    return reasons


def _infra_failure(real: Observation, sim: Observation) -> StepComparison:
    sides = [
        f"{name} side failed: {obs.error}"
        for name, obs in (("real", real), ("sim", sim))
        if obs.error is not None
    ]
    return StepComparison(score=0.0, drift=False, infra_failure=True, reasons=sides)
