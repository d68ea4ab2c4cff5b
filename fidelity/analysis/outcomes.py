"""Claimed against real outcomes, per domain: the 2×2 table, agreement, kappa, false rates.

A trajectory's claimed outcome (its simulation's, or its dataset's label) and its real
one (the environment's check after the replay, :mod:`fidelity.outcomes`) are stored per
trajectory. Only trajectories with both a claimed success/failure and a verified real
outcome enter the table; unverifiable real outcomes are counted and listed with their
reason. Rates and kappa carry bootstrap 95% intervals over trajectories
(:func:`bootstrap_rate`, :func:`bootstrap_kappa`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from fidelity import store_queries as queries
from fidelity.analysis.cells import (
    _CHUNK_ELEMENTS,
    BOOTSTRAP_RESAMPLES,
    _poisson1,
    _seed,
    bootstrap_rate,
)
from fidelity.analysis.models import (
    DomainOutcomes,
    Estimate,
    HorizonAgreement,
    OutcomeCase,
    OutcomeTable,
)
from fidelity.store import Store

OUTCOMES_SCHEMA = 5
"""The store schema version that added the ``outcomes`` table."""

OutcomeRow = tuple[str, str, bool | None, str | None, str | None, int | None, int | None]
"""``(domain, trajectory_id, claimed_success, real_status, real_reason, exit_code,
first_drift)`` as the ``outcomes`` query returns it."""


def outcome_figures(
    store: Store, run_id: str, resamples: int = BOOTSTRAP_RESAMPLES
) -> list[DomainOutcomes]:
    """The outcome figures of every domain of *run_id* that has any outcome (none in a
    read-only store older than the outcomes table)."""
    if (store.schema_version() or 1) < OUTCOMES_SCHEMA:
        return []
    by_domain: dict[str, list[OutcomeRow]] = defaultdict(list)
    for found in queries.rows(store, "outcomes", [run_id]):
        by_domain[str(found[0])].append(_typed(found))
    return [domain_outcomes(d, rows, resamples) for d, rows in sorted(by_domain.items())]


def _typed(found: Sequence[Any]) -> OutcomeRow:
    domain, tid, claimed, status, reason, code, drift = found
    return (str(domain), str(tid), claimed, status, reason, code, drift)


def real_success(status: str | None) -> bool | None:
    """The stored real status as True/False, None when unverifiable or not checked."""
    return {"success": True, "failure": False}.get(status or "")


def domain_outcomes(
    domain: str, rows: Sequence[OutcomeRow], resamples: int = BOOTSTRAP_RESAMPLES
) -> DomainOutcomes:
    """The figures of one domain from its trajectories' outcome rows."""
    table = OutcomeTable()
    claimed_flags: list[bool] = []
    real_flags: list[bool] = []
    covered: list[bool] = []
    false_successes: list[OutcomeCase] = []
    unverifiable: list[OutcomeCase] = []
    for _, tid, claimed, status, reason, code, drift in rows:
        real = real_success(status)
        if status == "unverifiable":
            unverifiable.append(OutcomeCase(trajectory_id=tid, first_drift=drift, reason=reason))
        if claimed is None or real is None:
            continue
        claimed_flags.append(claimed)
        real_flags.append(real)
        covered.append(drift is None)
        _count(table, claimed, real)
        if claimed and not real:
            false_successes.append(
                OutcomeCase(trajectory_id=tid, first_drift=drift, real_exit_code=code)
            )
    claims = np.array(claimed_flags, dtype=float)
    reals = np.array(real_flags, dtype=float)
    agree = (claims == reals).astype(float)
    seed = _seed("outcomes", domain)
    return DomainOutcomes(
        domain=domain,
        trajectories=len(rows),
        claimed=sum(r[2] is not None for r in rows),
        checked=sum(r[3] is not None for r in rows),
        unverifiable=len(unverifiable),
        claimed_unverifiable=sum(r[2] is not None and r[3] == "unverifiable" for r in rows),
        table=table,
        agreement=_rate(agree, np.ones_like(agree), seed, resamples),
        kappa=cohen_kappa(table),
        kappa_interval=bootstrap_kappa(claims, reals, seed + 3, resamples),
        false_success_rate=_rate(claims * (1 - reals), claims, seed + 1, resamples),
        false_failure_rate=_rate((1 - claims) * reals, 1 - claims, seed + 2, resamples),
        false_successes=false_successes,
        unverifiable_cases=unverifiable,
        horizon=_horizon_agreement(agree, np.array(covered, dtype=bool)),
    )


_CELLS = {
    (True, True): "agree_success",
    (True, False): "false_success",
    (False, True): "false_failure",
    (False, False): "agree_failure",
}
"""The table's cell for (claimed success, real success)."""


def _count(table: OutcomeTable, claimed: bool, real: bool) -> None:
    name = _CELLS[(claimed, real)]
    setattr(table, name, getattr(table, name) + 1)


def _rate(
    numerators: np.ndarray[Any, Any], denominators: np.ndarray[Any, Any], seed: int, resamples: int
) -> Estimate | None:
    """The ratio with its interval; None when its denominator is empty."""
    if not denominators.sum():
        return None
    return bootstrap_rate(numerators, denominators, seed, resamples)


def cohen_kappa(table: OutcomeTable) -> float | None:
    """Cohen's kappa of claimed against real; None for an empty table or when chance
    agreement is total (both sides constant and equal: kappa is undefined)."""
    n = table.agree_success + table.false_success + table.false_failure + table.agree_failure
    if n == 0:
        return None
    observed = (table.agree_success + table.agree_failure) / n
    claimed_yes = (table.agree_success + table.false_success) / n
    real_yes = (table.agree_success + table.false_failure) / n
    expected = claimed_yes * real_yes + (1 - claimed_yes) * (1 - real_yes)
    if expected >= 1:
        return None
    return (observed - expected) / (1 - expected)


def bootstrap_kappa(
    claims: np.ndarray[Any, Any],
    reals: np.ndarray[Any, Any],
    seed: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Estimate | None:
    """Cohen's kappa of *claims* against *reals* (0/1 per trajectory) with a percentile 95%
    interval over resampled trajectories (Poisson(1) weights, as for the rates); resamples
    where kappa is undefined are left out. None when kappa itself is undefined."""
    cells = np.stack(
        [claims * reals, claims * (1 - reals), (1 - claims) * reals, (1 - claims) * (1 - reals)],
        axis=1,
    )
    value = _kappas(cells.sum(axis=0, keepdims=True))[0]
    if np.isnan(value):
        return None
    if len(claims) < 2 or resamples == 0:
        return Estimate(value=float(value), low=float(value), high=float(value))
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // len(claims))
    kappas = np.concatenate(
        [
            _kappas(_poisson1(rng, (min(chunk, resamples - start), len(claims))) @ cells)
            for start in range(0, resamples, chunk)
        ]
    )
    kappas = kappas[~np.isnan(kappas)]
    if not kappas.size:
        return Estimate(value=float(value), low=float(value), high=float(value))
    low, high = np.percentile(kappas, [2.5, 97.5])
    return Estimate(value=float(value), low=float(min(low, value)), high=float(max(high, value)))


def _kappas(counts: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Kappa per row of 2×2 *counts* (agree_success, false_success, false_failure,
    agree_failure); NaN where it is undefined (:func:`cohen_kappa`)."""
    n = counts.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        observed = (counts[:, 0] + counts[:, 3]) / n
        claimed_yes = (counts[:, 0] + counts[:, 1]) / n
        real_yes = (counts[:, 0] + counts[:, 2]) / n
        expected = claimed_yes * real_yes + (1 - claimed_yes) * (1 - real_yes)
        kappas = (observed - expected) / (1 - expected)
    undefined = (n == 0) | (expected >= 1 - 1e-12)
    return np.where(undefined, np.nan, kappas)


def _horizon_agreement(
    agree: np.ndarray[Any, Any], covered: np.ndarray[Any, Any]
) -> HorizonAgreement:
    def share(mask: np.ndarray[Any, Any]) -> float | None:
        return float(agree[mask].mean()) if mask.any() else None

    return HorizonAgreement(
        covered=int(covered.sum()),
        covered_agreement=share(covered),
        cut=int((~covered).sum()),
        cut_agreement=share(~covered),
    )
