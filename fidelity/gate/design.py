"""Which trajectories the dataset gate replays, and the weight each replay carries.

The trajectory is the sampling unit: a replay yields one trajectory's figures (its
drifting steps, its outcome), never a step on its own, because the steps of one
trajectory are correlated. Every limit is then a ratio of per-draw means
``θ = E[w·A] / E[w·B]`` (see :mod:`fidelity.gate.bounds`), and the design fixes the
weights ``w`` so that the sample's mean estimates the dataset's own rate.

:class:`MixtureDesign` (the dataset gate): i.i.d. draws **with replacement** from the
*defensive mixture* ``q_i = ½·L_i/ΣL + ½·1/N`` over the ``N`` trajectories of the
dataset (``L_i`` its steps, known after the scan). A step-level rate (drift,
hallucination, infrastructure failures) is ``Σ D_i / Σ L_i = Σ_i p_i·(D_i/L_i)`` with
``p_i = L_i/ΣL``, so it is the mean of ``A = D/L`` under ``p``; drawing from ``q``
instead and weighting by ``p_i/q_i`` keeps the mean (``E_q[(p/q)·A] = E_p[A]``). A
trajectory-level share (unverifiable, false success) is the mean under the uniform
``1/N``: weight ``(1/N)/q_i``. Both weights are at most 2 whatever the lengths
(``p_i/q_i = 2L_i/(L_i + L̄)``, ``(1/N)/q_i = 2L̄/(L_i + L̄)``), which is what the bounds
need: a known, small ``W`` with ``0 ≤ w ≤ W``. The pure length-proportional design
(``q = p``) would give trajectory weights ``L̄/L_i``, unbounded as short trajectories
get rare draws; the pure uniform one would give step weights ``L_i/L̄``, up to
``L_max/L̄``. Draws with replacement keep the draws i.i.d. (a trajectory drawn twice is
replayed once and its result counted twice), which is what the betting bounds assume.

:class:`RunDesign` (``fidelity gate --run`` on a stored run): every trajectory of the
suite was replayed once; see its docstring for what is assumed.

Pure computation (numpy), no I/O; memory O(N) float64 (three arrays of N: the
probabilities, their cumulative sum and the lengths).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

_MANTISSA = float(2.0**-53)


class Design(Protocol):
    """What the gate asks of a design: the draws and the weight of each."""

    @property
    def max_step_weight(self) -> float:
        """``W`` of the step-level limits: the largest step weight of the population."""
        ...

    @property
    def max_trajectory_weight(self) -> float:
        """``W`` of the trajectory-level limits: the largest trajectory weight."""
        ...

    def step_weight(self, idx: npt.ArrayLike) -> FloatArray:
        """Step-level weight of the trajectories at positions *idx*."""
        ...

    def trajectory_weight(self, idx: npt.ArrayLike) -> FloatArray:
        """Trajectory-level weight of the trajectories at positions *idx*."""
        ...

    def draws(self, seed: int, start: int, count: int) -> IntArray:
        """Positions of draws ``start … start+count-1`` of the sequence *seed* names."""
        ...


def _lengths(lengths: npt.ArrayLike) -> IntArray:
    array = np.asarray(lengths)
    if array.ndim != 1 or array.size == 0:
        raise ValueError("lengths: a non-empty one-dimensional array of step counts")
    fractional = not np.issubdtype(array.dtype, np.integer) and (
        not np.all(np.isfinite(array)) or bool(np.any(array != np.round(array)))
    )
    if fractional:
        raise ValueError("lengths: whole step counts")
    whole = array.astype(np.int64)
    if np.any(whole < 0) or whole.sum() == 0:
        raise ValueError("lengths: step counts >= 0, not all 0")
    return whole


def _positions(idx: npt.ArrayLike, size: int) -> IntArray:
    positions = np.asarray(idx, dtype=np.int64)
    if positions.size and (positions.min() < 0 or positions.max() >= size):
        raise IndexError(f"positions outside 0..{size - 1}")
    return positions


def uniforms(seed: int, start: int, count: int) -> FloatArray:
    """Uniforms on ``[0, 1)`` for draws ``start … start+count-1`` of the sequence *seed*.

    Counter-based (Philox, keyed by *seed*): draw ``k`` is the first 64-bit word of
    Philox block ``k``, so it depends on ``(seed, k)`` alone, never on how the draws
    were split into calls (a resumed gate recomputes the same sequence).
    """
    if seed < 0 or start < 0 or count < 0:
        raise ValueError("seed, start and count are >= 0")
    generator = np.random.Philox(key=seed, counter=start)
    words = np.asarray(generator.random_raw(4 * count), dtype=np.uint64)[::4]
    return (words >> np.uint64(11)).astype(np.float64) * _MANTISSA


class MixtureDesign:
    """I.i.d. draws with replacement from ``q_i = ½·L_i/ΣL + ½·1/N`` (the dataset gate).

    *lengths* holds every trajectory's step count, in dataset order; positions index it.
    """

    def __init__(self, lengths: npt.ArrayLike) -> None:
        self.lengths = _lengths(lengths)
        n = self.lengths.size
        total = float(self.lengths.sum())
        self._p = self.lengths / total
        self.q: FloatArray = 0.5 * self._p + 0.5 / n
        self._uniform = 1.0 / n
        cumulative = np.cumsum(self.q)
        self._cumulative: FloatArray = cumulative / cumulative[-1]  # the last is exactly 1
        self.max_step_weight = float(np.max(self._p / self.q))
        self.max_trajectory_weight = float(np.max(self._uniform / self.q))

    def __len__(self) -> int:
        return int(self.lengths.size)

    def step_weight(self, idx: npt.ArrayLike) -> FloatArray:
        """``p_i/q_i = 2L_i/(L_i + L̄)``: the weight of step-level rates (< 2)."""
        positions = _positions(idx, len(self))
        return np.asarray(self._p[positions] / self.q[positions], dtype=np.float64)

    def trajectory_weight(self, idx: npt.ArrayLike) -> FloatArray:
        """``(1/N)/q_i = 2L̄/(L_i + L̄)``: the weight of trajectory-level shares (<= 2)."""
        positions = _positions(idx, len(self))
        return np.asarray(self._uniform / self.q[positions], dtype=np.float64)

    def draws(self, seed: int, start: int, count: int) -> IntArray:
        """Positions drawn (inverse CDF of ``q``) for draws ``start … start+count-1``."""
        found = np.searchsorted(self._cumulative, uniforms(seed, start, count), side="right")
        return np.minimum(found, len(self) - 1).astype(np.int64)


class RunDesign:
    """A stored run (an audit that replayed every trajectory of its suite once).

    The run's trajectories are taken as i.i.d. draws from the population the suite
    stands for (the tasks like these that an agent would meet), read in a seeded
    random order: a random permutation of an i.i.d. sample is still i.i.d., and it
    keeps an order in the suite file (easy tasks first, say) out of the sequence the
    bets are made on. Trajectory weight 1 (``W = 1``). Step weight ``L_i / L_max``
    (``W = 1``), so that with ``A = D/L`` and ``B = 1`` the ratio is
    ``E[(L/L_max)·(D/L)] / E[L/L_max] = E[D] / E[L]``, the step-level rate of the
    population. Assumed: no trajectory of that population is longer than the suite's
    longest (else its weight would exceed ``W`` and the bound would not hold).
    A trajectory with no step has step weight 0 (give it ``A = 0``).
    """

    max_step_weight = 1.0
    max_trajectory_weight = 1.0

    def __init__(self, lengths: npt.ArrayLike) -> None:
        self.lengths = _lengths(lengths)
        self._longest = float(self.lengths.max())

    def __len__(self) -> int:
        return int(self.lengths.size)

    def step_weight(self, idx: npt.ArrayLike) -> FloatArray:
        """``L_i / L_max``."""
        return self.lengths[_positions(idx, len(self))] / self._longest

    def trajectory_weight(self, idx: npt.ArrayLike) -> FloatArray:
        """1 for every trajectory."""
        return np.ones(_positions(idx, len(self)).shape, dtype=np.float64)

    def order(self, seed: int) -> IntArray:
        """Every position once, in the random order *seed* names."""
        return np.argsort(uniforms(seed, 0, len(self)), kind="stable").astype(np.int64)

    def draws(self, seed: int, start: int, count: int) -> IntArray:
        """Draws ``start … start+count-1`` of :meth:`order` (fewer past the run's end)."""
        if start < 0 or count < 0:
            raise ValueError("start and count are >= 0")
        return self.order(seed)[start : start + count]
