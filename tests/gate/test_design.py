"""The dataset gate's sampling designs: seeded draws that do not depend on rounds, and
weights under which the sample's weighted mean is the dataset's own rate."""

from __future__ import annotations

import numpy as np
import pytest

from fidelity.gate.design import MixtureDesign, RunDesign, uniforms

LENGTHS = np.array([1, 2, 2, 3, 5, 8, 13, 40, 0, 4])


def test_a_draw_depends_on_the_seed_and_its_index_only() -> None:
    design = MixtureDesign(LENGTHS)
    whole = design.draws(seed=7, start=0, count=500)
    for splits in ([1, 499], [10, 90, 400], [250, 250], [3] * 166 + [2]):
        starts = np.concatenate(([0], np.cumsum(splits)[:-1]))
        parts = [design.draws(7, int(s), int(c)) for s, c in zip(starts, splits, strict=True)]
        assert np.array_equal(np.concatenate(parts), whole)
    assert np.array_equal(design.draws(7, 123, 5), whole[123:128])
    assert not np.array_equal(design.draws(8, 0, 500), whole)
    assert design.draws(7, 10, 0).size == 0


def test_uniforms_lie_in_the_unit_interval_and_spread_evenly() -> None:
    u = uniforms(3, 0, 20_000)
    assert u.min() >= 0 and u.max() < 1
    counts = np.histogram(u, bins=10, range=(0, 1))[0]
    assert np.all(np.abs(counts - 2000) < 250)  # ~6 standard deviations


def test_draws_follow_the_defensive_mixture() -> None:
    design = MixtureDesign(LENGTHS)
    n, total = LENGTHS.size, LENGTHS.sum()
    assert np.allclose(design.q, 0.5 * LENGTHS / total + 0.5 / n)
    assert design.q.sum() == pytest.approx(1.0)
    drawn = design.draws(11, 0, 40_000)
    share = np.bincount(drawn, minlength=n) / drawn.size
    spread = np.sqrt(design.q * (1 - design.q) / drawn.size)
    assert np.all(np.abs(share - design.q) < 6 * spread)


def test_weights_make_the_weighted_mean_the_dataset_rate_and_stay_under_two() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, size=500)
    drifting = rng.binomial(lengths, np.where(lengths > 30, 0.4, 0.02))  # long ones drift
    failed = (rng.random(500) < 0.1).astype(float)  # a trajectory-level outcome
    design = MixtureDesign(lengths)
    every = np.arange(500)
    step, trajectory = design.step_weight(every), design.trajectory_weight(every)
    # exact expectations under q: the design estimates the population's own rates
    assert np.dot(design.q, step * drifting / lengths) == pytest.approx(
        drifting.sum() / lengths.sum()
    )
    assert np.dot(design.q, step) == pytest.approx(1.0)
    assert np.dot(design.q, trajectory * failed) == pytest.approx(failed.mean())
    assert np.dot(design.q, trajectory) == pytest.approx(1.0)
    assert design.max_step_weight == step.max() < 2
    assert design.max_trajectory_weight == trajectory.max() <= 2
    mean = lengths.mean()
    assert np.allclose(step, 2 * lengths / (lengths + mean))
    assert np.allclose(trajectory, 2 * mean / (lengths + mean))


def test_a_trajectory_without_steps_has_no_step_weight() -> None:
    design = MixtureDesign(LENGTHS)
    assert design.step_weight([8])[0] == 0
    assert design.trajectory_weight([8])[0] > 0


@pytest.mark.parametrize(
    "lengths", [[], [0, 0], [3, -1], [1.5, 2], [[1, 2]], [np.nan, 1]], ids=repr
)
def test_lengths_are_refused_unless_whole_non_negative_and_not_all_zero(
    lengths: list[float],
) -> None:
    with pytest.raises(ValueError):
        MixtureDesign(np.array(lengths))
    with pytest.raises(ValueError):
        RunDesign(np.array(lengths))


def test_positions_outside_the_dataset_are_refused() -> None:
    design = MixtureDesign(LENGTHS)
    with pytest.raises(IndexError):
        design.step_weight([LENGTHS.size])
    with pytest.raises(IndexError):
        design.trajectory_weight([-1])
    with pytest.raises(ValueError):
        design.draws(-1, 0, 3)


def test_a_stored_run_is_read_in_a_seeded_random_order_with_bounded_weights() -> None:
    lengths = np.array([3, 6, 12, 1, 9])
    drifting = np.array([0, 3, 12, 1, 0])
    run = RunDesign(lengths)
    order = run.order(5)
    assert sorted(order.tolist()) == [0, 1, 2, 3, 4]
    assert np.array_equal(run.order(5), order)
    assert not all(np.array_equal(run.order(s), order) for s in range(6, 12))
    assert np.array_equal(np.concatenate([run.draws(5, 0, 2), run.draws(5, 2, 9)]), order)
    every = np.arange(5)
    step = run.step_weight(every)
    assert run.max_step_weight == run.max_trajectory_weight == 1.0
    assert np.array_equal(step, lengths / 12) and np.all(run.trajectory_weight(every) == 1)
    # E[(L/Lmax)·(D/L)] / E[L/Lmax] = ΣD / ΣL
    assert np.mean(step * drifting / lengths) / np.mean(step) == pytest.approx(16 / 31)
