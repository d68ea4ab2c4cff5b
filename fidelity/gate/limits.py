"""A policy's limits decided on confidence bounds over a gate's evidence (no I/O).

Each rate limit becomes one ratio over the draws (:mod:`fidelity.gate.evidence`), read
twice: unknown steps as drifting for the upper bound, as faithful for the lower one. A
``max_*`` limit passes when the upper bound is at most the limit, fails when the lower
bound is over it, and is otherwise undecided; ``min_trust_horizon`` passes when every
depth up to it has its upper drift bound within ``max_drift_rate`` and fails when some
depth's lower bound is over it. Each is its own one-sided test at ``1 - confidence``: a
gate passes only when every limit passes, so a false pass needs the bound of a limit
that is truly violated to be wrong, which has probability at most ``1 - confidence``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from fidelity.analysis.models import RunSummary
from fidelity.gate.evidence import (
    Evidence,
    TrajectoryTally,
    depth_share,
    observations,
    step_population,
    step_share,
)
from fidelity.policy import (
    DEFAULT_CONFIDENCE,
    Check,
    Policy,
    Thresholds,
    Verdict,
    at_least,
    guard_checks,
)

if TYPE_CHECKING:
    from fidelity.gate.bounds import Observations

Kind = Literal["at_most", "at_least"]
Count = Callable[[TrajectoryTally], float]


def evaluate(summary: RunSummary, policy: Policy, evidence: Evidence) -> Verdict:
    """Apply *policy* to a run: its summary (point figures, counts) and the *evidence* of its
    sample (per-trajectory counts in draw order, weighted by the design), on which every
    rate limit is decided by a one-sided confidence bound (:mod:`fidelity.gate.limits`).

    Besides the policy's own limits, the infrastructure-failure limit and "at least
    one compared step" always apply, and a domain with no quality limit fails. An
    undecided critical limit fails the gate.
    """
    domain = summary.run.domain
    limits = policy.for_domain(domain)
    checks = bounded_checks(summary, evidence, limits, "critical")
    checks += guard_checks(summary.totals, limits)
    checks += bounded_checks(summary, evidence, policy.warnings_for(domain), "warning")
    status: Literal["pass", "warn", "fail"] = "pass"
    if any(not c.passed and c.severity == "critical" for c in checks):
        status = "fail"
    elif any(not c.passed for c in checks):
        status = "warn"
    return Verdict(
        status=status,
        run_id=summary.run.run_id,
        domain=domain,
        checks=checks,
        confidence=limits.confidence or DEFAULT_CONFIDENCE,
        replayed_trajectories=evidence.distinct,
        draws=evidence.draws,
    )


def bounded_checks(
    summary: RunSummary, evidence: Evidence, limits: Thresholds, severity: str
) -> list[Check]:
    """Every limit *limits* sets, decided on *evidence* at its confidence."""
    alpha = 1 - (limits.confidence or DEFAULT_CONFIDENCE)
    checks: list[Check] = []
    rates: list[tuple[str, float | None, Callable[[TrajectoryTally], int]]] = [
        ("drift_rate", limits.max_drift_rate, lambda t: t.drift),
        ("hallucination_rate", limits.max_hallucination_rate, lambda t: t.hallucinated),
    ]
    for name, limit, count in rates:
        if limit is not None:
            checks.append(_step_rate(name, evidence, count, limit, alpha))
    if limits.min_trust_horizon is not None:
        horizon = limits.max_drift_rate if limits.max_drift_rate is not None else 0.1
        checks.append(_horizon(evidence, summary, limits.min_trust_horizon, horizon, alpha))
    if limits.min_steps is not None:
        checks.append(at_least("compared_steps", summary.totals.compared_steps, limits.min_steps))
    if limits.max_infra_failure_rate is not None:
        checks.append(_infra(evidence, limits.max_infra_failure_rate, alpha))
    if limits.max_unverifiable_rate is not None:
        checks.append(
            _share(
                "unverifiable_rate", evidence, lambda t: float(t.unverifiable), _one,
                limits.max_unverifiable_rate, alpha,
            )
        )  # fmt: skip
    checks += _outcome_checks(evidence, limits, alpha)
    return [c.model_copy(update={"severity": severity}) for c in checks]


def _one(t: TrajectoryTally) -> float:
    return 1.0


def _outcome_checks(evidence: Evidence, limits: Thresholds, alpha: float) -> list[Check]:
    """The claims' limits, where the sample holds claims (a false-success rate where it holds
    a claimed success with a verified real outcome)."""
    checks = []
    claims = [t for t in evidence.tallies if t.claimed is not None]
    if limits.max_outcome_unverifiable_rate is not None and claims:
        checks.append(
            _share(
                "outcome_unverifiable_rate", evidence,
                lambda t: float(t.claimed is not None and t.real == "unverifiable"),
                lambda t: float(t.claimed is not None),
                limits.max_outcome_unverifiable_rate, alpha,
            )
        )  # fmt: skip
    verified = [t for t in claims if t.claimed and t.real in ("success", "failure")]
    if limits.max_false_success_rate is not None and verified:
        checks.append(
            _share(
                "false_success_rate", evidence,
                lambda t: float(t.claimed is True and t.real == "failure"),
                lambda t: float(t.claimed is True and t.real in ("success", "failure")),
                limits.max_false_success_rate, alpha,
            )
        )  # fmt: skip
    return checks


def _step_rate(
    name: str,
    evidence: Evidence,
    count: Callable[[TrajectoryTally], int],
    limit: float,
    alpha: float,
) -> Check:
    """A share of steps: unknown steps drifting for the upper bound, faithful for the lower."""
    reads = {
        side: observations(evidence, "step", step_share(count, side), step_population(side))
        for side in ("lower", "upper", "point")
    }
    return _decided(f"{name} <= {limit:g}", reads, evidence, limit, "at_most", alpha)


def _infra(evidence: Evidence, limit: float, alpha: float) -> Check:
    """Infrastructure failures over the steps of verifiable trajectories."""

    def failed(t: TrajectoryTally) -> float:
        return t.infra / t.steps if t.steps > 0 and not t.unverifiable else 0.0

    def verifiable(t: TrajectoryTally) -> float:
        return float(t.steps > 0 and not t.unverifiable)

    read = observations(evidence, "step", failed, verifiable)
    reads = {"lower": read, "upper": read, "point": read}
    return _decided(f"infra_failure_rate <= {limit:g}", reads, evidence, limit, "at_most", alpha)


def _share(
    name: str, evidence: Evidence, numerator: Count, denominator: Count, limit: float, alpha: float
) -> Check:
    """A share of trajectories (or of a sub-population of them)."""
    read = observations(evidence, "trajectory", numerator, denominator)
    reads = {"lower": read, "upper": read, "point": read}
    return _decided(f"{name} <= {limit:g}", reads, evidence, limit, "at_most", alpha)


def _decided(
    name: str,
    reads: dict[str, Observations],
    evidence: Evidence,
    limit: float,
    kind: Kind,
    alpha: float,
) -> Check:
    """The check of one limit from its three readings (lower, upper, point)."""
    from fidelity.gate.bounds import Bound, bounds, decide, more_needed

    point = _ratio(reads["point"])
    if evidence.exact:  # every trajectory replayed once: the rate is known, not estimated
        lower, upper = _ratio(reads["lower"]) or 0.0, _ratio(reads["upper"]) or 0.0
    else:
        lower = bounds(reads["lower"], alpha).lower
        upper = bounds(reads["upper"], alpha).upper
    bound = Bound(estimate=point, lower=lower, upper=upper, n=evidence.draws)
    decision = decide(bound, limit, kind)
    more = None
    if decision == "undecided" and point is not None:  # nothing measured: no estimate of it
        toward = reads["upper"] if (point or 0.0) <= limit else reads["lower"]
        more = more_needed(toward, alpha, limit, kind)
    return Check(
        name=name,
        value=point,
        limit=limit,
        passed=decision == "pass",
        lower=lower,
        upper=upper,
        decision=decision,
        more=more,
    )


def _ratio(read: Observations) -> float | None:
    """The weighted ratio Σ w·A / Σ w·B of a reading (None when Σ w·B is 0)."""
    denominator = float((read.weight * read.denominator).sum())
    if denominator <= 0:
        return None
    return float((read.weight * read.numerator).sum()) / denominator


def _horizon(
    evidence: Evidence, summary: RunSummary, minimum: int, limit: float, alpha: float
) -> Check:
    """``trust_horizon >= minimum``: every depth up to *minimum* within *limit* (its upper
    bound, to pass), or some depth over it (its lower bound, to fail). The bounds shown are
    the horizon's: the deepest depth every depth before which passes on its upper bound,
    and on its lower bound."""
    from fidelity.gate.bounds import bounds, more_needed

    deepest = max((t.steps for t in evidence.tallies), default=0)
    upper_ok: list[bool] = []
    lower_ok: list[bool] = []
    blocking: Observations | None = None  # the first undecided depth up to the minimum
    for depth in range(1, deepest + 1):
        reads = {
            side: observations(evidence, "trajectory", *depth_share(depth, side))
            for side in ("lower", "upper")
        }
        if evidence.exact:
            up, low = _ratio(reads["upper"]) or 0.0, _ratio(reads["lower"]) or 0.0
        else:
            up = bounds(reads["upper"], alpha).upper
            low = bounds(reads["lower"], alpha).lower
        upper_ok.append(up <= limit and (not upper_ok or upper_ok[-1]))
        lower_ok.append(low <= limit and (not lower_ok or lower_ok[-1]))
        if depth <= minimum and blocking is None and up > limit >= low:
            blocking = reads["upper"]
        if not lower_ok[-1] and depth >= minimum:  # neither prefix can grow any more
            break
    horizon_low, horizon_high = _prefix(upper_ok), _prefix(lower_ok)
    decision: Literal["pass", "fail", "undecided"] = "undecided"
    if horizon_low >= minimum:
        decision = "pass"
    elif horizon_high < minimum:
        decision = "fail"
    more = None
    if decision == "undecided" and blocking is not None:
        more = more_needed(blocking, alpha, limit, "at_most")
    return Check(
        name=f"trust_horizon >= {minimum:g}",
        value=summary.totals.trust_horizon,
        limit=minimum,
        passed=decision == "pass",
        lower=horizon_low,
        upper=horizon_high,
        decision=decision,
        more=more,
    )


def _prefix(flags: list[bool]) -> int:
    """How many of *flags* hold before the first that does not."""
    for index, flag in enumerate(flags):
        if not flag:
            return index
    return len(flags)


def population_upper(
    evidence: Evidence, count: Callable[[TrajectoryTally], int], alpha: float
) -> float:
    """Upper bound on the share of all the population's steps that *count* counts, unknown
    steps counted in (what the admitted data's claim starts from)."""
    from fidelity.gate.bounds import bounds

    share = step_share(count, "upper", unverifiable=True)
    read = observations(evidence, "step", share, step_population("upper", unverifiable=True))
    if evidence.exact:
        return _ratio(read) or 0.0
    return bounds(read, alpha).upper


def admitted_bound(
    upper: float,
    total_steps: int,
    replayed: Sequence[TrajectoryTally],
    count: Callable[[TrajectoryTally], int],
    kept: Mapping[str, int],
    admitted_steps: int,
    unreplayed_admitted_steps: int,
    kept_is_clean: bool,
) -> float | None:
    """Upper bound on the share of the admitted steps that *count* counts.

    With probability at least the confidence, the dataset holds at most ``upper ×
    total_steps`` such steps (unknown ones included). The replayed trajectories' own are
    known (*replayed*, each once); an admitted replayed trajectory keeps at most its kept
    steps' worth of them (none at all when the gate keeps only clean prefixes:
    *kept_is_clean*), the rest of the dataset's are among the unreplayed, of which at most
    *unreplayed_admitted_steps* were admitted. None when nothing was admitted.
    """
    if admitted_steps <= 0:
        return None
    known = {t.trajectory_id: (t.steps if t.unverifiable else count(t) + t.infra) for t in replayed}
    in_kept = 0 if kept_is_clean else sum(min(known.get(tid, 0), k) for tid, k in kept.items())
    unreplayed = max(0.0, upper * total_steps - sum(known.values()))
    return min(1.0, (in_kept + min(float(unreplayed_admitted_steps), unreplayed)) / admitted_steps)
