"""Map work over a stream in worker processes, results in the stream's order, memory bounded.

What :func:`ordered_map` guarantees, so a caller sees what one process would give:

- results come in input order, and at most ``window`` items are in flight, so a
  stream of any length is held only a window at a time;
- an item whose work raised in a worker is done again in this process, so the
  caller gets the very exception (type, message, traceback) it would without
  workers, at the item's place in the order;
- an error of the input stream itself comes after the results of every item
  read before it;
- a worker that dies (killed, out of memory) is an :class:`~fidelity.errors.InfrastructureError`
  naming what to do, never a hang or a lost result.

The first item is worked on here, and the workers are forked after it (only when
there is a second item): they inherit the code and data its work loaded (modules,
compiled patterns), so they start in milliseconds, ready. They ignore Ctrl-C: the
caller's process handles it, and the workers end with the map (finished, failed or
abandoned), however soon after their fork it ends:

- SIGINT and SIGTERM are blocked across the fork and unblocked by the worker once it
  has set its own dispositions, so a signal never reaches a handler it inherited (the
  CLI's SIGTERM handler raises KeyboardInterrupt; raised inside the fork's own
  after-fork hooks, Python reports it as ignored and the worker lived on);
- a worker closes its inherited copies of the caller's ends of the pipes, so the
  caller closing its end is the end of input to the worker, signal or not.
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from fidelity.errors import InfrastructureError

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

Item = TypeVar("Item")
Result = TypeVar("Result")


def available_cpus() -> int:
    """CPUs this process may run on (its affinity, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def ordered_map(
    work: Callable[[Item], Result],
    items: Iterable[Item],
    processes: int,
    window: int | None = None,
) -> Iterator[tuple[Item, Result]]:
    """``(item, work(item))`` for each of *items*, in order, computed by *processes* workers.

    With one process (or none) the work runs here, item by item; so it does when this
    process may not fork (:func:`fork_safe`). *window* caps the items submitted but not
    yet yielded (default: four per process). Items should be small (a few KB: where to
    find the data, not the data); results may be large.
    """
    source = iter(items)
    if processes <= 1 or not fork_safe():
        for item in source:
            yield item, work(item)
        return
    for first in source:  # done here: the workers fork with what it loaded and compiled
        yield first, work(first)
        break
    else:
        return
    for second in source:  # (an error reading it comes after the first result, as it should)
        source = itertools.chain([second], source)
        break
    else:
        return  # one item: no worker to fork
    workers = _Workers(work, processes)
    try:
        yield from workers.map(source, window or 4 * processes)
    finally:
        workers.close()


def fork_safe() -> bool:
    """Whether this process may fork workers: no profiler or tracer runs (the work stays
    here, where the profile sees it; a child forked with cProfile running crashes in its
    garbage collector on CPython 3.11)."""
    return sys.getprofile() is None and sys.gettrace() is None


class _Workers:
    """Forked processes, each served through its own pipe: an item goes to the workers in
    turn, so the oldest item's result is the next one its worker sends. No thread is
    involved (forking a threaded process can hang a child on a lock a thread held)."""

    def __init__(self, work: Callable[[Any], Any], processes: int) -> None:
        import multiprocessing  # here: a diff in one process starts without it

        self.work = work
        context = multiprocessing.get_context("fork")
        self.processes: list[BaseProcess] = []
        self.connections: list[Connection] = []
        try:
            for _ in range(processes):
                self._start(context)
        except BaseException:  # Ctrl-C while forking: the workers forked so far end too
            self.close()
            raise

    def _start(self, context: Any) -> None:
        """Fork one worker with :data:`_WORKER_SIGNALS` blocked (it unblocks them itself)."""
        mine, theirs = context.Pipe()
        inherited = [*self.connections, mine]  # the caller's ends the fork copies
        process = context.Process(target=_serve, args=(self.work, theirs, inherited), daemon=True)
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _WORKER_SIGNALS)
        try:
            process.start()
        except BaseException:
            mine.close()
            raise
        else:  # before the signals come: close() must find it
            self.processes.append(process)
            self.connections.append(mine)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            theirs.close()

    def map(self, source: Iterator[Any], window: int) -> Iterator[tuple[Any, Any]]:
        pending: deque[tuple[Any, Connection]] = deque()
        turns = itertools.cycle(self.connections)
        failure: Exception | None = None
        while True:
            try:
                item = next(source)
            except StopIteration:
                break
            except Exception as exc:  # noqa: BLE001 - raised below, after the items before it
                failure = exc
                break
            connection = next(turns)
            self._send(connection, item)
            pending.append((item, connection))
            if len(pending) > window:
                yield self._settle(*pending.popleft())
        while pending:
            yield self._settle(*pending.popleft())
        if failure is not None:
            raise failure

    def _send(self, connection: Connection, item: Any) -> None:
        try:
            connection.send(item)
        except OSError as exc:  # the worker's end is gone
            raise _died() from exc

    def _settle(self, item: Any, connection: Connection) -> tuple[Any, Any]:
        try:
            done, result = connection.recv()
        except (EOFError, OSError) as exc:
            raise _died() from exc
        if done:
            return item, result
        return item, self.work(item)  # raises here what it raised there, in this process

    def close(self) -> None:
        """End every worker now, busy or not (what it was doing is no longer wanted)."""
        for connection in self.connections:
            connection.close()
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.join()


def _died() -> InfrastructureError:
    return InfrastructureError(
        "a worker process died (killed, or out of memory); rerun with --jobs 1 to work in one process"
    )


_WORKER_SIGNALS = (signal.SIGINT, signal.SIGTERM)
"""Blocked from before a worker's fork until it has set its own dispositions of them."""


def _serve(work: Callable[[Any], Any], connection: Connection, inherited: list[Connection]) -> None:
    """A worker: ``(True, result)`` for each item received, or ``(False, None)`` when the work
    raised or its result does not pickle; the caller then redoes that item itself, to raise
    the exception with its own traceback (an exception need not pickle).

    It starts with :data:`_WORKER_SIGNALS` blocked (see :class:`_Workers`): a SIGTERM that
    came since the fork is delivered at the unblock, to the default action, and ends it.
    *inherited* are the caller's ends of the pipes, copied by the fork: closed here, so
    the caller closing its end is an end of file here."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the caller's to handle
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the CLI's handler: end, quietly
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _WORKER_SIGNALS)
    for end in inherited:
        end.close()
    while True:
        try:
            item = connection.recv()
        except EOFError:  # the caller is done
            return
        try:
            connection.send((True, work(item)))
        except Exception:  # noqa: BLE001 - the caller redoes the item and raises it
            connection.send((False, None))
