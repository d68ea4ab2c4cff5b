"""Per-domain calibrations of the web and swe comparators, and their development sets."""

from __future__ import annotations

import random
from importlib import resources
from pathlib import Path
from types import SimpleNamespace

import pytest

from devsets.calibration.devset_swe import SWE_CORRUPTIONS
from devsets.calibration.devset_swe import vary_volatile as swe_volatile
from devsets.calibration.devset_web import WEB_CORRUPTIONS
from devsets.calibration.devset_web import vary_volatile as web_volatile
from fidelity.compare import SweComparator, WebComparator
from fidelity.compare.base import CompareContext
from fidelity.compare.calibration import (
    SWE_FEATURES,
    WEB_FEATURES,
    Calibration,
    feature_names,
    load_calibration,
)
from fidelity.compare.config import CompareConfig
from fidelity.compare.swe import pass_fail_map
from fidelity.trajectory import CommandAction, Observation, Step, TextAction, ToolAction

PAGE = """\
# url: 'http://localhost:8000/books'
# tab 0 (active): 'Catalogue · Lantern Library'
RootWebArea 'Catalogue · Lantern Library', focused, url='http://localhost:8000/books'
\t[5] navigation 'Main'
\t\t[7] link 'Home', url='http://localhost:8000/'
\t\t[8] link 'Catalogue', url='http://localhost:8000/books'
\t[14] main
\t\t[15] heading 'Catalogue'
\t\tStaticText '48 result(s), page 1 of 5.'
\t\t[30] table
\t\t\t[39] row
\t\t\t\t[40] cell 'The Quiet Lantern 1'
\t\t\t\t[42] cell 'Lars Berg'
\t\t[80] checkbox 'Available only', checked=false
\t\t[81] button 'Next'
"""
VIEW = (
    "Here's the result of running `cat -n` on /repos/idna/idna/core.py:\n"
    "    10\tdef check_hyphen_ok(label):\n"
    "    11\t    if label[2:4] == '--':\n"
    "    12\t        raise IDNAError('Label has disallowed hyphens')\n"
    "    13\t    return True\n"
)
DIFF = (
    "diff --git a/idna/core.py b/idna/core.py\nindex 084c434..341c1c7 100644\n"
    "--- a/idna/core.py\n+++ b/idna/core.py\n@@ -11,1 +11,1 @@\n"
    "-    if label[2:4] == '--':\n+    if label[2:4] == '--' and label[:2] != 'xn':\n"
)
TESTS = (
    "test_hyphen (tests.test_idna.IDNATests.test_hyphen) ... ok\n"
    "test_length (tests.test_idna.IDNATests.test_length) ... FAIL\n\n"
    "Ran 2 tests in 0.004s\n\nFAILED (failures=1)\n"
)


def _web(text: str) -> Observation:
    return Observation(text=text)


def _swe(text: str, files: list[str] | None = None, diff: str = "") -> Observation:
    state = {"changed_files": files or [], "diff": diff, "tests": pass_fail_map(text)}
    return Observation(text=text, exit_code=0, state=state)


WEB_CONTEXT = CompareContext(action=TextAction(text="click('81')"))
SWE_CONTEXT = CompareContext(action=CommandAction(command="python3 -m unittest -v"))


def _fixed(domain: str, intercept: float) -> Calibration:
    """A calibration that always (intercept +50) or never (-50) reaches its cutoff."""
    names = feature_names(domain)
    return Calibration(
        domain=domain,
        features=list(names),
        coef=[0.0] * len(names),
        intercept=intercept,
        cutoff=0.5,
    )


@pytest.mark.parametrize(("domain", "names"), [("web", WEB_FEATURES), ("swe", SWE_FEATURES)])
def test_shipped_calibrations_load_with_their_features(domain: str, names: tuple[str, ...]) -> None:
    calibration = load_calibration(domain)
    assert calibration is not None and calibration.features == list(names)
    assert calibration.probability([0.0] * len(names)) < calibration.cutoff


def test_calibration_with_other_features_is_rejected() -> None:
    with pytest.raises(ValueError, match="does not match"):
        Calibration(
            domain="web", features=list(SWE_FEATURES), coef=[0.0] * 12, intercept=0, cutoff=0.5
        )


def test_web_applies_its_calibration_and_falls_back_to_the_threshold() -> None:
    sim = PAGE.replace("'Next'", "'Next page'")
    calibrated = WebComparator().compare(_web(PAGE), _web(sim), WEB_CONTEXT)
    assert calibrated.drift and "drift_p" in calibrated.metrics
    assert any(r.startswith("drift probability") for r in calibrated.reasons)
    for fixed in (WebComparator(0.5), WebComparator(calibrated=False)):
        assert fixed.calibration is None
        result = fixed.compare(_web(PAGE), _web(sim), WEB_CONTEXT)
        assert result.drift and "drift_p" not in result.metrics
    config = CompareConfig(thresholds={"web": 0.9})
    assert WebComparator(config=config).calibration is None


def test_missing_calibration_file_keeps_fixed_rules(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The package's calibration folder without ``web.json`` and ``swe.json`` (only
    ``terminal.json``): the real loader finds no file, and those domains decide by their
    fixed rules, the swe comparator's text part by the terminal calibration."""
    import fidelity.compare.calibration as shipped

    sim = PAGE.replace("'Next'", "'Next page'")
    calibrated = WebComparator().compare(_web(PAGE), _web(sim), WEB_CONTEXT)
    assert "drift_p" in calibrated.metrics  # the shipped web.json decides
    folder = resources.files(shipped.__name__)
    (tmp_path / "terminal.json").write_text(folder.joinpath("terminal.json").read_text())
    monkeypatch.setattr(shipped, "resources", SimpleNamespace(files=lambda package: tmp_path))
    shipped.load_calibration.cache_clear()
    try:
        web, swe = WebComparator(), SweComparator()
        fixed = web.compare(_web(PAGE), _web(sim), WEB_CONTEXT)
    finally:
        shipped.load_calibration.cache_clear()  # the shipped files again for later tests
    assert web.calibration is None and swe.calibration is None
    assert swe.terminal.calibration is not None and swe.terminal.calibration.domain == "terminal"
    assert fixed.drift and "drift_p" not in fixed.metrics  # the fixed threshold's verdict
    assert not any(reason.startswith("drift probability") for reason in fixed.reasons)
    assert fixed.score == calibrated.score  # the same comparison, another decision


def test_web_verdict_follows_the_calibration_not_the_fixed_rules() -> None:
    comparator = WebComparator()
    sim = PAGE.replace("[81] button 'Next'", "[81] button 'Next'\n\t\t[82] button 'Export'")
    comparator.calibration = _fixed("web", -50.0)
    quiet = comparator.compare(_web(PAGE), _web(sim), WEB_CONTEXT)
    assert not quiet.drift and quiet.reasons == [] and quiet.hallucinations == ["ui:button:Export"]
    comparator.calibration = _fixed("web", 50.0)
    loud = comparator.compare(_web(PAGE), _web(PAGE), WEB_CONTEXT)
    assert loud.drift and loud.reasons == ["drift probability 1.00 >= 0.50"]


def test_swe_flipped_test_drifts_whatever_the_probability() -> None:
    comparator = SweComparator()
    comparator.calibration = _fixed("swe", -50.0)
    flipped = TESTS.replace("... FAIL", "... ok")
    result = comparator.compare(_swe(TESTS), _swe(flipped), SWE_CONTEXT)
    assert result.drift and result.metrics["tests_flipped"] == 1.0
    assert result.reasons[0].startswith("test tests.test_idna.IDNATests.test_length")
    other = comparator.compare(_swe(VIEW), _swe(VIEW.replace("==", "!=")), SWE_CONTEXT)
    assert not other.drift and other.metrics["lines_changed"] == 2.0


def test_swe_shipped_calibration_flags_one_wrong_view_line_not_a_duration() -> None:
    comparator = SweComparator()
    assert comparator.calibration is not None and comparator.terminal.calibration is None
    wrong = comparator.compare(_swe(VIEW), _swe(VIEW.replace("==", "!=")), SWE_CONTEXT)
    assert wrong.drift and "drift_p" in wrong.metrics
    slower = comparator.compare(_swe(TESTS), _swe(TESTS.replace("0.004s", "0.391s")), SWE_CONTEXT)
    assert not slower.drift and slower.reasons == []


def _history(obs: Observation, action: TextAction | CommandAction | ToolAction) -> list[Step]:
    return [Step(action=action, observation=obs)]


@pytest.mark.parametrize("kind", sorted(WEB_CORRUPTIONS))
def test_web_corruptions_are_seeded_and_drift(kind: str) -> None:
    before = _web(PAGE.replace("[81] button 'Next'", "[81] button 'Previous'"))
    history = [*_history(before, WEB_CONTEXT.action), *_history(_web(PAGE), WEB_CONTEXT.action)]
    context = CompareContext(action=WEB_CONTEXT.action, history=history[:1])
    first = WEB_CORRUPTIONS[kind](_web(PAGE), history, random.Random(3))
    assert first is not None and first == WEB_CORRUPTIONS[kind](
        _web(PAGE), history, random.Random(3)
    )
    assert WebComparator().compare(_web(PAGE), first[0], context).drift, kind


@pytest.mark.parametrize("kind", sorted(SWE_CORRUPTIONS))
def test_swe_corruptions_are_seeded_and_drift(kind: str) -> None:
    action = ToolAction(
        tool="str_replace_editor",
        args={
            "command": "str_replace",
            "path": "/repos/idna/idna/core.py",
            "old_str": "a",
            "new_str": "b",
        },
    )
    texts = {
        "false_success": "No replacement was performed, old_str `a` did not appear verbatim.\n",
        "flipped_test": TESTS,
        "changed_number": TESTS,
        "stale_state": TESTS,
    }
    obs = _swe(texts.get(kind, VIEW + DIFF), ["idna/core.py"], DIFF)
    earlier = _swe(TESTS.replace("... FAIL", "... ok").replace("FAILED (failures=1)", "OK"))
    history = [Step(action=action, observation=earlier), Step(action=action, observation=obs)]
    first = SWE_CORRUPTIONS[kind](obs, history, random.Random(3))
    assert first is not None and first == SWE_CORRUPTIONS[kind](obs, history, random.Random(3))
    context = CompareContext(action=action, history=history[:1])
    assert SweComparator().compare(obs, first[0], context).drift, kind


def test_volatile_variants_change_the_text_but_do_not_drift() -> None:
    page = web_volatile(_web(PAGE), random.Random(1))
    assert page is not None and page.text != PAGE
    assert not WebComparator().compare(_web(PAGE), page, WEB_CONTEXT).drift
    run = _swe(TESTS + DIFF)
    varied = swe_volatile(run, random.Random(1))
    assert varied is not None and varied.text != run.text
    assert not SweComparator().compare(run, varied, SWE_CONTEXT).drift
    assert swe_volatile(_swe("no volatile content\n"), random.Random(1)) is None


@pytest.mark.parametrize("domain", ["web", "swe", "os", "mcp", "search"])
def test_one_rule_decides_fixed_threshold_or_calibration(domain: str) -> None:
    """An explicit threshold, a [thresholds] entry or calibrated=False fix the threshold."""
    from fidelity.compare import get_comparator
    from fidelity.compare.calibration.apply import calibration_for

    assert calibration_for(domain, None, CompareConfig()) == load_calibration(domain) is not None
    assert calibration_for(domain, 0.8, CompareConfig()) is None
    assert calibration_for(domain, None, CompareConfig(thresholds={domain: 0.8})) is None
    assert calibration_for(domain, None, CompareConfig(), enabled=False) is None
    assert calibration_for(domain, None, CompareConfig(thresholds={"terminal": 0.8})) is not None
    fixed = get_comparator(domain, CompareConfig(thresholds={domain: 0.8}))
    assert getattr(fixed, "calibration", "absent") is None
    assert getattr(get_comparator(domain), "calibration", None) is not None
