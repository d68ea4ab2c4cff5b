"""The os comparator on OSWorld trees and their linearised tables."""

from __future__ import annotations

import pytest

from fidelity.compare import get_comparator
from fidelity.compare.base import CompareContext
from fidelity.compare.calibration import comparison_vector, load_calibration
from fidelity.compare.osworld import OsComparator, normalize
from fidelity.sandboxes.desktop_tree import linearize, parse_xml
from fidelity.trajectory import CodeAction, Observation

ST = "https://accessibility.ubuntu.example.org/ns/state"
CP = "https://accessibility.ubuntu.example.org/ns/component"
CONTEXT = CompareContext(action=CodeAction(code="pyautogui.typewrite('2+3=')"))


def tree(display: str = "5", x: int = 801, title: str = "galculator", checked: bool = False) -> str:
    shown = 'st:showing="true" st:visible="true"'
    check = ' st:checked="true"' if checked else ""
    return (
        f'<desktop-frame xmlns:st="{ST}" xmlns:cp="{CP}">'
        '<application name="galculator">'
        f'<frame name="{title}" {shown} cp:screencoord="(794, 350)" cp:size="(330, 380)">'
        f'<menu name="File" {shown} cp:screencoord="(794, 376)" cp:size="(39, 25)" />'
        f'<text name="" {shown} cp:screencoord="({x}, 408)" cp:size="(317, 52)">{display}</text>'
        f'<toggle-button name="=" {shown}{check} cp:screencoord="(1060, 639)" cp:size="(59, 74)" />'
        f'<toggle-button name="+" {shown} cp:screencoord="(995, 679)" cp:size="(59, 34)" />'
        "</frame></application></desktop-frame>"
    )


def real(xml: str) -> Observation:
    root = parse_xml(xml)
    assert root is not None
    return Observation(text=linearize(root) + "\n", state={"tree": xml})


def table(xml: str) -> Observation:
    return Observation(text=real(xml).text)


@pytest.fixture
def comparator() -> OsComparator:
    return OsComparator()


def test_the_os_domain_uses_it_with_its_calibration() -> None:
    comparator = get_comparator("os")
    assert isinstance(comparator, OsComparator)
    calibration = load_calibration("os")
    assert calibration is not None and comparator.calibration == calibration
    assert all(c >= 0 for c in calibration.coef)  # never runs backwards


@pytest.mark.parametrize("form", [table, lambda xml: Observation(text=xml)])
def test_same_screen_is_no_drift(comparator: OsComparator, form: object) -> None:
    xml = tree()
    result = comparator.compare(real(xml), form(xml), CONTEXT)  # type: ignore[operator]
    assert result.score == 1.0 and not result.drift and result.reasons == []


def test_a_few_pixels_and_volatile_parts_are_no_drift(comparator: OsComparator) -> None:
    assert not comparator.compare(real(tree()), table(tree(x=804)), CONTEXT).drift
    marked = Observation(text=tree(title="*galculator"))
    assert not comparator.compare(real(tree()), marked, CONTEXT).drift
    assert normalize("22\u200e\u223616 Yesterday 2024-06-01") == "<TIME> <TIME> <TIME>"


def test_real_differences_drift(comparator: OsComparator) -> None:
    wrong = comparator.compare(real(tree()), table(tree(display="6")), CONTEXT)
    assert wrong.drift and any("text of text:" in r for r in wrong.reasons)
    moved = comparator.compare(real(tree()), table(tree(x=850)), CONTEXT)
    assert moved.drift and any(r.startswith("moved text:") for r in moved.reasons)
    state = comparator.compare(real(tree()), Observation(text=tree(checked=True)), CONTEXT)
    assert state.drift and state.metrics["state_agreement"] < 1.0
    invented = table(tree()).text + 'push-button\tApply\t""\t\t\t(812, 640)\t(80, 30)\n'
    extra = comparator.compare(real(tree()), Observation(text=invented), CONTEXT)
    assert extra.drift and extra.hallucinations == ["push-button:Apply"]


def test_tree_keys_carry_the_ancestor_path(comparator: OsComparator) -> None:
    other = tree().replace('<application name="galculator">', '<application name="mousepad">')
    result = comparator.compare(real(tree()), Observation(text=other), CONTEXT)
    assert result.drift
    assert "application:galculator/frame:galculator/menu:File" in result.omissions


def test_more_difference_never_lowers_the_drift_probability(comparator: OsComparator) -> None:
    one = comparator.compare(real(tree()), table(tree(display="6")), CONTEXT)
    two = comparator.compare(real(tree()), table(tree(display="6", x=900)), CONTEXT)
    assert two.metrics["drift_p"] >= one.metrics["drift_p"]
    assert comparison_vector("os", two) >= comparison_vector("os", one)


@pytest.mark.parametrize(
    "text", ["", "not a tree", "<desktop-frame", '{"a": 1}', "tag\tname\n\t\t\t", "\x00" * 5]
)
def test_no_input_makes_it_raise(comparator: OsComparator, text: str) -> None:
    result = comparator.compare(real(tree()), Observation(text=text), CONTEXT)
    assert 0.0 <= result.score <= 1.0 and result.drift
