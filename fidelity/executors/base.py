"""The executor interface."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fidelity.pipeline import Replayed
    from fidelity.store import JudgmentRecord, TrajectoryRecord
    from fidelity.task import TrajectoryTask
    from fidelity.worldmodels.base import WorldModel

RecordCallback = Callable[["TrajectoryRecord"], None]
"""Called on the driver with each finished record (in completion order)."""

JudgmentCallback = Callable[["JudgmentRecord"], None]
"""Called on the driver's event loop with each judgment as soon as it is answered."""


class Executor(ABC):
    """Runs trajectory tasks somewhere and hands their records back to the driver."""

    @abstractmethod
    async def run(
        self,
        tasks: Sequence[TrajectoryTask],
        model: WorldModel | None,
        on_record: RecordCallback,
        replayed: Mapping[str, Replayed] | None = None,
        *,
        on_judgment: JudgmentCallback | None = None,
    ) -> None:
        """Run every task; call *on_record* with each record as it finishes.

        *model* is the driver's world model (None: the tasks predict nothing,
        or an executor that builds each task's model from its config where it
        runs). *replayed* gives the real side of trajectories already replayed
        (by id): those tasks only simulate and compare. *on_judgment*: where an
        executor can, each judgment of a judging task is handed to it as it is
        answered, and that task's record then carries none (each judgment is
        handed over once); elsewhere they come in the record.
        """

    def close(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Release threads, workers or cluster connections."""
