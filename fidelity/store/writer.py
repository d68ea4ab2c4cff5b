"""Writing records in bulk: :class:`RecordBuffer` gathers records (and Ray workers' Parquet
shards) into batches, builds each batch's rows on the caller's thread, and has a writer
thread (:class:`_Writer`) commit it while the caller builds the next one."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from fidelity.store.records import ShardReceipt, TrajectoryRecord
from fidelity.store.rows import _Batch, _now

if TYPE_CHECKING:
    from fidelity.store.core import Store


class RecordBuffer:
    """Records waiting to be stored together (one bulk transaction per batch).

    A batch is written once it holds *size* records or *steps* steps, or *seconds*
    have passed since the last write, and by :meth:`flush` (call it in ``finally``):
    slow trajectories (real sandboxes) are stored as each one ends, fast streams in
    bulk (a write costs a few milliseconds whatever its size, so batches of
    thousands of steps amortise it; the step bound keeps a batch of long
    trajectories small in memory). A killed process loses at most the unflushed
    batch, which a resumed run redoes. Parquet shards that Ray workers wrote
    (:meth:`merge`) are queued and merged the same way, counted by trajectory.

    A full batch's rows are built and inserted (in a transaction left open, see
    :meth:`Store.stage_rows`) on the caller's thread, once the previous batch is
    committed; a writer thread then commits it (a checkpoint that writes the rows into the
    file, compressed: DuckDB holds no GIL there, see CHECKPOINT_THRESHOLD) while the
    caller goes on with the next batch. The insert stays on the caller's thread
    because DuckDB's scan of Python strings takes the GIL, which a busy caller would
    hold for whole switch intervals. ``background=False`` commits on the caller's
    thread. An insert error comes out of the :meth:`add` or :meth:`flush` handing
    the batch over; a commit that failed raises its error (the same
    :class:`StoreError`) from the next hand-over or :meth:`flush`. Either way the
    batch being handed over stays queued. :meth:`flush`
    and :meth:`close` return once every record is stored and readable, with no
    writer thread left. :meth:`Store.close` flushes the store's buffers first.
    """

    def __init__(
        self,
        store: Store,
        run_id: str,
        size: int = 1024,
        seconds: float = 1.0,
        steps: int = 10_000,
        background: bool = True,
    ) -> None:
        self.store = store
        self.run_id = run_id
        self.size = size
        self.seconds = seconds
        self.steps = steps
        self.pending: list[TrajectoryRecord] = []
        self.pending_steps = 0
        self.receipts: list[ShardReceipt] = []
        self.written = 0
        """Records stored (their write committed)."""
        self._last = time.monotonic()
        self._writer = _Writer() if background else None
        store._buffers.append(self)

    def __enter__(self) -> RecordBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add(self, record: TrajectoryRecord) -> None:
        """Queue *record*; hands the batch over to be written when it is full or old enough."""
        self.pending.append(record)
        self.pending_steps += len(record.trajectory.steps)
        self._hand_over_when_due()

    def merge(self, receipt: ShardReceipt) -> None:
        """Queue the Parquet shard of *receipt* (rows a Ray worker wrote, see
        :mod:`fidelity.store_shards`); shards are merged a batch at a time, in one
        transaction each (:meth:`Store.merge_shards`), as records are written."""
        self.receipts.append(receipt)
        self._hand_over_when_due()

    def _hand_over_when_due(self) -> None:
        queued = len(self.pending) + sum(len(r.trajectory_ids) for r in self.receipts)
        if (
            queued >= self.size
            or self.pending_steps >= self.steps
            or time.monotonic() - self._last >= self.seconds
        ):
            self._hand_over()

    def flush(self) -> None:
        """Store every queued record now, and wait until all of them are stored."""
        self._hand_over()
        if self._writer is not None:
            self.written += self._writer.wait()

    def close(self) -> None:
        """Flush (the buffer can still be used afterwards; nothing runs in the background)."""
        self.flush()

    def _hand_over(self) -> None:
        """Build the queued records' rows, then give them to the writer once the previous
        write ended. The queue is emptied only then: an error of the previous write, or a
        Ctrl-C while building or waiting, leaves every queued record queued (and no rows of
        a half-built record anywhere)."""
        self._last = time.monotonic()
        self._hand_over_records()
        self._hand_over_receipts()

    def _hand_over_records(self) -> None:
        """:meth:`_hand_over` for the queued records."""
        records = self.pending
        if not records:  # nothing to hand over (flush still waits for the write in flight)
            return
        rows, now = _Batch(), _now()
        for record in records:
            rows.add_record(record, now)
        if self._writer is not None:
            self.written += self._writer.wait()
        ids = [record.trajectory.id for record in records]
        store = self.store
        cursor = store.stage_rows(self.run_id, ids, rows)
        if self._writer is None:
            store.commit_rows(cursor)
            self.written += len(ids)
        else:
            self._writer.start(len(ids), lambda: store.commit_rows(cursor))
        # emptied once handed over: an interrupt just before writes a batch twice at worst,
        # which replaces its rows (a write deletes a trajectory's rows before inserting them)
        self.pending, self.pending_steps = [], 0

    def _hand_over_receipts(self) -> None:
        """:meth:`_hand_over` for the queued shards: merged by the writer, in one transaction."""
        receipts = self.receipts
        if not receipts:
            return
        if self._writer is not None:
            self.written += self._writer.wait()
        store, run_id, folders = self.store, self.run_id, [r.folder for r in receipts]
        count = sum(len(r.trajectory_ids) for r in receipts)
        if self._writer is None:
            self.written += store.merge_shards(run_id, folders)
        else:
            self._writer.start(count, lambda: store.merge_shards(run_id, folders))
        self.receipts = []


class _Writer:
    """Runs one write (a commit) at a time on a thread of its own; :meth:`wait` joins it and
    raises its error. A new thread per write (tens of microseconds against a commit's tens
    of milliseconds): nothing lingers between writes, so no thread outlives a flush."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._count = 0
        self._error: BaseException | None = None

    def start(self, count: int, write: Callable[[], object]) -> None:
        """Run *write* (of *count* records) in the background; the previous one has ended."""
        if self._thread is not None:
            raise RuntimeError("a store write is still in flight")  # a bug: wait() first
        thread = threading.Thread(target=self._run, args=(write,), name="fidelity-store-writer")
        self._thread, self._count = thread, count
        thread.start()

    def _run(self, write: Callable[[], object]) -> None:
        try:
            write()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller by wait()
            self._error = exc

    def wait(self) -> int:
        """Wait for the write in flight (if any); its record count, or its error raised.

        A Ctrl-C while waiting leaves the write running to its commit; the next wait
        (the caller's ``finally: flush()``) joins it again.
        """
        thread = self._thread
        if thread is None:
            return 0
        thread.join()
        self._thread = None
        count, self._count = self._count, 0
        error, self._error = self._error, None
        if error is not None:
            raise error
        return count
