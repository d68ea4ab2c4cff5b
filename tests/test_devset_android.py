"""The android dev set (``devsets/android``): real screens that parse, tasks that do not leak."""

from __future__ import annotations

import pytest

from devsets.android.build_tasks import task
from devsets.android.load import Record, load_pairs, load_records
from fidelity.compare.android import AndroidComparator
from fidelity.compare.base import CompareContext
from fidelity.trajectory import AndroidAction, Observation

RECORDS = load_records()
WAIT = CompareContext(action=AndroidAction(action_type="wait"), history=[], depth=1)


def test_the_set_holds_transitions_and_volatile_pairs_from_several_sources() -> None:
    kinds = {r.kind for r in RECORDS}
    assert kinds == {"transition", "volatile"}
    assert len({r.source for r in RECORDS if r.kind == "transition"}) >= 10


@pytest.mark.parametrize("record", RECORDS, ids=[r.id for r in RECORDS])
def test_every_screen_is_read_whole_by_the_android_comparator(record: Record) -> None:
    comparator = AndroidComparator()
    for text in (record.before, record.real, record.second):
        if not text:
            continue
        elements, _ = comparator.parse(Observation(text=text))
        assert len(elements) == text.count("\n") - 1  # one element a line, all of them read
        same = comparator.compare(Observation(text=text), Observation(text=text), WAIT)
        assert same.score == 1.0 and not same.drift


CHANGING = [r for r in RECORDS if r.kind == "transition" and r.real != r.before]
"""Transitions whose screen changes (a no-op's screen after is, by design, the one shown)."""


@pytest.mark.parametrize("record", CHANGING, ids=[r.id for r in CHANGING])
def test_a_task_never_shows_the_screen_it_asks_for(record: Record) -> None:
    prompt = str(task(record)["prompt"])
    assert record.before in prompt
    assert record.real not in prompt


def test_every_file_cited_names_a_repository_commit_and_path() -> None:
    for record in RECORDS:
        for cited in record.files:
            repo, _, rest = cited.partition("@")
            commit, _, path = rest.partition(":")
            assert repo.count("/") == 1 and len(commit) == 40 and path.endswith(".json"), cited


def test_labelled_pairs_load_with_both_labellers() -> None:
    pairs = load_pairs()
    assert pairs, "no labelled step"
    assert all(p.label_a is not None and p.label_b is not None for p in pairs)
