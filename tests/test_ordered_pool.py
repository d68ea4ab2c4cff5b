"""``ordered_map``: worker processes that give what one process gives, in its order."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from fidelity.errors import InfrastructureError, InputFormatError
from fidelity.ordered_pool import ordered_map

PARENT = os.getpid()


def square_elsewhere(n: int) -> tuple[int, bool]:
    """*n* squared, and whether a process other than the test's computed it."""
    return n * n, os.getpid() != PARENT


def refuse_seven(n: int) -> int:
    if n == 7:
        raise InputFormatError("data.jsonl", n, "value", "seven is refused")
    return n


def die_on_five(n: int) -> int:
    if n == 5 and os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return n


def test_results_come_in_order_from_the_workers() -> None:
    results = list(ordered_map(square_elsewhere, range(40), processes=2))
    assert [item for item, _ in results] == list(range(40))
    assert [value for _, (value, _) in results] == [n * n for n in range(40)]
    elsewhere = [where for _, (_, where) in results]
    assert elsewhere[0] is False  # the first item here, before the workers fork
    assert all(elsewhere[1:])


def test_one_process_works_here() -> None:
    results = list(ordered_map(square_elsewhere, range(5), processes=1))
    assert [where for _, (_, where) in results] == [False] * 5


def test_a_worker_error_is_raised_here_in_its_place() -> None:
    seen: list[int] = []
    with pytest.raises(InputFormatError, match=r"data.jsonl:7: value: seven is refused") as info:
        for item, _ in ordered_map(refuse_seven, range(20), processes=2):
            seen.append(item)
    assert seen == list(range(7))
    assert info.traceback[-1].name == "refuse_seven"  # raised again in this process


def test_an_input_error_comes_after_the_items_read_before_it() -> None:
    def items() -> Iterator[int]:
        yield from range(10)
        raise InputFormatError("data.jsonl", 11, None, "not JSON")

    seen: list[int] = []
    with pytest.raises(InputFormatError, match=r"data\.jsonl:11"):
        for item, _ in ordered_map(square_elsewhere, items(), processes=2):
            seen.append(item)
    assert seen == list(range(10))


def test_the_input_is_read_a_window_ahead_at_most() -> None:
    pulled: list[int] = []

    def items() -> Iterator[int]:
        for n in range(100):
            pulled.append(n)
            yield n

    for index, (item, _) in enumerate(ordered_map(square_elsewhere, items(), 2, window=3)):
        assert item == index
        assert len(pulled) <= index + 1 + 3 + 1  # this one, the window, the one submitted


def test_a_dead_worker_is_an_infrastructure_error_not_a_hang() -> None:
    with pytest.raises(InfrastructureError, match=r"worker process died.*--jobs 1"):
        list(ordered_map(die_on_five, range(12), processes=2))


def test_leaving_early_ends_the_workers() -> None:
    import multiprocessing

    stream = ordered_map(square_elsewhere, range(1000), processes=2)
    assert next(stream)[0] == 0
    assert next(stream)[0] == 1
    stream.close()
    assert multiprocessing.active_children() == []


HANG = 120
"""Seconds after which a worker (or a whole map) counts as hung; nothing here takes one."""

SIGNALLED_WHILE_FORKING = """
import os, signal, sys, time
from fidelity.cli.application import sigterm
from fidelity.ordered_pool import ordered_map

signal.signal(signal.SIGTERM, sigterm)  # as the CLI runs: its handler is inherited
forks = 0

def count() -> None:
    global forks
    forks += 1

def second_worker_waits_for_its_sigterm() -> None:
    # inside the fork's own after-fork hooks: the caller terminates this idle worker
    # now, before it reached its own code
    if forks == 2:
        while signal.SIGTERM not in signal.sigpending():
            time.sleep(0.01)

os.register_at_fork(before=count, after_in_child=second_worker_waits_for_its_sigterm)
print([value for _, value in ordered_map(abs, [0, -1], processes=2)])
"""


def test_a_worker_signalled_while_it_forks_still_ends() -> None:
    """A SIGTERM that reaches a worker before its own code runs ends it: the inherited
    handler never runs (its KeyboardInterrupt, raised in an after-fork hook, was reported
    as ignored and the worker lived on, waiting for input, and the map for it)."""
    import sys

    from tests.hang import run_or_hang

    done = run_or_hang([sys.executable, "-c", SIGNALLED_WHILE_FORKING], HANG)
    assert done is not None, "the map hung: a worker lived on past its SIGTERM"
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[0, 1]\n"
    assert done.stderr == ""  # no "Exception ignored ... KeyboardInterrupt"


def test_a_worker_ends_when_the_caller_closes_its_pipe() -> None:
    """No signal needed: a worker holds no copy of the caller's end of any pipe, so the
    caller closing it is the end of the worker's input (the workers forked later too)."""
    from fidelity.ordered_pool import _Workers

    workers = _Workers(square_elsewhere, 3)
    try:
        for connection in workers.connections:
            connection.close()
        for process in workers.processes:
            process.join(HANG)
            assert process.exitcode == 0, "a worker still waits for the input its caller closed"
    finally:
        workers.close()  # (ends them, should they still wait)


def test_one_item_forks_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing is left for workers after the first item, which is done here."""
    from fidelity import ordered_pool

    def no_workers(*args: object) -> None:
        raise AssertionError("workers forked for nothing")

    monkeypatch.setattr(ordered_pool, "_Workers", no_workers)
    assert list(ordered_map(square_elsewhere, [3], processes=4)) == [(3, (9, False))]
