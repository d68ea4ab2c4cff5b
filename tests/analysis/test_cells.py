"""Per-cell analysis: bootstrap intervals, too-few flags, modes side by side, entities, trend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fakes.trajectories import command_trajectory
from fidelity.analysis.cells import bootstrap_rate, trajectory_horizons
from fidelity.analysis.summary import summarize
from fidelity.compare.base import StepComparison
from fidelity.store import Store, TimedObservation, TrajectoryRecord
from fidelity.trajectory import Observation
from tests.test_store import INFO


def _write(store: Store, run_id: str, tid: str, mode: str, drifting: set[int]) -> None:
    trajectory = command_trajectory(tid, "ls", "git log", "cat a.txt")
    obs = [TimedObservation(Observation(text="x\n", exit_code=0)) for _ in range(3)]
    comparisons = [
        StepComparison(
            score=0.2 if depth in drifting else 1.0,
            drift=depth in drifting,
            hallucinations=["file:ghost.txt", "number:42"] if depth in drifting else [],
            omissions=["error:KeyError"] if depth == 3 and depth in drifting else [],
            normalizations={"timestamps": 2, "ansi": 0} if depth == 1 else {},
        )
        for depth in range(1, 4)
    ]
    store.write_trajectory(
        run_id, TrajectoryRecord(trajectory, obs, obs, comparisons, mode, 0.0, 0.0)
    )


@pytest.fixture
def store(db_path: Path) -> Store:
    store = Store(db_path)
    store.start_run("r", INFO)
    for i in range(40):
        _write(store, "r", f"tf{i}", "teacher-forced", {3} if i % 4 == 0 else set())
        _write(store, "r", f"ol{i}", "open-loop", {2, 3} if i % 2 == 0 else set())
    return store


def test_cells_per_mode_and_depth_with_intervals(store: Store) -> None:
    summary = summarize(store, "r", horizon_limit=0.2, min_cell_steps=30)
    store.close()
    cells = {(c.mode, c.depth): c for c in summary.cells}
    assert set(cells) == {(m, d) for m in ("teacher-forced", "open-loop") for d in (1, 2, 3)}
    ol3, tf3 = cells[("open-loop", 3)], cells[("teacher-forced", 3)]
    assert (ol3.steps, ol3.trajectories, ol3.drift.value) == (40, 40, 0.5)
    assert ol3.drift.low < 0.5 < ol3.drift.high and ol3.drift.high - ol3.drift.low < 0.45
    assert tf3.drift.value == 0.25 and tf3.hallucination.value == 0.25
    assert cells[("teacher-forced", 1)].drift == cells[("teacher-forced", 1)].drift.model_copy(
        update={"value": 0.0, "low": 0.0, "high": 0.0}
    )
    assert not any(c.too_few for c in summary.cells)
    horizons = {h.mode: h for h in summary.horizons}
    assert horizons["teacher-forced"].trust_horizon == 2  # 25% at depth 3 > 20%
    assert horizons["open-loop"].trust_horizon == 1
    assert horizons["open-loop"].never_drifted == 20
    assert horizons["open-loop"].median_trajectory_horizon == 2.0  # half 1, half 3
    kinds = {e.kind: e for e in summary.entities}
    assert (
        kinds["file"].hallucinations == 10 + 40 and kinds["number"].steps_with_hallucination == 50
    )
    assert kinds["error"].omissions == 10 + 20 and kinds["error"].hallucinations == 0
    assert [(n.rule, n.count, n.steps) for n in summary.normalizations] == [("timestamps", 160, 80)]
    assert [t.run_id for t in summary.trend] == ["r"] and summary.trend[0].steps == 240
    by_action = {(c.mode, c.action_name): c for c in summary.action_cells}
    assert by_action[("open-loop", "git log")].drift.value == 0.5


def test_too_few_steps_and_reproducible_intervals(store: Store) -> None:
    first = summarize(store, "r", min_cell_steps=41)
    again = summarize(store, "r", min_cell_steps=41)
    store.close()
    assert all(c.too_few for c in first.cells)
    assert first.cells == again.cells  # seeded per cell: identical intervals


def test_trajectory_horizons(store: Store) -> None:
    horizons = trajectory_horizons(store, "r")
    store.close()
    assert (horizons["tf0"], horizons["tf1"], horizons["ol0"], horizons["ol1"]) == (2, 3, 1, 3)


def test_bootstrap_interval_shrinks_with_more_trajectories() -> None:
    rng = np.random.default_rng(7)
    small = rng.random(40) < 0.3
    large = rng.random(4000) < 0.3
    narrow = bootstrap_rate(large.astype(float), np.ones(4000), seed=1)
    wide = bootstrap_rate(small.astype(float), np.ones(40), seed=1)
    assert narrow.low <= narrow.value <= narrow.high
    assert narrow.high - narrow.low < (wide.high - wide.low) / 4
    # the binomial 95% half-width at n=4000, p~0.3 is ~0.014
    assert narrow.high - narrow.low == pytest.approx(2 * 1.96 * (0.3 * 0.7 / 4000) ** 0.5, rel=0.2)


def test_trend_lists_runs_of_the_same_domain_up_to_this_one(db_path: Path) -> None:
    with Store(db_path) as store:
        for run_id, drifting in (("a", set()), ("b", {3}), ("c", {1, 2, 3})):
            store.start_run(run_id, INFO)
            _write(store, run_id, "t", "teacher-forced", drifting)
        trend = summarize(store, "b").trend
        latest = summarize(store, "c").trend
    assert [t.run_id for t in trend] == ["a", "b"]
    assert [round(t.drift_rate, 3) for t in latest] == [0.0, 0.333, 1.0]
