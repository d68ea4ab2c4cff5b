"""The line-order feature: a reordered but equal listing drifts, by how much it moved."""

from __future__ import annotations

import pytest
from compare_samples import context, obs

from fidelity.compare import SweComparator, TerminalComparator
from fidelity.compare.calibration import comparison_vector, load_calibration
from fidelity.compare.terminal import moved_lines, reordered

GREP = [
    "xarray/core/variable.py:    def where(self, cond, other=dtypes.NA):",
    "xarray/core/groupby.py:    def where(self, cond, other=dtypes.NA):",
    "xarray/core/ops.py:def where_method(self, cond, other=dtypes.NA):",
    "xarray/core/computation.py:def where(cond, x, y):",
    "xarray/core/duck_array_ops.py:def where(condition, x, y):",
    "xarray/core/duck_array_ops.py:def where_method(data, cond, other=dtypes.NA):",
    "xarray/core/common.py:    def where(self, cond, other=dtypes.NA, drop: bool = False):",
]
MOVED = [GREP[2], GREP[0], GREP[1], GREP[3], GREP[6], GREP[4], GREP[5]]
"""The dev set's swe|tf|pydata__xarray-4687|2: the same grep hits, two of them moved."""


def text(lines: list[str]) -> str:
    return "\n".join(lines) + "\n"


def test_reordered_counts_the_lines_out_of_order() -> None:
    assert reordered(text(GREP), text(MOVED)) == (2, 7)
    assert reordered(text(GREP), text(GREP[::-1])) == (6, 7)
    assert reordered(text(GREP), text([*GREP[:3], "new line", *GREP[3:]])) == (0, 7)


def test_repeated_lines_are_no_anchors() -> None:
    """A dropped blank line shifts which blank matches which: no move is read from it."""
    real = "a\n\nb\n\nc\n"
    assert reordered(real, "a\nb\n\nc\n") == (0, 3)
    assert reordered(real, "b\n\na\n\nc\n") == (1, 3)


@pytest.mark.parametrize("comparator", [TerminalComparator(), SweComparator()])
def test_reordered_grep_hits_drift_and_say_so(
    comparator: TerminalComparator | SweComparator,
) -> None:
    """grep -r's lines are sorted for similarity; the order they were printed in still counts."""
    command = 'grep -r "def where" xarray'
    result = comparator.compare(obs(text(GREP)), obs(text(MOVED)), context(command))
    assert result.drift
    assert "lines reordered: 2 of 7" in result.reasons
    assert result.hallucinations == [f"moved:{GREP[2]}", f"moved:{GREP[6]}"]
    assert result.omissions == []
    assert (result.metrics["lines_reordered"], result.score) == (2.0, 1.0)


def test_the_moved_lines_are_those_off_a_longest_run_in_real_order() -> None:
    assert moved_lines(text(GREP), text(MOVED)) == (GREP[2], GREP[6])
    assert moved_lines(text(GREP), text(GREP)) == ()
    assert moved_lines(text(GREP), text([GREP[6], *GREP[:6]])) == (GREP[6],)
    assert (
        len(moved_lines(text(GREP), text(GREP[::-1]))) == reordered(text(GREP), text(GREP[::-1]))[0]
    )
    # a line one side lacks is no move, and a repeated line no anchor
    assert moved_lines("a\nb\nc\n", "c\nnew\na\nb\n") == ("c",)
    assert moved_lines("x\na\nx\nb\n", "b\nx\na\nx\n") == ("b",)


def test_moved_lines_are_named_but_not_counted_as_invented_content() -> None:
    """The labellers name the lines a reordered listing moved (swe|tf|scikit-learn__scikit-learn-
    10297|21, find's order); the calibration's entity count stays what it was, since
    ``lines_reordered`` already weighs the move."""
    comparator = TerminalComparator(calibrated=False)
    result = comparator.compare(obs(text(GREP)), obs(text(MOVED)), context("grep -r where ."))
    assert [e.partition(":")[0] for e in result.hallucinations] == ["moved", "moved"]
    without = result.model_copy(update={"hallucinations": []})
    assert comparison_vector("terminal", result) == comparison_vector("terminal", without)


def test_more_moved_lines_never_lower_the_probability() -> None:
    comparator = TerminalComparator()
    command = "ls"
    listing = [f"file_{i:02d}.py" for i in range(20)]
    probabilities = []
    for moved in (1, 4, 10, 19):
        sim = listing[moved:] + listing[:moved] if moved < 19 else listing[::-1]
        result = comparator.compare(obs(text(listing)), obs(text(sim)), context(command))
        probabilities.append(result.metrics["drift_p"])
    assert probabilities == sorted(probabilities)
    calibration = load_calibration("terminal")
    assert (
        calibration is not None and calibration.coef[calibration.features.index("order_gap")] >= 0
    )


def test_pytest_xdist_order_is_volatile() -> None:
    """pytest -n reports failures as its workers finish them: another order is no drift."""
    a = "FAILED tests/test_a.py::test_one - assert 0\nFAILED tests/test_b.py::test_two - assert 1\n"
    b = "FAILED tests/test_b.py::test_two - assert 1\nFAILED tests/test_a.py::test_one - assert 0\n"
    result = TerminalComparator().compare(obs(a), obs(b), context("pytest -n 2 tests"))
    assert not result.drift
    assert "lines_reordered" not in result.metrics
    assert TerminalComparator().compare(obs(a), obs(b), context("pytest tests")).drift


def test_identical_texts_carry_no_order_metrics() -> None:
    result = TerminalComparator().compare(obs(text(GREP)), obs(text(GREP)), context("grep -r x ."))
    assert "lines_reordered" not in result.metrics and "order_gap" not in result.metrics
