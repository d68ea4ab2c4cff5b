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
from devsets.android_world.load import (
    HELD_OUT,
    HERE,
    LABELLERS,
    LOGS,
    SHARED,
    TUNING,
    Pair,
    disagreements,
    load_pairs,
    load_records,
    m3a_fields,
)
from devsets.wm.load import LABELS, load_labels
from fidelity.compare.android import AndroidComparator
from fidelity.compare.base import CompareContext
from fidelity.trajectory import AndroidAction, Observation
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


@pytest.fixture(scope="module")
def labelled(records: list[Pair]) -> list[Pair]:
    """Every labelled pair, the ones the labellers disagree on included."""
    if not (HERE / "labels").is_dir():
        unavailable("devsets/android_world/labels holds no labels")
    return load_pairs(agreed_only=False)


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_both_labellers_labelled_every_pair_and_only_known_ones(records: list[Pair]) -> None:
    """Each label file covers the same pairs, all of them pairs of the set, with rubric labels;
    every predicted pair that was labelled has its prediction."""
    labels = load_labels(HERE)
    known = {p.id for p in records}
    assert labels and set(labels) <= known
    assert all(set(by) == set(LABELLERS) for by in labels.values())
    assert all(lab.label in LABELS for by in labels.values() for lab in by.values())
    assert {p.id for p in load_pairs(agreed_only=False)} == set(labels)


def test_disagreements_are_left_out_and_named(labelled: list[Pair]) -> None:
    """The figures use the pairs both labellers labelled alike; the others are named apart."""
    split = disagreements(labelled)
    differ = {
        p.id for p in labelled if p.labels[LABELLERS[0]].label != p.labels[LABELLERS[1]].label
    }
    assert {p.id for p in split} == differ
    used = load_pairs()
    assert {p.id for p in used} == {p.id for p in labelled} - differ
    assert all(p.agreed and p.label in LABELS for p in used)
    assert all(p.label == "" for p in split)
    assert len(split) < len(labelled) / 10  # agreement is what makes the set trustworthy


def test_the_labels_keep_the_rubric(labelled: list[Pair]) -> None:
    """What the rubric and LABELLING.md ask, in every label: a pair identical but for trailing
    whitespace is labelled identical and only such a pair; a drift lists what differs, copied
    from its side (hallucinations from SIMULATED, omissions from REAL); other labels list
    nothing."""
    for pair in labelled:
        real = [line.rstrip() for line in pair.real.text.strip().split("\n")]
        sim = [line.rstrip() for line in pair.sim.text.strip().split("\n")]
        for lab in pair.labels.values():
            assert (lab.label == "identical") == (real == sim), pair.id
            if lab.label != "drift":
                assert not (lab.hallucinations or lab.omissions), pair.id
                continue
            assert lab.hallucinations or lab.omissions, pair.id
            assert all(_flat(h) in _flat(pair.sim.text) for h in lab.hallucinations), pair.id
            assert all(_flat(o) in _flat(pair.real.text) for o in lab.omissions), pair.id


def test_every_app_is_tuning_or_held_out_and_both_are_labelled(labelled: list[Pair]) -> None:
    """The hold-out split is by app, named in advance: the labelled pairs cover both sides."""
    groups = {p.group for p in labelled}
    assert groups == set(TUNING) | set(HELD_OUT) and not set(TUNING) & set(HELD_OUT)
    for side in (TUNING, HELD_OUT):
        mine = [p for p in load_pairs() if p.group in side]
        assert any(p.label == "drift" for p in mine) and any(p.label != "drift" for p in mine)


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


def test_a_pair_the_labellers_disagree_on_is_left_out(records: list[Pair], tmp_path: Path) -> None:
    """Drift for one labeller, volatile for the other: no label, out of the figures, named."""
    unchanged = [p for p in records if p.kind == "unchanged"][:2]
    (tmp_path / "labels").mkdir()
    for name, label in (("androidworld-a", "drift"), ("androidworld-b", "volatile")):
        rows = [
            {"task": unchanged[0].id, "label": label},
            {"task": unchanged[1].id, "label": "volatile"},
        ]
        (tmp_path / "labels" / f"{name}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    every = load_pairs(tmp_path, agreed_only=False)
    assert {p.id for p in every} == {p.id for p in unchanged}
    assert [p.id for p in disagreements(every)] == [unchanged[0].id]
    assert [(p.id, p.label) for p in load_pairs(tmp_path)] == [(unchanged[1].id, "volatile")]
