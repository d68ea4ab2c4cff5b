"""The os comparator's other shapes (ElementSetComparator): JSON state compared as JSON, other
output as terminal text (fixed threshold)."""

from __future__ import annotations

import json

from fidelity.compare.base import CompareContext
from fidelity.compare.osworld import ElementSetComparator
from fidelity.trajectory import Observation, TextAction

CONTEXT = CompareContext(action=TextAction(text="pyautogui.hotkey('ctrl', 's')"))


def compare(real: str, sim: str):  # type: ignore[no-untyped-def]
    return ElementSetComparator().compare(Observation(text=real), Observation(text=sim), CONTEXT)


def test_json_window_state() -> None:
    state = {"active_window": "report.odt - LibreOffice Writer", "saved": True, "windows": 2}
    assert compare(json.dumps(state), json.dumps(state)).drift is False
    changed = compare(json.dumps(state), json.dumps({**state, "saved": False}))
    assert changed.drift and "value $.saved: true != false" in changed.reasons


def test_text_output_uses_fixed_text_rule() -> None:
    comparator = ElementSetComparator()
    assert comparator.json.text.calibration is None and comparator.threshold == 0.9
    result = compare("Saved /home/user/report.odt\n", "Saved /home/user/report-final.odt\n")
    assert result.drift
    assert "path:/home/user/report-final.odt" in result.hallucinations


HEADER = "tag\tname\ttext\tclass\tdescription\tposition (top-left x&y)\tsize (w&h)"


def table(*rows: tuple[str, str, str, str]) -> str:
    """OSWorld's linearised accessibility tree."""
    return "\n".join([HEADER, *(f"{t}\t{n}\t{x}\t\t\t{p}\t(10, 10)" for t, n, x, p in rows)])


def test_accessibility_table_compares_elements_not_positions() -> None:
    real = table(("push-button", "Save", "", "(10, 10)"), ("text", "Editor", "hello", "(0, 40)"))
    moved = table(("push-button", "Save", "", "(300, 10)"), ("text", "Editor", "hello", "(5, 45)"))
    assert (compare(real, moved).score, compare(real, moved).drift) == (1.0, False)
    invented = table(("push-button", "Export", "", "(10, 10)"), ("text", "Editor", "hi", "(0, 40)"))
    result = compare(real, invented)
    assert result.drift and "element:push-button 'Export'" in result.hallucinations
    assert result.metrics["tree"] == 1.0


def test_accessibility_xml_tree() -> None:
    real = '<desktop-frame name="main"><frame name="Mousepad"><push-button name="Save"/></frame></desktop-frame>'
    sim = '<desktop-frame name="main"><frame name="Mousepad"><push-button name="Quit"/></frame></desktop-frame>'
    assert compare(real, real).score == 1.0
    result = compare(real, sim)
    assert result.drift and "element:push-button 'Save'" in result.omissions
