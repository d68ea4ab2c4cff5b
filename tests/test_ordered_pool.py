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
