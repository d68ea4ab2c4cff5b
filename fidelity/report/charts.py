"""Charts of a run against trajectory depth, written directly as inline SVG text.

Each chart is a small ``<svg>`` element: a ``viewBox`` and no fixed size (CSS
sizes it), no XML prologue, metadata or global ``<style>``, labels kept as
``<text>``, and one clip path whose id is unique to the chart kind (two charts on
a page share no id). The output depends only on the rows, so it is deterministic.
Charts show only numbers and fixed labels, never text from the run.

No plotting library is imported: matplotlib cost an audit's report about 0.5 s
to import and as much again to lay out five small charts (issue 31).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from markupsafe import Markup, escape

from fidelity.analysis.models import Cell, DepthRow, EntityRow, TrendRow

DRIFT_COLOR = "#e8590c"
HALLUCINATION_COLOR = "#c92a2a"
SCORE_COLOR = "#1c7ed6"
STEPS_COLOR = "#d0d5dd"
LIMIT_COLOR = "#667085"
BEYOND_COLOR = "#ffe8e8"

_EDGE = "#98a2b3"
_LABEL = "#475467"
_TICK = "#667085"
_GRID = "#eaecf0"
_GRID_WIDTH = ' stroke-width="0.8"'

_WIDTH = 640.0
_HEIGHT = 300.0
_FONT = 12.0  # tick and axis labels, px
_LEGEND_FONT = 10.5
_MARKERS_UP_TO = 40  # depths; beyond that lines alone read better
_DASHED = "5.5 2.75"
_DOTTED = "1.4 2.3"

_PALETTE = ["#e8590c", "#1c7ed6", "#2f9e44", "#ae3ec9", "#f08c00", "#0c8599", "#c92a2a"]

Format = Callable[[float], str]


def _number(value: float) -> str:
    """A coordinate or value in the SVG: two decimals at most, no trailing zeros."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text in {"-0", ""} else text


def _percent(value: float) -> str:
    text = f"{value * 100:.1f}".removesuffix(".0")
    return f"{text}%"


def _whole_percent(value: float) -> str:
    return f"{value * 100:.0f}%"


def _plain(value: float) -> str:
    return f"{value:.10g}"


def ticks(low: float, high: float, bins: int, integer: bool = False) -> list[float]:
    """At most *bins* + 1 round values in [*low*, *high*] (steps of 1, 2, 2.5 or 5 × 10ⁿ;
    whole steps only with *integer*)."""
    if not high > low:
        return [low]
    raw = (high - low) / bins
    magnitude = 10.0 ** math.floor(math.log10(raw))
    steps = [m * magnitude for m in (1, 2, 2.5, 5, 10)]
    if integer:
        steps = [s for s in steps if s >= 1 and float(s).is_integer()] or [1.0]
    step = next((s for s in steps if s >= raw - 1e-12), steps[-1])
    first = math.ceil(low / step - 1e-9)
    last = math.floor(high / step + 1e-9)
    return [round(n * step, 10) for n in range(first, last + 1)]


@dataclass
class _Scale:
    """A linear map from data values to SVG coordinates."""

    low: float
    high: float
    start: float  # SVG coordinate of *low*
    end: float  # SVG coordinate of *high*

    def __call__(self, value: float) -> float:
        span = self.high - self.low or 1.0
        return self.start + (value - self.low) / span * (self.end - self.start)


@dataclass
class _Entry:
    """One legend entry: a line (with its dash) or a filled swatch."""

    label: str
    color: str
    kind: str = "line"  # line | box
    dash: str | None = None


@dataclass
class _Chart:
    """An SVG chart being drawn: a plot area with axes, its elements, a legend above."""

    name: str
    label: str
    left: float = 56.0
    right: float = 16.0
    bottom: float = 44.0
    height: float = _HEIGHT
    legend_columns: int = 4
    entries: list[_Entry] = field(default_factory=list)
    back: list[str] = field(default_factory=list)  # grid, shading: under the data
    data: list[str] = field(default_factory=list)  # clipped to the plot area
    front: list[str] = field(default_factory=list)  # axes, ticks, labels

    @property
    def clip(self) -> str:
        return f"fidelity-{self.name}-plot"

    def area(self, rows: int) -> tuple[float, float, float, float]:
        """The plot area (x0, y0, x1, y1) below a legend of *rows* rows."""
        top = 10.0 + 16.0 * max(rows, 1)
        return self.left, top, _WIDTH - self.right, self.height - self.bottom

    def legend_rows(self) -> list[list[_Entry]]:
        """The entries in rows of at most *legend_columns* that fit the chart's width."""
        rows: list[list[_Entry]] = []
        width = 0.0
        for entry in self.entries:
            if not rows or len(rows[-1]) == self.legend_columns or width + _span(entry) > _WIDTH:
                rows.append([])
                width = 0.0
            rows[-1].append(entry)
            width += _span(entry)
        return rows

    def box(self) -> tuple[float, float, float, float]:
        return self.area(len(self.legend_rows()))

    def svg(self) -> Markup:
        """The finished ``<svg>`` element."""
        x0, y0, x1, y1 = self.box()
        clip = (
            f'<defs><clipPath id="{self.clip}"><rect x="{_number(x0)}" y="{_number(y0)}" '
            f'width="{_number(x1 - x0)}" height="{_number(y1 - y0)}"/></clipPath></defs>'
        )
        parts = [
            f'<svg class="chart-svg" role="img" aria-label="{escape(self.label)}" '
            f'viewBox="0 0 {_number(_WIDTH)} {_number(self.height)}" '
            'xmlns="http://www.w3.org/2000/svg" font-family="DejaVu Sans, sans-serif" '
            f'font-size="{_number(_FONT)}">',
            clip,
            *self.back,
            f'<g clip-path="url(#{self.clip})">',
            *self.data,
            "</g>",
            *self.front,
            *self._legend(),
            "</svg>",
        ]
        return Markup("\n".join(parts))

    def _legend(self) -> list[str]:
        """The entries centred above the plot area, *legend_columns* a row."""
        out: list[str] = []
        for index, row in enumerate(self.legend_rows()):
            x = (_WIDTH - sum(_span(entry) for entry in row)) / 2
            y = 14.0 + 16.0 * index
            for entry in row:
                out.append(_swatch(entry, x, y))
                out.append(
                    f'<text x="{_number(x + 26)}" y="{_number(y + 3.5)}" fill="{_LABEL}" '
                    f'font-size="{_number(_LEGEND_FONT)}">{escape(entry.label)}</text>'
                )
                x += _span(entry)
        return out


def _span(entry: _Entry) -> float:
    """The width a legend entry takes: swatch, label (estimated), gap."""
    return 28.0 + 0.58 * _LEGEND_FONT * len(entry.label) + 14.0


def _swatch(entry: _Entry, x: float, y: float) -> str:
    if entry.kind == "box":
        return (
            f'<rect x="{_number(x + 2)}" y="{_number(y - 4)}" width="18" height="8" '
            f'fill="{entry.color}"/>'
        )
    dash = f' stroke-dasharray="{entry.dash}"' if entry.dash else ""
    return _segment(x, y, x + 22, y, entry.color, f' stroke-width="2"{dash}')


def _segment(x1: float, y1: float, x2: float, y2: float, color: str, extra: str = "") -> str:
    """An SVG line from (x1, y1) to (x2, y2)."""
    return (
        f'<line x1="{_number(x1)}" y1="{_number(y1)}" x2="{_number(x2)}" y2="{_number(y2)}" '
        f'stroke="{color}"{extra}/>'
    )


def _x_axis(
    chart: _Chart,
    scale: _Scale,
    values: Sequence[float],
    label: str,
    grid: bool = True,
    text: Format = _plain,
) -> None:
    """Ticks, tick labels, grid lines and the label of the bottom axis."""
    x0, y0, x1, y1 = chart.box()
    for value in values:
        x = scale(value)
        if grid:
            chart.back.append(_segment(x, y0, x, y1, _GRID, _GRID_WIDTH))
        chart.front.append(_segment(x, y1, x, y1 + 4, _EDGE))
        chart.front.append(
            f'<text x="{_number(x)}" y="{_number(y1 + 17)}" text-anchor="middle" '
            f'fill="{_TICK}">{escape(text(value))}</text>'
        )
    chart.front.append(_segment(x0, y1, x1, y1, _EDGE))
    chart.front.append(
        f'<text x="{_number((x0 + x1) / 2)}" y="{_number(y1 + 35)}" text-anchor="middle" '
        f'fill="{_LABEL}">{escape(label)}</text>'
    )


def _y_axis(
    chart: _Chart,
    scale: _Scale,
    values: Sequence[float],
    label: str | None = None,
    text: Format = _plain,
    side: str = "left",
    grid: bool = True,
) -> None:
    """Ticks, tick labels, grid lines and the (rotated) label of a side axis."""
    x0, y0, x1, y1 = chart.box()
    edge, sign, anchor = (x0, -1, "end") if side == "left" else (x1, 1, "start")
    for value in values:
        y = scale(value)
        if grid:
            chart.back.append(_segment(x0, y, x1, y, _GRID, _GRID_WIDTH))
        chart.front.append(_segment(edge, y, edge + 4 * sign, y, _EDGE))
        chart.front.append(
            f'<text x="{_number(edge + 7 * sign)}" y="{_number(y + 4)}" '
            f'text-anchor="{anchor}" fill="{_TICK}">{escape(text(value))}</text>'
        )
    chart.front.append(_segment(edge, y0, edge, y1, _EDGE))
    if label is not None:
        x = _number(edge + 44 * sign)
        middle = _number((y0 + y1) / 2)
        chart.front.append(
            f'<text x="{x}" y="{middle}" text-anchor="middle" fill="{_LABEL}" '
            f'transform="rotate(-90 {x} {middle})">{escape(label)}</text>'
        )


def _line(
    chart: _Chart,
    points: Sequence[tuple[float, float]],
    color: str,
    markers: bool,
    dash: str | None = None,
) -> None:
    """A polyline through *points* (SVG coordinates), with round markers if asked."""
    dashing = f' stroke-dasharray="{dash}"' if dash else ""
    coordinates = " ".join(f"{_number(x)},{_number(y)}" for x, y in points)
    chart.data.append(
        f'<polyline points="{coordinates}" fill="none" stroke="{color}" stroke-width="2" '
        f'stroke-linejoin="round"{dashing}/>'
    )
    if markers:
        chart.data.extend(
            f'<circle cx="{_number(x)}" cy="{_number(y)}" r="3" fill="{color}"/>' for x, y in points
        )


def _rect(x0: float, y0: float, x1: float, y1: float, color: str, extra: str = "") -> str:
    return (
        f'<rect x="{_number(min(x0, x1))}" y="{_number(min(y0, y1))}" '
        f'width="{_number(abs(x1 - x0))}" height="{_number(abs(y1 - y0))}" fill="{color}"{extra}/>'
    )


def _depth_scale(chart: _Chart, depths: Sequence[int]) -> _Scale:
    x0, _, x1, _ = chart.box()
    return _Scale(min(depths) - 0.5, max(depths) + 0.5, x0, x1)


def _depth_axis(chart: _Chart, scale: _Scale, grid: bool = True) -> None:
    values = ticks(scale.low, scale.high, 12, integer=True)
    _x_axis(chart, scale, values, "trajectory depth (step)", grid=grid)


def _value_scale(chart: _Chart, high: float) -> _Scale:
    _, y0, _, y1 = chart.box()
    return _Scale(0.0, high, y1, y0)


def _shade_beyond_horizon(chart: _Chart, x: _Scale, depths: Sequence[int], horizon: int) -> None:
    _, y0, _, y1 = chart.box()
    start = max(horizon, min(depths) - 1) + 0.5
    chart.back.insert(0, _rect(x(start), y0, x(max(depths) + 0.5), y1, BEYOND_COLOR))


def rates_chart(rows: Sequence[DepthRow], horizon: int, limit: float) -> Markup | None:
    """Drift and hallucination rate against depth, with the horizon limit and trust horizon.

    ``None`` when there are no depth rows to plot.
    """
    if not rows:
        return None
    depths = [row.depth for row in rows]
    markers = len(rows) <= _MARKERS_UP_TO
    chart = _Chart("rates", "Drift and hallucination rate by depth")
    # the legend's entries first: the plot area sits below the legend's rows
    chart.entries = [
        _Entry("drift rate", DRIFT_COLOR),
        _Entry("hallucination rate", HALLUCINATION_COLOR, dash=_DASHED),
        _Entry(f"horizon limit ({_percent(limit)})", LIMIT_COLOR, dash=_DOTTED),
    ]
    shaded = horizon < max(depths)
    if shaded:
        chart.entries.append(_Entry("beyond trust horizon", BEYOND_COLOR, kind="box"))
    x = _depth_scale(chart, depths)
    top = max([limit, *(r.drift_rate for r in rows), *(r.hallucination_rate for r in rows)])
    y = _value_scale(chart, min(1.0, top * 1.15) or 0.05)
    if shaded:
        _shade_beyond_horizon(chart, x, depths, horizon)
    drift = [(x(r.depth), y(r.drift_rate)) for r in rows]
    hallucination = [(x(r.depth), y(r.hallucination_rate)) for r in rows]
    _line(chart, drift, DRIFT_COLOR, markers)
    _line(chart, hallucination, HALLUCINATION_COLOR, markers, dash=_DASHED)
    x0, _, x1, _ = chart.box()
    _line(chart, [(x0, y(limit)), (x1, y(limit))], LIMIT_COLOR, False, dash=_DOTTED)
    _y_axis(chart, y, ticks(0.0, y.high, 6), text=_whole_percent)
    _depth_axis(chart, x)
    return chart.svg()


def score_chart(rows: Sequence[DepthRow]) -> Markup | None:
    """Mean score against depth, over grey bars of how many steps each depth holds.

    ``None`` when there are no depth rows to plot.
    """
    if not rows:
        return None
    depths = [row.depth for row in rows]
    chart = _Chart("score", "Mean score by depth", right=56.0, legend_columns=2)
    chart.entries = [
        _Entry("steps compared", STEPS_COLOR, kind="box"),
        _Entry("mean score", SCORE_COLOR),
    ]
    x = _depth_scale(chart, depths)
    most = max(r.steps for r in rows)
    count_ticks = ticks(0.0, most * 1.05 or 1.0, 5, integer=True)
    counts = _value_scale(chart, max(most * 1.05, count_ticks[-1], 1.0))
    score = _value_scale(chart, 1.02)
    half = 0.35 * (x(1.0) - x(0.0))
    for row in rows:
        chart.data.append(
            _rect(
                x(row.depth) - half,
                counts(0.0),
                x(row.depth) + half,
                counts(row.steps),
                STEPS_COLOR,
            )
        )
    points = [(x(r.depth), score(r.mean_score)) for r in rows]
    _line(chart, points, SCORE_COLOR, len(rows) <= _MARKERS_UP_TO)
    # Score reads on the left, the sample size on the right.
    _y_axis(chart, score, ticks(0.0, 1.0, 6), "mean score")
    _y_axis(chart, counts, count_ticks, "steps compared", side="right", grid=False)
    _depth_axis(chart, x, grid=False)
    return chart.svg()


def _safe_label(text: str) -> str:
    """Chart labels keep letters, digits, spaces and dashes only (no run text verbatim)."""
    return re.sub(r"[^A-Za-z0-9 ._-]", "", text)[:40] or "?"


def cells_chart(cells: Sequence[Cell]) -> Markup | None:
    """Drift rate against depth, one line per domain × mode, with its 95% interval as a band.

    Depths with too few steps are drawn hollow. ``None`` without depth cells.
    """
    series: dict[tuple[str, str], list[Cell]] = {}
    for cell in cells:
        if cell.depth is not None:
            series.setdefault((cell.domain, cell.mode), []).append(cell)
    if not series:
        return None
    ordered = [
        (_safe_label(f"{domain} {mode}"), sorted(rows, key=lambda c: c.depth or 0))
        for (domain, mode), rows in sorted(series.items())
    ]
    chart = _Chart("cells", "Drift rate by depth per domain and mode", legend_columns=3)
    colors = [_PALETTE[index % len(_PALETTE)] for index in range(len(ordered))]
    chart.entries = [
        _Entry(label, color) for (label, _), color in zip(ordered, colors, strict=True)
    ]
    x = _depth_scale(chart, [c.depth or 0 for _, rows in ordered for c in rows])
    y = _value_scale(chart, 1.0)
    for (_, rows), color in zip(ordered, colors, strict=True):
        _cell_series(chart, x, y, rows, color)
    _y_axis(chart, y, ticks(0.0, 1.0, 6), "drift rate (95% interval)", text=_whole_percent)
    _depth_axis(chart, x)
    return chart.svg()


def _cell_series(chart: _Chart, x: _Scale, y: _Scale, rows: list[Cell], color: str) -> None:
    """One domain × mode: its interval band, its line, hollow markers where steps are few."""
    upper = [(x(c.depth or 0), y(c.drift.high)) for c in rows]
    lower = [(x(c.depth or 0), y(c.drift.low)) for c in reversed(rows)]
    band = " ".join(f"{_number(a)},{_number(b)}" for a, b in [*upper, *lower])
    chart.data.append(f'<polygon points="{band}" fill="{color}" fill-opacity="0.15"/>')
    _line(chart, [(x(c.depth or 0), y(c.drift.value)) for c in rows], color, False)
    if len(rows) <= _MARKERS_UP_TO:
        chart.data.extend(
            f'<circle cx="{_number(x(c.depth or 0))}" cy="{_number(y(c.drift.value))}" r="3" '
            f'fill="white" stroke="{color}"/>'
            for c in rows
            if c.too_few
        )


def entities_chart(rows: Sequence[EntityRow]) -> Markup | None:
    """Hallucinated and omitted entities per kind, as horizontal bars (top 12 kinds)."""
    rows = [r for r in rows if r.hallucinations or r.omissions][:12]
    if not rows:
        return None
    labels = [_safe_label(r.kind) for r in rows]
    left = 16.0 + 0.6 * _FONT * max(len(label) for label in labels)
    height = max(160.0, 32.0 * len(rows) + 80.0)
    chart = _Chart(
        "entities",
        "Hallucinated and omitted entities by kind",
        left=left,
        height=height,
        legend_columns=2,
    )
    chart.entries = [
        _Entry("hallucinated", HALLUCINATION_COLOR, kind="box"),
        _Entry("omitted", STEPS_COLOR, kind="box"),
    ]
    x0, y0, x1, y1 = chart.box()
    most = max(max(r.hallucinations, r.omissions) for r in rows) * 1.05
    values = ticks(0.0, most, 6, integer=True)
    x = _Scale(0.0, max(most, 1.0), x0, x1)
    y = _Scale(-0.6, len(rows) - 0.4, y1, y0)  # the first kind on top
    for index, (row, label) in enumerate(zip(rows, labels, strict=True)):
        middle = len(rows) - 1 - index
        bar = _rect(x(0), y(middle + 0.4), x(row.hallucinations), y(middle), HALLUCINATION_COLOR)
        chart.data.append(bar)
        chart.data.append(_rect(x(0), y(middle), x(row.omissions), y(middle - 0.4), STEPS_COLOR))
        chart.front.append(
            f'<text x="{_number(x0 - 7)}" y="{_number(y(middle) + 4)}" text-anchor="end" '
            f'fill="{_TICK}">{escape(label)}</text>'
        )
    chart.front.append(_segment(x0, y0, x0, y1, _EDGE))
    _x_axis(chart, x, values, "entities")
    return chart.svg()


def trend_chart(rows: Sequence[TrendRow]) -> Markup | None:
    """Drift and hallucination rate of the last runs of the domain, oldest first."""
    if len(rows) < 2:
        return None
    chart = _Chart("trend", "Drift and hallucination rate across runs", legend_columns=2)
    chart.entries = [
        _Entry("drift rate", DRIFT_COLOR),
        _Entry("hallucination rate", HALLUCINATION_COLOR, dash=_DASHED),
    ]
    x0, _, x1, _ = chart.box()
    x = _Scale(0.75, len(rows) + 0.25, x0, x1)
    y = _value_scale(chart, 1.0)
    drift = [(x(n), y(r.drift_rate)) for n, r in enumerate(rows, start=1)]
    hallucination = [(x(n), y(r.hallucination_rate)) for n, r in enumerate(rows, start=1)]
    _line(chart, drift, DRIFT_COLOR, True)
    _line(chart, hallucination, HALLUCINATION_COLOR, True, dash=_DASHED)
    _y_axis(chart, y, ticks(0.0, 1.0, 6), text=_whole_percent)
    _x_axis(chart, x, ticks(1.0, float(len(rows)), 12, integer=True), "run (oldest → this run)")
    return chart.svg()
