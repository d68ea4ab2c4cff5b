"""The world-model dev set (``devsets/wm``): every labelled step has one usable answer."""

from __future__ import annotations

import json
from pathlib import Path

from devsets.wm.load import (
    _file_order,
    load_labels,
    load_prediction_sources,
    load_predictions,
)


def test_every_labelled_step_has_a_usable_answer_and_both_labellers() -> None:
    answers = load_predictions()
    labels = load_labels()
    assert len(labels) >= 290
    assert sorted(set(labels) - set(answers)) == []
    assert {len(by) for by in labels.values()} == {2}


def test_prediction_files_are_read_in_the_order_they_were_written() -> None:
    names = [Path(f"shard{n}.jsonl") for n in (10, 2, 0, 9)]
    assert [p.stem for p in sorted(names, key=_file_order)] == [
        "shard0",
        "shard2",
        "shard9",
        "shard10",
    ]


def _write(folder: Path, name: str, tasks: list[str]) -> None:
    lines = [json.dumps({"task": task, "answer": f"{name} on {task}"}) for task in tasks]
    (folder / f"{name}.jsonl").write_text("\n".join(lines) + "\n")


def test_an_open_loop_answer_is_used_only_from_a_predictor_that_saw_no_real_step(
    tmp_path: Path,
) -> None:
    (tmp_path / "predictions").mkdir()
    _write(tmp_path / "predictions", "shard1", ["swe|tf|run-a|3", "swe|ol|run-a|1"])
    _write(tmp_path / "predictions", "shard10", ["swe|ol|run-a|1", "swe|ol|run-b|1"])
    _write(tmp_path / "predictions", "shard2", ["swe|ol|run-b|1"])
    sources = load_prediction_sources(tmp_path)
    assert sources == {
        "swe|tf|run-a|3": "shard1",
        "swe|ol|run-a|1": "shard10",  # shard1 saw run-a's real history in its tf prompt
        "swe|ol|run-b|1": "shard2",  # the first written, not the first by name
    }
    assert load_predictions(tmp_path)["swe|ol|run-b|1"] == "shard2 on swe|ol|run-b|1"
