"""The default executor: this process, sandboxes in threads, predictions on the event loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from fidelity.defaults import SANDBOX_CONCURRENCY, SIM_CONCURRENCY
from fidelity.executors.base import Executor, JudgmentCallback, RecordCallback, ShardSink
from fidelity.task import Progress, TaskRunner, TrajectoryTask, gather_or_cancel

if TYPE_CHECKING:
    from fidelity.pipeline import Replayed
    from fidelity.worldmodels.base import WorldModel


logger = logging.getLogger(__name__)


class LocalExecutor(Executor):
    """Up to *threads* sandboxes and *sim_concurrency* predictions at once, in this process."""

    def __init__(
        self,
        threads: int = SANDBOX_CONCURRENCY,
        sim_concurrency: int = SIM_CONCURRENCY,
        progress: Progress | None = None,
    ) -> None:
        self.threads = threads
        self.sim_concurrency = sim_concurrency
        self.progress = progress

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
        """Run every task concurrently; records are handed over as each one finishes
        (*shards* is ignored: the records are already here), judgments (with
        *on_judgment*) as each one is answered, on this event loop.

        When one task raises, the others are cancelled before the error goes on.
        """
        runner = TaskRunner(self.threads, self.sim_concurrency, self.progress, on_judgment)
        known = replayed or {}
        logger.debug(
            "%d tasks here: %d sandboxes and %d predictions at once (%d already replayed)",
            len(tasks),
            self.threads,
            self.sim_concurrency,
            len(known),
        )

        async def one(task: TrajectoryTask) -> None:
            try:
                record = await runner.run(task, model, known.get(task.trajectory.id))
            except asyncio.CancelledError:
                raise
            except BaseException as exc:
                logger.debug("task %s failed: %s: %s", task.trajectory.id, type(exc).__name__, exc)
                raise
            on_record(record)
            runner.progress("compare", 1)

        try:
            await gather_or_cancel(map(one, tasks))
        finally:
            await runner.aclose()
