"""Run over run: did fidelity change between a baseline run and a current run?

For every domain × mode, at every depth and over all depths, the drift rate and
the hallucination rate of the two runs are compared with a two-sided z-test
whose variance is cluster-robust (steps of one trajectory are not independent;
the trajectory is the unit that is resampled, as in the bootstrap intervals).
The variance is computed under the null hypothesis (pooled rate), so a cell
that is 0 % in one run and 100 % in the other still gets a finite statistic.

p-values are adjusted with Holm's step-down method over every test of the
comparison, so looking at fifty depths does not manufacture a regression. A
cell is a **regression** when the rate rose, the adjusted p-value is below
``alpha`` and the effect size (Cohen's h) is at least ``min_effect``; cells with
fewer than ``min_steps`` compared steps on either side are **inconclusive**.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from fidelity import store_queries as queries
from fidelity.analysis.models import DomainOutcomes, Estimate
from fidelity.analysis.outcomes import outcome_figures
from fidelity.errors import UsageError
from fidelity.store import Store

DEFAULT_ALPHA = 0.05
DEFAULT_MIN_EFFECT = 0.2  # Cohen's h: "small"
DEFAULT_MIN_STEPS = 10

Metric = Literal["drift_rate", "hallucination_rate"]
Status = Literal["regression", "improvement", "unchanged", "inconclusive"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunRef(_Model):
    """What identifies a run being compared."""

    run_id: str
    started_at: datetime
    domain: str
    mode: str
    world_model: dict[str, Any]
    code_version: str


class DriftTest(_Model):
    """One metric of one cell, baseline against current."""

    domain: str
    mode: str
    depth: int | None  # None: all depths pooled
    metric: Metric
    baseline_steps: int
    current_steps: int
    baseline_rate: float
    current_rate: float
    difference: float  # current - baseline (positive: worse)
    effect_size: float  # Cohen's h, signed like difference
    z: float
    p_value: float
    p_adjusted: float  # Holm over every test of this comparison
    status: Status


class OutcomeDrift(_Model):
    """One domain's outcome figures (claimed against real) in each run, where it has any."""

    domain: str
    baseline: DomainOutcomes | None
    current: DomainOutcomes | None


class DriftReport(_Model):
    """Every test between two runs and the overall decision."""

    baseline: RunRef
    current: RunRef
    alpha: float
    min_effect: float
    min_steps: int
    tests: list[DriftTest]
    regressions: int
    improvements: int
    notes: list[str] = Field(default_factory=list)
    outcomes: list[OutcomeDrift] = Field(default_factory=list)

    @property
    def exit_code(self) -> int:
        """1 when any cell regressed, 0 otherwise."""
        return 1 if self.regressions else 0


def compare_runs(
    store: Store,
    baseline: str,
    current: str,
    alpha: float = DEFAULT_ALPHA,
    min_effect: float = DEFAULT_MIN_EFFECT,
    min_steps: int = DEFAULT_MIN_STEPS,
) -> DriftReport:
    """Test, per domain × mode and depth, whether *current* drifts or hallucinates more."""
    if not 0 < alpha < 1:
        raise UsageError(f"--alpha {alpha}: must be between 0 and 1")
    if baseline == current:
        raise UsageError(f"--baseline and --current are the same run ({baseline!r})")
    refs = [_ref(store, store.require_run(run)) for run in (baseline, current)]
    base_cells, cur_cells = (_counts(store, ref.run_id) for ref in refs)
    keys = sorted(set(base_cells) & set(cur_cells), key=_order)
    if not keys:
        raise UsageError(
            f"runs {baseline!r} and {current!r} share no domain × mode with compared steps"
        )
    raw = [
        _test(key, metric, base_cells[key], cur_cells[key], min_steps)
        for key in keys
        for metric in ("drift_rate", "hallucination_rate")
    ]
    tests = _decide(raw, alpha, min_effect)
    notes = _notes(refs[0], refs[1], set(base_cells) ^ set(cur_cells))
    return DriftReport(
        baseline=refs[0],
        current=refs[1],
        alpha=alpha,
        min_effect=min_effect,
        min_steps=min_steps,
        tests=tests,
        regressions=sum(t.status == "regression" for t in tests),
        improvements=sum(t.status == "improvement" for t in tests),
        notes=notes,
        outcomes=outcome_drift(store, baseline, current),
    )


def outcome_drift(store: Store, baseline: str, current: str) -> list[OutcomeDrift]:
    """Per domain, the outcome figures of both runs (those of the report and ``audit --json``)."""
    base = {o.domain: o for o in outcome_figures(store, baseline)}
    cur = {o.domain: o for o in outcome_figures(store, current)}
    return [
        OutcomeDrift(domain=d, baseline=base.get(d), current=cur.get(d))
        for d in sorted(set(base) | set(cur))
    ]


def outcome_lines(report: DriftReport) -> list[str]:
    """The outcome figures of *report* as plain text lines (``fidelity drift``'s output)."""
    lines = []
    for row in report.outcomes:
        for side, run, figures in (
            ("baseline", report.baseline.run_id, row.baseline),
            ("current", report.current.run_id, row.current),
        ):
            head = f"outcomes {row.domain}, {side} {run}"
            lines.extend([f"{head}: none"] if figures is None else [head, *_outcome_text(figures)])
    return lines


def _outcome_text(o: DomainOutcomes) -> list[str]:
    t = o.table
    kappa = o.kappa_interval or (
        None if o.kappa is None else Estimate(value=o.kappa, low=o.kappa, high=o.kappa)
    )
    lines = [
        f"  claimed success: real success {t.agree_success}, real failure {t.false_success}; "
        f"claimed failure: real success {t.false_failure}, real failure {t.agree_failure}; "
        f"unverifiable {o.unverifiable}",
        f"  agreement {_estimate(o.agreement, True)}, kappa {_estimate(kappa, False)}, "
        f"false-success rate {_estimate(o.false_success_rate, True)}, "
        f"false-failure rate {_estimate(o.false_failure_rate, True)}",
    ]
    for case in o.false_successes:
        step = "none" if case.first_drift is None else str(case.first_drift)
        lines.append(f"  false success {case.trajectory_id}: first drifting step {step}")
    lines.extend(f"  unverifiable {c.trajectory_id}: {c.reason}" for c in o.unverifiable_cases)
    return lines


def _estimate(e: Estimate | None, percent: bool) -> str:
    if e is None:
        return "n/a"
    show = "{:.1%}" if percent else "{:.2f}"
    return f"{show.format(e.value)} [{show.format(e.low)}, {show.format(e.high)}]"


def cluster_z_test(
    base: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
    cur: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]],
) -> tuple[float, float]:
    """z and two-sided p for ``sum(x)/sum(n)`` of two samples of clusters ``(x, n)``.

    The variance of each ratio is the cluster-robust (linearised) variance with
    residuals taken around the pooled rate.
    """
    (x1, n1), (x2, n2) = base, cur
    pooled = (x1.sum() + x2.sum()) / (n1.sum() + n2.sum())
    variance = _ratio_variance(x1, n1, pooled) + _ratio_variance(x2, n2, pooled)
    diff = x2.sum() / n2.sum() - x1.sum() / n1.sum()
    if variance <= 0:
        return (0.0, 1.0) if diff == 0 else (math.copysign(math.inf, diff), 0.0)
    z = float(diff / math.sqrt(variance))
    return z, math.erfc(abs(z) / math.sqrt(2))


def cohens_h(p1: float, p2: float) -> float:
    """Effect size of a change of proportion from *p1* to *p2* (signed)."""
    return 2 * math.asin(math.sqrt(p2)) - 2 * math.asin(math.sqrt(p1))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjusted p-values, in input order."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    adjusted = [1.0] * len(p_values)
    running = 0.0
    for rank, index in enumerate(order):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted


_Key = tuple[str, str, int | None]
_Clusters = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]


def _ratio_variance(x: np.ndarray[Any, Any], n: np.ndarray[Any, Any], rate: float) -> float:
    k = len(n)
    if k < 2:
        return 0.0
    mean_n = n.mean()
    residual = x - rate * n
    return float((residual**2).sum() / (mean_n**2 * k * (k - 1)))


def _counts(store: Store, run_id: str) -> dict[_Key, _Clusters]:
    cells: dict[_Key, _Clusters] = {}
    for query, per_depth in (("drift_per_depth", True), ("drift_per_domain", False)):
        for (domain, mode, key), rows in queries.grouped(store, query, run_id):
            n = np.array([r[4] for r in rows], dtype=np.float64)
            d = np.array([r[5] for r in rows], dtype=np.float64)
            h = np.array([r[6] for r in rows], dtype=np.float64)
            cells[(domain, mode, int(key) if per_depth else None)] = (n, d, h)
    return cells


def _order(key: _Key) -> tuple[str, str, int]:
    return key[0], key[1], -1 if key[2] is None else key[2]


def _test(key: _Key, metric: Metric, base: _Clusters, cur: _Clusters, min_steps: int) -> DriftTest:
    column = 1 if metric == "drift_rate" else 2
    p1 = float(base[column].sum() / base[0].sum())
    p2 = float(cur[column].sum() / cur[0].sum())
    z, p = cluster_z_test((base[column], base[0]), (cur[column], cur[0]))
    enough = base[0].sum() >= min_steps and cur[0].sum() >= min_steps
    return DriftTest(
        domain=key[0],
        mode=key[1],
        depth=key[2],
        metric=metric,
        baseline_steps=int(base[0].sum()),
        current_steps=int(cur[0].sum()),
        baseline_rate=p1,
        current_rate=p2,
        difference=p2 - p1,
        effect_size=cohens_h(p1, p2),
        z=z if math.isfinite(z) else math.copysign(1e9, z),
        p_value=p,
        p_adjusted=p,
        status="unchanged" if enough else "inconclusive",
    )


def _decide(tests: list[DriftTest], alpha: float, min_effect: float) -> list[DriftTest]:
    conclusive = [i for i, t in enumerate(tests) if t.status != "inconclusive"]
    adjusted = holm([tests[i].p_value for i in conclusive])
    result = list(tests)
    for index, p_adj in zip(conclusive, adjusted, strict=True):
        test = tests[index]
        status: Status = "unchanged"
        if p_adj < alpha and abs(test.effect_size) >= min_effect:
            status = "regression" if test.difference > 0 else "improvement"
        result[index] = test.model_copy(update={"p_adjusted": p_adj, "status": status})
    return result


def _ref(store: Store, run_id: str) -> RunRef:
    row = queries.row(store, "drift_ref", [run_id])
    assert row is not None  # require_run checked it
    return RunRef(
        run_id=row[0],
        started_at=row[1],
        domain=row[2],
        mode=row[3],
        world_model=json.loads(row[4]),
        code_version=row[5],
    )


def _notes(base: RunRef, cur: RunRef, unmatched: set[_Key]) -> list[str]:
    notes = []
    if base.world_model != cur.world_model:
        changed = sorted(
            k
            for k in set(base.world_model) | set(cur.world_model)
            if base.world_model.get(k) != cur.world_model.get(k)
        )
        notes.append(f"world model changed: {', '.join(changed)}")
    if base.code_version != cur.code_version:
        notes.append(f"code version changed: {base.code_version} → {cur.code_version}")
    only = sorted({f"{k[0]}/{k[1]}" for k in unmatched})
    if only:
        notes.append(f"compared in one run only (not tested): {', '.join(only)}")
    return notes
