"""Hand-made runs for policy tests: per-trajectory tallies and the summary they add up to."""

from __future__ import annotations

from collections.abc import Sequence

from fidelity.analysis.models import RunInfo, RunSummary, Totals
from fidelity.gate.evidence import Evidence, TrajectoryTally, run_evidence
from fidelity.gate.limits import evaluate
from fidelity.policy import Policy, Verdict


def tally(
    index: int,
    steps: int = 5,
    drift: int = 0,
    hallucinated: int = 0,
    infra: int = 0,
    unverifiable: bool = False,
    claimed: bool | None = None,
    real: str | None = None,
) -> TrajectoryTally:
    """Trajectory ``t<index>`` of *steps* steps; its *drift* drifting steps are its last
    ones (a derailment), its *infra* failed ones its first."""
    return TrajectoryTally(
        trajectory_id=f"t{index}",
        steps=steps,
        drift=drift,
        hallucinated=hallucinated,
        infra=steps if unverifiable else infra,
        unverifiable=unverifiable,
        drift_depths=tuple(range(steps - drift + 1, steps + 1)),
        infra_depths=tuple(range(1, (steps if unverifiable else infra) + 1)),
        claimed=claimed,
        real=real,
    )


def made_run(
    tallies: Sequence[TrajectoryTally], domain: str = "terminal", limit: float = 0.1
) -> tuple[RunSummary, Evidence]:
    """The summary *tallies* add up to (point figures, as the store's queries compute them)
    and their evidence as a stored run's."""
    run = RunInfo(
        run_id="r",
        started_at="2026-11-20T00:00:00",
        status="done",
        domain=domain,
        sandbox="local",
        mode="teacher-forced",
        suite="s",
        code_version="v",
    )
    steps = sum(t.steps for t in tallies)
    infra = sum(t.infra for t in tallies)
    compared = steps - infra
    unverifiable = [t for t in tallies if t.unverifiable]
    totals = Totals(
        trajectories=len(tallies),
        steps=steps,
        compared_steps=compared,
        infra_failures=infra,
        drift_rate=sum(t.drift for t in tallies) / compared if compared else None,
        hallucination_rate=sum(t.hallucinated for t in tallies) / compared if compared else None,
        mean_score=0.9 if compared else None,
        trust_horizon=_horizon(tallies, limit) if compared else None,
        horizon_limit=limit,
        unverifiable=len(unverifiable),
        unverifiable_steps=sum(t.steps for t in unverifiable),
    )
    summary = RunSummary(run=run, totals=totals, by_depth=[], by_action=[], worst=[])
    return summary, run_evidence(tallies, "r")


def _horizon(tallies: Sequence[TrajectoryTally], limit: float) -> int:
    depth = 0
    while True:
        reached = [t for t in tallies if t.steps > depth and depth + 1 not in t.infra_depths]
        if not reached:
            return depth
        drifting = sum(depth + 1 in t.drift_depths for t in reached)
        if drifting / len(reached) > limit:
            return depth
        depth += 1


def judged(tallies: Sequence[TrajectoryTally], policy: Policy, domain: str = "terminal") -> Verdict:
    """*policy*'s verdict on the run *tallies* make."""
    summary, evidence = made_run(tallies, domain)
    return evaluate(summary, policy, evidence)
