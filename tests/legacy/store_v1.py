# ruff: noqa
# type: ignore
# The store module exactly as it shipped with schema version 1 (fidelity 0.1.0, commit 30a4cdb):
# tests write a database with it and check that today's store upgrades it in place.
"""DuckDB store: runs, trajectories, steps, real and sim observations, comparisons.

Every trajectory of a run is written in one transaction (replacing any rows it
had), and its row in ``trajectories`` is marked ``done`` last. An interrupted
audit therefore leaves only whole trajectories behind, and re-running it with
the same run id redoes exactly the trajectories that are not ``done``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from fidelity.compare.base import StepComparison
from fidelity.errors import NotFoundError, StoreError
from fidelity.trajectory import Observation, Trajectory

SCHEMA_VERSION = 1
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
        except duckdb.IOException as exc:
            raise StoreError(f"{self.path}: cannot open database ({_first_line(exc)})") from exc
        if not read_only:
            self._migrate()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (flushes the write-ahead log)."""
        self.connection.close()

    def _migrate(self) -> None:
        self.connection.execute(_SCHEMA)
        # Added after schema 1 shipped; older files gain it in place (NULL for old rows).
        self.connection.execute("ALTER TABLE observations ADD COLUMN IF NOT EXISTS state JSON")
        self.connection.execute("ALTER TABLE steps ADD COLUMN IF NOT EXISTS control JSON")
        row = self.connection.execute(
            "SELECT value FROM meta WHERE key = 'schema_version'"
        ).fetchone()
        if row is None:
            self.connection.execute(
                "INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
            )
        elif int(row[0]) > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path}: schema version {row[0]} is newer than this fidelity "
                f"({SCHEMA_VERSION}); upgrade fidelity"
            )

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
            self.connection.execute(
                "UPDATE runs SET status = 'running', finished_at = NULL WHERE run_id = ?", [run_id]
            )
            return True
        self.connection.execute(
            """INSERT INTO runs VALUES (?, ?, NULL, 'running', ?, ?, ?, ?, ?, ?, ?, ?)""",
            [
                run_id,
                _now(),
                info["domain"],
                info["sandbox"],
                json.dumps(info["world_model"], sort_keys=True),
                info["mode"],
                info["suite"],
                info["suite_digest"],
                info["code_version"],
                json.dumps(info.get("config", {}), sort_keys=True, default=str),
            ],
        )
        return False

    def finish_run(self, run_id: str, status: str) -> None:
        """Mark *run_id* as ``done``, ``interrupted`` or ``failed``."""
        self.connection.execute(
            "UPDATE runs SET status = ?, finished_at = ? WHERE run_id = ?", [status, _now(), run_id]
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
            """
            SELECT r.run_id, r.started_at, r.finished_at, r.status, r.domain, r.sandbox,
                   r.mode, r.world_model, count(c.score) AS steps,
                   avg(CASE WHEN c.infra_failure THEN NULL ELSE c.drift::INT END) AS drift_rate
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
        ]
        runs = [dict(zip(keys, row, strict=True)) for row in frame]
        for run in runs:
            run["world_model"] = json.loads(run["world_model"])
        return runs

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

    def write_trajectory(self, run_id: str, record: TrajectoryRecord) -> None:
        """Store one audited trajectory atomically (replacing earlier partial rows)."""
        trajectory = record.trajectory
        key = [run_id, trajectory.id]
        with self.transaction() as tx:
            for table in (*_PER_TRAJECTORY_TABLES, "trajectories"):
                tx.execute(f"DELETE FROM {table} WHERE run_id = ? AND trajectory_id = ?", key)
            _insert_rows(tx, "steps", _step_rows(run_id, trajectory))
            observations = _observation_rows(run_id, trajectory.id, "real", "real", 0, record.real)
            comparisons: list[Sequence[Any]] = []
            for variant in record.variants():
                observations += _observation_rows(
                    run_id, trajectory.id, "sim", variant.mode, variant.sample, variant.sim
                )
                comparisons += _comparison_rows(
                    run_id, trajectory, variant.mode, variant.sample, variant.comparisons
                )
            _insert_rows(tx, "observations", observations)
            _insert_rows(tx, "comparisons", comparisons)
            tx.execute(
                "INSERT INTO trajectories VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    *key,
                    trajectory.domain.value,
                    trajectory.env.model_dump_json(),
                    len(trajectory.steps),
                    "failed" if record.error else "done",
                    record.error,
                    record.real_seconds,
                    record.sim_seconds,
                    _now(),
                ],
            )

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
        with self.transaction() as tx:
            tx.executemany(
                "DELETE FROM judgments WHERE run_id = ? AND trajectory_id = ? AND depth = ? "
                "AND mode = ? AND sample = ?",
                [row[:5] for row in rows],
            )
            _insert_rows(tx, "judgments", rows)


_ROWS_PER_INSERT = 500


def _insert_rows(tx: duckdb.DuckDBPyConnection, table: str, rows: Sequence[Sequence[Any]]) -> None:
    """Insert *rows* with a few multi-row ``VALUES`` statements (``executemany`` runs one
    statement per row, several times slower)."""
    for start in range(0, len(rows), _ROWS_PER_INSERT):
        chunk = rows[start : start + _ROWS_PER_INSERT]
        placeholders = "(" + ", ".join("?" * len(chunk[0])) + ")"
        tx.execute(
            f"INSERT INTO {table} VALUES " + ", ".join([placeholders] * len(chunk)),
            [value for row in chunk for value in row],
        )


def _step_rows(run_id: str, trajectory: Trajectory) -> list[Sequence[Any]]:
    return [
        [
            run_id,
            trajectory.id,
            depth,
            step.action.type,
            step.action.name,
            step.action.render(),
            step.action.model_dump_json(),
            step.control.model_dump_json() if step.control is not None else None,
        ]
        for depth, step in enumerate(trajectory.steps, start=1)
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
                json.dumps(obs.state, sort_keys=True) if obs.state is not None else None,
            ]
        )
    return rows


def _comparison_rows(
    run_id: str, trajectory: Trajectory, mode: str, sample: int, comparisons: list[StepComparison]
) -> list[Sequence[Any]]:
    return [
        [
            run_id,
            trajectory.id,
            depth,
            mode,
            sample,
            trajectory.domain.value,
            c.score,
            c.drift,
            c.infra_failure,
            c.exit_match,
            json.dumps(c.metrics, sort_keys=True),
            c.hallucinations,
            c.omissions,
            c.stale,
            json.dumps(c.normalizations, sort_keys=True),
            c.reasons,
        ]
        for depth, c in enumerate(comparisons, start=1)
    ]


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
