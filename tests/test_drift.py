"""``fidelity drift``: run-over-run tests per domain and depth, Holm correction, exit codes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fakes.trajectories import command_trajectory
from fidelity.cli import app
from fidelity.compare.base import StepComparison
from fidelity.drift import cluster_z_test, cohens_h, compare_runs, holm
from fidelity.errors import NotFoundError, UsageError
from fidelity.store import Store, TimedObservation, TrajectoryRecord
from fidelity.trajectory import Observation
from tests.test_store import INFO


def _run(store: Store, run_id: str, drift_at: list[set[int]], model: str = "m1") -> None:
    """One run; trajectory i drifts at the depths in ``drift_at[i]`` (4 steps each)."""
    store.start_run(run_id, INFO | {"world_model": {"backend": "endpoint", "model": model}})
    for index, drifting in enumerate(drift_at):
        trajectory = command_trajectory(f"t{index}", "ls", "pwd", "cat a", "wc a")
        obs = [TimedObservation(Observation(text="x\n", exit_code=0)) for _ in range(4)]
        comparisons = [
            StepComparison(
                score=0.3 if depth in drifting else 1.0,
                drift=depth in drifting,
                hallucinations=["file:ghost"] if depth in drifting else [],
            )
            for depth in range(1, 5)
        ]
        record = TrajectoryRecord(trajectory, obs, obs, comparisons, "teacher-forced", 0.0, 0.0)
        store.write_trajectory(run_id, record)
    store.finish_run(run_id, "done")


def _regressed_db(db_path: Path) -> None:
    with Store(db_path) as store:
        _run(store, "base", [set() for _ in range(40)] + [{4}] * 4)
        _run(store, "cur", [{3, 4}] * 30 + [set()] * 14, model="m2")


def test_regression_is_flagged_at_the_depths_that_moved(db_path: Path) -> None:
    _regressed_db(db_path)
    with Store(db_path, read_only=True) as store:
        report = compare_runs(store, "base", "cur")
    flagged = {(t.depth, t.metric) for t in report.tests if t.status == "regression"}
    assert (3, "drift_rate") in flagged and (None, "drift_rate") in flagged
    assert all(t.depth not in {1, 2} for t in report.tests if t.status == "regression")
    depth3 = next(t for t in report.tests if t.depth == 3 and t.metric == "drift_rate")
    assert depth3.baseline_rate == 0 and depth3.current_rate == pytest.approx(30 / 44)
    assert depth3.effect_size == pytest.approx(cohens_h(0, 30 / 44))
    assert depth3.p_adjusted >= depth3.p_value
    assert report.exit_code == 1 and any("world model changed: model" in n for n in report.notes)
    with Store(db_path, read_only=True) as store:
        reverse = compare_runs(store, "cur", "base")
    assert reverse.regressions == 0 and reverse.improvements > 0 and reverse.exit_code == 0


def test_small_or_equal_runs_are_not_flagged(db_path: Path) -> None:
    with Store(db_path) as store:
        _run(store, "a", [set()] * 3)
        _run(store, "b", [{1, 2, 3, 4}] * 3)  # 0% -> 100%, but 12 steps per depth? no: 3
        _run(store, "c", [{2}] * 20 + [set()] * 20)
        _run(store, "d", [{2}] * 21 + [set()] * 19)
        tiny = compare_runs(store, "a", "b", min_steps=10)
        same = compare_runs(store, "c", "d")
    assert {t.status for t in tiny.tests if t.depth is not None} == {"inconclusive"}
    assert same.regressions == 0 and same.exit_code == 0


def test_statistics_helpers() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert cohens_h(0.5, 0.5) == 0 and cohens_h(0.0, 1.0) == pytest.approx(math.pi)
    ones = np.ones(50)
    z, p = cluster_z_test((np.zeros(50), ones), (np.r_[np.ones(10), np.zeros(40)], ones))
    # 0/50 vs 10/50: pooled-variance z = 0.2 / sqrt(2 * 0.1 * 0.9 / 49) ~ 3.30
    assert z == pytest.approx(0.2 / math.sqrt(2 * 0.09 / 49)) and p < 0.001


def test_usage_errors(db_path: Path) -> None:
    _regressed_db(db_path)
    with Store(db_path, read_only=True) as store:
        with pytest.raises(UsageError, match="same run"):
            compare_runs(store, "base", "base")
        with pytest.raises(NotFoundError, match="no run 'nope'"):
            compare_runs(store, "base", "nope")


def test_cli_exit_codes(db_path: Path) -> None:
    _regressed_db(db_path)
    runner = CliRunner()
    regressed = runner.invoke(
        app, ["drift", "--baseline", "base", "--current", "cur", "--db", str(db_path), "--json"]
    )
    assert regressed.exit_code == 1, regressed.output
    assert json.loads(regressed.output)["regressions"] >= 1
    fine = runner.invoke(
        app, ["drift", "--baseline", "cur", "--current", "base", "--db", str(db_path)]
    )
    assert fine.exit_code == 0 and "improvement" in fine.output
    missing = runner.invoke(
        app, ["drift", "--baseline", "base", "--current", "x", "--db", str(db_path)]
    )
    assert missing.exit_code == 2
    no_option = runner.invoke(app, ["drift", "--baseline", "base", "--db", str(db_path)])
    assert no_option.exit_code == 2
