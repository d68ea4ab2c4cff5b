"""The DuckDB store: whole trajectories, resumable runs, no duplicates."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import duckdb
import pytest

from fakes.trajectories import command_trajectory
from fidelity.compare.base import StepComparison
from fidelity.errors import NotADatabaseError, NotFoundError, StoreError, exit_code_for
from fidelity.store import (
    SCHEMA_VERSION,
    JudgmentRecord,
    RecordBuffer,
    ReplayedRecord,
    Store,
    StoredReplay,
    TimedObservation,
    TrajectoryRecord,
    run_status,
)
from fidelity.store_shards import PARTIAL, merge_left_over, write_shard
from fidelity.trajectory import Observation

INFO = {
    "domain": "terminal",
    "sandbox": "local",
    "world_model": {"backend": "copy"},
    "mode": "teacher-forced",
    "suite": "suite.jsonl",
    "suite_digest": "abc",
    "code_version": "test",
}


def record(trajectory_id: str, drift: bool = False) -> TrajectoryRecord:
    trajectory = command_trajectory(trajectory_id, "ls", "pwd")
    real = [TimedObservation(Observation(text="a\n", exit_code=0), 1.0)] * 2
    sim = [TimedObservation(Observation(text="b\n", exit_code=0), 2.0)] * 2
    comparison = StepComparison(
        score=0.5 if drift else 1.0, drift=drift, hallucinations=["file:b"] if drift else []
    )
    return TrajectoryRecord(
        trajectory, real, sim, [comparison, comparison], "teacher-forced", 0.1, 0.2
    )


def count(path: Path, table: str) -> int:
    with duckdb.connect(str(path), read_only=True) as con:
        row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
        assert row is not None
        return int(row[0])


def test_writes_whole_trajectories(db_path: Path) -> None:
    with Store(db_path) as store:
        assert store.start_run("r1", INFO) is False
        store.write_trajectory("r1", record("t1"))
        store.write_trajectory("r1", record("t2", drift=True))
        store.finish_run("r1", "done")
        assert store.done_trajectories("r1") == {"t1", "t2"}
        assert store.real_observations("r1")["t1"][0].text == "a\n"
    assert count(db_path, "steps") == 4
    assert count(db_path, "observations") == 8
    assert count(db_path, "comparisons") == 4


def test_rewriting_a_trajectory_never_duplicates(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        store.write_trajectory("r1", record("t1"))
        store.write_trajectory("r1", record("t1", drift=True))
    assert count(db_path, "comparisons") == 2
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT bool_and(drift) FROM comparisons").fetchone() == (True,)


def test_failed_write_rolls_back(db_path: Path) -> None:
    bad = record("t2")
    bad.comparisons = [bad.comparisons[0], "not a comparison"]  # type: ignore[list-item]
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        store.write_trajectory("r1", record("t1"))
        with pytest.raises(AttributeError):
            store.write_trajectory("r1", bad)
        assert store.done_trajectories("r1") == {"t1"}
    assert count(db_path, "steps") == 2  # nothing of t2 is left half-written


def test_resuming_needs_the_same_suite(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        assert store.start_run("r1", INFO) is True
        with pytest.raises(StoreError, match="another suite, domain or mode"):
            store.start_run("r1", {**INFO, "suite_digest": "other"})


def test_runs_are_listed_newest_first(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("old", INFO)
        store.write_trajectory("old", record("t1", drift=True))
        store.start_run("new", INFO)
        runs = store.list_runs()
        assert [r["run_id"] for r in runs] == ["new", "old"]
        assert runs[1]["drift_rate"] == 1.0 and runs[1]["steps"] == 2
        assert store.latest_run() == "new"
        with pytest.raises(NotFoundError, match="no run 'nope'"):
            store.require_run("nope")


def test_read_only_open_of_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="no such database"):
        Store(tmp_path / "missing.duckdb", read_only=True)


def test_not_a_database(tmp_path: Path) -> None:
    path = tmp_path / "garbage.duckdb"
    path.write_text("this is not duckdb")
    for read_only in (False, True):
        with pytest.raises(NotADatabaseError, match=r"garbage\.duckdb: not a DuckDB database") as e:
            Store(path, read_only=read_only)
        assert exit_code_for(e.value) == 2  # the user's mistake, not the gate-fail code
    assert path.read_text() == "this is not duckdb"


@pytest.mark.parametrize(
    "name", ["data.jsonl", "empty.jsonl", "table.csv", "rows.parquet", "notes.json", "a-folder"]
)
def test_a_dataset_given_as_the_database_is_refused_not_opened_in_memory(
    tmp_path: Path, name: str
) -> None:
    """DuckDB opens an existing ``*.jsonl`` (or csv, parquet, json) as a new in-memory
    database: an audit would have stored nothing and said nothing."""
    path = tmp_path / name
    if name == "a-folder":
        path.mkdir()
    else:
        path.write_text("" if name.startswith("empty") else '{"id": "t", "steps": []}\n')
    for read_only in (False, True):
        with pytest.raises(NotADatabaseError, match=rf"{name}: not a DuckDB database") as e:
            Store(path, read_only=read_only)
        assert exit_code_for(e.value) == 2
    assert (
        path.is_dir()
        if name == "a-folder"
        else path.read_text() in ("", '{"id": "t", "steps": []}\n')
    )


def test_a_new_database_may_have_any_name(tmp_path: Path) -> None:
    path = tmp_path / "results.jsonl"  # not there yet: a DuckDB file is made under that name
    with Store(path) as store:
        store.start_run("r", INFO)
    with Store(path, read_only=True) as store:
        assert store.latest_run() == "r"


def test_store_errors_are_infrastructure_errors() -> None:
    assert exit_code_for(StoreError("locked")) == 3


def test_replayed_real_sides_are_kept_until_the_trajectory_is_whole(db_path: Path) -> None:
    trajectory = command_trajectory("t", "ls", "pwd")
    real = [TimedObservation(Observation(text=f"{i}\n", exit_code=0), 5.0) for i in range(2)]
    with Store(db_path) as store:
        store.start_run("r", INFO)
        store.write_replayed("r", ReplayedRecord(trajectory, real, 1.5, None))
        assert store.done_trajectories("r") == set()
        (kept,) = store.replayed("r").values()
        assert kept == StoredReplay(None, real, 1.5, None)
        store.write_trajectory("r", record("t"))
        assert store.replayed("r") == {} and store.done_trajectories("r") == {"t"}
    assert count(db_path, "observations") == 4  # replaced, not added to


def test_a_running_run_whose_owner_is_gone_is_dead(db_path: Path) -> None:
    assert run_status("running", os.getpid(), socket.gethostname()) == "running"
    with Store(db_path) as store:
        store.start_run("r", INFO)
        (row,) = store.list_runs()
        assert (row["status"], row["owner_pid"]) == ("running", os.getpid())
    dead_pid = _exited_pid()
    assert run_status("running", dead_pid, socket.gethostname()) == "dead"
    assert run_status("running", dead_pid, "another-host") == "running"  # cannot tell
    assert run_status("done", dead_pid, socket.gethostname()) == "done"
    assert run_status("running", None, None) == "running"  # recorded before owners were


def _exited_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_file_from_before_owners_lists_read_only(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("old", INFO)
    with duckdb.connect(str(db_path)) as con:
        con.execute("ALTER TABLE runs DROP COLUMN owner_pid")
        con.execute("ALTER TABLE runs DROP COLUMN owner_host")
    with Store(db_path, read_only=True) as store:
        (run,) = store.list_runs()
    assert (run["status"], run["owner_pid"], run["owner_host"]) == ("running", None, None)


def test_a_database_written_by_the_version_1_code_is_upgraded_in_place(db_path: Path) -> None:
    """tests/legacy/store_v1.py is the store module as it shipped with schema version 1."""
    from fidelity.analysis.summary import summarize
    from tests.legacy import store_v1

    with store_v1.Store(db_path) as old:
        old.start_run("r1", INFO)
        for trajectory_id, drift in (("t1", False), ("t3", True)):
            fields = list(record(trajectory_id, drift).__dict__.values())[:-1]  # no outcome in v1
            legacy = store_v1.TrajectoryRecord(*fields)
            old.write_trajectory("r1", legacy)
    with duckdb.connect(str(db_path)) as con:  # the oldest files: no state/control columns
        con.execute("ALTER TABLE observations DROP COLUMN state")
        con.execute("ALTER TABLE steps DROP COLUMN control")
    before = _every_row(db_path)
    with Store(db_path) as store:
        assert store.schema_version() == SCHEMA_VERSION > 1
    after = _every_row(db_path)
    for table, rows in before.items():  # the same rows, the new columns empty
        assert [row[: len(rows[0])] for row in after[table]] == rows, table
        assert {row[len(rows[0]) :] for row in after[table]} <= {(), (None,), (None, None)}
    with Store(db_path) as store:
        assert store.done_trajectories("r1") == {"t1", "t3"}
        assert store.real_observations("r1")["t1"][0].text == "a\n"
        store.write_trajectory("r1", record("t2", drift=True))
        store.write_trajectory("r1", record("t3"))  # replaced, never duplicated
        summary = summarize(store, "r1")
    assert summary.totals.trajectories == 3 and summary.totals.steps == 6
    assert summary.totals.drift_rate == pytest.approx(1 / 3)
    with Store(db_path) as again:  # reopening applies nothing twice
        assert again.schema_version() == SCHEMA_VERSION


def _every_row(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a fixed order (columns in table order)."""
    with duckdb.connect(str(path), read_only=True) as con:
        tables = [row[0] for row in con.execute("SHOW TABLES").fetchall() if row[0] != "meta"]
        return {
            table: con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall() for table in tables
        }


def test_wide_tables_keep_no_index_and_compress_texts(db_path: Path) -> None:
    """Schema 4: only ``trajectories`` (one row per trajectory) keeps a key; texts are zstd."""
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        store.write_trajectories("r1", [record(f"t{i}") for i in range(3)])
        store.connection.execute("CHECKPOINT")
        keyed = store.connection.execute(
            "SELECT table_name FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY' "
            "ORDER BY ALL"
        ).fetchall()
        compression = store.connection.execute(
            "SELECT DISTINCT compression FROM pragma_storage_info('observations') "
            "WHERE column_name = 'text' AND segment_type = 'VARCHAR'"
        ).fetchall()
    assert [row[0] for row in keyed] == ["judgments", "meta", "runs", "trajectories"]
    assert compression == [("ZSTD",)]


def test_list_cells_of_equal_length_stay_lists(db_path: Path) -> None:
    """Every comparison with exactly one entity: the column is still one list per row."""
    records = [record(f"t{i}", drift=True) for i in range(3)]
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        store.write_trajectories("r1", records)
    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute("SELECT DISTINCT hallucinations, omissions FROM comparisons").fetchall()
    assert rows == [(["file:b"], [])]


def test_entity_lists_come_back_as_written(db_path: Path) -> None:
    """Lists travel as JSON: quotes, commas, brackets, backslashes and non-ASCII survive."""
    tricky = ['file:a, "b"', "url:https://x/[1]", "path:C:\\dir\\f", "name:ünïcode ✓", "", "null"]
    written = record("t1", drift=True)
    written.comparisons = [
        StepComparison(score=0.1, drift=True, hallucinations=tricky, reasons=["x"]),
        StepComparison(score=1.0, drift=False, omissions=tricky[::-1], stale=["s"]),
    ]
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        store.write_trajectories("r1", [written])
    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute(
            "SELECT hallucinations, omissions, stale, reasons FROM comparisons ORDER BY depth"
        ).fetchall()
    assert rows == [(tricky, [], [], ["x"]), ([], tricky[::-1], ["s"], [])]


def test_the_buffer_writes_a_batch_once_it_holds_enough_steps(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        # written on this thread, so the hand-over shows at once (the writer thread: below)
        buffer = RecordBuffer(store, "r1", size=100, seconds=3600, steps=5, background=False)
        buffer.add(record("t1"))
        buffer.add(record("t2"))  # 4 steps pending: not yet
        assert store.done_trajectories("r1") == set() and buffer.pending_steps == 4
        buffer.add(record("t3"))  # 6 steps
        assert store.done_trajectories("r1") == {"t1", "t2", "t3"}
        assert (buffer.pending, buffer.pending_steps, buffer.written) == ([], 0, 3)


def writer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "fidelity-store-writer"]


def test_batches_are_committed_on_a_writer_thread_and_flush_waits_for_them(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    committers: list[str] = []
    commit_rows = Store.commit_rows

    def spy(self: Store, cursor: Any) -> None:
        committers.append(threading.current_thread().name)
        commit_rows(self, cursor)

    monkeypatch.setattr(Store, "commit_rows", spy)
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        buffer = RecordBuffer(store, "r1", size=2, seconds=3600)
        for i in range(5):
            buffer.add(record(f"t{i}"))
        assert len(buffer.pending) == 1  # two batches handed over, one record queued
        buffer.flush()
        assert store.done_trajectories("r1") == {f"t{i}" for i in range(5)}
        assert (buffer.pending, buffer.written) == ([], 5)
        assert committers == ["fidelity-store-writer"] * 3
        assert writer_threads() == []
    assert count(db_path, "comparisons") == 10


def test_an_error_in_the_writer_thread_reaches_the_caller(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit failing on the writer thread (injected: a full disk cannot be made to order)
    comes out of the caller's next hand-over as that same error (exit 3), with the records
    being handed over still queued; the failed batch keeps nothing, the others are stored."""
    failures: list[tuple[str, StoreError]] = []
    commit_rows = Store.commit_rows

    def failing_once(self: Store, cursor: Any) -> None:
        if failures:
            commit_rows(self, cursor)
            return
        cursor.close()  # rolls the staged transaction back, as a failed commit does
        error = StoreError(f"{self.path}: cannot write to the database (IO Error: disk full)")
        failures.append((threading.current_thread().name, error))
        raise error

    monkeypatch.setattr(Store, "commit_rows", failing_once)
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        buffer = RecordBuffer(store, "r1", size=2, seconds=3600)
        buffer.add(record("lost0"))
        buffer.add(record("lost1"))  # handed over: its commit fails on the writer thread
        buffer.add(record("t2"))
        with pytest.raises(StoreError) as raised:
            buffer.add(record("t3"))  # the next hand-over waits for the write, gets its error
        assert failures == [("fidelity-store-writer", raised.value)]
        assert exit_code_for(raised.value) == 3
        assert [r.trajectory.id for r in buffer.pending] == ["t2", "t3"]  # still queued
        buffer.flush()
        assert store.done_trajectories("r1") == {"t2", "t3"}
        assert writer_threads() == []
    assert count(db_path, "steps") == 4  # nothing of the failed batch


def test_an_insert_error_reaches_the_caller_with_the_batch_still_queued(db_path: Path) -> None:
    """A real insert failure (the same trajectory twice in one batch breaks the key of
    ``trajectories``) comes out of the hand-over as the store's one-line error; earlier
    batches stay."""
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        buffer = RecordBuffer(store, "r1", size=2, seconds=3600)
        buffer.add(record("t0"))
        buffer.add(record("t1"))
        buffer.add(record("twice"))
        with pytest.raises(StoreError, match=r"cannot write to the database \(.*key") as error:
            buffer.add(record("twice"))
        assert exit_code_for(error.value) == 3
        assert [r.trajectory.id for r in buffer.pending] == ["twice", "twice"]
        buffer.pending.pop()
        buffer.flush()
        assert store.done_trajectories("r1") == {"t0", "t1", "twice"}
        assert writer_threads() == []
    assert count(db_path, "steps") == 6


def test_closing_the_store_stores_every_buffered_record(db_path: Path) -> None:
    """No flush by the caller: closing the store writes what is queued and waits for the
    batch in flight; no writer thread is left."""
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        buffer = RecordBuffer(store, "r1", size=3, seconds=3600)
        for i in range(7):
            buffer.add(record(f"t{i}"))
    assert writer_threads() == []
    with Store(db_path, read_only=True) as store:
        assert store.done_trajectories("r1") == {f"t{i}" for i in range(7)}
    assert count(db_path, "observations") == 28


def test_ctrl_c_while_waiting_for_the_writer_keeps_the_queued_records(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C (injected) as a hand-over waits for the previous write: the batch in flight
    commits, the new one stays queued, and the caller's ``finally: flush()`` stores both."""
    from fidelity.store import _Writer

    wait = _Writer.wait
    interrupts = [KeyboardInterrupt()]

    def interrupted(self: _Writer) -> int:
        if self._thread is not None and interrupts:
            raise interrupts.pop()
        return wait(self)

    monkeypatch.setattr(_Writer, "wait", interrupted)
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        buffer = RecordBuffer(store, "r1", size=2, seconds=3600)
        with pytest.raises(KeyboardInterrupt):
            try:
                for i in range(4):
                    buffer.add(record(f"t{i}"))  # the second hand-over is interrupted
            finally:
                buffer.flush()
        assert store.done_trajectories("r1") == {"t0", "t1", "t2", "t3"}
    assert count(db_path, "steps") == 8


def test_bulk_writes_store_many_trajectories_at_once_and_replace_old_rows(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        store.write_trajectories("r1", [record(f"t{i}") for i in range(50)])
        store.write_trajectories("r1", [record("t3", drift=True), record("t50")])
        assert len(store.done_trajectories("r1")) == 51
    assert count(db_path, "comparisons") == 102
    with duckdb.connect(str(db_path), read_only=True) as con:
        rows = con.execute(
            "SELECT trajectory_id, hallucinations FROM comparisons WHERE drift"
        ).fetchall()
    assert rows == [("t3", ["file:b"]), ("t3", ["file:b"])]


def test_sorted_json_is_json_dumps_sorted() -> None:
    """The stored metrics/normalizations/state text is byte for byte what json.dumps wrote."""
    from fidelity.store import _sorted_json

    samples: list[Any] = [
        {},
        {"b": 1.5, "a": 0.1 + 0.2, "é": float("inf")},
        {"z": {"y": [1, "x", None], "a": True}},
        {"text": 'line\nwith "quotes" and ünïcode'},
        {2: [1.5, float("nan"), -0.0, 10**20], 1: {"b": None, "a": False}, 3.5: "x"},
        {"line": 1e-7, "char": 0.30000000000000004, "entity": 1, "z": float("-inf")},
        [],
        None,
    ]
    for sample in samples:
        assert _sorted_json(sample) == json.dumps(sample, sort_keys=True)
    for bad in ({"a": object()}, {"a": 1, 2: 3}):  # not JSON; keys that do not sort
        with pytest.raises(TypeError):
            json.dumps(bad, sort_keys=True)
        with pytest.raises(TypeError):
            _sorted_json(bad)


def test_a_file_newer_than_the_code_is_refused_and_left_as_it_was(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("r1", INFO)
        store.write_trajectory("r1", record("t1"))
    with duckdb.connect(str(db_path)) as con:
        con.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    before = _every_row(db_path)
    with pytest.raises(StoreError, match="schema version 99 is newer than this fidelity"):
        Store(db_path)
    assert _every_row(db_path) == before


def _trajectory_rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """What a run stored per trajectory (``finished_at`` left out: it is when, not what)."""
    with duckdb.connect(str(path), read_only=True) as con:
        return {
            table: con.execute(
                f"SELECT * EXCLUDE (finished_at) FROM {table} ORDER BY ALL"
                if table == "trajectories"
                else f"SELECT * FROM {table} ORDER BY ALL"
            ).fetchall()
            for table in ("steps", "observations", "comparisons", "trajectories")
        }


def test_parquet_shards_merge_into_the_rows_a_direct_write_stores(tmp_path: Path) -> None:
    failed = record("t2")
    failed.error = "sandbox lost"
    records = [record("t0"), record("t1", drift=True), failed]
    with Store(tmp_path / "direct.duckdb") as store:
        store.start_run("r1", INFO)
        store.write_trajectories("r1", records)
    root = tmp_path / "parts" / "r1"
    receipts = [write_shard(records[:2], root), write_shard(records[2:], root)]
    assert receipts[1].failed == {"t2": "sandbox lost"} and receipts[0].failed == {}
    assert receipts[0].trajectory_ids == ["t0", "t1"]
    with Store(tmp_path / "merged.duckdb") as store:
        store.start_run("r1", INFO)
        store.write_trajectories("r1", [record("t0", drift=True), record("t9")])  # t0 again
        store.write_judgments(
            "r1", {"judge": "j"}, [JudgmentRecord("t0", 1, "teacher-forced", 0, None, None)]
        )
        with RecordBuffer(store, "r1") as buffer:
            for receipt in receipts:
                buffer.merge(receipt)
        assert buffer.written == 3
        judged = store.connection.execute("SELECT count(*) FROM judgments").fetchone()
    assert judged == (0,)  # t0's old judgments went with its old rows
    assert not any(root.iterdir())  # merged shards are deleted
    merged, direct = (
        _trajectory_rows(tmp_path / "merged.duckdb"),
        _trajectory_rows(tmp_path / "direct.duckdb"),
    )
    assert {t: [r for r in rows if r[1] != "t9"] for t, rows in merged.items()} == direct
    assert len(direct["observations"]) == 12 and len(direct["comparisons"]) == 6


def test_shards_left_over_are_merged_once_and_partial_ones_dropped(tmp_path: Path) -> None:
    root = tmp_path / "parts" / "r1"
    write_shard([record("t0")], root)
    write_shard([record("t0", drift=True), record("t1")], root)  # t0 again: a retried task
    (root / f"{PARTIAL}dead").mkdir()  # a task killed mid-write
    (root / f"{PARTIAL}dead" / "steps.parquet").write_bytes(b"PAR1")
    with Store(tmp_path / "f.duckdb") as store:
        store.start_run("r1", INFO)
        assert merge_left_over(store, "r1", root) == 2  # t0 once
        assert merge_left_over(store, "r1", root) == 0  # nothing left, root removed
        assert store.done_trajectories("r1") == {"t0", "t1"}
    assert not root.exists()
    assert count(tmp_path / "f.duckdb", "comparisons") == 4
    assert count(tmp_path / "f.duckdb", "trajectories") == 2


def test_a_store_another_process_holds_says_which_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "busy.duckdb"
    Store(path).close()
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        with pytest.raises(StoreError) as raised:
            Store(path)
        assert str(raised.value) == (
            f"{path}: in use by another process (PID {holder.pid}), which holds its lock: "
            "wait for it to end, or pass another --db"
        )
        assert exit_code_for(raised.value) == 3
    finally:
        holder.kill()
        holder.wait()


_HOLD = """
import sys, time, duckdb
connection = duckdb.connect(sys.argv[1])
print("holding", flush=True)
time.sleep(120)
"""
