"""The executor interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fidelity.task import JudgmentCallback

if TYPE_CHECKING:
    from fidelity.pipeline import Replayed
    from fidelity.store import ShardReceipt, TrajectoryRecord
    from fidelity.task import TrajectoryTask
    from fidelity.worldmodels.base import WorldModel

__all__ = ["Executor", "JudgmentCallback", "RecordCallback", "ShardSink"]

RecordCallback = Callable[["TrajectoryRecord"], None]
"""Called on the driver with each finished record (in completion order)."""


@dataclass(frozen=True)
class ShardSink:
    """Where workers may store their records themselves, as Parquet shards under *folder*
    (a path every node sees), and who hears each shard's receipt on the driver."""

    folder: Path
    on_receipt: Callable[[ShardReceipt], None]


class Executor(ABC):
    """Runs trajectory tasks somewhere and hands their records back to the driver."""

    @abstractmethod
    async def run(
        self,
        tasks: Sequence[TrajectoryTask],
        model: WorldModel | None,
        on_record: RecordCallback,
        replayed: Mapping[str, Replayed] | None = None,
        shards: ShardSink | None = None,
        *,
        on_judgment: JudgmentCallback | None = None,
    ) -> None:
        """Run every task; call *on_record* with each record as it finishes.

        *model* is the driver's world model (None: the tasks predict nothing,
        or an executor that builds each task's model from its config where it
        runs). *replayed* gives the real side of trajectories already replayed
        (by id): those tasks only simulate and compare. With *shards*, an executor
        whose workers can write the store's rows where they run (Ray) hands over
        shard receipts instead of records (a record still comes back when its
        worker was lost); the others ignore it. *on_judgment*: where an
        executor can, each judgment of a judging task is handed to it as it is
        answered, and that task's record then carries none (each judgment is
        handed over once); elsewhere they come in the record.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Release threads, workers or cluster connections."""
