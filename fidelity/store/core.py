"""DuckDB store: runs, trajectories, steps, real and sim observations, comparisons.

Every trajectory of a run is written in one transaction (replacing any rows it
had), and its row in ``trajectories`` is marked ``done`` last. An interrupted
audit therefore leaves only whole trajectories behind, and re-running it with
the same run id redoes exactly the trajectories that are not ``done``.

The store owns its schema (:mod:`fidelity.store.schema`): ``_SCHEMA`` is version 1 as
first shipped, and ``MIGRATIONS`` upgrade a file in place, one numbered step at a time (the
version is kept in ``meta.schema_version``); a file newer than this code is
refused. Rows are written by column name, in bulk (per batch of trajectories,
one insert per table scanning NumPy columns, :mod:`fidelity.store.rows`;
:class:`~fidelity.store.writer.RecordBuffer` commits a batch on a writer thread while its
caller builds the next one), and read back through the query functions of
:mod:`fidelity.store_queries`, the only other module that holds SQL.

Since version 4 only ``trajectories`` (one row per trajectory) has a primary key:
``steps``, ``observations`` and ``comparisons`` stay unique because every writer
deletes a trajectory's rows before inserting them again, in the same
transaction; observation texts are zstd-compressed by DuckDB.

An audit whose world model needs every real replay first (the retrieval
baseline) stores each replay as it completes (status ``replayed``: real side
only); a resumed run reuses them instead of replaying again. A run records the
process that owns it (``owner_pid``, ``owner_host``): a run still ``running``
whose owner is gone from this host (killed with SIGKILL, or the machine lost
power) is shown as ``dead``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from fidelity.defaults import DEFAULT_DB
from fidelity.errors import NotADatabaseError, NotFoundError, StoreError
from fidelity.processes import alive
from fidelity.store.records import (
    JudgmentRecord,
    ReplayedRecord,
    StoredReplay,
    TimedObservation,
    TrajectoryRecord,
    stored_observation,
)
from fidelity.store.rows import _Batch, _insert_rows, _now
from fidelity.store.schema import (
    _PER_TRAJECTORY_TABLES,
    _SCHEMA,
    COLUMNS,
    MIGRATIONS,
    SCHEMA_VERSION,
    WRITTEN,
)

if TYPE_CHECKING:
    from _typeshed import SupportsFlush

    from fidelity.outcomes import RealOutcome
    from fidelity.trajectory import Observation

CHECKPOINT_THRESHOLD = "1MB"
"""Write-ahead log size at which a writer folds it into the database file. Small, so that a
bulk write (a batch of thousands of steps, tens of MB) checkpoints at its commit: DuckDB then
writes its rows once, compressed, into the file instead of first into the log (a commit
whose log would pass ``auto_checkpoint_skip_wal_threshold`` skips it); small writes (a run
started, a few judgments) still gather in the log. See :data:`ROW_GROUP_SIZE`."""

ROW_GROUP_SIZE = 10_240
"""Rows per row group in a writable store (DuckDB's default is 122,880). A checkpoint
recompresses the table's last, partly filled row group; with a checkpoint at every bulk
commit, default-sized groups would be compressed again and again as batches of 10,000 to
20,000 rows fill them. Groups the size of a batch are written about once
(``benchmarks/store_writes.py``: about 40% less wall time than a 64 MB log threshold with
default groups, for a file about a fifth larger)."""

WRITER_THREADS = 1
"""DuckDB threads of a writable store. A bulk insert scans the rows' Python strings, which
needs the GIL: a second DuckDB thread only contends for it with the thread building the
next batch (``benchmarks/store_writes.py``'s path, 30,000 steps, five alternating runs on
2 cores at load 9: medians 20,200 steps per CPU second with one thread against 16,200 with
two, 5,460 against 4,420 steps/s wall). Read-only stores (reports, analysis) keep DuckDB's
default, one thread per core."""


def run_status(status: str, owner_pid: int | None, owner_host: str | None) -> str:
    """*status* as it stands: a ``running`` run whose owner process is gone from this host
    is ``dead`` (it was killed without a chance to say so). A run owned by another host,
    or recorded before owners were, keeps its status: it cannot be checked from here.
    """
    if status != "running" or owner_pid is None or owner_host != socket.gethostname():
        return status
    return status if alive(owner_pid) else "dead"


class Store:
    """A DuckDB file holding every run. Use as a context manager."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_DB, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        if read_only and not self.path.exists():
            raise NotFoundError(f"{self.path}: no such database (run `fidelity audit` first)")
        from fidelity.duckdb_files import refuse_other_files  # at open: not for every import

        refuse_other_files(self.path, "--db with a fidelity database")
        try:
            self.connection = (
                duckdb.connect(str(self.path), read_only=True)
                if read_only
                else _attached(self.path)
            )
        except duckdb.Error as exc:
            if "not a valid DuckDB database file" in str(exc):
                raise NotADatabaseError(
                    f"{self.path}: not a DuckDB database (pass --db with a fidelity database, "
                    "or a new file name)"
                ) from None
            holder = _LOCK_HOLDER.search(str(exc))
            if holder is not None:
                raise StoreError(
                    f"{self.path}: in use by another process (PID {holder[1]}), which holds "
                    "its lock: wait for it to end, or pass another --db"
                ) from None
            raise StoreError(f"{self.path}: cannot open database ({_first_line(exc)})") from None
        self._buffers: list[SupportsFlush] = []  # the RecordBuffers writing to this store
        if not read_only:
            with self._writing("create the schema in"):
                self._migrate()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Store what every :class:`RecordBuffer` of this store still holds (waiting for its
        writer), then close the connection (flushes the write-ahead log)."""
        buffers, self._buffers = self._buffers, []
        try:
            for buffer in buffers:
                buffer.flush()
        finally:
            self.connection.close()

    def _migrate(self) -> None:
        """Create the version-1 tables if missing, then apply every migration not yet applied,
        all in one transaction (one commit: a new file costs one sync, not one per statement;
        an upgrade that fails leaves the file as it was)."""
        with self.transaction() as tx:
            tx.execute(_SCHEMA)
            version = self.schema_version()
            if version is None:
                tx.execute("INSERT INTO meta VALUES ('schema_version', '1')")
                version = 1
            if version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path}: schema version {version} is newer than this fidelity "
                    f"({SCHEMA_VERSION}); upgrade fidelity"
                )
            for migration in MIGRATIONS:
                if migration.version <= version:
                    continue
                for statement in migration.statements:
                    tx.execute(statement)
                tx.execute(
                    "UPDATE meta SET value = ? WHERE key = 'schema_version'",
                    [str(migration.version)],
                )

    def schema_version(self) -> int | None:
        """The schema version of the open file (None: a file not yet initialised)."""
        row = self.connection.execute(
            "SELECT value FROM meta WHERE key = 'schema_version'"
        ).fetchone()
        return int(row[0]) if row is not None else None

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of its own to this store (for a transaction or a long read beside
        others), reading and writing the store's tables by their plain names."""
        cursor = self.connection.cursor()
        if not self.read_only:
            cursor.execute(f"USE {_CATALOG}")
        return cursor

    @contextmanager
    def _writing(self, what: str) -> Iterator[None]:
        """Turn a DuckDB write failure (disk full, I/O error) into one-line :class:`StoreError`."""
        try:
            yield
        except duckdb.Error as exc:
            raise StoreError(
                f"{self.path}: cannot {what} the database ({_first_line(exc)})"
            ) from None

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A transaction that rolls back on any exception (Ctrl-C included)."""
        self.connection.begin()
        try:
            yield self.connection
        except BaseException:
            self.connection.rollback()
            raise
        self.connection.commit()

    # -- runs ---------------------------------------------------------------------

    def start_run(self, run_id: str, info: dict[str, Any]) -> bool:
        """Create run *run_id*, or reopen it; returns True when it already existed.

        Reopening requires the same suite digest and domain: a run id holds one
        audit, resumed, never two different ones.
        """
        existing = self.connection.execute(
            "SELECT suite_digest, domain, mode FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
        if existing is not None:
            if (existing[0], existing[1], existing[2]) != (
                info["suite_digest"],
                info["domain"],
                info["mode"],
            ):
                raise StoreError(
                    f"run {run_id!r} in {self.path} was started with another suite, domain or "
                    "mode; choose a new --run-id"
                )
            with self._writing("write to"):
                self.connection.execute(
                    "UPDATE runs SET status = 'running', finished_at = NULL, owner_pid = ?, "
                    "owner_host = ? WHERE run_id = ?",
                    [os.getpid(), socket.gethostname(), run_id],
                )
            return True
        row = (
            run_id,
            _now(),
            None,
            "running",
            info["domain"],
            info["sandbox"],
            json.dumps(info["world_model"], sort_keys=True),
            info["mode"],
            info["suite"],
            info["suite_digest"],
            info["code_version"],
            json.dumps(info.get("config", {}), sort_keys=True, default=str),
            os.getpid(),
            socket.gethostname(),
        )
        with self._writing("write to"):
            _insert_rows(self.connection, "runs", [row])
        return False

    def finish_run(self, run_id: str, status: str) -> None:
        """Mark *run_id* as ``done``, ``interrupted`` or ``failed``."""
        with self._writing("write to"):
            self.connection.execute(
                "UPDATE runs SET status = ?, finished_at = ? WHERE run_id = ?",
                [status, _now(), run_id],
            )

    def record_gate(self, run_id: str, claim: dict[str, Any]) -> None:
        """Keep a dataset gate's claim (its limits' bounds, what it admitted) with *run_id*,
        in the run's ``config`` under ``gate_claim`` (the report's gate section reads it)."""
        row = self.connection.execute(
            "SELECT config FROM runs WHERE run_id = ?", [run_id]
        ).fetchone()
        if row is None:
            raise NotFoundError(f"{self.path}: no run {run_id!r}")
        config = {**json.loads(row[0]), "gate_claim": claim}
        with self._writing("write to"):
            self.connection.execute(
                "UPDATE runs SET config = ? WHERE run_id = ?", [json.dumps(config), run_id]
            )

    def done_trajectories(self, run_id: str) -> set[str]:
        """Ids of the trajectories of *run_id* stored whole."""
        rows = self.connection.execute(
            "SELECT trajectory_id FROM trajectories WHERE run_id = ? AND status = 'done'", [run_id]
        ).fetchall()
        return {row[0] for row in rows}

    def latest_run(self) -> str:
        """The most recently started run id."""
        row = self.connection.execute(
            "SELECT run_id FROM runs ORDER BY started_at DESC LIMIT 1"
        ).fetchone()
        if row is None:
            raise NotFoundError(f"{self.path}: no runs stored yet (run `fidelity audit` first)")
        return str(row[0])

    def require_run(self, run_id: str | None) -> str:
        """*run_id* if it exists, the latest run when None; NotFoundError otherwise."""
        if run_id is None:
            return self.latest_run()
        row = self.connection.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None:
            raise NotFoundError(f"{self.path}: no run {run_id!r} (see `fidelity runs`)")
        return run_id

    def list_runs(self) -> list[dict[str, Any]]:
        """Every run, newest first, with its step and drift counts."""
        try:
            rows = self._run_rows("r.owner_pid, r.owner_host")
        except duckdb.BinderException:  # written before the owner columns, opened read-only
            rows = self._run_rows("NULL::INTEGER AS owner_pid, NULL::VARCHAR AS owner_host")
        keys = [
            "run_id",
            "started_at",
            "finished_at",
            "status",
            "domain",
            "sandbox",
            "mode",
            "world_model",
            "steps",
            "drift_rate",
            "owner_pid",
            "owner_host",
        ]
        runs = [dict(zip(keys, row, strict=True)) for row in rows]
        for run in runs:
            run["world_model"] = json.loads(run["world_model"])
            run["status"] = run_status(run["status"], run["owner_pid"], run["owner_host"])
        return runs

    def _run_rows(self, owner_columns: str) -> list[tuple[Any, ...]]:
        """The rows of :meth:`list_runs`, with *owner_columns* for the owner (one query: asking
        the catalog first whether the columns exist cost a second one at every start)."""
        return self.connection.execute(
            f"""
            SELECT r.run_id, r.started_at, r.finished_at, r.status, r.domain, r.sandbox,
                   r.mode, r.world_model, count(c.score) AS steps,
                   avg(CASE WHEN c.infra_failure THEN NULL ELSE c.drift::INT END) AS drift_rate,
                   {owner_columns}
            FROM runs r LEFT JOIN comparisons c USING (run_id)
            GROUP BY ALL ORDER BY r.started_at DESC
            """
        ).fetchall()

    # -- trajectories ---------------------------------------------------------------

    def real_observations(self, run_id: str) -> dict[str, list[Observation]]:
        """The real observations of every trajectory of *run_id* stored whole, in depth order."""
        rows = self.connection.execute(
            """SELECT o.trajectory_id, o.text, o.exit_code, o.cwd, o.timed_out, o.truncated, o.error,
                      o.state
               FROM observations o JOIN trajectories t USING (run_id, trajectory_id)
               WHERE o.run_id = ? AND o.side = 'real' AND t.status = 'done'
               ORDER BY o.trajectory_id, o.depth""",
            [run_id],
        ).fetchall()
        result: dict[str, list[Observation]] = {}
        for trajectory_id, *columns in rows:
            result.setdefault(trajectory_id, []).append(stored_observation(*columns))
        return result

    def write_replayed(self, run_id: str, record: ReplayedRecord) -> None:
        """Store the real side of one trajectory (status ``replayed``), before its simulation.

        :meth:`write_trajectory` replaces it once the trajectory is simulated and compared.
        """
        trajectory = record.trajectory
        batch = _Batch()
        batch.add_steps(trajectory)
        batch.add_observations(trajectory.id, "real", "real", 0, record.real)
        batch.add_outcome(trajectory, record.outcome)
        batch.add_trajectory(
            trajectory, "replayed", record.error, record.real_seconds, None, _now()
        )
        with self._writing("write to"), self.transaction() as tx:
            for table in (*_PER_TRAJECTORY_TABLES, "trajectories"):
                tx.execute(
                    f"DELETE FROM {table} WHERE run_id = ? AND trajectory_id = ?",
                    [run_id, trajectory.id],
                )
            batch.insert(tx, run_id)

    def replayed(self, run_id: str) -> dict[str, StoredReplay]:
        """The real sides stored by :meth:`write_replayed` and not yet completed, by id."""
        rows = self.connection.execute(
            """SELECT t.trajectory_id, t.env, t.error, t.real_seconds, o.text, o.exit_code, o.cwd,
                      o.timed_out, o.truncated, o.error, o.latency_ms, o.state
               FROM trajectories t JOIN observations o USING (run_id, trajectory_id)
               WHERE t.run_id = ? AND t.status = 'replayed' AND o.side = 'real'
               ORDER BY t.trajectory_id, o.depth""",
            [run_id],
        ).fetchall()
        result: dict[str, StoredReplay] = {}
        for tid, env, error, seconds, text, code, cwd, timed_out, cut, obs_error, ms, state in rows:
            if tid not in result:
                initial = json.loads(env).get("initial_observation")
                result[tid] = StoredReplay(initial, [], seconds or 0.0, error)
            observation = stored_observation(text, code, cwd, timed_out, cut, obs_error, state)
            result[tid].real.append(TimedObservation(observation, ms))
        for tid, outcome in self._real_outcomes(run_id, list(result)).items():
            result[tid].outcome = outcome
        return result

    def _real_outcomes(self, run_id: str, ids: list[str]) -> dict[str, RealOutcome]:
        """The real outcomes stored for trajectories *ids* of *run_id* (those checked)."""
        from fidelity.outcomes import RealOutcome

        if not ids:
            return {}
        rows = self.connection.execute(
            """SELECT trajectory_id, real_status, real_reason, check_exit_code, check_seconds,
                      check_output
               FROM outcomes WHERE run_id = ? AND real_status IS NOT NULL
                 AND list_contains(?, trajectory_id)""",
            [run_id, ids],
        ).fetchall()
        return {
            tid: RealOutcome(
                status=status, reason=reason, exit_code=code, seconds=seconds, output=output or ""
            )
            for tid, status, reason, code, seconds, output in rows
        }

    def write_trajectory(self, run_id: str, record: TrajectoryRecord) -> None:
        """Store one audited trajectory atomically (replacing earlier partial rows)."""
        self.write_trajectories(run_id, [record])

    def write_trajectories(self, run_id: str, records: Sequence[TrajectoryRecord]) -> None:
        """Store *records* in one transaction, in bulk (replacing rows they had before).

        Either every record is stored whole or none is.
        """
        if not records:
            return
        batch = _Batch()
        now = _now()
        for record in records:
            batch.add_record(record, now)
        self.write_rows(run_id, [record.trajectory.id for record in records], batch)

    def write_rows(self, run_id: str, ids: list[str], batch: _Batch) -> None:
        """Store the rows of trajectories *ids* held by *batch*, in one transaction (replacing
        rows they had before)."""
        self.commit_rows(self.stage_rows(run_id, ids, batch))

    def stage_rows(self, run_id: str, ids: list[str], batch: _Batch) -> duckdb.DuckDBPyConnection:
        """Insert the rows of trajectories *ids* held by *batch* (deleting rows they had
        before) in a new transaction on a cursor of its own, and return that cursor with the
        transaction still open: :meth:`commit_rows` ends it, from any thread. On an error
        nothing is kept (closing the cursor rolls the transaction back)."""
        cursor = self.cursor()
        try:
            with self._writing("write to"):
                cursor.begin()
                _delete_stored(cursor, run_id, ids)
                batch.insert(cursor, run_id)
        except BaseException:
            cursor.close()
            raise
        return cursor

    def merge_shards(self, run_id: str, folders: Sequence[Path]) -> int:
        """Store the trajectories of the Parquet shards in *folders* (see
        :mod:`fidelity.store_shards`) as run *run_id*'s, in one transaction on a cursor of
        its own (replacing rows they had before, ``trajectories`` last), then delete the
        shards. Returns how many trajectories were stored; on an error nothing is kept
        and the shards stay."""
        if not folders:
            return 0
        files = {table: _parquet_list(folders, table) for table in WRITTEN}
        # A trajectory in two shards (a task Ray retried after its first attempt had written
        # one, both left over) is taken from one of them only.
        chosen = (
            "SELECT trajectory_id, max(parse_dirpath(filename)) AS shard "
            f"FROM read_parquet({files['trajectories']}, filename = true) GROUP BY ALL"
        )
        with self._writing("merge shards into"), self.cursor() as cursor:
            cursor.begin()
            # the choice is made once (a temporary table of this cursor's transaction), not
            # by re-reading every shard's trajectories file in each table's insert
            cursor.execute(f"CREATE TEMP TABLE _fidelity_chosen AS {chosen}")
            rows = cursor.execute("SELECT trajectory_id FROM _fidelity_chosen").fetchall()
            _delete_stored(cursor, run_id, [row[0] for row in rows])
            for table in WRITTEN:
                names = ", ".join(name for name in COLUMNS[table] if name != "run_id")
                cursor.execute(
                    f"INSERT INTO {table} (run_id, {names}) SELECT ?, {names} "
                    f"FROM read_parquet({files[table]}, filename = true) AS p "
                    "SEMI JOIN _fidelity_chosen AS c ON p.trajectory_id = c.trajectory_id "
                    "AND parse_dirpath(p.filename) = c.shard",
                    [run_id],
                )
            cursor.execute("DROP TABLE _fidelity_chosen")
            cursor.commit()
        for folder in folders:
            shutil.rmtree(folder)
        return len(rows)

    def commit_rows(self, cursor: duckdb.DuckDBPyConnection) -> None:
        """Commit the transaction :meth:`stage_rows` left open on *cursor*, and close the
        cursor (a failed commit keeps nothing of the transaction)."""
        with self._writing("write to"), cursor:
            cursor.commit()

    def write_judgments(
        self, run_id: str, judge: dict[str, str], records: Sequence[JudgmentRecord]
    ) -> None:
        """Store judgments of *run_id*'s steps in one transaction (replacing earlier ones)."""
        if not records:
            return
        now, config = _now(), json.dumps(judge, sort_keys=True)
        rows = [
            [
                run_id,
                r.trajectory_id,
                r.depth,
                r.mode,
                r.sample,
                config,
                json.dumps(r.scores, sort_keys=True) if r.scores is not None else None,
                r.overall,
                r.error,
                r.raw,
                now,
            ]
            for r in records
        ]
        with self._writing("write to"), self.transaction() as tx:
            tx.executemany(
                "DELETE FROM judgments WHERE run_id = ? AND trajectory_id = ? AND depth = ? "
                "AND mode = ? AND sample = ?",
                [row[:5] for row in rows],
            )
            _insert_rows(tx, "judgments", rows)


def _delete_stored(cursor: duckdb.DuckDBPyConnection, run_id: str, ids: list[str]) -> None:
    """Delete every row the trajectories *ids* of *run_id* have stored (``trajectories`` last),
    in the transaction open on *cursor*; a trajectory not yet stored costs one lookup."""
    stored = cursor.execute(
        "SELECT trajectory_id FROM trajectories WHERE run_id = ? "
        "AND trajectory_id IN (SELECT unnest(?::VARCHAR[]))",
        [run_id, ids],
    ).fetchall()
    if stored:
        again = [row[0] for row in stored]
        for table in (*_PER_TRAJECTORY_TABLES, "trajectories"):
            cursor.execute(
                f"DELETE FROM {table} WHERE run_id = ? "
                "AND trajectory_id IN (SELECT unnest(?::VARCHAR[]))",
                [run_id, again],
            )


def _parquet_list(folders: Sequence[Path], table: str) -> str:
    """The SQL list literal of *table*'s Parquet file in each shard folder (``read_parquet``
    takes no query parameter for its files)."""
    return "[" + ", ".join(sql_string(folder / f"{table}.parquet") for folder in folders) + "]"


def sql_string(path: Path) -> str:
    """*path* as a SQL string literal (quotes doubled), for the statements that take no
    parameter there (``read_parquet``'s files, ``COPY … TO``)."""
    return "'" + str(path).replace("'", "''") + "'"


_CATALOG = "fidelity"
"""The name a writable store's file is attached under (see :func:`_attached`)."""


def _attached(path: Path) -> duckdb.DuckDBPyConnection:
    """A writable connection to the store file at *path*: an in-memory database with the
    file attached (the only way to give its new row groups :data:`ROW_GROUP_SIZE`) and
    used, so the tables keep their plain names; the writer's settings applied."""
    connection = duckdb.connect(config={"threads": WRITER_THREADS})
    try:
        connection.execute(
            f"ATTACH {sql_string(path)} AS {_CATALOG} (ROW_GROUP_SIZE {ROW_GROUP_SIZE})"
        )
        connection.execute(f"USE {_CATALOG}")
        connection.execute(f"SET checkpoint_threshold = '{CHECKPOINT_THRESHOLD}'")
    except BaseException:
        connection.close()
        raise
    return connection


_LOCK_HOLDER = re.compile(r"Conflicting lock is held in .*?\(PID (\d+)\)")
"""DuckDB's words for a file another process has open for writing (its PID)."""


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
