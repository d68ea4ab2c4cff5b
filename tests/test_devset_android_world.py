"""The AndroidWorld dev set (``devsets/android_world``): real screens with a status bar, read
from ``../shared/android-screens`` at run time; every screen parses whole, no task shows the
screen it asks for, no sheet tells the kinds apart."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pytest

from devsets.android_world.build_tasks import task
from devsets.android_world.label_batches import sheet
from devsets.android_world.load import LOGS, SHARED, Pair, load_pairs, load_records, m3a_fields
from fidelity.compare.android import AndroidComparator
from fidelity.compare.base import CompareContext
from fidelity.model import AndroidAction, Observation
from tests.conftest import unavailable

WAIT = CompareContext(action=AndroidAction(action_type="wait"))


@pytest.fixture(scope="module")
def records() -> list[Pair]:
    if not (SHARED / LOGS).is_dir():
        unavailable("../shared/android-screens is not beside this checkout")
    return load_records()


def test_the_set_holds_every_kind_and_three_apps(records: list[Pair]) -> None:
    kinds = Counter(p.kind for p in records)
    assert kinds["predicted"] == 75 and kinds["unchanged"] >= 30 and kinds["recapture"] >= 15
    assert {p.group for p in records} == {"calendar", "audio", "chrome"}
    assert all(p.action is not None for p in records)
    assert all(p.real.text != p.sim.text for p in records if p.kind != "predicted")


def test_every_screen_is_read_whole_and_equals_itself(records: list[Pair]) -> None:
    comparator = AndroidComparator()
    for pair in records:
        for text in {pair.before, pair.real.text, pair.sim.text} - {""}:
            items = comparator.parse(Observation(text=text))[0]
            chrome = comparator.parse(Observation(text=text))[1].get("android_chrome", 0)
            assert len(items) + chrome == text.count("UI element "), pair.id
            same = comparator.compare(Observation(text=text), Observation(text=text), WAIT)
            assert (same.score, same.drift) == (1.0, False), pair.id


def test_the_talking_status_bar_is_system_ui(records: list[Pair]) -> None:
    """Clock, notification icon, signal, battery and connectivity: five elements a screen."""
    comparator = AndroidComparator()
    calendar = [p for p in records if p.group == "calendar" and p.kind == "unchanged"]
    for pair in calendar:
        counts = comparator.parse(pair.real)[1]
        assert counts["android_chrome"] == 5, pair.id


def test_a_task_never_shows_the_screen_it_asks_for(records: list[Pair]) -> None:
    for pair in records:
        if pair.kind != "predicted" or pair.before == pair.real.text:
            continue
        prompt = str(task(pair)["prompt"])
        assert pair.before in prompt and pair.real.text not in prompt, pair.id


def test_sheets_show_no_kind_and_no_verdict(records: list[Pair]) -> None:
    """The sheet's own words (the screens aside) are the same for every kind."""
    blank = Observation(text="SCREEN")
    texts = set()
    for kind in ("predicted", "unchanged", "recapture"):
        pair = next(p for p in records if p.kind == kind)
        shown = dataclasses.replace(pair, id="ID", before="SCREEN", real=blank, sim=blank)
        action = pair.action.render() if pair.action is not None else ""
        texts.add(sheet(shown).replace(pair.goal, "GOAL").replace(action, "A"))
    assert len(texts) == 1
    (text,) = texts
    for word in ("unchanged", "recapture", "predict", "drift", "fidelity", "volatile"):
        assert word not in text.lower()
    assert not {p.id[-2:] for p in records} - {"-1", "-2", "-3"}


def test_m3a_values_are_read_as_written() -> None:
    line = (
        'UI element 4: {"index": 4, "text": "a "quoted", text", "is_clickable": True, '
        '"is_scrollable": True}'
    )
    assert m3a_fields(line) == {
        "index": "4",
        "text": 'a "quoted", text',
        "is_clickable": "True",
        "is_scrollable": "True",
    }


def test_predictions_and_labels_attach_by_task(records: list[Pair], tmp_path: Path) -> None:
    """A prediction turns a ``predicted`` record into a pair; labels attach by task id."""
    first = next(p for p in records if p.kind == "predicted")
    unchanged = next(p for p in records if p.kind == "unchanged")
    (tmp_path / "predictions").mkdir()
    (tmp_path / "labels").mkdir()
    answer = f"<predicted_observation>\n{first.real.text}\n</predicted_observation>"
    (tmp_path / "predictions" / "shard1.jsonl").write_text(
        json.dumps({"task": first.id, "answer": answer}) + "\n"
    )
    for name in ("androidworld-a", "androidworld-b"):
        rows = [
            {"task": first.id, "label": "identical"},
            {"task": unchanged.id, "label": "drift", "hallucinations": ["x"]},
        ]
        (tmp_path / "labels" / f"{name}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    pairs = {p.id: p for p in load_pairs(tmp_path)}
    assert set(pairs) == {first.id, unchanged.id}
    assert pairs[first.id].sim.text.strip() == first.real.text.strip()
    assert pairs[unchanged.id].label == "drift" and pairs[unchanged.id].hallucinations() == ["x"]
    assert pairs[first.id].label_a is not None and pairs[first.id].label_b is not None
