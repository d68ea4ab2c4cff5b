"""Trajectory tasks on a Ray cluster (``--executor ray [--ray-address ADDR]``; ``fidelity[ray]``).

Each task travels as JSON (its configs are plain data) to a Ray worker, which
builds its own sandbox and world model there and returns the record; the
driver stores records as they come back, so resuming works as it does
locally. With ``--ray-results parquet`` a worker writes its records as the
store's rows in a Parquet shard instead (:mod:`fidelity.store_shards`) and
returns a small receipt, which the driver merges: observation texts never
cross the object store or the driver's Python. Every task asks for one CPU, so each node runs as many at once as it
has CPUs. A worker that dies (the node is lost, the process is killed) is
retried once by Ray; a task that still fails is recorded as an infrastructure
failure of its trajectory (every step failed), which a resumed run redoes.
A judging task on a worker posts each judgment, as it is answered, to a
:class:`JudgmentMailbox` actor on the cluster, which the driver empties as
letters arrive and once more after a Ctrl-C or an error: what was answered is
stored even for a trajectory still running (its worker is cancelled; workers
have no response cache). A retried task posts its judgments again; the store
keeps one per step. Tasks run here (a known real side) hand each judgment over
as it is answered, as the local executor does.
Every node needs fidelity installed, with the same version as the driver.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from fidelity.defaults import SIM_CONCURRENCY
from fidelity.errors import UsageError
from fidelity.executors.base import Executor, JudgmentCallback, RecordCallback, ShardSink
from fidelity.task import Progress, TaskRunner, TrajectoryTask

if TYPE_CHECKING:
    from fidelity.pipeline import Replayed
    from fidelity.store import JudgmentRecord, TrajectoryRecord
    from fidelity.store_shards import ShardReceipt
    from fidelity.worldmodels.base import WorldModel

T = TypeVar("T")
logger = logging.getLogger(__name__)

LOCAL_OBJECT_STORE_BYTES = 100 * 1024 * 1024
"""Object store of a cluster this executor starts itself (records are small)."""

MAX_CHUNK = 64
"""At most this many trajectories per Ray task (and shard) when workers write Parquet shards."""

TASKS_PER_CPU = 4
"""Parquet shards: trajectories are grouped only while every CPU still gets this many tasks."""


class RayExecutor(Executor):
    """Runs each task as a Ray task (one CPU) on the cluster at *address*, or a local one."""

    def __init__(
        self,
        address: str | None = None,
        sim_concurrency: int = SIM_CONCURRENCY,
        progress: Progress | None = None,
    ) -> None:
        self.address = address
        self.sim_concurrency = sim_concurrency
        self.progress: Progress = progress or (lambda phase, n: None)

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
        """Run every task on the cluster; *model* stays on the driver (workers build their own).

        Tasks with a known real side (*replayed*) only simulate and compare:
        they run here, with *model*. Judgments go to *on_judgment* one by one as
        they are answered, here or on a worker (see the module's note).
        With *shards*, workers write Parquet shards and hand back receipts (see
        :func:`chunk_size` for how tasks are grouped).
        """
        known = replayed or {}
        local = [t for t in tasks if t.trajectory.id in known]
        remote = [t for t in tasks if t.trajectory.id not in known]
        if local:
            runner = TaskRunner(1, self.sim_concurrency, self.progress, on_judgment)
            try:
                for task in local:
                    on_record(await runner.run(task, model, known[task.trajectory.id]))
                    self.progress("compare", 1)
            finally:
                await runner.aclose()
        if remote:
            judging = on_judgment is not None and any(t.judge is not None for t in remote)
            await self._remote(remote, on_record, shards, on_judgment if judging else None)

    async def _remote(
        self,
        tasks: Sequence[TrajectoryTask],
        on_record: RecordCallback,
        shards: ShardSink | None,
        on_judgment: JudgmentCallback | None,
    ) -> None:
        ray = _connect(self.address)
        function = ray.remote(num_cpus=1, max_retries=1, retry_exceptions=False)(_run_remote)
        size = 1 if shards is None else chunk_size(len(tasks), ray.cluster_resources().get("CPU"))
        folder = None if shards is None else str(shards.folder)
        chunks = [tasks[start : start + size] for start in range(0, len(tasks), size)]
        logger.debug(
            "%d tasks as %d Ray tasks of up to %d trajectories (results: %s)",
            len(tasks),
            len(chunks),
            size,
            "driver" if shards is None else shards.folder,
        )
        letters = None if on_judgment is None else _Letters(ray, on_judgment, self.progress)
        mailbox = None if letters is None else letters.mailbox
        refs = {
            function.remote(
                [t.model_dump_json() for t in c], self.sim_concurrency, folder, mailbox
            ): c
            for c in chunks
        }

        async def one(ref: Any) -> tuple[Sequence[TrajectoryTask], Any]:
            try:
                return refs[ref], await ref
            except Exception as exc:  # noqa: BLE001 - classified by _failure, never swallowed
                return refs[ref], _failure(ray, exc)

        running = {asyncio.ensure_future(one(ref)) for ref in refs}
        try:
            while running:
                waited = running if letters is None else running | {letters.next()}
                done, _ = await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
                if letters is not None:
                    letters.hand_over(done)
                for finished in done & running:
                    running.discard(finished)
                    chunk, result = finished.result()
                    self._hand_over(chunk, result, on_record, shards)
            if letters is not None:
                letters.empty()  # every task returned after its last post
        except BaseException as error:
            for future in running:
                future.cancel()
            _cancel(ray, list(refs))  # none still writes a shard the caller then merges
            if letters is not None:
                letters.empty_after_failure(error)
            raise
        finally:
            if letters is not None:
                letters.close()

    def _hand_over(
        self,
        chunk: Sequence[TrajectoryTask],
        result: Any,
        on_record: RecordCallback,
        shards: ShardSink | None,
    ) -> None:
        """What one Ray task gave back: records, a shard receipt, or why its worker was lost."""
        if isinstance(result, BaseException):
            ids = ", ".join(task.trajectory.id for task in chunk)
            logger.debug("Ray task of %s raised %s: the run stops", ids, type(result).__name__)
            raise result
        self.progress("real", len(chunk))
        self.progress("sim", len(chunk))
        if isinstance(result, str):  # the worker died twice: an infrastructure failure
            ids = ", ".join(task.trajectory.id for task in chunk)
            logger.info(
                "Ray task of %s failed, recorded as an infrastructure failure: %s", ids, result
            )
            result = [_failed_record(task, result) for task in chunk]
        if isinstance(result, list):
            for record in result:
                on_record(record)
        elif shards is not None:
            shards.on_receipt(result)
        self.progress("compare", len(chunk))


class JudgmentMailbox:
    """A Ray actor (async) where workers post judgments as they are answered.

    The driver asks for the letters after the first *seen* ones (which it has
    handled, so they are dropped here); asking drops nothing else, so a request
    the driver cancels loses no letter.
    """

    def __init__(self) -> None:
        self.letters: list[Any] = []
        self.dropped = 0
        self.arrived = asyncio.Event()

    async def post(self, letter: Any) -> None:
        """Keep *letter* until the driver has it."""
        self.letters.append(letter)
        self.arrived.set()

    async def after(self, seen: int, wait: bool) -> list[Any]:
        """The letters after the first *seen* (with *wait*: once there is at least one)."""
        if seen > self.dropped:  # a request the driver cancelled may come late with less
            del self.letters[: seen - self.dropped]
            self.dropped = seen
        while wait and not self.letters:
            self.arrived.clear()
            await self.arrived.wait()
        return list(self.letters)


class _Letters:
    """The driver's side of a :class:`JudgmentMailbox`: each judgment handed over once."""

    def __init__(self, ray: Any, on_judgment: JudgmentCallback, progress: Progress) -> None:
        self.ray = ray
        self.mailbox = ray.remote(num_cpus=0)(JudgmentMailbox).remote()
        self.on_judgment = on_judgment
        self.progress = progress
        self.seen = 0
        self.waiting: asyncio.Future[list[Any]] | None = None

    def next(self) -> asyncio.Future[list[Any]]:
        """A future of the letters not yet handed over, once there is one."""
        if self.waiting is None:
            self.waiting = asyncio.ensure_future(self._after(wait=True))
        return self.waiting

    async def _after(self, wait: bool) -> list[Any]:
        letters: list[Any] = await self.mailbox.after.remote(self.seen, wait)
        return letters

    def hand_over(self, done: set[asyncio.Future[Any]]) -> None:
        """Hand over the letters of the request among *done*, if it is."""
        if self.waiting is not None and self.waiting in done:
            waiting, self.waiting = self.waiting, None
            self._take(waiting.result())

    def empty(self) -> None:
        """Hand over every letter still in the mailbox."""
        if self.waiting is not None:
            self.waiting.cancel()  # its letters stay in the mailbox until asked for again
            self.waiting = None
        self._take(
            self.ray.get(self.mailbox.after.remote(self.seen, False), timeout=CANCEL_WAIT_SECONDS)
        )

    def empty_after_failure(self, error: BaseException) -> None:
        """Hand over what was posted before *error* (a Ctrl-C, a failure); a mailbox that
        cannot be reached then (its node lost) is noted on *error*, which stays the one shown."""
        try:
            self.empty()
        except self.ray.exceptions.RayError as lost:
            error.add_note(f"judgments answered on the cluster but not collected: {lost}")

    def _take(self, letters: list[Any]) -> None:
        for letter in letters:
            self.seen += 1  # counted first: a letter whose handling failed is not handed again
            self.on_judgment(letter)
            self.progress("judge", 1)

    def close(self) -> None:
        """Stop the mailbox actor."""
        self.ray.kill(self.mailbox)


def chunk_size(tasks: int, cpus: float | None) -> int:
    """Trajectories per Ray task (one shard each) when workers write Parquet shards.

    One per task while the run is small against the cluster, so every CPU stays
    busy to the end; a very large run groups them (at least
    :data:`TASKS_PER_CPU` tasks per CPU for balance, at most :data:`MAX_CHUNK`
    trajectories each), so the driver merges thousands of shards rather than
    millions of small files, and Ray schedules fewer tasks. A worker lost twice
    costs its whole chunk, recorded as failed and redone by a resumed run.
    """
    return max(1, min(MAX_CHUNK, tasks // (TASKS_PER_CPU * max(1, int(cpus or 1)))))


CANCEL_WAIT_SECONDS = 60.0
"""How long the driver waits for Ray tasks it cancelled after an error (and for the
judgment mailbox's last letters)."""


def map_on_cluster(
    function: Callable[..., T],
    calls: Sequence[tuple[Any, ...]],
    address: str | None,
    on_result: Callable[[T], None] | None = None,
) -> list[T]:
    """``[function(*args) for args in calls]``, each call a Ray task (one CPU), in call order.

    For work that is not a trajectory task (the dataset gate's passes over
    shards). *on_result* sees each result as it arrives (any order). A worker
    that dies is retried once by Ray; an error raised by a call is raised here
    as an instance of its own class, the other calls cancelled and waited for
    (so none is still writing files the caller then removes). *function* must
    be importable on every node.
    """
    ray = _connect(address)
    remote = ray.remote(num_cpus=1, max_retries=1, retry_exceptions=False)(function)
    refs = [remote.remote(*args) for args in calls]
    order = {ref: index for index, ref in enumerate(refs)}
    results: dict[int, T] = {}
    try:
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            result = results[order[done[0]]] = ray.get(done[0])  # fetched once, kept
            if on_result is not None:
                on_result(result)
        return [results[index] for index in range(len(refs))]
    except BaseException as exc:
        _cancel(ray, refs)
        if isinstance(exc, ray.exceptions.RayTaskError):
            raise exc.as_instanceof_cause() from None
        raise


def _cancel(ray: Any, refs: list[Any]) -> None:
    """Cancel the Ray tasks of *refs* and wait for them to end, bounded: a node lost while
    cancelling must not hang the driver.

    Cancelled without force first (the task is interrupted where it runs, and its worker
    answers): a forced cancel marks the task failed at once, and when the finished task's
    reply was already on its way, Ray's owner trips an internal check
    (``TaskManager::CompletePendingTask``: "An unexpected system state has occurred") and
    aborts the driver, exit code 1 and no message (seen in CI on a sharded scan's first
    error). Only a task still running after the wait is forced.
    """
    for ref in refs:
        ray.cancel(ref, force=False)
    _, running = ray.wait(refs, num_returns=len(refs), timeout=CANCEL_WAIT_SECONDS)
    for ref in running:
        ray.cancel(ref, force=True)


def _connect(address: str | None) -> Any:
    """The ``ray`` module, connected to *address* (None: start a small local cluster)."""
    try:
        import ray
    except ImportError as exc:
        raise UsageError(
            "--executor ray needs Ray: pip install 'fidelity[ray]' (on every node)"
        ) from exc
    if not ray.is_initialized():
        if address is None:
            logger.info("starting a local Ray cluster (%d CPUs)", os.cpu_count() or 2)
            ray.init(
                # "local": a cluster of its own, even where another one runs on this
                # machine (ray.init would join that one, and refuse num_cpus)
                address="local",
                num_cpus=os.cpu_count() or 2,
                object_store_memory=LOCAL_OBJECT_STORE_BYTES,
                include_dashboard=False,
                log_to_driver=False,
            )
        else:
            logger.info("joining the Ray cluster at %s", address)
            try:
                ray.init(address=address, log_to_driver=False)
            except ConnectionError as exc:
                raise UsageError(f"--ray-address {address}: {exc}") from exc
    return ray


def _failure(ray: Any, exc: Exception) -> BaseException | str:
    """A worker that died (after Ray's retry): its reason; an error of the task itself: raised."""
    if isinstance(exc, ray.exceptions.RayTaskError):
        # The task itself raised (e.g. SandboxUnavailableError: every task would fail the
        # same way): re-raised on the driver as an instance of its own class.
        cause: BaseException = exc.as_instanceof_cause()
        return cause
    return f"ray worker lost: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _failed_record(task: TrajectoryTask, reason: str) -> TrajectoryRecord:
    from fidelity.pipeline import failed_replay
    from fidelity.store import TrajectoryRecord

    failed = failed_replay(task.trajectory, reason)
    return TrajectoryRecord(task.trajectory, failed.steps, [], [], "", 0.0, 0.0, failed.error)


def _run_remote(
    tasks_json: list[str], sim_concurrency: int, folder: str | None, mailbox: Any = None
) -> list[TrajectoryRecord] | ShardReceipt:
    """On a worker: rebuild the tasks, run them one after the other (each builds its world
    model here), and return their records, or write them as one shard under *folder*
    and return its receipt. With *mailbox* (a :class:`JudgmentMailbox`), each judgment
    is posted there as it is answered, and the records carry none."""
    tasks = [TrajectoryTask.model_validate_json(text) for text in tasks_json]
    post = None if mailbox is None else _poster(mailbox)
    records = [asyncio.run(_run_here(task, sim_concurrency, post)) for task in tasks]
    if folder is None:
        return records
    from fidelity.store_shards import write_shard

    return write_shard(records, Path(folder))


def _poster(mailbox: Any) -> JudgmentCallback:
    import ray

    def post(judgment: JudgmentRecord) -> None:
        # waited for: the task returns only after its last judgment is in the mailbox
        ray.get(mailbox.post.remote(judgment))

    return post


async def _run_here(
    task: TrajectoryTask, sim_concurrency: int, post: JudgmentCallback | None = None
) -> TrajectoryRecord:
    config = task.world_model
    if config is not None and config.type == "endpoint":
        # The response cache is one DuckDB file: one writer at a time, so workers go without.
        config = config.model_copy(update={"cache": None})
    if task.judge is not None and task.judge.cache is not None:  # the judge's likewise
        task = task.model_copy(update={"judge": task.judge.model_copy(update={"cache": None})})
    model = config.build() if config is not None else None
    runner = TaskRunner(1, sim_concurrency, on_judgment=post)
    try:
        return await runner.run(task, model)
    finally:
        await runner.aclose()
        if model is not None:
            await model.aclose()
