"""Anytime-valid confidence bounds on the gate's limits: a betting confidence sequence.

Every limit the gate decides is a ratio of per-draw means, ``θ = E[w·A] / E[w·B]``,
over i.i.d. draws of whole trajectories (the sampling unit; steps of one trajectory
are correlated, so a trajectory is one draw whatever its length), with ``0 ≤ A ≤ B ≤ 1``
and a weight ``0 ≤ w ≤ W``, ``W`` known before any draw (:mod:`fidelity.gate.design`):

- step-level rates (drift, hallucination, infrastructure failures): ``A`` the share of
  the trajectory's steps that drift, ``B = 1``, ``w`` the step weight;
- trajectory-level shares (unverifiable, claims whose check could not run, false
  success): ``A ∈ {0, 1}``, ``B = 1`` (or ``B = 1`` only inside the sub-population the
  share is taken over), ``w`` the trajectory weight;
- drift at depth ``j`` (the trust horizon): ``A = 1`` if step ``j`` drifts, ``B = 1`` if
  the trajectory has ``j`` steps or more, trajectory weight.

**Method** (Waudby-Smith & Ramdas, "Estimating means of bounded random variables by
betting", JRSS-B 2023, arXiv 2010.09686). For a candidate ``c``, the upper side tests
``H0: θ ≥ c`` with ``Z_i(c) = w_i(c·B_i − A_i)``: under ``H0``, ``E[Z_i] =
c·E[wB] − E[wA] ≤ 0``, and ``Z_i ≥ −W(1−c)`` because ``A ≤ B ≤ 1``. A gambler who bets
``λ_i ∈ [0, ρ/(W(1−c))]``, chosen from the draws before ``i`` only, holds the capital
``K_t(c) = Π_{i≤t} (1 + λ_i Z_i(c))``, positive (each factor ``≥ 1 − ρ``) and, under
``H0``, a supermartingale from 1; Ville's inequality gives ``P(∃t: K_t(c) ≥ 1/α) ≤ α``.
The upper bound is the largest ``c`` whose capital never reached ``1/α``, so it lies
below ``θ`` at some time with probability at most ``α``: it holds at every ``t`` at
once (*anytime*), and a sequential gate may look after every round, stop when it knows,
or be resumed, without inflating its error. The lower side is the mirror image
(``H0: θ ≤ c``, ``Z'_i = w_i(A_i − c·B_i) ≥ −W·c``, bets up to ``ρ/(W·c)``). Nothing
is assumed about the distribution of ``A`` within a trajectory or across trajectories
beyond the bounds, so the bounds hold for clustered data and at zero events, where a
normal or bootstrap interval collapses to ``[0, 0]``.

**Cells** (why reading the bound on a grid is safe). ``[0, 1]`` is cut into ``CELLS``
cells of width 0.01, and every candidate ``c`` of a cell uses the same bets (sized for
the cell's middle, capped for its worst end: ``ρ/(W(1−g))`` at the left end ``g`` for
the upper side, so the cap is valid for every ``c`` of the cell). A fixed bet is a valid
predictable bet for each of them, and ``Z_i(c)`` grows with ``c``, so within a cell the
upper side's capital grows with ``c``: once it reaches ``1/α`` at a point, every point
above it in the cell is rejected too. The upper bound is read at ``STEPS`` points per
cell (every 0.001): the first rejected point of the highest cell whose left end is not
rejected, so it is rounded *up*, and it lies below ``θ`` only if ``θ``'s own capital
crossed ``1/α``. The lower side is the mirror image (capital falling with ``c``, read
from the right end down, rounded down). Rejections are kept over time (the running
intersection of the confidence sets), valid because Ville's inequality covers every
``t`` at once. A round of draws updates 100 capitals per side; reading the bound
replays the draws at the 9 inner points of one cell per side.

**The bets.** Two bettors share the capital half and half (an average of test
supermartingales is one): ``λ = m·edge / (M·edge + E[Z²])`` for ``m = 1`` and ``m = 2``
(``BETTORS``), where ``edge`` is the mean of the past ``Z`` in the side's favour (0
against it), ``E[Z²]`` their second moment and ``M`` the most a unit bet can lose on
one draw (``W(1−c)`` above, ``W·c`` below), all from the draws before ``i``, regularised
by one fake draw at ``Z = 0`` with the largest variance a range of ``W`` allows
(``W²/4``), then cut to ``[0, ρ/(W(1−c))]`` with ``ρ = TRUNCATION = 0.9``. With ``m = 1``
this is the paper's second-order Kelly bet (aGRAPA, ``edge/E[Z²]``) shrunk by the
``M·edge`` term of its LBOW rule: for a two-point payoff (a rare drifting trajectory
among clean ones) it never exceeds the exact Kelly bet, where aGRAPA does, by so much
that its capital can fall for ever (a 9% rate, drifting trajectories wholly drifting:
aGRAPA's upper bound stayed at 0.22 after 33,000 draws; this one reaches 0.098). The
``m = 2`` bettor is for payoffs skewed the other way (a few wholly drifting trajectories
when a gate should fail) and reaches the cap sooner. At zero events (``Z = w·c`` every
draw) both reach the cap within a few draws and stay there, the fastest a bounded bet
may go: 36 clean draws of unit weight put the bound under 0.10, where a fixed-size
exact binomial bound needs 29. ``ρ = 0.9`` keeps one draw from taking more than 90% of
a bettor's capital; at zero events the cap is what binds, so a larger ``ρ`` passes a
faithful dataset sooner. Validity depends on none of these choices, only power does.

**Several limits.** Each limit is its own one-sided test at level ``α``. A gate passes
only when every limit passes, so a false pass needs the violated limit's own bound to be
wrong, which happens with probability at most ``α``; no correction over the limits is
needed for the gate's claim. The trust horizon passes ``min_trust_horizon = h`` only
when every depth up to ``h`` passes (an intersection-union test: level ``α`` as well).

The estimate is the weighted ratio ``Σ w·A / Σ w·B`` (``None`` when ``Σ w·B = 0``; the
bounds are then ``[0, 1]``). Pure numpy, no I/O; matrices are worked in blocks of about
``_BLOCK`` elements (a few MiB).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
Decision = Literal["pass", "fail", "undecided"]
Kind = Literal["at_most", "at_least"]

CELLS = 100
"""Cells of ``[0, 1]`` with one sequence of bets each (sized for the cell's middle)."""
STEPS = 10
"""Points per cell the bound is read at: it is rounded outwards by at most ``1/FINE``."""
FINE = CELLS * STEPS
TRUNCATION = 0.9
"""``ρ``: the largest share of its capital a bet may lose on one draw."""
BETTORS = (1.0, 2.0)
"""Multiples of the plug-in bet; the capital is their average (each holds half)."""
MORE_NEEDED_CAP = 100_000
_BLOCK = 1 << 18  # matrix elements worked at once
_TOLERANCE = 1e-9  # float slack on the ranges (weights computed as p/q, shares as D/L)


def _array(values: npt.ArrayLike, name: str) -> FloatArray:
    array = np.array(values, dtype=np.float64)
    if array.ndim != 1 or not np.all(np.isfinite(array)):
        raise ValueError(f"{name}: a one-dimensional array of finite numbers")
    return array


@dataclass(frozen=True, eq=False)
class Observations:
    """Draws of one limit, in draw order: per draw ``w``, ``A`` and ``B``.

    ``0 ≤ A ≤ B ≤ 1`` and ``0 ≤ w ≤ max_weight`` (checked, with a float slack of
    ``1e-9`` that is clipped away). The arrays are copied and made read-only.
    """

    weight: FloatArray
    numerator: FloatArray
    denominator: FloatArray
    max_weight: float

    def __post_init__(self) -> None:
        weight = _array(self.weight, "weight")
        numerator = _array(self.numerator, "numerator")
        denominator = _array(self.denominator, "denominator")
        if not weight.shape == numerator.shape == denominator.shape:
            raise ValueError("weight, numerator and denominator differ in length")
        if not (math.isfinite(self.max_weight) and self.max_weight > 0):
            raise ValueError("max_weight: a positive number")
        slack = _TOLERANCE * max(1.0, self.max_weight)
        if weight.size and (weight.min() < -slack or weight.max() > self.max_weight + slack):
            raise ValueError(f"weight outside [0, max_weight = {self.max_weight:g}]")
        if denominator.size and (
            denominator.min() < -_TOLERANCE or denominator.max() > 1 + _TOLERANCE
        ):
            raise ValueError("denominator outside [0, 1]")
        if numerator.size and (
            numerator.min() < -_TOLERANCE or np.any(numerator > denominator + _TOLERANCE)
        ):
            raise ValueError("numerator outside [0, denominator]")
        denominator = np.clip(denominator, 0.0, 1.0)
        for name, array in (
            ("weight", np.clip(weight, 0.0, self.max_weight)),
            ("numerator", np.clip(numerator, 0.0, denominator)),
            ("denominator", denominator),
        ):
            array.setflags(write=False)
            object.__setattr__(self, name, array)
        object.__setattr__(self, "max_weight", float(self.max_weight))

    def __len__(self) -> int:
        return int(self.weight.size)

    @classmethod
    def empty(cls, max_weight: float) -> Observations:
        """No draw yet."""
        nothing = np.zeros(0)
        return cls(nothing, nothing, nothing, max_weight)

    def concat(self, other: Observations) -> Observations:
        """These draws followed by *other*'s (same ``max_weight``)."""
        if other.max_weight != self.max_weight:
            raise ValueError("draws of one limit share one max_weight")
        return Observations(
            np.concatenate([self.weight, other.weight]),
            np.concatenate([self.numerator, other.numerator]),
            np.concatenate([self.denominator, other.denominator]),
            self.max_weight,
        )

    def estimate(self) -> float | None:
        """``Σ w·A / Σ w·B``, or ``None`` when no draw weighs in the denominator."""
        below = float(np.dot(self.weight, self.denominator))
        return float(np.dot(self.weight, self.numerator)) / below if below > 0 else None


@dataclass(frozen=True)
class Bound:
    """A limit's estimate and its one-sided bounds (each at level ``1 − α``) after ``n`` draws."""

    estimate: float | None
    lower: float
    upper: float
    n: int


@dataclass
class _Draws:
    """Per-draw figures the bets need, for draws ``n0+1 … n0+t`` (global, 1-based ``k``).

    ``μ̂_{k−1}(r) = (r·su − sv)/k`` and ``σ̂²_{k−1}(r) = (σ0² + r²·saa − 2r·sab + sbb)/k``
    use the sums *before* draw ``k`` (plus one fake draw at ``Z = 0``); the sums of
    squares are those of ``Z_j(r) − μ̂_j(r) = r·du_j − dv_j``.
    """

    u: FloatArray  # w·B
    v: FloatArray  # w·A
    k: FloatArray
    su: FloatArray
    sv: FloatArray
    saa: FloatArray
    sab: FloatArray
    sbb: FloatArray
    after: FloatArray  # the five sums after the last draw


def _draws(n0: int, sums: FloatArray, u: FloatArray, v: FloatArray) -> _Draws:
    k = n0 + np.arange(1, u.size + 1, dtype=np.float64)
    su_after = sums[0] + np.cumsum(u)
    sv_after = sums[1] + np.cumsum(v)
    du = u - su_after / (k + 1)
    dv = v - sv_after / (k + 1)
    after = [su_after, sv_after]
    for start, step in zip(sums[2:], (du * du, du * dv, dv * dv), strict=True):
        after.append(start + np.cumsum(step))
    su, sv, saa, sab, sbb = (
        np.concatenate(([start], run[:-1])) for start, run in zip(sums, after, strict=True)
    )
    last = np.array([run[-1] for run in after])
    return _Draws(u=u, v=v, k=k, su=su, sv=sv, saa=saa, sab=sab, sbb=sbb, after=last)


@dataclass(frozen=True)
class _Points:
    """Where one side's capital is read: per point, its cell and its step within the cell.

    Upper side: point ``k`` of cell ``j`` is ``c = j/CELLS + k/FINE`` (``k = 0`` the left
    end, where the capital is least). Lower side: ``c = (j+1)/CELLS − k/FINE`` (``k = 0``
    the right end). The bet is sized for the cell's middle and capped for its worst end.
    """

    upper: bool
    cell: IntArray
    step: IntArray

    @property
    def fine(self) -> IntArray:
        """The points on the fine grid (``c = fine / FINE``)."""
        if self.upper:
            return self.cell * STEPS + self.step
        return (self.cell + 1) * STEPS - self.step

    def c(self) -> FloatArray:
        return self.fine / FINE

    def cap(self, max_weight: float) -> FloatArray:
        if self.upper:
            return TRUNCATION / (max_weight * (1 - self.cell / CELLS))
        return TRUNCATION / (max_weight * (self.cell + 1) / CELLS)

    def take(self, columns: slice | IntArray) -> _Points:
        return _Points(self.upper, self.cell[columns], self.step[columns])


def _points(upper: bool, cells: npt.ArrayLike, steps: npt.ArrayLike) -> _Points:
    cell, step = np.broadcast_arrays(np.asarray(cells, np.int64), np.asarray(steps, np.int64))
    return _Points(upper, cell.ravel(), step.ravel())


def _log_factors(draws: _Draws, points: _Points, max_weight: float) -> FloatArray:
    """``log(1 + λ·Z)`` per bettor × draw × point (one side): the bets of :func:`_bets`."""
    z = np.outer(draws.u, points.c()) - draws.v[:, None]  # Z(c) = w(cB − A)
    bets = _bets(draws, points, max_weight)
    return np.log1p(bets * z) if points.upper else np.log1p(-bets * z)


def _bets(draws: _Draws, points: _Points, max_weight: float) -> FloatArray:
    """``λ`` per bettor × draw × point: ``BETTORS`` times ``edge / (M·edge + E[Z²])``.

    From the past ``Z(r)`` at the cell's middle ``r``: ``edge`` is the mean in the side's
    favour (0 when against it), ``E[Z²]`` the second moment and ``M`` the most a unit
    bet can lose on one draw (``W(1−r)`` above, ``W·r`` below); cut to ``[0, cap]``.
    """
    k = draws.k[:, None]
    r = (points.cell + 0.5) / CELLS
    mean = (np.outer(draws.su, r) - draws.sv[:, None]) / k
    squares = np.outer(draws.saa, r * r) - 2 * np.outer(draws.sab, r) + draws.sbb[:, None]
    moment = (max_weight**2 / 4 + np.maximum(squares, 0.0)) / k + mean * mean
    edge = np.maximum(mean if points.upper else -mean, 0.0)
    loss = max_weight * (1 - r) if points.upper else max_weight * r
    multiples = np.array(BETTORS)[:, None, None]
    return np.clip(multiples * edge / (loss * edge + moment), 0.0, points.cap(max_weight))


class _Capital:
    """One side's log-capital at some points: per bettor, and the running maximum of
    the bettors' average (the capital the rejections are read from), over draws."""

    def __init__(self, points: _Points, max_weight: float) -> None:
        self.points = points
        self.max_weight = max_weight
        self.n = 0
        self.sums = np.zeros(5)
        self.levels = np.zeros((len(BETTORS), points.cell.size))
        self.best = np.zeros(points.cell.size)

    def advance(self, u: FloatArray, v: FloatArray) -> Iterator[tuple[slice, FloatArray]]:
        """Take draws ``(u, v)``; yield per block of points the running maxima (draws × block)."""
        if u.size == 0:
            return
        draws = _draws(self.n, self.sums, u, v)
        width = max(1, _BLOCK // (u.size * len(BETTORS)))
        for start in range(0, self.best.size, width):
            cols = slice(start, min(start + width, self.best.size))
            logs = _log_factors(draws, self.points.take(cols), self.max_weight)
            path = np.cumsum(logs, axis=1) + self.levels[:, None, cols]
            average = np.logaddexp.reduce(path, axis=0) - math.log(len(BETTORS))
            running = np.maximum(np.maximum.accumulate(average, axis=0), self.best[cols])
            self.levels[:, cols], self.best[cols] = path[:, -1], running[-1]
            yield cols, running
        self.n += u.size
        self.sums = draws.after

    def run(self, u: FloatArray, v: FloatArray) -> _Capital:
        """Take draws without looking at the path."""
        for _ in self.advance(u, v):
            pass
        return self


def _threshold(alpha: float) -> float:
    if not 0 < alpha < 1:
        raise ValueError("alpha must lie in (0, 1)")
    return math.log(1 / alpha)


def _sides(obs: Observations) -> tuple[FloatArray, FloatArray]:
    return obs.weight * obs.denominator, obs.weight * obs.numerator


def _highest_open(rejected: npt.NDArray[np.bool_]) -> IntArray:
    """Per row, the highest index not rejected, or -1."""
    open_ = ~rejected
    found = rejected.shape[-1] - 1 - np.argmax(open_[..., ::-1], axis=-1)
    return np.asarray(np.where(open_.any(axis=-1), found, -1), dtype=np.int64)


def _lowest_open(rejected: npt.NDArray[np.bool_]) -> IntArray:
    """Per row, the lowest index not rejected, or the row's length."""
    open_ = ~rejected
    found = np.argmax(open_, axis=-1)
    return np.asarray(np.where(open_.any(axis=-1), found, rejected.shape[-1]), dtype=np.int64)


def _refined(
    obs: Observations, upper: bool, cell: int, threshold: float, draws: int | None = None
) -> FloatArray:
    """Per draw, the bound inside *cell* (the highest, or lowest, cell still open then).

    Reads the capital at the cell's inner points with the cell's bets, from the first
    draw: the capital is monotone within the cell, so the bound is the first point
    rejected (or the cell's far end when none is). Only the first *draws* draws when given.
    """
    inner = _points(upper, cell, np.arange(1, STEPS))
    u, v = (side[:draws] for side in _sides(obs))
    capital = _Capital(inner, obs.max_weight)
    found = np.full(u.size, STEPS, dtype=np.int64)
    for cols, running in capital.advance(u, v):
        hit = running >= threshold
        first = np.where(hit.any(axis=1), np.argmax(hit, axis=1) + cols.start + 1, STEPS)
        found = np.minimum(found, first)
    return _points(upper, cell, found).c()


class _Side:
    """One side of a sequential bound: the capital at every cell's least point, and at
    the inner points of the cell the bound lies in (restarted when that cell moves)."""

    def __init__(self, upper: bool, max_weight: float) -> None:
        self.upper = upper
        self.max_weight = max_weight
        self.cells = _Capital(_points(upper, np.arange(CELLS), 0), max_weight)
        self.cell = -1  # none yet: the first reading starts ``inner``
        self.inner = self.cells

    def bound(self, u: FloatArray, v: FloatArray, threshold: float) -> float:
        """The bound after draws ``(u, v)``, of which ``self.cells`` has taken all."""
        rejected = self.cells.best >= threshold
        # the upper side's cell 0 (c = 0 at its left end) and the lower side's last cell
        # (c = 1 at its right end) are never rejected: Z ≤ 0 there, and bets are ≥ 0
        cell = int(_highest_open(rejected) if self.upper else _lowest_open(rejected))
        if cell != self.cell:
            self.cell = cell
            self.inner = _Capital(_points(self.upper, cell, np.arange(1, STEPS)), self.max_weight)
        self.inner.run(u[self.inner.n :], v[self.inner.n :])
        hit = self.inner.best >= threshold
        step = int(np.argmax(hit)) + 1 if hit.any() else STEPS
        return float(_points(self.upper, cell, step).c()[0])


class Sequential:
    """A limit's bound over rounds of draws: the state a sequential gate keeps.

    ``add`` takes the next round's draws (in draw order, never re-ordered by outcome
    or completion time); the bound holds after every round at once. A round of ``m``
    draws costs ``O(m × CELLS)`` (and ``O(all draws × STEPS)`` when the cell the bound
    lies in moves).
    """

    def __init__(self, max_weight: float, alpha: float) -> None:
        self.alpha = alpha
        self.threshold = _threshold(alpha)
        self.observations = Observations.empty(max_weight)
        self._up = _Side(True, float(max_weight))
        self._lo = _Side(False, float(max_weight))
        self.bound = Bound(None, 0.0, 1.0, 0)
        """The bound after every draw so far (running intersection over all of them)."""

    def add(self, observations: Observations) -> Bound:
        """Take one round's draws; the bound after them."""
        self.observations = obs = self.observations.concat(observations)
        if len(observations):
            new_u, new_v = _sides(observations)
            self._up.cells.run(new_u, new_v)
            self._lo.cells.run(new_u, new_v)
            u, v = _sides(obs)
            lower = self._lo.bound(u, v, self.threshold)
            upper = self._up.bound(u, v, self.threshold)
            self.bound = Bound(obs.estimate(), lower, upper, len(obs))
        return self.bound

    def decision(self, limit: float, kind: Kind) -> Decision:
        """:func:`decide` on the current bound."""
        return decide(self.bound, limit, kind)

    def decided(self, limit: float, kind: Kind) -> bool:
        """Whether the limit is passed or failed (a gate may stop once all are)."""
        return self.decision(limit, kind) != "undecided"

    def more_needed(self, limit: float, kind: Kind, cap: int = MORE_NEEDED_CAP) -> int | None:
        """See :func:`more_needed`."""
        if self.decided(limit, kind):
            return 0
        estimate = self.observations.estimate()
        if estimate is None or estimate == limit:
            return None
        to_pass = (estimate < limit) == (kind == "at_most")
        upper = to_pass == (kind == "at_most")  # the side whose bound must cross the limit
        strict = not to_pass  # at_most fails on lower > limit, at_least on upper < limit
        capital = (self._up if upper else self._lo).cells
        points = _needed(upper, limit, strict, capital.best < self.threshold)
        return _first_crossing(self.observations, points, self.threshold, cap)


def _needed(upper: bool, limit: float, strict: bool, open_cells: npt.NDArray[np.bool_]) -> _Points:
    """The points whose rejection the decision needs, in the cells still open.

    Upper side, to reach ``upper ≤ limit`` (``<`` when *strict*): each open cell must
    be rejected from the last fine point at or under the limit on (its left end when
    that is over the limit; nothing when the whole cell is under). Lower side, to reach
    ``lower ≥ limit`` (``>`` when *strict*): from the first fine point at or over it.
    """
    at = limit * FINE
    at = round(at) if abs(at - round(at)) < _TOLERANCE else at
    cells = np.flatnonzero(open_cells)
    if upper:
        last = math.ceil(at) - 1 if strict else math.floor(at)
        cells = cells[(cells + 1) * STEPS > last]
        steps = np.clip(last - cells * STEPS, 0, STEPS)
        return _points(True, cells, np.where(steps < 1, 0, steps))
    first = math.floor(at) + 1 if strict else math.ceil(at)
    cells = cells[cells * STEPS < first]
    steps = (cells + 1) * STEPS - first
    return _points(False, cells, np.where(steps < 1, 0, steps))


def _first_crossing(obs: Observations, points: _Points, threshold: float, cap: int) -> int | None:
    """Draws after *obs*, repeating *obs* in order, until every point's capital crossed."""
    if points.cell.size == 0:
        return None
    u, v = _sides(obs)
    capital = _Capital(points, obs.max_weight).run(u, v)
    done = 0
    while done < cap:
        chunk = min(max(256, done), cap - done)
        extra = np.arange(done, done + chunk) % len(obs)
        capital.run(u[extra], v[extra])
        done += chunk
        if np.all(capital.best >= threshold):
            return _crossing_in(obs, points, threshold, done - chunk, chunk)
    return None


def _crossing_in(
    obs: Observations, points: _Points, threshold: float, before: int, chunk: int
) -> int:
    """The exact draw, within the last chunk, at which the last point crossed."""
    u, v = _sides(obs)
    capital = _Capital(points, obs.max_weight).run(u, v)
    head = np.arange(before) % len(obs)
    capital.run(u[head], v[head])
    extra = np.arange(before, before + chunk) % len(obs)
    first = np.zeros(points.cell.size, dtype=np.int64)
    for cols, running in capital.advance(u[extra], v[extra]):
        first[cols] = np.argmax(running >= threshold, axis=0)
    return before + int(first.max()) + 1


def bounds(observations: Observations, alpha: float) -> Bound:
    """The estimate and the lower and upper bounds (each one-sided at ``1 − α``) after all draws."""
    state = Sequential(observations.max_weight, alpha)
    return state.add(observations)


def bounds_path(observations: Observations, alpha: float) -> tuple[FloatArray, FloatArray]:
    """``(lower[t], upper[t])``: the bounds after the first ``t + 1`` draws, for every ``t``.

    Running intersections (a bound never loosens), so ``path[n − 1]`` is what a gate
    that stopped after ``n`` draws states, and what a fixed-size gate of ``n`` draws does.
    """
    threshold = _threshold(alpha)
    every = np.arange(CELLS)
    u, v = _sides(observations)
    paths = []
    for upper in (False, True):
        capital = _Capital(_points(upper, every, 0), observations.max_weight)
        rejected = np.concatenate([run >= threshold for _, run in capital.advance(u, v)], axis=1)
        cells = _highest_open(rejected) if upper else _lowest_open(rejected)
        path = np.zeros(len(observations))
        for cell in np.unique(cells):  # the open cell only moves inwards: rows in one run
            rows = np.flatnonzero(cells == cell)
            refined = _refined(observations, upper, int(cell), threshold, int(rows[-1]) + 1)
            path[rows] = refined[rows]
        paths.append(path)
    return paths[0], paths[1]


def decide(bound: Bound, limit: float, kind: Kind) -> Decision:
    """``at_most``: pass when ``upper ≤ limit``, fail when ``lower > limit``.

    ``at_least``: pass when ``lower ≥ limit``, fail when ``upper < limit``. Else undecided.
    """
    if kind == "at_most":
        if bound.upper <= limit:
            return "pass"
        return "fail" if bound.lower > limit else "undecided"
    if bound.lower >= limit:
        return "pass"
    return "fail" if bound.upper < limit else "undecided"


def more_needed(
    observations: Observations,
    alpha: float,
    limit: float,
    kind: Kind,
    cap: int = MORE_NEEDED_CAP,
) -> int | None:
    """About how many more draws would decide the limit if the next ones look like these.

    The observed draws are repeated in order after themselves, and the answer is the
    first count at which the bound crosses the limit: towards a pass when the estimate
    is on the pass side of the limit, else towards a fail. 0 when it is decided;
    ``None`` with no estimate, with the estimate at the limit, or past *cap*.
    """
    state = Sequential(observations.max_weight, alpha)
    state.add(observations)
    return state.more_needed(limit, kind, cap)


def horizon_bounds(
    per_depth: Sequence[Observations], limit: float, alpha: float
) -> tuple[int, int]:
    """``(horizon_lower, horizon_upper)`` of the trust horizon from per-depth draws.

    ``per_depth[j − 1]`` holds depth ``j``. ``horizon_lower`` is the largest ``d`` with
    every depth up to ``d`` bounded above by *limit*: the horizon is at least this
    (``min_trust_horizon = h`` passes when ``h ≤ horizon_lower``, an intersection-union
    test at level ``α``). ``horizon_upper`` is the largest ``d`` with no depth up to
    ``d`` bounded below above *limit* (it fails when ``h > horizon_upper``; that side is
    at level ``α`` per depth). A depth no draw reaches has bounds ``[0, 1]``.
    """
    found = [bounds(obs, alpha) for obs in per_depth]
    lower = next((j for j, b in enumerate(found) if b.upper > limit), len(found))
    upper = next((j for j, b in enumerate(found) if b.lower > limit), len(found))
    return lower, upper
