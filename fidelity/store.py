"""DuckDB store: runs, trajectories, steps, real and sim observations, comparisons.

Every trajectory of a run is written in one transaction (replacing any rows it
had), and its row in ``trajectories`` is marked ``done`` last. An interrupted
audit therefore leaves only whole trajectories behind, and re-running it with
the same run id redoes exactly the trajectories that are not ``done``.

The store owns its schema: :data:`_SCHEMA` is version 1 as first shipped, and
:data:`MIGRATIONS` upgrade a file in place, one numbered step at a time (the
version is kept in ``meta.schema_version``); a file newer than this code is
refused. Rows are written by column name, in bulk (one DataFrame per table per
batch of trajectories), and read back through the query functions of
:mod:`fidelity.store_queries`, the only other module that holds SQL.

An audit whose world model needs every real replay first (the retrieval
baseline) stores each replay as it completes (status ``replayed``: real side
only); a resumed run reuses them instead of replaying again. A run records the
process that owns it (``owner_pid``, ``owner_host``): a run still ``running``
whose owner is gone from this host (killed with SIGKILL, or the machine lost
power) is shown as ``dead``.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas
from pydantic import TypeAdapter

from fidelity.compare.base import StepComparison
from fidelity.errors import NotADatabaseError, NotFoundError, StoreError
from fidelity.model import Action, Observation, Trajectory

DEFAULT_DB = "fidelity.duckdb"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    started_at TIMESTAMP NOT NULL,
    finished_at TIMESTAMP,
    status VARCHAR NOT NULL,
    domain VARCHAR NOT NULL,
    sandbox VARCHAR NOT NULL,
    world_model JSON NOT NULL,
    mode VARCHAR NOT NULL,
    suite VARCHAR NOT NULL,
    suite_digest VARCHAR NOT NULL,
    code_version VARCHAR NOT NULL,
    config JSON NOT NULL
);
CREATE TABLE IF NOT EXISTS trajectories (
    run_id VARCHAR NOT NULL,
    trajectory_id VARCHAR NOT NULL,
    domain VARCHAR NOT NULL,
    env JSON NOT NULL,
    n_steps INTEGER NOT NULL,
    status VARCHAR NOT NULL,
    error VARCHAR,
    real_seconds DOUBLE,
    sim_seconds DOUBLE,
    finished_at TIMESTAMP,
    PRIMARY KEY (run_id, trajectory_id)
);
CREATE TABLE IF NOT EXISTS steps (
    run_id VARCHAR NOT NULL,
    trajectory_id VARCHAR NOT NULL,
    depth INTEGER NOT NULL,
    action_type VARCHAR NOT NULL,
    action_name VARCHAR NOT NULL,
    action VARCHAR NOT NULL,
    action_json JSON NOT NULL,
    control JSON,
    PRIMARY KEY (run_id, trajectory_id, depth)
);
CREATE TABLE IF NOT EXISTS observations (
    run_id VARCHAR NOT NULL,
    trajectory_id VARCHAR NOT NULL,
    depth INTEGER NOT NULL,
    side VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    sample INTEGER NOT NULL,
    text VARCHAR NOT NULL,
    exit_code INTEGER,
    cwd VARCHAR,
    timed_out BOOLEAN NOT NULL,
    truncated BOOLEAN NOT NULL,
    error VARCHAR,
    latency_ms DOUBLE,
    state JSON,
    PRIMARY KEY (run_id, trajectory_id, depth, side, mode, sample)
);
CREATE TABLE IF NOT EXISTS comparisons (
    run_id VARCHAR NOT NULL,
    trajectory_id VARCHAR NOT NULL,
    depth INTEGER NOT NULL,
    mode VARCHAR NOT NULL,
    sample INTEGER NOT NULL,
    domain VARCHAR NOT NULL,
    score DOUBLE NOT NULL,
    drift BOOLEAN NOT NULL,
    infra_failure BOOLEAN NOT NULL,
    exit_match BOOLEAN,
    metrics JSON NOT NULL,
    hallucinations VARCHAR[] NOT NULL,
    omissions VARCHAR[] NOT NULL,
    stale VARCHAR[] NOT NULL,
    normalizations JSON NOT NULL,
    reasons VARCHAR[] NOT NULL,
    PRIMARY KEY (run_id, trajectory_id, depth, mode, sample)
);
CREATE TABLE IF NOT EXISTS judgments (
    run_id VARCHAR NOT NULL,
    trajectory_id VARCHAR NOT NULL,
    depth INTEGER NOT NULL,
    mode VARCHAR NOT NULL,
    sample INTEGER NOT NULL,
    judge JSON NOT NULL,
    scores JSON,
    overall DOUBLE,
    error VARCHAR,
    raw VARCHAR,
    judged_at TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, trajectory_id, depth, mode, sample)
);
"""


@dataclass(frozen=True)
class Migration:
    """One schema step: from ``version - 1`` to ``version``."""

    version: int
    description: str
    statements: tuple[str, ...]


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        2,
        "observations.state and steps.control (added in place while the version stayed 1)",
        (
            "ALTER TABLE observations ADD COLUMN IF NOT EXISTS state JSON",
            "ALTER TABLE steps ADD COLUMN IF NOT EXISTS control JSON",
        ),
    ),
    Migration(
        3,
        "runs.owner_pid and runs.owner_host (a running run whose owner is gone shows as dead)",
        (
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS owner_pid INTEGER",
            "ALTER TABLE runs ADD COLUMN IF NOT EXISTS owner_host VARCHAR",
        ),
    ),
)
"""Every schema change since version 1, in order. Add a change as the next entry."""

ACTION: TypeAdapter[Action] = TypeAdapter(Action)

SCHEMA_VERSION = MIGRATIONS[-1].version if MIGRATIONS else 1

COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": (
        "run_id", "started_at", "finished_at", "status", "domain", "sandbox", "world_model",
        "mode", "suite", "suite_digest", "code_version", "config", "owner_pid", "owner_host",
    ),
    "trajectories": (
        "run_id", "trajectory_id", "domain", "env", "n_steps", "status", "error",
        "real_seconds", "sim_seconds", "finished_at",
    ),
    "steps": (
        "run_id", "trajectory_id", "depth", "action_type", "action_name", "action",
        "action_json", "control",
    ),
    "observations": (
        "run_id", "trajectory_id", "depth", "side", "mode", "sample", "text", "exit_code",
        "cwd", "timed_out", "truncated", "error", "latency_ms", "state",
    ),
    "comparisons": (
        "run_id", "trajectory_id", "depth", "mode", "sample", "domain", "score", "drift",
        "infra_failure", "exit_match", "metrics", "hallucinations", "omissions", "stale",
        "normalizations", "reasons",
    ),
    "judgments": (
        "run_id", "trajectory_id", "depth", "mode", "sample", "judge", "scores", "overall",
        "error", "raw", "judged_at",
    ),
}  # fmt: skip
"""The columns each writer fills, by name (the insert order never depends on the table's)."""

# judgments go too: a re-audited trajectory's old judgments no longer describe its steps
_PER_TRAJECTORY_TABLES = ("steps", "observations", "comparisons", "judgments")


@dataclass
class TimedObservation:
    """An observation and how long it took to obtain."""

    observation: Observation
    latency_ms: float | None = None


@dataclass
class SimVariant:
    """One more simulation of a trajectory: another mode, or another sample (draw)."""

    mode: str
    sample: int
    sim: list[TimedObservation]
    comparisons: list[StepComparison]


@dataclass
class TrajectoryRecord:
    """Everything one audited trajectory adds to the store.

    ``sim``/``comparisons`` are sample 0 of ``mode``; an audit drawing several
    samples or running both modes adds the other draws as ``extra`` variants.
    """

    trajectory: Trajectory
    real: list[TimedObservation]
    sim: list[TimedObservation]
    comparisons: list[StepComparison]
    mode: str
    real_seconds: float
    sim_seconds: float
    error: str | None = None
    extra: list[SimVariant] = field(default_factory=list)

    def variants(self) -> list[SimVariant]:
        """Every simulation of the trajectory, the first one included."""
        return [SimVariant(self.mode, 0, self.sim, self.comparisons), *self.extra]


class RecordBuffer:
    """Records waiting to be stored together (one bulk transaction per batch).

    A batch is written once it holds *size* records or *seconds* have passed
    since the last write, and by :meth:`flush` (call it in ``finally``): slow
    trajectories (real sandboxes) are stored as each one ends, fast streams in
    bulk. A killed process loses at most the unflushed batch, which a resumed
    run redoes.
    """

    def __init__(self, store: Store, run_id: str, size: int = 256, seconds: float = 1.0) -> None:
        self.store = store
        self.run_id = run_id
        self.size = size
        self.seconds = seconds
        self.pending: list[TrajectoryRecord] = []
        self.written = 0
        self._last = time.monotonic()

    def add(self, record: TrajectoryRecord) -> None:
        """Queue *record*; writes the batch when it is full or old enough."""
        self.pending.append(record)
        if len(self.pending) >= self.size or time.monotonic() - self._last >= self.seconds:
            self.flush()

    def flush(self) -> None:
        """Write every queued record now (in one transaction)."""
        batch, self.pending = self.pending, []
        self._last = time.monotonic()
        if batch:
            self.store.write_trajectories(self.run_id, batch)
            self.written += len(batch)


@dataclass
class ReplayedRecord:
    """The real side of one trajectory, stored before it is simulated (see :meth:`Store.write_replayed`)."""

    trajectory: Trajectory
    real: list[TimedObservation]
    real_seconds: float
    error: str | None = None


@dataclass
class StoredReplay:
    """A real side read back from the store: the start page shown, then every step."""

    initial_observation: str | None
    real: list[TimedObservation]
    real_seconds: float
    error: str | None = None


def run_status(status: str, owner_pid: int | None, owner_host: str | None) -> str:
    """*status* as it stands: a ``running`` run whose owner process is gone from this host
    is ``dead`` (it was killed without a chance to say so). A run owned by another host,
    or recorded before owners were, keeps its status: it cannot be checked from here.
    """
    if status != "running" or owner_pid is None or owner_host != socket.gethostname():
        return status
    return status if _alive(owner_pid) else "dead"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True


@dataclass
class JudgmentRecord:
    """An LLM judge's verdict on one compared step: scores, or the error that replaced them."""

    trajectory_id: str
    depth: int
    mode: str
    sample: int
    scores: dict[str, float] | None
    overall: float | None
    error: str | None = None
    raw: str | None = None


class Store:
    """A DuckDB file holding every run. Use as a context manager."""

    def __init__(self, path: str | os.PathLike[str] = DEFAULT_DB, read_only: bool = False) -> None:
        self.path = Path(path)
        if read_only and not self.path.exists():
            raise NotFoundError(f"{self.path}: no such database (run `fidelity audit` first)")
        try:
            self.connection = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as exc:
            if "not a valid DuckDB database file" in str(exc):
                raise NotADatabaseError(
                    f"{self.path}: not a DuckDB database (pass --db with a fidelity database, "
                    "or a new file name)"
                ) from None
            raise StoreError(f"{self.path}: cannot open database ({_first_line(exc)})") from None
        if not read_only:
            with self._writing("create the schema in"):
                self._migrate()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (flushes the write-ahead log)."""
        self.connection.close()

    def _migrate(self) -> None:
        """Create the version-1 tables if missing, then apply every migration not yet applied."""
        self.connection.execute(_SCHEMA)
        version = self.schema_version()
        if version is None:
            self.connection.execute("INSERT INTO meta VALUES ('schema_version', '1')")
            version = 1
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {version} is newer than this fidelity "
                f"({SCHEMA_VERSION}); upgrade fidelity"
            )
        for migration in MIGRATIONS:
            if migration.version <= version:
                continue
            with self.transaction() as tx:
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
        frame = self.connection.execute(
            f"""
            SELECT r.run_id, r.started_at, r.finished_at, r.status, r.domain, r.sandbox,
                   r.mode, r.world_model, count(c.score) AS steps,
                   avg(CASE WHEN c.infra_failure THEN NULL ELSE c.drift::INT END) AS drift_rate,
                   {self._owner_columns()}
            FROM runs r LEFT JOIN comparisons c USING (run_id)
            GROUP BY ALL ORDER BY r.started_at DESC
            """
        ).fetchall()
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
        runs = [dict(zip(keys, row, strict=True)) for row in frame]
        for run in runs:
            run["world_model"] = json.loads(run["world_model"])
            run["status"] = run_status(run["status"], run["owner_pid"], run["owner_host"])
        return runs

    def _owner_columns(self) -> str:
        """The owner columns, or NULLs in a file written before they existed and opened
        read-only (only a writable open adds them)."""
        present = self.connection.execute(
            "SELECT count(*) FROM information_schema.columns "
            "WHERE table_name = 'runs' AND column_name IN ('owner_pid', 'owner_host')"
        ).fetchone()
        if present is not None and present[0] == 2:
            return "r.owner_pid, r.owner_host"
        return "NULL::INTEGER AS owner_pid, NULL::VARCHAR AS owner_host"

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
        for trajectory_id, text, exit_code, cwd, timed_out, truncated, error, state in rows:
            result.setdefault(trajectory_id, []).append(
                Observation(
                    text=text,
                    exit_code=exit_code,
                    cwd=cwd,
                    timed_out=timed_out,
                    truncated=truncated,
                    error=error,
                    state=json.loads(state) if state is not None else None,
                )
            )
        return result

    def write_replayed(self, run_id: str, record: ReplayedRecord) -> None:
        """Store the real side of one trajectory (status ``replayed``), before its simulation.

        :meth:`write_trajectory` replaces it once the trajectory is simulated and compared.
        """
        trajectory = record.trajectory
        key = [run_id, trajectory.id]
        with self._writing("write to"), self.transaction() as tx:
            for table in (*_PER_TRAJECTORY_TABLES, "trajectories"):
                tx.execute(f"DELETE FROM {table} WHERE run_id = ? AND trajectory_id = ?", key)
            _insert_rows(tx, "steps", _step_rows(run_id, trajectory))
            _insert_rows(
                tx,
                "observations",
                _observation_rows(run_id, trajectory.id, "real", "real", 0, record.real),
            )
            _insert_rows(
                tx,
                "trajectories",
                [
                    (
                        *key,
                        trajectory.domain.value,
                        trajectory.env.model_dump_json(),
                        len(trajectory.steps),
                        "replayed",
                        record.error,
                        record.real_seconds,
                        None,
                        _now(),
                    )
                ],
            )

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
            observation = Observation(
                text=text,
                exit_code=code,
                cwd=cwd,
                timed_out=timed_out,
                truncated=cut,
                error=obs_error,
                state=json.loads(state) if state is not None else None,
            )
            result[tid].real.append(TimedObservation(observation, ms))
        return result

    def write_trajectory(self, run_id: str, record: TrajectoryRecord) -> None:
        """Store one audited trajectory atomically (replacing earlier partial rows)."""
        self.write_trajectories(run_id, [record])

    def write_trajectories(self, run_id: str, records: Sequence[TrajectoryRecord]) -> None:
        """Store *records* in one transaction, in bulk (replacing rows they had before).

        Either every record is stored whole or none is.
        """
        if not records:
            return
        rows: dict[str, list[Sequence[Any]]] = {table: [] for table in _WRITTEN}
        now = _now()
        for record in records:
            _record_rows(run_id, record, now, rows)
        ids = [record.trajectory.id for record in records]
        with self._writing("write to"), self.transaction() as tx:
            stored = tx.execute(
                "SELECT trajectory_id FROM trajectories WHERE run_id = ? "
                "AND trajectory_id IN (SELECT unnest(?::VARCHAR[]))",
                [run_id, ids],
            ).fetchall()
            if stored:
                again = [row[0] for row in stored]
                for table in (*_PER_TRAJECTORY_TABLES, "trajectories"):
                    tx.execute(
                        f"DELETE FROM {table} WHERE run_id = ? "
                        "AND trajectory_id IN (SELECT unnest(?::VARCHAR[]))",
                        [run_id, again],
                    )
            for table in _WRITTEN:
                _insert_rows(tx, table, rows[table])

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


_WRITTEN = ("steps", "observations", "comparisons", "trajectories")
"""The tables a trajectory writes, ``trajectories`` (its ``done`` mark) last."""


def _record_rows(
    run_id: str, record: TrajectoryRecord, now: datetime, rows: dict[str, list[Sequence[Any]]]
) -> None:
    """Append the rows of *record* to *rows* (by table)."""
    trajectory = record.trajectory
    rows["steps"] += _step_rows(run_id, trajectory)
    rows["observations"] += _observation_rows(run_id, trajectory.id, "real", "real", 0, record.real)
    for variant in record.variants():
        if not variant.sim and not variant.comparisons:
            continue  # a replay-only record simulated nothing
        rows["observations"] += _observation_rows(
            run_id, trajectory.id, "sim", variant.mode, variant.sample, variant.sim
        )
        rows["comparisons"] += _comparison_rows(
            run_id, trajectory, variant.mode, variant.sample, variant.comparisons
        )
    rows["trajectories"].append(
        (
            run_id,
            trajectory.id,
            trajectory.domain.value,
            trajectory.env.model_dump_json(),
            len(trajectory.steps),
            "failed" if record.error else "done",
            record.error,
            record.real_seconds,
            record.sim_seconds,
            now,
        )
    )


def _insert_rows(tx: duckdb.DuckDBPyConnection, table: str, rows: Sequence[Sequence[Any]]) -> None:
    """Insert *rows* (in :data:`COLUMNS` order) into *table* by column name, in one statement.

    The rows travel as one DataFrame that DuckDB scans in bulk (numbers natively,
    text as Python objects); parameterised ``VALUES`` or ``executemany`` cost a
    statement per row.
    """
    if not rows:
        return
    columns = COLUMNS[table]
    frame = pandas.DataFrame(
        {
            name: pandas.Series(cells, dtype=_dtype(cells))
            for name, cells in zip(columns, zip(*rows, strict=True), strict=True)
        }
    )
    names = ", ".join(columns)
    view = f"_fidelity_rows_{table}"
    tx.register(view, frame)
    try:
        tx.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {view}")
    finally:
        tx.unregister(view)


def _dtype(cells: tuple[Any, ...]) -> type[object] | None:
    """Numbers and booleans without NULLs scan natively; anything else as Python objects."""
    if isinstance(cells[0], bool | int | float) and None not in cells:
        return None  # pandas infers int64 / float64 / bool
    return object


@functools.lru_cache(maxsize=65_536)
def _action_name(action_json: str) -> str:
    """An action's name, by its JSON (parsing a command line is slow; agents repeat commands)."""
    name: str = ACTION.validate_json(action_json).name
    return name


def _step_rows(run_id: str, trajectory: Trajectory) -> list[Sequence[Any]]:
    return [
        [
            run_id,
            trajectory.id,
            depth,
            step.action.type,
            _action_name(action_json),
            step.action.render(),
            action_json,
            step.control.model_dump_json() if step.control is not None else None,
        ]
        for depth, step in enumerate(trajectory.steps, start=1)
        if (action_json := step.action.model_dump_json())
    ]


def _observation_rows(
    run_id: str,
    trajectory_id: str,
    side: str,
    mode: str,
    sample: int,
    observations: list[TimedObservation],
) -> list[Sequence[Any]]:
    rows: list[Sequence[Any]] = []
    for depth, timed in enumerate(observations, start=1):
        obs = timed.observation
        rows.append(
            [
                run_id,
                trajectory_id,
                depth,
                side,
                mode,
                sample,
                obs.text,
                obs.exit_code,
                obs.cwd,
                obs.timed_out,
                obs.truncated,
                obs.error,
                timed.latency_ms,
                _sorted_json(obs.state) if obs.state is not None else None,
            ]
        )
    return rows


def _comparison_rows(
    run_id: str, trajectory: Trajectory, mode: str, sample: int, comparisons: list[StepComparison]
) -> list[Sequence[Any]]:
    domain, trajectory_id = trajectory.domain.value, trajectory.id
    return [
        [
            run_id,
            trajectory_id,
            depth,
            mode,
            sample,
            domain,
            c.score,
            c.drift,
            c.infra_failure,
            c.exit_match,
            _sorted_json(c.metrics),
            c.hallucinations,
            c.omissions,
            c.stale,
            _sorted_json(c.normalizations),
            c.reasons,
        ]
        for depth, c in enumerate(comparisons, start=1)
    ]


_SORTED_JSON = json.JSONEncoder(sort_keys=True).encode


def _sorted_json(data: Any) -> str:
    """``json.dumps(data, sort_keys=True)``, without building an encoder per call."""
    return _SORTED_JSON(data) if data != {} else "{}"


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
