"""The sample replayed in rounds, each limit decided on its confidence bound after each.

``--sample auto`` replays the planned draws (:func:`fidelity.gate.sample.plan`) a round at
a time and stops as soon as every critical limit is decided, one fails, or the budget
(``--max-replays`` distinct trajectories) is spent. The bounds are confidence sequences,
valid at every look (:mod:`fidelity.gate.bounds`), so stopping when they decide does not
inflate the error. A fixed ``--sample N`` is one round of N draws; ``--all`` replays every
trajectory once, and its rates are then known rather than bounded.

Each round's replays are stored as they finish, and the draws depend only on the seed:
a gate stopped between rounds and run again with the same ``--run`` (and ``--seed``)
draws the same trajectories and replays only those the run does not hold yet.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fidelity import pipeline
from fidelity.analysis.models import RunSummary
from fidelity.analysis.summary import summarize
from fidelity.analysis.tallies import read_tallies
from fidelity.gate.evidence import Evidence, TrajectoryTally, design_evidence, population_evidence
from fidelity.gate.limits import evaluate
from fidelity.gate.options import GateOptions, Scan
from fidelity.gate.sample import Spool, design_of, plan
from fidelity.gate.verify import verify
from fidelity.policy import Policy, Verdict
from fidelity.store import Store

if TYPE_CHECKING:
    import numpy as np

    from fidelity.gate.design import MixtureDesign

logger = logging.getLogger(__name__)

FIRST_ROUND = 10
"""Draws of the first round of ``--sample auto``."""
GROWTH = 0.1
"""Each later round adds this share of the draws so far (at least :data:`MIN_ROUND`): the
gate overshoots the draws that decide by at most a tenth, or ten draws."""
MIN_ROUND = 10

RoundCallback = Callable[[Verdict], None]
"""Told the verdict after each round (the CLI shows each limit's bound)."""


@dataclass
class Sampled:
    """What the rounds learned: the last round's summary, evidence and verdict."""

    summary: RunSummary
    evidence: Evidence
    verdict: Verdict


def planned_positions(scan: Scan, options: GateOptions) -> np.ndarray:
    """Every position the gate may replay, in draw order (``--all``: each once, in order)."""
    import numpy as np

    if options.sample is None:
        return np.arange(scan.trajectories, dtype=np.int64)
    design = design_of(scan)
    fixed = None if options.sample == "auto" else int(options.sample)
    return plan(design, options.seed, fixed, options.max_replays)


def replay_rounds(
    store: Store,
    run_id: str,
    scan: Scan,
    options: GateOptions,
    policy: Policy,
    spool: Spool,
    draws: np.ndarray,
    limit: float,
    progress: pipeline.ProgressCallback,
    on_round: RoundCallback | None = None,
) -> Sampled:
    """Replay *draws* (from :func:`planned_positions`) in rounds until the policy is decided
    (``--sample auto``) or they are used up; the last round's figures."""
    ids = spool.ids()
    design = design_of(scan) if options.sample is not None else None
    sequential = options.sample == "auto"
    progress("total:real", 0 if sequential else len(set(draws.tolist())))
    used = 0
    round_number = 0
    while True:
        used = _next_end(used, len(draws)) if sequential else len(draws)
        round_number += 1
        wanted = draws[:used]
        trajectories = spool.trajectories(sorted(set(wanted.tolist())), options)
        logger.debug(
            "round %d: %d draws of %d planned, %d distinct trajectories to replay",
            round_number,
            used,
            len(draws),
            len(trajectories),
        )
        verify(store, run_id, list(trajectories.values()), options, scan.domain, progress)
        sampled = _evaluated(store, run_id, scan, design, policy, wanted, ids, limit)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("round %d: %s", round_number, _bounds(sampled.verdict))
        if on_round is not None:
            on_round(sampled.verdict)
        if not sequential or used >= len(draws) or decided(sampled.verdict):
            why = "decided" if decided(sampled.verdict) else "draws used up"
            logger.info("rounds end after round %d (%d draws): %s", round_number, used, why)
            return sampled


def _bounds(verdict: Verdict) -> str:
    """Each limit's estimate, bounds and decision after a round, for the log."""
    shown = [f"{c.sentence()} ({c.severity})" for c in verdict.checks]
    return "; ".join(shown) or "no limit"


def _next_end(used: int, total: int) -> int:
    step = FIRST_ROUND if used == 0 else max(MIN_ROUND, int(used * GROWTH))
    return min(total, used + step)


def decided(verdict: Verdict) -> bool:
    """Whether more replays could change *verdict*: no when a critical limit failed (the
    gate fails whatever comes) or none is undecided."""
    critical = [c for c in verdict.checks if c.severity == "critical"]
    if any(c.decision == "fail" or (c.decision is None and not c.passed) for c in critical):
        return True
    return not any(c.decision == "undecided" for c in critical)


def _evaluated(
    store: Store,
    run_id: str,
    scan: Scan,
    design: MixtureDesign | None,
    policy: Policy,
    draws: np.ndarray,
    ids: dict[int, str],
    limit: float,
) -> Sampled:
    """The policy on the draws so far."""
    summary = summarize(store, run_id, limit, worst=0, detail=False)
    tallies = read_tallies(store, run_id, summary.totals.mode)
    evidence = _evidence(scan, design, draws, ids, tallies)
    return Sampled(summary, evidence, evaluate(summary, policy, evidence))


def _evidence(
    scan: Scan,
    design: MixtureDesign | None,
    draws: np.ndarray,
    ids: dict[int, str],
    tallies: dict[str, TrajectoryTally],
) -> Evidence:
    """The draws' evidence; the population's when every trajectory has been replayed."""
    positions = draws.tolist()
    if design is None or len(set(positions)) == scan.trajectories:  # its rates are known
        return population_evidence([tallies[ids[p]] for p in sorted(set(positions))])
    return design_evidence(design, draws, [tallies[ids[p]] for p in positions])
