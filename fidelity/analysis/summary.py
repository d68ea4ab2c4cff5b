"""Aggregate one stored run into a :class:`RunSummary` (DuckDB does the work)."""

from __future__ import annotations

import json

from fidelity import store_queries as queries
from fidelity.analysis import cells as _cells
from fidelity.analysis.causes import cause_rows
from fidelity.analysis.cells import MIN_CELL_STEPS, trust_horizon
from fidelity.analysis.models import (
    DEFAULT_HORIZON_LIMIT,
    ActionRow,
    DepthRow,
    JudgeFigures,
    RunInfo,
    RunSummary,
    Totals,
    UnverifiableRow,
    WorstStep,
)
from fidelity.analysis.outcomes import outcome_figures
from fidelity.analysis.simulation import simulation_figures
from fidelity.pipeline import UNVERIFIABLE
from fidelity.store import Store, run_status

WORST_STEPS = 25

# Rates are over compared steps: infrastructure failures are counted apart.


def summarize(
    store: Store,
    run_id: str | None = None,
    horizon_limit: float = DEFAULT_HORIZON_LIMIT,
    worst: int = WORST_STEPS,
    detail: bool = True,
    min_cell_steps: int = MIN_CELL_STEPS,
) -> RunSummary:
    """Everything the report and the gate need about *run_id* (default: the latest run).

    With *detail* (the default) the summary also holds the per-cell figures with
    bootstrap intervals (domain × mode × depth and × action type), horizons,
    entity kinds, normalizations and the trend across runs of the same domain. The
    claimed-against-real outcome figures are always there (the gate checks them).
    """
    run_id = store.require_run(run_id)
    run = _run_info(store, run_id)
    mode = headline_mode(run.mode)
    by_depth = _by_depth(store, run_id, mode)
    unverifiable = queries.rows(store, "unverifiable", [mode, mode, run_id, UNVERIFIABLE])
    totals = _totals(store, run_id, mode, by_depth, horizon_limit)
    summary = RunSummary(
        run=run,
        totals=totals.model_copy(
            update={
                "unverifiable": len(unverifiable),
                "unverifiable_steps": sum(int(r[3]) for r in unverifiable),
            }
        ),
        unverifiable=[
            UnverifiableRow(trajectory_id=tid, domain=domain, reason=error[len(UNVERIFIABLE) :])
            for tid, domain, error, _ in unverifiable
        ],
        by_depth=by_depth,
        by_action=_by_action(store, run_id, mode),
        worst=_worst(store, run_id, mode, worst),
        outcomes=outcome_figures(store, run_id),
        min_cell_steps=min_cell_steps,
    )
    if not detail:
        return summary
    depth_cells = _cells.depth_cells(store, run_id, min_cell_steps)
    return summary.model_copy(
        update={
            "cells": depth_cells,
            "action_cells": _cells.action_cells(store, run_id, min_cell_steps),
            "horizons": _cells.horizons(store, run_id, depth_cells, horizon_limit),
            "entities": _cells.entities(store, run_id),
            "normalizations": _cells.normalizations(store, run_id),
            "trend": _cells.trend(store, run_id),
            "simulation": simulation_figures(store, run_id),
            "judge": _judge(store, run_id),
            "causes": cause_rows(store, run_id, mode),
        }
    )


def headline_mode(run_mode: str) -> str | None:
    """The mode the headline figures are about when a run holds several (the first one).

    ``teacher-forced+open-loop`` gives ``teacher-forced``: the headline, the
    gate and the worst steps are about it, and the per-cell tables show every
    mode side by side. A one-mode run needs no filter (None).
    """
    return run_mode.split("+")[0] if "+" in run_mode else None


def _judge(store: Store, run_id: str) -> JudgeFigures | None:
    """The judge's agreement with the metrics, when ``fidelity judge`` scored this run."""
    row = queries.row(store, "summary_judge", [run_id])
    if not row or not row[0]:
        return None
    from fidelity.judge import judge_agreement  # the judge's client is only loaded when needed

    agreement, means = judge_agreement(store, run_id)
    return JudgeFigures(
        steps=agreement.n,
        spearman=agreement.overall,
        dimensions=agreement.dimensions,
        mean_scores=means,
    )


def _run_info(store: Store, run_id: str) -> RunInfo:
    row = queries.dicts(store, "summary_run", [run_id])[0]
    return RunInfo(
        run_id=row["run_id"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        status=run_status(row["status"], row.get("owner_pid"), row.get("owner_host")),
        domain=row["domain"],
        sandbox=row["sandbox"],
        world_model=json.loads(row["world_model"]),
        mode=row["mode"],
        suite=row["suite"],
        code_version=row["code_version"],
        config=json.loads(row["config"]),
    )


def _totals(
    store: Store, run_id: str, mode: str | None, by_depth: list[DepthRow], limit: float
) -> Totals:
    row = queries.dicts(
        store,
        "summary_totals",
        [run_id, run_id, mode, mode],
    )[0]
    compared = row["steps"] - row["infra_failures"]
    return Totals(
        trajectories=row["trajectories"],
        steps=row["steps"],
        compared_steps=compared,
        infra_failures=row["infra_failures"],
        # nothing compared: no rate, score or horizon is a figure (not 0% drift, not depth 9)
        drift_rate=row["drift_rate"] if compared else None,
        hallucination_rate=row["hallucination_rate"] if compared else None,
        mean_score=row["mean_score"] if compared else None,
        trust_horizon=trust_horizon(by_depth, limit) if compared else None,
        horizon_limit=limit,
        mode=mode,
    )


def _by_depth(store: Store, run_id: str, mode: str | None) -> list[DepthRow]:
    rows = queries.dicts(
        store,
        "summary_by_depth",
        [run_id, mode, mode],
    )
    return [DepthRow(**row) for row in rows]


def _by_action(store: Store, run_id: str, mode: str | None) -> list[ActionRow]:
    rows = queries.dicts(
        store,
        "summary_by_action",
        [run_id, mode, mode],
    )
    return [ActionRow(**row) for row in rows]


def _worst(store: Store, run_id: str, mode: str | None, limit: int) -> list[WorstStep]:
    rows = queries.dicts(
        store,
        "summary_worst",
        [run_id, mode, mode, limit],
    )
    for row in rows:
        row["normalizations"] = json.loads(row["normalizations"])
    return [WorstStep(**row) for row in rows]
