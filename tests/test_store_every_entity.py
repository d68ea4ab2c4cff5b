"""The store keeps every invented and omitted item of a step, in rank order, with their counts
(schema 6); a store written before gets the count columns empty."""

from __future__ import annotations

from pathlib import Path

import duckdb

from fakes.trajectories import command_trajectory
from fidelity.compare.base import StepComparison
from fidelity.store import MIGRATIONS, Store, TimedObservation, TrajectoryRecord
from fidelity.trajectory import Observation
from tests.test_store import INFO

NAMED = [f"line:invented {i}" for i in range(10)]
MORE = [f"line:invented {i}" for i in range(10, 37)]


def _record(trajectory_id: str) -> TrajectoryRecord:
    trajectory = command_trajectory(trajectory_id, "ls")
    real = [TimedObservation(Observation(text="a\n", exit_code=0), 1.0)]
    sim = [TimedObservation(Observation(text="b\n", exit_code=0), 1.0)]
    comparison = StepComparison(
        score=0.1,
        drift=True,
        hallucinations=NAMED,
        more_hallucinations=MORE,
        omissions=["line:a"],
    )
    return TrajectoryRecord(trajectory, real, sim, [comparison], "teacher-forced", 0.1, 0.1)


def test_every_item_and_its_count_are_stored_in_rank_order(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        store.write_trajectory("r1", _record("t1"))  # one row: bound as parameters
        store.write_trajectories("r1", [_record("t2"), _record("t3")])  # the bulk path
        store.finish_run("r1", "done")
    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute(
            "SELECT trajectory_id, hallucinations, hallucination_count, omissions, omission_count "
            "FROM comparisons ORDER BY trajectory_id"
        ).fetchall()
    assert [r[0] for r in rows] == ["t1", "t2", "t3"]
    for _, hallucinations, h_count, omissions, o_count in rows:
        assert hallucinations == NAMED + MORE and h_count == 37
        assert omissions == ["line:a"] and o_count == 1


def test_a_store_of_schema_5_gets_empty_counts(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        store.write_trajectory("r1", _record("t1"))
    with duckdb.connect(str(db_path)) as con:  # as schema 5 left it
        con.execute("ALTER TABLE comparisons DROP COLUMN hallucination_count")
        con.execute("ALTER TABLE comparisons DROP COLUMN omission_count")
        con.execute("UPDATE meta SET value = '5' WHERE key = 'schema_version'")
    with Store(db_path) as store:
        assert store.schema_version() == MIGRATIONS[-1].version >= 6
    with duckdb.connect(str(db_path), read_only=True) as con:
        row = con.execute(
            "SELECT len(hallucinations), hallucination_count, omission_count FROM comparisons"
        ).fetchone()
    assert row == (37, None, None)  # a list written before may have been cut at ten
