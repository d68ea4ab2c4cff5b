"""The betting confidence sequence against the properties of Waudby-Smith & Ramdas (2023):
coverage at every true mean (0 and 1 included), anytime validity, no collapse at zero
events, monotone bounds, weighted ratios, rounds, decisions and what more would decide.

Every test is seeded and deterministic. Monte Carlo coverage is checked against a
binomial tail: with the true miss rate at its worst allowed value ``α``, the observed
miss count passes the test's cut-off with probability under 1e-9.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from fidelity.gate.bounds import (
    FINE,
    Bound,
    Observations,
    Sequential,
    bounds,
    bounds_path,
    decide,
    horizon_bounds,
    more_needed,
)
from fidelity.gate.design import MixtureDesign

ALPHA = 0.05


def ones(n: int) -> np.ndarray:
    return np.ones(n)


def plain(numerator: np.ndarray | list[float], weight: float = 1.0) -> Observations:
    """Unit-denominator draws of equal weight."""
    a = np.asarray(numerator, dtype=float)
    return Observations(np.full(a.size, weight), a, ones(a.size), max(weight, 1.0))


def misses_allowed(n: int, alpha: float = ALPHA, tail: float = 1e-9) -> int:
    """The largest miss count a level-α method reaches with probability over *tail*."""
    from scipy.stats import binom

    return int(binom.isf(tail, n, alpha))


# zero and few events ---------------------------------------------------------------


def test_three_clean_trajectories_cannot_pass_a_ten_percent_limit() -> None:
    bound = bounds(plain(np.zeros(3)), ALPHA)
    assert bound.estimate == 0.0 and bound.upper > 0.5
    assert decide(bound, 0.10, "at_most") == "undecided"
    # a percentile bootstrap of the same draws would be [0, 0]; the bound is not
    assert bound.lower == 0.0


def test_clean_draws_pass_a_ten_percent_limit_after_about_thirty() -> None:
    _, upper = bounds_path(plain(np.zeros(200)), ALPHA)
    first = int(np.argmax(upper <= 0.10)) + 1
    exact = math.ceil(math.log(ALPHA) / math.log(0.9))  # fixed-n exact binomial: 29
    assert exact < first <= 40  # 36: a few draws for being valid at every n
    assert np.all(np.diff(upper) <= 0)  # running intersection: never loosens


def test_clean_draws_of_a_suite_shaped_mixture_pass_within_fifty() -> None:
    rng = np.random.default_rng(4)
    design = MixtureDesign(rng.integers(2, 14, size=3600))
    idx = design.draws(0, 0, 200)
    obs = Observations(design.step_weight(idx), np.zeros(200), ones(200), design.max_step_weight)
    _, upper = bounds_path(obs, ALPHA)
    assert int(np.argmax(upper <= 0.10)) + 1 <= 50


# coverage ----------------------------------------------------------------------------


@pytest.mark.parametrize("values", [(0.0, 1.0), (0.0, 0.5, 1.0)], ids=["bernoulli", "three"])
def test_exact_coverage_over_every_short_sequence(values: tuple[float, ...]) -> None:
    """Every sequence of 8 (or 6) draws enumerated: P(bound misses θ) ≤ α, both sides."""
    length = 8 if len(values) == 2 else 6
    found = {}
    for seq in itertools.product(range(len(values)), repeat=length):
        found[seq] = bounds(plain([values[i] for i in seq]), ALPHA)
    grid = [0.0, 0.01, 0.1, 0.3, 0.5, 0.8, 1.0]
    for probabilities in _distributions(len(values), grid):
        mean = float(np.dot(probabilities, values))
        miss_up = miss_lo = 0.0
        for seq, bound in found.items():
            chance = float(np.prod([probabilities[i] for i in seq]))
            miss_up += chance * (bound.upper < mean)
            miss_lo += chance * (bound.lower > mean)
        assert miss_up <= ALPHA and miss_lo <= ALPHA, (probabilities, miss_up, miss_lo)


def _distributions(size: int, grid: list[float]) -> list[np.ndarray]:
    if size == 2:
        return [np.array([1 - p, p]) for p in grid]
    return [np.array([1 - p - q, p, q]) for p in grid for q in grid if p + q <= 1]


@pytest.mark.parametrize("rate", [0.0, 0.03, 0.1, 0.3, 1.0])
def test_coverage_on_clustered_weighted_draws(rate: float) -> None:
    """Step-level drift of whole trajectories (per-trajectory Beta), mixture weights."""
    rng = np.random.default_rng([7, int(rate * 100)])
    lengths = rng.integers(2, 14, size=2000)
    p = rng.beta(rate * 2, (1 - rate) * 2, size=2000) if 0 < rate < 1 else np.full(2000, rate)
    drifting = rng.binomial(lengths, p)
    truth = drifting.sum() / lengths.sum()
    design = MixtureDesign(lengths)
    gates, misses_up, misses_lo = 150, 0, 0
    for gate in range(gates):
        idx = design.draws(gate, 0, 80)
        share = drifting[idx] / lengths[idx]
        obs = Observations(design.step_weight(idx), share, ones(80), design.max_step_weight)
        bound = bounds(obs, ALPHA)
        misses_up += bound.upper < truth
        misses_lo += bound.lower > truth
    assert max(misses_up, misses_lo) <= misses_allowed(gates)
    assert max(misses_up, misses_lo) <= ALPHA * gates  # this seed: inside the level itself


def test_the_running_bound_stays_on_the_truth_over_long_sequences() -> None:
    """Anytime validity: over 600 draws, looked at after every one, the truth is crossed
    in at most α of the sequences; a normal interval looked at as often is not."""
    rng = np.random.default_rng(12)
    truth, sequences, crossed, naive = 0.1, 60, 0, 0
    for _ in range(sequences):
        a = (rng.random(600) < truth).astype(float)
        lower, upper = bounds_path(plain(a), ALPHA)
        crossed += bool(np.any(upper < truth) or np.any(lower > truth))
        t = np.arange(1, 601)
        mean = np.cumsum(a) / t
        half = 1.645 * np.sqrt(np.maximum(mean * (1 - mean), 1e-12) / t)
        naive += bool(np.any((mean + half < truth)[19:]))  # from 20 draws on
    assert crossed <= misses_allowed(sequences, 2 * ALPHA)
    assert crossed <= 1
    assert naive > 2 * ALPHA * sequences  # why the gate needs an anytime bound


def test_bounds_at_the_ends_of_the_unit_interval() -> None:
    everything = bounds(plain(ones(60)), ALPHA)
    assert everything.estimate == 1.0 and everything.upper == 1.0 and everything.lower > 0.9
    nothing = bounds(plain(np.zeros(60)), ALPHA)
    assert nothing.lower == 0.0 and nothing.upper < 0.1


# the data, the weights, the rounds -------------------------------------------------------


def test_more_drift_in_the_latest_draw_never_lowers_a_bound() -> None:
    rng = np.random.default_rng(3)
    for _ in range(60):
        n = int(rng.integers(2, 120))
        a = np.where(rng.random(n) < rng.choice([0.05, 0.3]), rng.random(n), 0.0)
        w = rng.uniform(0.2, 1.5, n)
        more = a.copy()
        more[-1] = min(1.0, a[-1] + rng.uniform(0.05, 1.0))
        before = bounds(Observations(w, a, ones(n), 1.5), ALPHA)
        after = bounds(Observations(w, more, ones(n), 1.5), ALPHA)
        assert after.upper >= before.upper and after.lower >= before.lower


def test_a_drifting_trajectory_among_clean_ones_never_lowers_a_bound() -> None:
    """Wherever it falls: the regime of a faithful dataset. (Elsewhere the bets, sized
    from earlier draws, may shrink after one: an early drift can then lower a later bound
    by a few thousandths; validity does not depend on it.)"""
    rng = np.random.default_rng(5)
    for _ in range(80):
        n = int(rng.integers(3, 150))
        w = rng.uniform(0.3, 1.2, n)
        a = np.zeros(n)
        a[rng.integers(n, size=int(rng.integers(0, 3)))] = rng.random()
        more = a.copy()
        i = int(rng.integers(n))
        more[i] = min(1.0, a[i] + rng.uniform(0.05, 1.0))
        before = bounds(Observations(w, a, ones(n), 1.2), ALPHA)
        after = bounds(Observations(w, more, ones(n), 1.2), ALPHA)
        assert after.upper >= before.upper and after.lower >= before.lower


def test_weights_bound_the_step_rate_where_it_differs_from_the_trajectory_share() -> None:
    """Short trajectories drift in one step: a fifth of the trajectories, 1.3% of steps."""
    rng = np.random.default_rng(9)
    lengths = rng.integers(1, 31, size=4000)
    drifting = (lengths <= 6).astype(np.int64)
    step_rate = drifting.sum() / lengths.sum()
    trajectory_share = float(np.mean(drifting > 0))
    assert trajectory_share - step_rate > 0.15
    design = MixtureDesign(lengths)
    idx = design.draws(1, 0, 1500)
    share = drifting[idx] / lengths[idx]
    step = bounds(
        Observations(design.step_weight(idx), share, ones(1500), design.max_step_weight), ALPHA
    )
    any_drift = (drifting[idx] > 0).astype(float)
    traj = Observations(
        design.trajectory_weight(idx), any_drift, ones(1500), design.max_trajectory_weight
    )
    per_trajectory = bounds(traj, ALPHA)
    assert step.lower <= step_rate <= step.upper < 0.03
    assert per_trajectory.lower <= trajectory_share <= per_trajectory.upper
    assert step.upper < per_trajectory.lower
    assert step.estimate == pytest.approx(step_rate, abs=0.005)
    assert per_trajectory.estimate == pytest.approx(trajectory_share, abs=0.03)
    unweighted = float(np.mean(share))  # the mixture over-draws long trajectories
    assert not step.lower <= unweighted <= step.upper


def test_a_sub_population_share_counts_only_its_own_draws() -> None:
    """False success: A = claimed success and failed, B = claimed success and verified."""
    b = np.array([1, 0, 1, 1, 0, 0, 1, 0] * 10, dtype=float)
    a = np.array([1, 0, 0, 0, 0, 0, 0, 0] * 10, dtype=float)
    bound = bounds(Observations(ones(80), a, b, 1.0), ALPHA)
    assert bound.estimate == pytest.approx(0.25)
    assert bound.lower < 0.25 < bound.upper


def test_no_draw_in_the_denominator_gives_no_estimate_and_the_whole_interval() -> None:
    empty = bounds(Observations(ones(5), np.zeros(5), np.zeros(5), 1.0), ALPHA)
    assert empty == Bound(estimate=None, lower=0.0, upper=1.0, n=5)
    assert bounds(Observations.empty(1.0), ALPHA) == Bound(None, 0.0, 1.0, 0)
    weightless = bounds(Observations(np.zeros(5), ones(5), ones(5), 1.0), ALPHA)
    assert weightless.estimate is None and (weightless.lower, weightless.upper) == (0.0, 1.0)


def test_rounds_give_the_bounds_of_the_whole_sequence_at_every_round_end() -> None:
    rng = np.random.default_rng(2)
    a = np.where(rng.random(300) < 0.15, rng.random(300), 0.0)
    w = rng.uniform(0.5, 1.3, 300)
    whole = Observations(w, a, ones(300), 1.3)
    lower, upper = bounds_path(whole, ALPHA)
    state = Sequential(1.3, ALPHA)
    for start in range(0, 300, 23):
        end = min(start + 23, 300)
        got = state.add(Observations(w[start:end], a[start:end], ones(end - start), 1.3))
        assert (got.lower, got.upper, got.n) == (lower[end - 1], upper[end - 1], end)
    assert state.bound == bounds(whole, ALPHA)
    assert np.all(np.diff(upper) <= 0) and np.all(np.diff(lower) >= 0)
    assert np.all(np.round(upper * FINE) == upper * FINE)  # read on the fine grid


def test_rounds_of_no_draw_change_nothing() -> None:
    state = Sequential(1.0, ALPHA)
    first = state.add(plain([0.0, 0.5, 0.0]))
    assert state.add(Observations.empty(1.0)) == first


@pytest.mark.parametrize(
    ("weight", "numerator", "denominator", "top"),
    [
        ([1.0], [0.5], [0.4], 1.0),  # A > B
        ([1.0], [-0.1], [1.0], 1.0),
        ([1.0], [0.1], [1.2], 1.0),
        ([2.5], [0.1], [1.0], 2.0),  # w > W
        ([-0.5], [0.1], [1.0], 2.0),
        ([1.0, 1.0], [0.1], [1.0], 1.0),  # lengths differ
        ([np.nan], [0.1], [1.0], 1.0),
        ([1.0], [0.1], [1.0], 0.0),  # W must be positive
    ],
)
def test_observations_outside_their_ranges_are_refused(
    weight: list[float], numerator: list[float], denominator: list[float], top: float
) -> None:
    with pytest.raises(ValueError):
        Observations(np.array(weight), np.array(numerator), np.array(denominator), top)


def test_float_slack_on_the_ranges_is_clipped_away() -> None:
    obs = Observations(np.array([2 + 1e-12]), np.array([1 + 1e-12]), np.array([1.0]), 2.0)
    assert obs.weight[0] == 2.0 and obs.numerator[0] == 1.0
    with pytest.raises(ValueError):
        obs.weight[0] = 1.0  # read-only


def test_alpha_outside_the_unit_interval_is_refused() -> None:
    for alpha in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError):
            bounds(plain([0.0]), alpha)


# decisions -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lower", "upper", "kind", "expected"),
    [
        (0.02, 0.10, "at_most", "pass"),  # the limit itself passes an at-most limit
        (0.02, 0.101, "at_most", "undecided"),
        (0.10, 0.30, "at_most", "undecided"),  # a lower bound at the limit is no fail
        (0.101, 0.30, "at_most", "fail"),
        (0.10, 0.30, "at_least", "pass"),
        (0.02, 0.10, "at_least", "undecided"),
        (0.02, 0.099, "at_least", "fail"),
    ],
)
def test_decide_at_the_edges(lower: float, upper: float, kind: str, expected: str) -> None:
    assert decide(Bound(0.05, lower, upper, 10), 0.10, kind) == expected  # type: ignore[arg-type]


def test_horizon_bounds_read_depth_by_depth() -> None:
    clean, drifting = plain(np.zeros(80)), plain(np.r_[ones(40), np.zeros(40)])
    unsure = plain(np.r_[ones(1), np.zeros(9)])
    nobody = Observations(ones(80), np.zeros(80), np.zeros(80), 1.0)
    assert horizon_bounds([clean, clean, drifting, clean], 0.10, ALPHA) == (2, 2)
    assert horizon_bounds([clean, unsure, drifting], 0.10, ALPHA) == (1, 2)
    assert horizon_bounds([clean, clean], 0.10, ALPHA) == (2, 2)
    assert horizon_bounds([clean, nobody, clean], 0.10, ALPHA) == (1, 3)
    assert horizon_bounds([], 0.10, ALPHA) == (0, 0)


# how many more -----------------------------------------------------------------------


def test_more_needed_is_what_the_same_draws_again_would_take() -> None:
    few = plain(np.zeros(10))
    extra = more_needed(few, ALPHA, 0.10, "at_most")
    assert extra is not None and 15 <= extra <= 30
    state = Sequential(1.0, ALPHA)
    state.add(few)
    state.add(plain(np.zeros(extra - 1)))
    assert state.decision(0.10, "at_most") == "undecided"
    state.add(plain(np.zeros(1)))
    assert state.decision(0.10, "at_most") == "pass"


def test_more_needed_towards_a_fail_when_the_estimate_is_over_the_limit() -> None:
    drift = plain(np.r_[ones(3), np.zeros(7)])  # 30% against a 10% limit
    extra = more_needed(drift, ALPHA, 0.10, "at_most")
    assert extra is not None and extra > 0
    repeated = plain(np.tile(drift.numerator, 1 + extra // 10 + 1)[: 10 + extra])
    assert decide(bounds(repeated, ALPHA), 0.10, "at_most") == "fail"
    at_least = more_needed(drift, ALPHA, 0.10, "at_least")  # the same lower bound, ≥ now
    assert at_least is not None and 0 < at_least <= extra


def test_more_needed_at_the_edges() -> None:
    assert more_needed(plain(np.zeros(60)), ALPHA, 0.10, "at_most") == 0  # decided
    assert more_needed(plain(np.r_[ones(1), np.zeros(9)]), ALPHA, 0.10, "at_most") is None
    assert more_needed(Observations.empty(1.0), ALPHA, 0.10, "at_most") is None
    near = plain(np.r_[ones(1), np.zeros(10)])  # 9.1% against 10%: thousands of draws
    assert more_needed(near, ALPHA, 0.10, "at_most", cap=500) is None
    far = more_needed(near, ALPHA, 0.10, "at_most")
    assert far is not None and far > 1000
    assert more_needed(plain(np.zeros(10)), ALPHA, 0.0, "at_most") is None  # never under 0
