"""Per-cell analysis with bootstrap intervals, trajectory horizons, entities, trend.

DuckDB aggregates the comparisons to one row per (cell, trajectory): compared
steps, drifting steps, hallucinating steps and the score sum. The bootstrap
then resamples *trajectories* (steps of one trajectory are not independent)
with Poisson(1) weights, cell by cell and in bounded chunks, so memory stays
proportional to the largest cell, never to the run.
"""

from __future__ import annotations

import hashlib
import math
import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np

from fidelity import store_queries as queries
from fidelity.analysis.models import (
    Cell,
    DepthRow,
    EntityRow,
    Estimate,
    HorizonRow,
    NormalizationRow,
    TrendRow,
)
from fidelity.store import Store

BOOTSTRAP_RESAMPLES = 1000
MIN_CELL_STEPS = 30
"""Cells with fewer compared steps are flagged: their rates are too noisy to conclude."""
TREND_RUNS = 20
_CHUNK_ELEMENTS = 2_000_000  # resample × trajectory weights held at once


def depth_cells(
    store: Store, run_id: str, min_steps: int = MIN_CELL_STEPS, resamples: int = BOOTSTRAP_RESAMPLES
) -> list[Cell]:
    """Drift, hallucination and score per domain × mode × depth, with 95% intervals."""
    return [
        _cell(domain, mode, rows, min_steps, resamples, depth=int(key))
        for (domain, mode, key), rows in queries.grouped(store, "cells_per_depth", run_id)
    ]


def action_cells(
    store: Store, run_id: str, min_steps: int = MIN_CELL_STEPS, resamples: int = BOOTSTRAP_RESAMPLES
) -> list[Cell]:
    """The same figures per domain × mode × action type (command name, tool, …)."""
    cells = [
        _cell(domain, mode, rows, min_steps, resamples, action_name=str(key))
        for (domain, mode, key), rows in queries.grouped(store, "cells_per_action", run_id)
    ]
    return sorted(cells, key=lambda c: (c.domain, c.mode, -c.drift.value, -c.steps))


def bootstrap_rate(
    numerators: np.ndarray[Any, Any],
    denominators: np.ndarray[Any, Any],
    seed: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> Estimate:
    """Ratio ``sum(numerators) / sum(denominators)`` with a percentile 95% interval.

    Each index is one trajectory (a cluster); resamples weight the clusters with
    Poisson(1) draws, in chunks that bound memory.
    """
    return bootstrap_ratios([numerators], denominators, seed, resamples)[0]


def bootstrap_ratios(
    numerators: Sequence[np.ndarray[Any, Any]],
    denominators: np.ndarray[Any, Any],
    seed: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
) -> list[Estimate]:
    """:func:`bootstrap_rate` for several numerators over the same resampled trajectories."""
    total = float(denominators.sum())
    values = [float(x.sum()) / total if total else 0.0 for x in numerators]
    if len(denominators) < 2 or resamples == 0:
        return [Estimate(value=v, low=v, high=v) for v in values]
    rng = np.random.default_rng(seed)
    chunk = max(1, _CHUNK_ELEMENTS // len(denominators))
    stacked = np.stack([denominators, *numerators], axis=1)
    sums = []
    for start in range(0, resamples, chunk):
        weights = _poisson1(rng, (min(chunk, resamples - start), len(denominators)))
        sums.append(weights @ stacked)
    resampled = np.concatenate(sums)
    kept = resampled[resampled[:, 0] > 0]
    if kept.shape[0] == 0:
        return [Estimate(value=v, low=v, high=v) for v in values]
    # every numerator's interval in one call (numpy's per-call overhead outweighs the work)
    lows, highs = np.percentile(kept[:, 1:] / kept[:, :1], [2.5, 97.5], axis=0)
    return [
        Estimate(value=value, low=float(min(low, value)), high=float(max(high, value)))
        for value, low, high in zip(values, lows, highs, strict=True)
    ]


def _poisson_table() -> np.ndarray[Any, Any]:
    """Inverse CDF of Poisson(1) on a 16-bit grid: ``table[u]`` for uniform 16-bit ``u``."""
    cdf = np.cumsum([math.exp(-1) / math.factorial(k) for k in range(12)])
    grid = (np.arange(1 << 16) + 0.5) / (1 << 16)
    return np.searchsorted(cdf, grid).astype(np.float32)


_POISSON_TABLE = _poisson_table()


def _poisson1(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray[Any, Any]:
    """Poisson(1) weights through a lookup table (several times faster than ``rng.poisson``)."""
    return _POISSON_TABLE[rng.integers(0, 1 << 16, size=shape, dtype=np.uint16)]


def trust_horizon(by_depth: Sequence[DepthRow], limit: float) -> int:
    """Largest depth d such that the drift rate stays <= *limit* at every depth <= d."""
    horizon = 0
    for row in sorted(by_depth, key=lambda r: r.depth):
        if row.depth != horizon + 1 or row.drift_rate > limit:
            break
        horizon = row.depth
    return horizon


def trajectory_horizons(store: Store, run_id: str) -> dict[str, int]:
    """Per trajectory: steps before its first step that drifted or could not be compared."""
    rows = queries.rows(store, "cells_trajectory_horizons", [run_id])
    return {str(tid): int(h) for tid, h in rows}


def horizons(store: Store, run_id: str, cells: Sequence[Cell], limit: float) -> list[HorizonRow]:
    """Trust horizon per domain × mode, and the spread of per-trajectory horizons."""
    rows = queries.rows(store, "cells_horizons", [run_id])
    result = []
    for domain, mode, values, never in rows:
        depth_rows = [
            DepthRow(
                depth=c.depth or 0,
                steps=c.steps,
                drift_rate=c.drift.value,
                hallucination_rate=c.hallucination.value,
                mean_score=c.score.value,
            )
            for c in cells
            if c.domain == domain and c.mode == mode
        ]
        result.append(
            HorizonRow(
                domain=domain,
                mode=mode,
                trust_horizon=trust_horizon(depth_rows, limit),
                trajectories=len(values),
                mean_trajectory_horizon=statistics.fmean(values),
                median_trajectory_horizon=float(statistics.median(values)),
                never_drifted=int(never),
            )
        )
    return result


def entities(store: Store, run_id: str) -> list[EntityRow]:
    """Hallucinated and omitted entities grouped by kind (``file:x`` → ``file``)."""
    rows = queries.rows(store, "cells_entities", [run_id, run_id])
    return [
        EntityRow(kind=k, hallucinations=h, steps_with_hallucination=s, omissions=o)
        for k, h, s, o in rows
    ]


def normalizations(store: Store, run_id: str) -> list[NormalizationRow]:
    """Every normalization rule that fired in the run, most frequent first."""
    rows = queries.rows(store, "cells_normalizations", [run_id])
    return [NormalizationRow(rule=r, count=c, steps=s) for r, c, s in rows]


def trend(store: Store, run_id: str, limit: int = TREND_RUNS) -> list[TrendRow]:
    """The last *limit* runs of the same domain up to *run_id*, oldest first."""
    rows = queries.rows(store, "cells_trend", [run_id, limit])
    return [
        TrendRow(
            run_id=row[0],
            started_at=row[1],
            world_model=_model_name(row[2]),
            code_version=row[3],
            mode=row[4],
            steps=row[5],
            drift_rate=row[6],
            hallucination_rate=row[7],
            mean_score=row[8],
        )
        for row in rows
    ]


def _model_name(world_model_json: str) -> str:
    import json

    described = json.loads(world_model_json)
    for key in ("model", "name", "backend"):
        if described.get(key):
            return str(described[key])
    return "?"


def _cell(
    domain: str,
    mode: str,
    rows: list[tuple[Any, ...]],
    min_steps: int,
    resamples: int,
    depth: int | None = None,
    action_name: str | None = None,
) -> Cell:
    n = np.array([r[4] for r in rows], dtype=np.float64)
    d = np.array([r[5] for r in rows], dtype=np.float64)
    h = np.array([r[6] for r in rows], dtype=np.float64)
    s = np.array([r[7] for r in rows], dtype=np.float64)
    drift, hallucination, score = bootstrap_ratios(
        [d, h, s], n, _seed(domain, mode, depth, action_name), resamples
    )
    steps = int(n.sum())
    return Cell(
        domain=domain,
        mode=mode,
        depth=depth,
        action_name=action_name,
        steps=steps,
        trajectories=len(rows),
        drift=drift,
        hallucination=hallucination,
        score=score,
        too_few=steps < min_steps,
    )


def _seed(*parts: object) -> int:
    """A stable seed per cell: the same run always gives the same intervals."""
    digest = hashlib.sha256(repr(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big")
