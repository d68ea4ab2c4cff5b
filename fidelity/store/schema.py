"""The store's schema: version 1 as first shipped (:data:`_SCHEMA`), every migration since
(:data:`MIGRATIONS`, applied by :meth:`~fidelity.store.core.Store._migrate`), and the columns
each writer fills (:data:`COLUMNS`).

*Adding a column*: a :class:`Migration` entry, the column in :data:`COLUMNS`, the value in
the row builder (``_Batch``).
"""

from __future__ import annotations

from dataclasses import dataclass

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


_STEPS_V4 = """
    run_id VARCHAR NOT NULL,
    trajectory_id VARCHAR NOT NULL,
    depth INTEGER NOT NULL,
    action_type VARCHAR NOT NULL,
    action_name VARCHAR NOT NULL,
    action VARCHAR NOT NULL,
    action_json JSON NOT NULL,
    control JSON
"""
_OBSERVATIONS_V4 = """
    run_id VARCHAR NOT NULL,
    trajectory_id VARCHAR NOT NULL,
    depth INTEGER NOT NULL,
    side VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    sample INTEGER NOT NULL,
    text VARCHAR NOT NULL USING COMPRESSION zstd,
    exit_code INTEGER,
    cwd VARCHAR,
    timed_out BOOLEAN NOT NULL,
    truncated BOOLEAN NOT NULL,
    error VARCHAR,
    latency_ms DOUBLE,
    state JSON
"""
_COMPARISONS_V4 = """
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
    reasons VARCHAR[] NOT NULL
"""


def _rebuilt_tables(tables: dict[str, str]) -> tuple[str, ...]:
    """Statements that rebuild each table with new column definitions, keeping every row
    (DuckDB cannot drop a primary key or change a column's compression in place)."""
    statements: list[str] = []
    for table, columns in tables.items():
        statements += [
            f"CREATE TABLE {table}_new ({columns})",
            f"INSERT INTO {table}_new BY NAME SELECT * FROM {table}",
            f"DROP TABLE {table}",
            f"ALTER TABLE {table}_new RENAME TO {table}",
        ]
    return tuple(statements)


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
    Migration(
        4,
        "steps, observations and comparisons without a primary key, observation texts zstd"
        "-compressed (bulk writes: no ART index to maintain and checkpoint; a trajectory's "
        "rows stay unique because every writer deletes them before inserting them again)",
        _rebuilt_tables(
            {
                "steps": _STEPS_V4,
                "observations": _OBSERVATIONS_V4,
                "comparisons": _COMPARISONS_V4,
            }
        ),
    ),
    Migration(
        5,
        "outcomes: per trajectory, the claimed outcome and the real one (env.check)",
        (
            """CREATE TABLE IF NOT EXISTS outcomes (
    run_id VARCHAR NOT NULL,
    trajectory_id VARCHAR NOT NULL,
    claimed_success BOOLEAN,
    claimed_reward DOUBLE,
    claimed_by VARCHAR,
    real_status VARCHAR,
    real_reason VARCHAR,
    check_exit_code INTEGER,
    check_seconds DOUBLE,
    check_output VARCHAR
)""",
        ),
    ),
    Migration(
        6,
        "comparisons.hallucination_count and omission_count: the lists hold every item in "
        "rank order (no longer the first ten only), their lengths beside them (NULL on rows "
        "written before: their lists may have been cut at ten)",
        (
            "ALTER TABLE comparisons ADD COLUMN IF NOT EXISTS hallucination_count INTEGER",
            "ALTER TABLE comparisons ADD COLUMN IF NOT EXISTS omission_count INTEGER",
        ),
    ),
    Migration(
        7,
        "trajectories.task: the trajectory's instruction, system prompt and the meta the "
        "world model's prompt reads (NULL on rows written before), so that an export "
        "rebuilds the exact prompts without the suite",
        ("ALTER TABLE trajectories ADD COLUMN IF NOT EXISTS task JSON",),
    ),
)
"""Every schema change since version 1, in order. Add a change as the next entry."""


SCHEMA_VERSION = MIGRATIONS[-1].version if MIGRATIONS else 1

COLUMNS: dict[str, tuple[str, ...]] = {
    "runs": (
        "run_id", "started_at", "finished_at", "status", "domain", "sandbox", "world_model",
        "mode", "suite", "suite_digest", "code_version", "config", "owner_pid", "owner_host",
    ),
    "trajectories": (
        "run_id", "trajectory_id", "domain", "env", "n_steps", "status", "error",
        "real_seconds", "sim_seconds", "finished_at", "task",
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
        "normalizations", "reasons", "hallucination_count", "omission_count",
    ),
    "judgments": (
        "run_id", "trajectory_id", "depth", "mode", "sample", "judge", "scores", "overall",
        "error", "raw", "judged_at",
    ),
    "outcomes": (
        "run_id", "trajectory_id", "claimed_success", "claimed_reward", "claimed_by",
        "real_status", "real_reason", "check_exit_code", "check_seconds", "check_output",
    ),
}  # fmt: skip
"""The columns each writer fills, by name (the insert order never depends on the table's)."""

# judgments go too: a re-audited trajectory's old judgments no longer describe its steps
_PER_TRAJECTORY_TABLES = ("steps", "observations", "comparisons", "judgments", "outcomes")


WRITTEN = ("steps", "observations", "comparisons", "outcomes", "trajectories")
"""The tables a trajectory writes, ``trajectories`` (its ``done`` mark) last."""
