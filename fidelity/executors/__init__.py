"""Where trajectory tasks run: local threads (default) or a Ray cluster.

Every executor takes :class:`~fidelity.task.TrajectoryTask` objects and hands
each :class:`~fidelity.store.TrajectoryRecord` to a callback on the driver as
soon as it is done (the caller stores it), so an interrupted run keeps every
record already handed over and a resumed run redoes only the rest.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from fidelity.defaults import SANDBOX_CONCURRENCY, SIM_CONCURRENCY
from fidelity.executors.base import Executor, RecordCallback, ShardSink
from fidelity.executors.local import LocalExecutor
from fidelity.task import Progress

if TYPE_CHECKING:
    from fidelity.store import Store

__all__ = [
    "Executor",
    "ExecutorConfig",
    "LocalExecutor",
    "RecordCallback",
    "ShardSink",
    "get_executor",
]


class ExecutorConfig(BaseModel):
    """Which executor runs the tasks, and how wide."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["local", "ray"] = "local"
    threads: int = Field(
        default=SANDBOX_CONCURRENCY, ge=1, description="local: concurrent sandboxes"
    )
    sim_concurrency: int = Field(
        default=SIM_CONCURRENCY, ge=1, description="predictions in flight at once"
    )
    ray_address: str | None = Field(
        default=None, description="ray: the cluster to join (None: start a local one)"
    )
    results: Literal["driver", "parquet"] = Field(
        default="driver",
        description="ray: records come back to the driver, which stores them (driver), or "
        "workers write the store's rows as Parquet shards that the driver's DuckDB merges",
    )
    results_dir: Path | None = Field(
        default=None,
        description="ray parquet: where shards go, a folder every node sees at the same path "
        "(None: <db>.parts next to the database); each run's under <results_dir>/<run id>",
    )

    def shard_folder(self, db: Path, run_id: str) -> Path | None:
        """Where run *run_id*'s Parquet shards go (absolute: workers run elsewhere), or None
        when records come back to the driver."""
        if self.type != "ray" or self.results != "parquet":
            return None
        return (self.results_dir or db.with_name(f"{db.name}.parts")).absolute() / run_id

    def merge_left_over(self, store: Store, db: Path, run_id: str) -> None:
        """Merge the shards of run *run_id* whose receipt never came (an interrupted attempt,
        a retried task), see :func:`fidelity.store_shards.merge_left_over`; then remove the
        default ``<db>.parts`` once no run's shards are left in it (a ``results_dir`` the
        user named is theirs, and stays). Nothing to do when records come to the driver."""
        folder = self.shard_folder(db, run_id)
        if folder is None:
            return
        from fidelity.store_shards import merge_left_over

        merge_left_over(store, run_id, folder)
        if self.results_dir is None and folder.parent.is_dir():
            with contextlib.suppress(OSError):  # not empty: another run's shards wait there
                folder.parent.rmdir()


def get_executor(config: ExecutorConfig, progress: Progress | None = None) -> Executor:
    """The executor *config* names (Ray is imported only when chosen)."""
    if config.type == "ray":
        from fidelity.executors.ray import RayExecutor

        executor: Executor = RayExecutor(config.ray_address, config.sim_concurrency, progress)
        return executor
    return LocalExecutor(config.threads, config.sim_concurrency, progress)
