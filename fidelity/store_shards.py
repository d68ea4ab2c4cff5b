"""Trajectory rows as Parquet shards: written where a Ray task ran, merged by the driver.

With ``--executor ray --ray-results parquet`` a worker turns its records into the
store's rows with the store's own code (:meth:`Store.write_trajectories` into an
in-memory store) and has DuckDB copy each table to one Parquet file of a shard
folder. The folder is written under a temporary name and renamed when complete,
so a shard either exists whole or not at all. The worker returns only a
:class:`ShardReceipt`; the driver's :class:`~fidelity.store.RecordBuffer` merges
shards in batches (:meth:`Store.merge_shards`: DuckDB reads the Parquet, one
transaction per batch, the shards deleted once committed).

Shards whose receipt never reached the driver (the run was interrupted, or Ray
retried a task whose first attempt had finished writing) are merged by
:func:`merge_left_over`, which an audit calls before it lists what is left to do
and again once its tasks have ended: an interrupted run's finished work is kept,
and a merge replaces the rows a trajectory had, so nothing is stored twice.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path

from fidelity.store import WRITTEN, ShardReceipt, Store, TrajectoryRecord, sql_string

__all__ = ["MERGE_BATCH", "PARTIAL", "ShardReceipt", "merge_left_over", "write_shard"]

PARTIAL = ".partial-"
"""The name prefix of a shard folder still being written."""

MERGE_BATCH = 256
"""Shards merged per transaction by :func:`merge_left_over`."""


def write_shard(records: Sequence[TrajectoryRecord], root: Path) -> ShardReceipt:
    """Write *records* as one shard under *root* (created if missing); its receipt."""
    name = secrets.token_hex(8)
    partial = root / f"{PARTIAL}{name}"
    partial.mkdir(parents=True)
    with Store(":memory:") as scratch:
        scratch.write_trajectories("shard", records)
        for table in WRITTEN:  # one Parquet file each: <table>.parquet
            scratch.connection.execute(
                f"COPY (SELECT * EXCLUDE (run_id) FROM {table}) "
                f"TO {sql_string(partial / f'{table}.parquet')} (FORMAT parquet)"
            )
    folder = root / name
    partial.rename(folder)
    return ShardReceipt(
        folder=folder,
        trajectory_ids=[record.trajectory.id for record in records],
        failed={r.trajectory.id: r.error for r in records if r.error is not None},
    )


def merge_left_over(store: Store, run_id: str, root: Path) -> int:
    """Merge every complete shard left under *root* into run *run_id*, delete the partial
    ones (their task was killed mid-write; it is retried or redone), and remove *root*
    once empty. Returns how many trajectories were merged."""
    if not root.is_dir():
        return 0
    complete: list[Path] = []
    for entry in sorted(root.iterdir()):
        if entry.name.startswith(PARTIAL):
            shutil.rmtree(entry)
        elif entry.is_dir():
            complete.append(entry)
    merged = sum(
        store.merge_shards(run_id, complete[start : start + MERGE_BATCH])
        for start in range(0, len(complete), MERGE_BATCH)
    )
    if not any(root.iterdir()):
        root.rmdir()
    return merged
