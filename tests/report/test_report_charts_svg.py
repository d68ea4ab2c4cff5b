"""The charts' SVG, written without a plotting library: axes that cover the data, marks
inside the plot area, values placed by their size, every chart kind (issue 31)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from markupsafe import Markup

from fidelity.analysis.models import Cell, DepthRow, EntityRow, Estimate, RunSummary, TrendRow
from fidelity.report.charts import (
    cells_chart,
    entities_chart,
    rates_chart,
    score_chart,
    ticks,
    trend_chart,
)


def _plot_area(svg: str) -> tuple[float, float, float, float]:
    """The clip rectangle of the plot area: x0, y0, x1, y1."""
    found = re.search(
        r'<clipPath id="[^"]+"><rect x="([\d.]+)" y="([\d.]+)" width="([\d.]+)" '
        r'height="([\d.]+)"/>',
        svg,
    )
    assert found is not None
    x, y, width, height = (float(v) for v in found.groups())
    return x, y, x + width, y + height


def _clipped(svg: str) -> str:
    """The marks drawn inside the plot area's clip group."""
    return svg.split('clip-path="url(#', 1)[1].split("</g>", 1)[0]


def _bars(svg: str) -> list[tuple[float, float, float, float]]:
    rects = re.findall(
        r'<rect x="([-\d.]+)" y="([-\d.]+)" width="([\d.]+)" height="([\d.]+)"', _clipped(svg)
    )
    return [(float(x), float(y), float(x) + float(w), float(y) + float(h)) for x, y, w, h in rects]


def _polylines(svg: str) -> list[list[tuple[float, float]]]:
    return [
        [(float(x), float(y)) for x, y in (p.split(",") for p in points.split())]
        for points in re.findall(r'<polyline points="([^"]+)"', svg)
    ]


def _inside(
    box: tuple[float, float, float, float], area: tuple[float, float, float, float]
) -> bool:
    x0, y0, x1, y1 = area
    return x0 - 0.01 <= box[0] <= box[2] <= x1 + 0.01 and y0 - 0.01 <= box[1] <= box[3] <= y1 + 0.01


def test_ticks_are_round_values_covering_the_range() -> None:
    assert ticks(0.0, 1.0, 6) == [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert ticks(0.5, 13.5, 12, integer=True) == [2, 4, 6, 8, 10, 12]
    assert ticks(0.0, 0.05, 6) == [0.0, 0.01, 0.02, 0.03, 0.04, 0.05]
    assert ticks(0.0, 3.0, 6, integer=True) == [0, 1, 2, 3]  # no half steps
    assert ticks(2.0, 2.0, 5) == [2.0]
    many = ticks(0.0, 1234.0, 5, integer=True)
    assert len(many) <= 6 and many[0] == 0 and many[-1] <= 1234


def test_every_bar_of_the_entities_chart_lies_inside_its_plot_area() -> None:
    """The longest bar ends inside the area (the axis extends past the last round tick)."""
    rows = [
        EntityRow(kind="line", hallucinations=2, steps_with_hallucination=2, omissions=310),
        EntityRow(kind="path", hallucinations=0, steps_with_hallucination=0, omissions=40),
    ]
    svg = str(entities_chart(rows))
    area = _plot_area(svg)
    bars = _bars(svg)
    assert len(bars) == 4
    assert all(_inside(bar, area) for bar in bars)
    longest = max(bars, key=lambda b: b[2] - b[0])
    assert longest[2] - longest[0] > 0.9 * (area[2] - area[0])  # the axis is not padded much
    assert ">line<" in svg and ">path<" in svg


def test_the_score_chart_draws_a_bar_per_depth_scaled_to_its_steps(summary: RunSummary) -> None:
    svg = str(score_chart(summary.by_depth))
    area = _plot_area(svg)
    bars = _bars(svg)
    assert len(bars) == len(summary.by_depth)
    assert all(_inside(bar, area) for bar in bars)
    heights = [bar[3] - bar[1] for bar in bars]
    steps = [row.steps for row in summary.by_depth]
    ratio = heights[0] / steps[0]
    assert heights == pytest.approx([s * ratio for s in steps], abs=0.05)


def test_rates_are_placed_by_their_size(summary: RunSummary) -> None:
    """A higher rate is drawn higher (a smaller y), every point inside the plot area."""
    rows = summary.by_depth
    svg = str(rates_chart(rows, 5, 0.25))
    area = _plot_area(svg)
    drift, hallucination, limit = _polylines(svg)
    assert len(drift) == len(rows) == len(hallucination)
    order = sorted(range(len(rows)), key=lambda i: rows[i].drift_rate)
    ys = [drift[i][1] for i in order]
    assert ys == sorted(ys, reverse=True)
    assert all(_inside((x, y, x, y), area) for x, y in drift + hallucination)
    assert limit[0][1] == limit[1][1]  # the horizon limit is a level line


def _cell(domain: str, depth: int, value: float, too_few: bool = False) -> Cell:
    estimate = Estimate(value=value, low=max(0.0, value - 0.1), high=min(1.0, value + 0.1))
    return Cell(
        domain=domain,
        mode="teacher-forced",
        depth=depth,
        steps=5 if too_few else 50,
        trajectories=5,
        drift=estimate,
        hallucination=estimate,
        score=estimate,
        too_few=too_few,
    )


def test_the_cells_chart_draws_a_line_and_band_per_domain_and_mode() -> None:
    cells = [_cell("terminal", d, d / 10) for d in (1, 2, 3)]
    cells += [_cell("web", 1, 0.5), _cell("web", 2, 0.6, too_few=True)]
    cells.append(_cell("web", 0, 0.1).model_copy(update={"depth": None, "action_name": "ls"}))
    svg = str(cells_chart(cells))
    assert svg.count("<polygon") == 2 and len(_polylines(svg)) == 2
    assert svg.count('fill="white"') == 1  # the one depth with too few steps, hollow
    assert "terminal teacher-forced" in svg and "web teacher-forced" in svg
    assert cells_chart([cells[-1]]) is None  # action cells only: nothing against depth


def test_the_trend_chart_needs_two_runs() -> None:
    row = TrendRow(
        run_id="r1",
        started_at="2026-01-01T00:00:00",
        world_model="m",
        code_version="v",
        mode="teacher-forced",
        steps=10,
        drift_rate=0.3,
        hallucination_rate=0.1,
        mean_score=0.8,
    )
    assert trend_chart([row]) is None
    svg = str(trend_chart([row, row.model_copy(update={"run_id": "r2", "drift_rate": 0.6})]))
    drift = _polylines(svg)[0]
    assert drift[1][1] < drift[0][1]  # the second run drifts more: drawn higher


def test_labels_are_escaped_and_stripped_of_markup() -> None:
    rows = [EntityRow(kind='<b>"x"&', hallucinations=1, steps_with_hallucination=1, omissions=0)]
    svg = entities_chart(rows)
    assert isinstance(svg, Markup)
    assert "<b>" not in svg and ">bx<" in svg


def test_drawing_the_charts_imports_no_plotting_library(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from fidelity.analysis.models import DepthRow\n"
        "from fidelity.report.charts import rates_chart, score_chart\n"
        "rows = [DepthRow(depth=d, steps=9, drift_rate=0.1, hallucination_rate=0.0, "
        "mean_score=0.9) for d in (1, 2)]\n"
        "assert rates_chart(rows, 1, 0.2) and score_chart(rows)\n"
        "print(sorted(m for m in ('matplotlib', 'numpy') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert result.stdout.strip() == "[]"


def test_many_depths_draw_lines_without_markers() -> None:
    rows = [
        DepthRow(depth=d, steps=10, drift_rate=0.5, hallucination_rate=0.1, mean_score=0.5)
        for d in range(1, 60)
    ]
    assert "<circle" not in str(rates_chart(rows, 60, 0.25))
    assert "<circle" in str(rates_chart(rows[:10], 60, 0.25))


def test_a_long_legend_wraps_into_rows_inside_the_chart() -> None:
    cells = [_cell(f"domain{n}-{'x' * 30}", 1, 0.2 * n) for n in range(3)]
    svg = str(cells_chart(cells))
    swatches = re.findall(
        r'<line x1="([\d.-]+)" y1="([\d.]+)" x2="([\d.-]+)"[^>]*stroke-width="2"', svg
    )
    assert len(swatches) == 3
    assert all(float(x1) >= 0 and float(x2) <= 640 for x1, _, x2 in swatches)
    assert len({y for _, y, _ in swatches}) >= 2  # three long labels do not fit one row
    assert _plot_area(svg)[1] > 40  # the plot area starts below the legend's rows
