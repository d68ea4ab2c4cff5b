"""SweComparator: terminal verdict plus git diff files/hunks and the test pass/fail map."""

from __future__ import annotations

from fidelity.compare import SweComparator
from fidelity.compare.base import CompareContext
from fidelity.compare.swe import diff_files, pass_fail_map
from fidelity.trajectory import CommandAction, Observation

PYTEST = """\
============================= test session starts ==============================
platform linux -- Python 3.11.2, pytest-8.3.3, pluggy-1.5.0
rootdir: /testbed
collected 4 items

tests/test_cart.py::test_total PASSED                                    [ 25%]
tests/test_cart.py::test_discount {d} [ 50%]
tests/test_cart.py::test_empty PASSED                                    [ 75%]
tests/test_tax.py::test_rounding PASSED                                  [100%]

========================= {summary} in {secs}s =========================
"""

DIFF = """\
diff --git a/shop/cart.py b/shop/cart.py
index 3f2a1c9..8b7e4d0 100644
--- a/shop/cart.py
+++ b/shop/cart.py
@@ -12,7 +12,7 @@ def total(items):
-    return sum(i.price for i in items)
+    return sum(i.price * i.quantity for i in items)
"""

PASSING = PYTEST.format(
    d="PASSED                                 ", summary="4 passed", secs="0.12"
)


def compare(real: str, sim: str, command: str = "python -m pytest -v"):  # type: ignore[no-untyped-def]
    context = CompareContext(action=CommandAction(command=command))
    return SweComparator().compare(
        Observation(text=real, exit_code=0), Observation(text=sim, exit_code=0), context
    )


def test_rerun_with_other_duration_does_not_drift() -> None:
    sim = PYTEST.format(
        d="PASSED                                 ", summary="4 passed", secs="0.31"
    )
    result = compare(PASSING, sim)
    assert (result.drift, result.reasons) == (False, [])
    assert result.metrics["test_agreement"] == 1.0


def test_flipped_outcome_names_the_test() -> None:
    sim = PYTEST.format(
        d="FAILED                                 ", summary="1 failed, 3 passed", secs="0.12"
    )
    result = compare(PASSING, sim)
    assert result.drift
    assert "test tests/test_cart.py::test_discount: PASSED != FAILED" in result.reasons
    assert result.metrics["test_agreement"] == 0.75


def test_invented_test_is_hallucinated() -> None:
    sim = PASSING.replace(
        "tests/test_tax.py::test_rounding PASSED",
        "tests/test_tax.py::test_rounding PASSED\ntests/test_tax.py::test_vat_reverse_charge PASSED",
    )
    result = compare(PASSING, sim)
    assert result.drift
    assert "test:tests/test_tax.py::test_vat_reverse_charge" in result.hallucinations


def test_diff_with_other_hunk_and_file() -> None:
    sim = DIFF.replace("i.price * i.quantity", "i.price + i.quantity").replace(
        "shop/cart.py", "shop/basket.py"
    )
    result = compare(DIFF, sim, "git diff")
    assert result.drift
    assert "file:shop/basket.py" in result.hallucinations
    assert "file:shop/cart.py" in result.omissions
    assert result.metrics["diff_file_f1"] == 0.0


def test_other_blob_ids_in_a_diff_are_drift_and_named() -> None:
    """A diff's index line hashes the file's content (outside the hunks too): another run
    writing the same file shows the same ids, so other ids are content, not volatile."""
    result = compare(DIFF, DIFF.replace("3f2a1c9..8b7e4d0", "3f2a1c9..1234abc"), "git diff")
    assert result.drift
    assert "line:index 3f2a1c9..1234abc 100644" in result.hallucinations
    assert "line:index 3f2a1c9..8b7e4d0 100644" in result.omissions


def test_parsers() -> None:
    unittest_out = "test_total (tests.test_cart.TestCart.test_total) ... ok\ntest_tax (tests.t.T.test_tax) ... FAIL\n"
    assert pass_fail_map(unittest_out) == {
        "tests.test_cart.TestCart.test_total": "PASSED",
        "tests.t.T.test_tax": "FAILED",
    }
    assert pass_fail_map("FAILED tests/a.py::test_x - AssertionError: 1 != 2") == {
        "tests/a.py::test_x": "FAILED"
    }
    assert diff_files(DIFF) == {"shop/cart.py"}


def state(diff: str = "", tests: dict[str, str] | None = None) -> dict[str, object]:
    from fidelity.compare.swe import diff_files as files

    return {"changed_files": sorted(files(diff)), "diff": diff, "tests": tests or {}}


def compare_states(real: dict[str, object], sim: dict[str, object], text: str = "ok\n"):  # type: ignore[no-untyped-def]
    context = CompareContext(action=CommandAction(command="true"))
    return SweComparator().compare(
        Observation(text=text, exit_code=0, state=real),
        Observation(text=text, exit_code=0, state=sim),
        context,
    )


def test_same_text_but_forgotten_edit_drifts_on_state() -> None:
    result = compare_states(state(DIFF), state(""))
    assert result.drift
    assert "file:shop/cart.py" in result.omissions
    assert result.metrics["diff_file_f1"] == 0.0
    assert compare_states(state(DIFF), state(DIFF)).drift is False


def test_state_hunks_and_invented_file() -> None:
    other = DIFF.replace("i.price * i.quantity", "i.price + i.quantity + 1")
    result = compare_states(state(DIFF), state(other))
    assert result.drift and result.metrics["hunk_sim"] < 0.8
    invented = DIFF + DIFF.replace("shop/cart.py", "shop/extra.py")
    result = compare_states(state(DIFF), state(invented))
    assert "file:shop/extra.py" in result.hallucinations


def test_state_test_maps_are_compared() -> None:
    passed = {"tests.test_cart.T.test_total": "PASSED"}
    flipped = {"tests.test_cart.T.test_total": "FAILED"}
    result = compare_states(state(tests=passed), state(tests=flipped))
    assert "test tests.test_cart.T.test_total: PASSED != FAILED" in result.reasons
    assert compare_states(state(tests=passed), state(tests=passed)).drift is False


def test_state_wins_over_text_only_when_both_sides_have_it() -> None:
    # Text shows a flipped test; state (both sides) agrees: the state is what is compared.
    real_text = PASSING
    sim_text = PYTEST.format(
        d="FAILED                                 ", summary="1 failed, 3 passed", secs="0.12"
    )
    same = state(tests={"a.T.test_x": "PASSED"})
    context = CompareContext(action=CommandAction(command="python -m pytest -v"))
    both = SweComparator().compare(
        Observation(text=real_text, exit_code=0, state=same),
        Observation(text=sim_text, exit_code=0, state=same),
        context,
    )
    assert not any(r.startswith("test ") for r in both.reasons)
    one_side = SweComparator().compare(
        Observation(text=real_text, exit_code=0, state=same),
        Observation(text=sim_text, exit_code=0),
        context,
    )
    assert "test tests/test_cart.py::test_discount: PASSED != FAILED" in one_side.reasons


def test_malformed_sim_state_counts_as_empty() -> None:
    result = compare_states(state(DIFF), {"changed_files": "nope", "diff": 3, "tests": []})
    assert result.drift and "file:shop/cart.py" in result.omissions
