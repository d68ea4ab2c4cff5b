"""The DuckDB store: runs, trajectories, steps, real and sim observations, comparisons.

The store and how it writes and reads are described in :mod:`fidelity.store.core`. Every
name other modules use is importable from here, and so are the internals that tests and
``benchmarks/store_writes.py`` reach (``_Batch``, ``_Writer``, ``_insert_columns``, ...).
"""

from __future__ import annotations

from fidelity.defaults import DEFAULT_DB
from fidelity.store.core import Store, run_status, sql_string
from fidelity.store.records import (
    JudgmentRecord,
    ReplayedRecord,
    ShardReceipt,
    SimVariant,
    StoredReplay,
    TimedObservation,
    TrajectoryRecord,
    action_adapter,
    stored_observation,
)
from fidelity.store.rows import _Batch as _Batch
from fidelity.store.rows import _insert_columns as _insert_columns
from fidelity.store.rows import _now as _now
from fidelity.store.rows import _sorted_json as _sorted_json
from fidelity.store.schema import COLUMNS, MIGRATIONS, SCHEMA_VERSION, WRITTEN, Migration
from fidelity.store.writer import RecordBuffer
from fidelity.store.writer import _Writer as _Writer

__all__ = [
    "COLUMNS",
    "DEFAULT_DB",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "WRITTEN",
    "JudgmentRecord",
    "Migration",
    "RecordBuffer",
    "ReplayedRecord",
    "ShardReceipt",
    "SimVariant",
    "Store",
    "StoredReplay",
    "TimedObservation",
    "TrajectoryRecord",
    "action_adapter",
    "run_status",
    "sql_string",
    "stored_observation",
]
