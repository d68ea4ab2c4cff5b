"""Carriage returns rendered as a terminal shows them, and progress redraws written out
(one per line, or run together without their ``\\r``) collapsed to the last: the
``carriage_return`` rule."""

from __future__ import annotations

import pytest
from compare_samples import context, obs

from fidelity.compare import CompareConfig, TerminalComparator
from fidelity.compare.normalize import (
    Normalizer,
    collapse_progress,
    progress_states,
    render_carriage_returns,
)

STATE = "100.0%  2 of 2 [####] 00:00:00"
HALF = " 50.0%  1 of 2 [##  ] 00:00:00"
TQDM = [
    "  0%|          | 0/2 [00:00<?, ?it/s]",
    " 50%|#####     | 1/2 [00:00<00:00, 9.71it/s]",
    "100%|##########| 2/2 [00:00<00:00, 9.70it/s]",
]

# (raw output with \r, what a model writes: the same without the \r), none of them drift
SAME = {
    "issue 42": ("\r" + STATE + "\r" + STATE + "\nok\n", STATE + "\nok\n"),
    "the \\r dropped": ("\r" + STATE + "\r" + STATE + "\nok\n", STATE + STATE + "\nok\n"),
    "each redraw a line": ("\r" + HALF + "\r" + STATE + "\nok\n", HALF + "\n" + STATE + "\nok\n"),
    "tqdm": ("\r".join(TQDM) + "\n", TQDM[-1] + "\n"),
    "tqdm, each a line": ("\r".join(TQDM) + "\n", "\n".join(TQDM) + "\n"),
    "tqdm run together": ("\r".join(TQDM) + "\n", "".join(TQDM) + "\n"),
}


@pytest.mark.parametrize("case", SAME)
def test_progress_written_without_its_carriage_returns_is_not_drift(case: str) -> None:
    real, sim = SAME[case]
    result = TerminalComparator().compare(obs(real), obs(sim), context("python fetch.py"))
    assert (result.drift, result.hallucinations, result.omissions) == (False, [], [])
    assert result.normalizations["carriage_return"] >= 1


def test_another_final_state_is_drift() -> None:
    real = "\r" + HALF + "\r" + STATE + "\n"
    result = TerminalComparator().compare(obs(real), obs(HALF + "\n"), context("python fetch.py"))
    assert result.drift


def test_rendering_overwrites_in_place_and_honours_erase_in_line() -> None:
    assert render_carriage_returns("Downloading file...\rDone\n") == (
        "Doneloading file...\n",
        1,
        0,
    )
    erased = "Downloading file...\r\x1b[KDone\n"
    assert render_carriage_returns(erased) == ("Done\n", 1, 0)
    assert render_carriage_returns("abc\r\x1b[2Kxy\n")[0] == "xy\n"
    assert render_carriage_returns("50%\r")[0] == "50%"  # a line's end, counted
    coloured = "\r\x1b[32m 50%\x1b[0m\r\x1b[32m100%\x1b[0m\n"
    assert render_carriage_returns(coloured) == ("100%\n", 1, 4)


def test_counted_once_per_rendered_line_and_ending() -> None:
    text, counts = Normalizer()("a\rb\nc\r\nd\r", "x")
    assert text == "b\nc\nd"
    assert counts == {"carriage_return": 2, "crlf": 1}


def test_only_progress_lines_collapse() -> None:
    pytest_lines = "tests/a.py ....  [ 50%]\ntests/b.py ..F.  [100%]\n"
    assert collapse_progress(pytest_lines) == (pytest_lines, 0)
    assert progress_states("done: 100% of the work") is None
    two = "Downloading a 50% [##  ] 1/2\nDownloading b 50% [##  ] 1/2\n"
    assert collapse_progress(two) == (two, 0)  # two bars, not one redrawn
    assert progress_states(HALF + STATE) == [HALF, STATE]


def test_strict_whitespace_renders_nothing() -> None:
    strict = TerminalComparator(config=CompareConfig(whitespace="strict"))
    real, sim = SAME["tqdm"]
    assert strict.compare(obs(real), obs(sim), context("python fetch.py")).drift
    assert Normalizer(strict.normalizer.rules)("a\rb")[0] == "a\rb"
