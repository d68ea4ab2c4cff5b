"""What happens to one trajectory of a gated dataset: admitted whole or cut, or quarantined."""

from __future__ import annotations

from typing import Literal

from fidelity.gate.options import Decision, GateOptions, RealCheck, Verified
from fidelity.policy import Verdict


def decide(
    trajectory_id: str,
    total: int,
    verified: Verified,
    verdict: Verdict,
    domain_horizon: int,
    minimum: int,
    options: GateOptions,
    risk: float | None = None,
) -> Decision:
    """What happens to one trajectory of *total* steps (verified when it has a horizon; a
    trajectory never replayed whose drift *risk* is over ``options.max_risk`` is
    quarantined, cause ``risk``)."""
    decision = _decide(trajectory_id, total, verified, verdict, domain_horizon, minimum, options)
    if risk is None:
        return decision
    decision = decision.model_copy(update={"risk": risk})
    unreplayed = not decision.verified and decision.outcome == "admitted"
    if unreplayed and options.max_risk is not None and risk > options.max_risk:
        return decision.model_copy(
            update={
                "outcome": "quarantined",
                "steps_kept": 0,
                "cause": "risk",
                "reason": f"not verified; drift risk {risk:.3f} over --max-risk {options.max_risk:g}",
            }
        )
    return decision


def _decide(
    trajectory_id: str,
    total: int,
    verified: Verified,
    verdict: Verdict,
    domain_horizon: int,
    minimum: int,
    options: GateOptions,
) -> Decision:
    reason = verified.unverifiable.get(trajectory_id)
    if reason is not None:
        return Decision(
            trajectory_id=trajectory_id,
            outcome="unverifiable",
            verified=False,
            steps=total,
            steps_kept=0,
            horizon=None,
            reason=f"unverifiable: {reason}",
            cause="unverifiable",
        )
    horizon = verified.horizons.get(trajectory_id)
    if horizon is not None:
        check = verified.checks.get(trajectory_id)
        decision = _verified(trajectory_id, total, horizon, minimum, options)
        return _with_outcome(decision, check) if check is not None else decision
    if verdict.status == "fail":
        return Decision(
            trajectory_id=trajectory_id,
            outcome="quarantined",
            verified=False,
            steps=total,
            steps_kept=0,
            horizon=None,
            reason="not verified, and the dataset fails the gate",
            cause="gate",
        )
    kept = min(total, domain_horizon) if options.cut_at_horizon else total
    outcome: Literal["admitted", "quarantined"] = "admitted" if kept else "quarantined"
    return Decision(
        trajectory_id=trajectory_id,
        outcome=outcome,
        verified=False,
        steps=total,
        steps_kept=kept if kept else 0,
        horizon=None,
        reason=f"not verified; dataset {verdict.status}"
        + (f", cut at domain trust horizon {domain_horizon}" if kept < total else ""),
        cause=None if kept else "gate",
    )


def _with_outcome(decision: Decision, check: RealCheck) -> Decision:
    """*decision* quarantined when the real check contradicts the claim (cause ``outcome``)
    or could not run on a claim (cause ``outcome-unverifiable``: a claim nothing checked is
    never admitted as verified, nor exported as a reward)."""
    agrees = check.agrees
    decision = decision.model_copy(update={"outcome_agreement": agrees})
    if check.claimed is not None and check.real == "unverifiable":
        claimed = "success" if check.claimed else "failure"
        return decision.model_copy(
            update={
                "outcome": "quarantined",
                "steps_kept": 0,
                "cause": "outcome-unverifiable",
                "reason": f"outcome-unverifiable: claimed {claimed}, the real check could not "
                f"run: {check.reason or 'no reason given'}",
            }
        )
    if agrees is not False:
        return decision
    claimed = "success" if check.claimed else "failure"
    code = "" if check.exit_code is None else f" (exit {check.exit_code})"
    return decision.model_copy(
        update={
            "outcome": "quarantined",
            "steps_kept": 0,
            "cause": "outcome",
            "reason": f"outcome: claimed {claimed}, the real check says {check.real}{code}",
        }
    )


def _verified(
    trajectory_id: str, total: int, horizon: int, minimum: int, options: GateOptions
) -> Decision:
    def decision(outcome: Literal["admitted", "quarantined"], kept: int, reason: str) -> Decision:
        return Decision(
            trajectory_id=trajectory_id,
            outcome=outcome,
            verified=True,
            steps=total,
            steps_kept=kept,
            horizon=horizon,
            reason=reason,
            cause="drift" if outcome == "quarantined" else None,
        )

    if horizon >= total:
        return decision("admitted", total, "verified: no step drifts")
    if not options.cut_at_horizon:
        return decision("quarantined", 0, f"drifts at step {horizon + 1}")
    if horizon < minimum:
        return decision(
            "quarantined", 0, f"drifts at step {horizon + 1}: horizon {horizon} < {minimum}"
        )
    return decision(
        "admitted", horizon, f"cut at its trust horizon {horizon} (drifts at step {horizon + 1})"
    )
