"""What the report shows, computed from a :class:`RunSummary` (and a gate verdict).

Everything here is plain data for the template: strings stay unescaped (the
template escapes them), only the diff cells and charts are :class:`Markup`
built from escaped fragments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from fidelity.analysis.models import (
    ActionRow,
    Cell,
    DepthRow,
    Estimate,
    RunInfo,
    RunSummary,
    Totals,
    WorstStep,
)
from fidelity.report.charts import (
    cells_chart,
    entities_chart,
    rates_chart,
    score_chart,
    trend_chart,
)
from fidelity.report.diff import SideBySide, side_by_side

MAX_WORST = 50
"""Worst steps shown; a summary may hold more."""

MAX_ENTITIES = 40
"""Hallucinated (and, separately, omitted) entities listed per step."""

MAX_ACTION_CHARS = 2000
"""Characters of an action string shown."""

MAX_CELL_ROWS = 600
"""Rows of the domain × mode × depth (and × action) tables; the charts show every cell."""

VERDICT_TITLES = {
    "pass": "Simulated data passes the gate",
    "warn": "Simulated data passes with warnings",
    "fail": "Simulated data fails the gate",
}


@dataclass(frozen=True)
class Card:
    """One headline figure."""

    label: str
    value: str
    detail: str
    tone: str = "neutral"  # good | warn | bad | neutral
    meter: float | None = None  # 0..1, drawn as a thin bar under the value
    kind: str = "count"  # meter colour: count | drift | hall | score | tone


@dataclass(frozen=True)
class Check:
    """One gate check as shown in the verdict banner."""

    name: str
    value: str
    limit: str
    passed: bool | None
    bound: str = "–"  # "[lower, upper]" of a bounded check
    decision: str = ""  # pass | fail | undecided ('' for a count)


@dataclass(frozen=True)
class GateClaim:
    """A dataset gate's claim kept with its run: what it admitted, each limit's bounds."""

    statement: str
    confidence: str
    replayed: str
    checks: list[Check]


@dataclass(frozen=True)
class Banner:
    """The strip at the top: the gate verdict, or the headline when there is none."""

    tone: str  # pass | warn | fail | info
    label: str
    title: str
    text: str
    checks: list[Check] = field(default_factory=list)


@dataclass(frozen=True)
class RateRow:
    """One row of the per-depth or per-action table."""

    label: str
    steps: int
    drift_rate: float
    hallucination_rate: float
    mean_score: float
    beyond_horizon: bool = False


@dataclass(frozen=True)
class StepView:
    """One worst step, ready for the side-by-side card."""

    rank: int
    step: WorstStep
    action: str
    action_cut: int
    diff: SideBySide
    hallucinations: list[str]
    hallucinations_more: int
    omissions: list[str]
    omissions_more: int
    normalizations: list[tuple[str, int]]

    @property
    def exit_differs(self) -> bool:
        """True when both exit codes are known and differ."""
        real, sim = self.step.real_exit_code, self.step.sim_exit_code
        return real is not None and sim is not None and real != sim


def percent(value: float) -> str:
    """``0.1234`` → ``12.3%``."""
    return f"{value * 100:.1f}%"


def score(value: float) -> str:
    """A score with three decimals."""
    return f"{value:.3f}"


def score_or_dash(value: float | None) -> str:
    """:func:`score`, or a dash when there is no figure."""
    return "–" if value is None else score(value)


def percent_or_dash(value: float | None) -> str:
    """:func:`percent`, or a dash when there is no figure."""
    return "–" if value is None else percent(value)


def count(value: int) -> str:
    """An integer with thousands separators."""
    return f"{value:,}"


def bar_width(value: float) -> str:
    """A CSS width for a share in [0, 1] (clamped)."""
    return f"{max(0.0, min(1.0, value)) * 100:.1f}%"


def format_value(value: Any) -> str:
    """A verdict value or limit as text."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return count(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return _text(value)


def format_datetime(moment: datetime | None) -> str:
    """``2025-01-02 03:04:05 UTC`` (or the offset when not UTC)."""
    if moment is None:
        return "—"
    text = moment.strftime("%Y-%m-%d %H:%M:%S")
    offset = moment.utcoffset()
    if offset is None:
        return text
    return f"{text} UTC" if not offset else f"{text} {moment.strftime('%z')}"


def format_duration(run: RunInfo) -> str:
    """How long the run took, or ``—`` when unknown."""
    if run.finished_at is None:
        return "—"
    try:
        seconds = (run.finished_at - run.started_at).total_seconds()
    except TypeError:  # one naive, one aware
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def _json(value: Any, indent: int | None = None) -> str:
    """Stable JSON for display; falls back to input order when keys do not sort."""
    try:
        return json.dumps(value, indent=indent, sort_keys=True, default=str, ensure_ascii=False)
    except TypeError:  # keys of mixed types
        return json.dumps(value, indent=indent, default=str, ensure_ascii=False)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else _json(value)


def world_model_name(world_model: Mapping[str, Any]) -> str:
    """The most telling single value of the world-model description."""
    for key in ("model", "name", "backend"):
        if world_model.get(key):
            return _text(world_model[key])
    return "—" if not world_model else _text(dict(world_model))


def _max_depth(summary: RunSummary) -> int:
    return max((row.depth for row in summary.by_depth), default=0)


def _headline_banner(summary: RunSummary) -> Banner:
    totals, deepest = summary.totals, _max_depth(summary)
    if totals.compared_steps == 0:
        return Banner(
            "info",
            "No verdict",
            "No steps were compared",
            "This run holds no compared steps, so there is nothing to judge yet.",
        )
    limit = percent(totals.horizon_limit)
    horizon = totals.trust_horizon or 0
    if horizon == 0:
        title = f"Simulation drifts above {limit} from the first step"
    elif horizon >= deepest:
        title = f"Simulation stays within {limit} drift at every depth (1–{deepest})"
    else:
        title = f"Simulation can be trusted up to depth {horizon} of {deepest}"
    text = (
        f"{percent(totals.drift_rate or 0.0)} of {count(totals.compared_steps)} compared steps "
        f"drift, {percent(totals.hallucination_rate or 0.0)} hallucinate, mean score "
        f"{score(totals.mean_score or 0.0)}."
    )
    return Banner("info", "No verdict", title, text)


def _check(raw: Any) -> Check:
    item: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {"name": raw}
    passed = item.get("passed")
    lower, upper = item.get("lower"), item.get("upper")
    bounded = lower is not None or upper is not None
    return Check(
        name=_text(item.get("name", item.get("limit", "check"))),
        value=format_value(item.get("value", item.get("estimate"))),
        limit=format_value(item.get("limit")) if "name" in item else "",
        passed=passed if isinstance(passed, bool) else None,
        bound=f"[{format_value(lower)}, {format_value(upper)}]" if bounded else "–",
        decision=_text(item.get("decision") or ""),
    )


def gate_claim(run: RunInfo) -> GateClaim | None:
    """The claim a dataset gate kept with *run* (None: not a dataset gate's run)."""
    claim = run.config.get("gate_claim")
    if not isinstance(claim, Mapping):
        return None
    admitted = claim.get("admitted_claim") or {}
    limits = claim.get("limits") or []
    checks = [_check(item) for item in limits if isinstance(item, Mapping)]
    confidence = claim.get("confidence")
    return GateClaim(
        statement=_text(admitted.get("statement", "")) if isinstance(admitted, Mapping) else "",
        confidence=percent(confidence) if isinstance(confidence, int | float) else "–",
        replayed=count(claim.get("replayed_trajectories") or 0),
        checks=checks,
    )


def _verdict_banner(verdict: Mapping[str, Any]) -> Banner:
    status = _text(verdict.get("status", "")).lower()
    tone = status if status in VERDICT_TITLES else "info"
    raw_checks = verdict.get("checks") or []
    checks = [_check(raw) for raw in raw_checks] if isinstance(raw_checks, list) else []
    passed = sum(1 for check in checks if check.passed)
    title = VERDICT_TITLES.get(status, f"Gate status: {status or 'unknown'}")
    text = f"{passed} of {len(checks)} checks passed." if checks else "The gate listed no checks."
    return Banner(tone, status.upper() or "?", title, text, checks)


def banner(summary: RunSummary, verdict: Mapping[str, Any] | None) -> Banner:
    """The verdict banner, or the headline banner when no verdict is given."""
    return _headline_banner(summary) if verdict is None else _verdict_banner(verdict)


def _horizon_tone(totals: Totals, deepest: int) -> str:
    if totals.trust_horizon is None:
        return "neutral"
    if totals.trust_horizon >= deepest:
        return "good"
    return "bad" if totals.trust_horizon == 0 else "warn"


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def cards(summary: RunSummary) -> list[Card]:
    """The six headline figures; rates and scores read ``—`` when nothing was compared."""
    totals, deepest = summary.totals, _max_depth(summary)
    limit = percent(totals.horizon_limit)

    def rate(value: float | None, text: str, scale: float = 1.0) -> str:
        return "—" if value is None else text.format(value * scale)

    return [
        Card(
            "Steps compared",
            count(totals.compared_steps),
            f"of {count(totals.steps)} steps in {count(totals.trajectories)} trajectories",
            meter=_share(totals.compared_steps, totals.steps),
        ),
        Card(
            "Drift rate",
            rate(totals.drift_rate, "{:.1f}%", 100),
            "steps scoring below the domain threshold",
            meter=totals.drift_rate,
            kind="drift",
        ),
        Card(
            "Hallucination rate",
            rate(totals.hallucination_rate, "{:.1f}%", 100),
            "steps where sim invents at least one entity",
            meter=totals.hallucination_rate,
            kind="hall",
        ),
        Card(
            "Mean score",
            rate(totals.mean_score, "{:.3f}"),
            "1.000 = identical after normalization",
            meter=totals.mean_score,
            kind="score",
        ),
        Card(
            "Trust horizon",
            rate(totals.trust_horizon, "{:,}"),
            f"of {count(deepest)} depths stay within {limit} drift",
            _horizon_tone(totals, deepest),
            meter=None if totals.trust_horizon is None else _share(totals.trust_horizon, deepest),
            kind="tone",
        ),
        Card(
            "Infra failures",
            count(totals.infra_failures - totals.unverifiable_steps),
            "sandbox or model failures, kept out of the rates"
            + (
                f"; {count(totals.unverifiable)} unverifiable trajectories apart"
                if totals.unverifiable
                else ""
            ),
            "warn" if totals.infra_failures else "good",
        ),
    ]


def depth_rows(rows: Sequence[DepthRow], horizon: int) -> list[RateRow]:
    """Per-depth rows in depth order, flagged past the trust horizon."""
    return [
        RateRow(
            str(r.depth),
            r.steps,
            r.drift_rate,
            r.hallucination_rate,
            r.mean_score,
            r.depth > horizon,
        )
        for r in sorted(rows, key=lambda r: r.depth)
    ]


def action_rows(rows: Sequence[ActionRow]) -> list[RateRow]:
    """Per-action rows, worst drift first (then most steps, then name)."""
    ordered = sorted(rows, key=lambda r: (-r.drift_rate, -r.steps, r.action_name))
    return [
        RateRow(r.action_name, r.steps, r.drift_rate, r.hallucination_rate, r.mean_score)
        for r in ordered
    ]


def _capped(items: Sequence[str], limit: int) -> tuple[list[str], int]:
    return list(items[:limit]), max(0, len(items) - limit)


def step_view(rank: int, step: WorstStep) -> StepView:
    """One worst step with its diff computed and long lists capped."""
    hallucinations, more_h = _capped(step.hallucinations, MAX_ENTITIES)
    omissions, more_o = _capped(step.omissions, MAX_ENTITIES)
    normalizations = sorted(step.normalizations.items(), key=lambda kv: (-kv[1], kv[0]))
    return StepView(
        rank=rank,
        step=step,
        action=step.action[:MAX_ACTION_CHARS],
        action_cut=max(0, len(step.action) - MAX_ACTION_CHARS),
        diff=side_by_side(step.real_text, step.sim_text),
        hallucinations=hallucinations,
        hallucinations_more=more_h,
        omissions=omissions,
        omissions_more=more_o,
        normalizations=normalizations,
    )


def _run_facts(run: RunInfo) -> list[tuple[str, str]]:
    return [
        ("Domain", run.domain),
        ("Sandbox", run.sandbox),
        ("Mode", run.mode),
        *([("Headline mode", headline)] if (headline := _headline(run.mode)) else []),
        ("Suite", run.suite),
        ("Code version", run.code_version),
        ("Started", format_datetime(run.started_at)),
        ("Finished", format_datetime(run.finished_at)),
        ("Duration", format_duration(run)),
    ]


def _headline(mode: str) -> str | None:
    if "+" not in mode:
        return None
    first = mode.split("+")[0]
    return f"{first} (overview, depth and worst steps; cells show every mode)"


def context(summary: RunSummary, verdict: Mapping[str, Any] | None) -> dict[str, Any]:
    """Everything the report template needs."""
    run, totals = summary.run, summary.totals
    worst = [step_view(i, step) for i, step in enumerate(summary.worst[:MAX_WORST], start=1)]
    depths = [view.step.depth for view in worst]
    return {
        "run": run,
        "facts": _run_facts(run),
        "world_model_name": world_model_name(run.world_model),
        "world_model": [(key, _text(value)) for key, value in run.world_model.items()],
        "config_json": _json(run.config, indent=2) if run.config else "",
        "totals": totals,
        "banner": banner(summary, verdict),
        "cards": cards(summary),
        "rates_svg": rates_chart(summary.by_depth, totals.trust_horizon or 0, totals.horizon_limit),
        "score_svg": score_chart(summary.by_depth),
        "depth_rows": depth_rows(summary.by_depth, totals.trust_horizon or 0),
        "action_rows": action_rows(summary.by_action),
        "worst": worst,
        "worst_total": len(summary.worst),
        "worst_actions": sorted({view.step.action_name for view in worst}),
        "worst_depth_range": (min(depths), max(depths)) if depths else (0, 0),
        "unverifiable": summary.unverifiable,
        "gate_claim": gate_claim(run),
        **detail_context(summary),
    }


@dataclass(frozen=True)
class CellView:
    """One row of a cell table: figures with their intervals as text."""

    domain: str
    mode: str
    label: str
    depth: int | None
    steps: int
    trajectories: int
    drift: Estimate
    hallucination: Estimate
    score: Estimate
    too_few: bool


def interval(estimate: Estimate, as_percent: bool = True) -> str:
    """``[1.2%, 4.5%]`` (or scores with three decimals)."""
    fmt = percent if as_percent else score
    return f"[{fmt(estimate.low)}, {fmt(estimate.high)}]"


def cell_views(cells: Sequence[Cell]) -> list[CellView]:
    """Table rows for depth or action cells (capped at :data:`MAX_CELL_ROWS`)."""
    return [
        CellView(
            domain=c.domain,
            mode=c.mode,
            label=str(c.depth) if c.depth is not None else (c.action_name or "?"),
            depth=c.depth,
            steps=c.steps,
            trajectories=c.trajectories,
            drift=c.drift,
            hallucination=c.hallucination,
            score=c.score,
            too_few=c.too_few,
        )
        for c in cells[:MAX_CELL_ROWS]
    ]


def detail_context(summary: RunSummary) -> dict[str, Any]:
    """The per-cell, entity, normalization and trend parts of the template context."""
    depths = [c.depth for c in summary.cells if c.depth is not None]
    modes = sorted({c.mode for c in summary.cells})
    return {
        "cells_svg": cells_chart(summary.cells),
        "cell_rows": cell_views(summary.cells),
        "cells_total": len(summary.cells),
        "action_cell_rows": cell_views(summary.action_cells),
        "action_cells_total": len(summary.action_cells),
        "cell_domains": sorted({c.domain for c in summary.cells}),
        "cell_modes": modes,
        "side_by_side": len(modes) > 1,
        "cell_depth_range": (min(depths), max(depths)) if depths else (0, 0),
        "too_few_cells": sum(c.too_few for c in summary.cells),
        "min_cell_steps": summary.min_cell_steps,
        "horizons": summary.horizons,
        "entities": summary.entities,
        "entities_svg": entities_chart(summary.entities),
        "normalizations": summary.normalizations,
        "trend": summary.trend,
        "trend_svg": trend_chart(summary.trend),
        "simulation": [s for s in summary.simulation if s.sampling or s.controllability],
        "judge": summary.judge,
        "outcomes": summary.outcomes,
        "causes": summary.causes,
        "causes_total": sum(c.steps for c in summary.causes),
    }
