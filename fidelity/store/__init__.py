"""The DuckDB store: runs, trajectories, steps, real and sim observations, comparisons.

The store and how it writes and reads are described in :mod:`fidelity.store.core`. Every
name other modules use is importable from here.
"""

from __future__ import annotations

from fidelity.store.core import (
    COLUMNS,
    DEFAULT_DB,
    MIGRATIONS,
    SCHEMA_VERSION,
    WRITTEN,
    JudgmentRecord,
    Migration,
    RecordBuffer,
    ReplayedRecord,
    ShardReceipt,
    SimVariant,
    Store,
    StoredReplay,
    TimedObservation,
    TrajectoryRecord,
    action_adapter,
    run_status,
    sql_string,
)

# internals that tests and benchmarks/store_writes.py reach through this package
from fidelity.store.core import _Batch as _Batch
from fidelity.store.core import _insert_columns as _insert_columns
from fidelity.store.core import _now as _now
from fidelity.store.core import _sorted_json as _sorted_json
from fidelity.store.core import _Writer as _Writer

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
]
