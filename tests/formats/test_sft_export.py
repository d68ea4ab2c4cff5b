"""``--to sft``: whole trajectories for fine-tuning, the untrusted turns out of the loss or cut.

Rows are compared field by field with chats written out by hand here, and loaded with Hugging
Face ``datasets``; the trainers' own code reads them in ``test_stack_loaders.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fidelity.errors import UsageError
from fidelity.formats.rl_export import (
    EXTRA_INFO_FIELDS,
    ExportOptions,
    RLWriter,
    TrajectoryFidelity,
    suffix,
)
from fidelity.formats.sft_export import MESSAGE_FIELDS, SFT_COLUMNS, sft_schema
from fidelity.trajectory import Trajectory
from tests.conftest import require_module

SYSTEM = "You are a shell agent. One command a turn."
TOOLS = [{"name": "write_note", "description": "Save a note.", "parameters": {"type": "object"}}]


def _terminal(**fields: Any) -> Trajectory:
    data = {
        "id": "t-shell",
        "domain": "terminal",
        "instruction": "Count the files, then read a.txt.",
        "system_prompt": SYSTEM,
        "source": "sim",
        "env": {"initial_observation": "agent@box:/w$"},
        "steps": [
            {"action": {"type": "command", "command": "ls"}, "observation": {"text": "a.txt\n"}},
            {"action": {"type": "command", "command": "cat a.txt"}, "observation": {"text": "hi"}},
            {"action": {"type": "command", "command": "rm a.txt"}, "observation": {"text": ""}},
        ],
        **fields,
    }
    return Trajectory.model_validate(data)


def _notes() -> Trajectory:
    return Trajectory.model_validate(
        {
            "id": "t-notes",
            "domain": "mcp",
            "instruction": "Save a note called ünï.",
            "env": {"tools": TOOLS},
            "steps": [
                {
                    "action": {"type": "tool", "tool": "write_note", "args": {"title": "ünï"}},
                    "observation": {"text": "saved"},
                },
                {"action": {"type": "tool", "tool": "list_notes"}, "observation": {"text": "ünï"}},
            ],
        }
    )


def _message(role: str, content: str, trained: bool | None = None, **rest: Any) -> dict[str, Any]:
    message = {"role": role, "content": content, "tool_calls": None, "tool_call_id": None}
    message |= {"step_loss_mask": 0 if trained is False else 1, "loss_weight": float(bool(trained))}
    return message | rest


TRUSTED_TWO = TrajectoryFidelity(trust_horizon=2, verified=True, gate_run_id="g1")
WHOLE = [
    _message("system", SYSTEM),
    _message("user", "Count the files, then read a.txt.\n\nagent@box:/w$"),
    _message("assistant", "ls", True),
    _message("user", "a.txt\n"),
    _message("assistant", "cat a.txt", True),
    _message("user", "hi"),
    _message("assistant", "rm a.txt", False),  # after the trust horizon: out of the loss
]


def _rows(tmp_path: Path, *written: tuple[Trajectory, TrajectoryFidelity]) -> list[dict[str, Any]]:
    pq = require_module("pyarrow.parquet", "pip install pyarrow")
    path = tmp_path / "admitted.sft.parquet"
    with RLWriter(path, ExportOptions(format="sft")) as writer:
        for trajectory, fidelity in written:
            writer.write(trajectory, fidelity)
    table = pq.read_table(path)  # type: ignore[attr-defined]
    assert table.schema.equals(sft_schema())
    return list(table.to_pylist())


def test_the_whole_trajectory_masked_and_the_trusted_prefix_cut(tmp_path: Path) -> None:
    (row,) = _rows(tmp_path, (_terminal(), TRUSTED_TWO))
    assert list(row) == list(SFT_COLUMNS)
    assert row["trajectory"] == WHOLE  # slime: step_loss_mask 0 on the untrusted action
    assert row["messages"] == WHOLE[:5]  # verl, TRL, OpenRLHF, SkyRL: cut after the last trusted
    assert row["messages"][0]["role"] == "system"
    assert row["messages"][1]["content"].startswith("Count the files")  # the task comes first
    assert row["conversations"] == [  # LLaMA-Factory's sharegpt, cut the same way
        {"from": "human", "value": "Count the files, then read a.txt.\n\nagent@box:/w$"},
        {"from": "gpt", "value": "ls"},
        {"from": "human", "value": "a.txt\n"},
        {"from": "gpt", "value": "cat a.txt"},
    ]
    assert (row["system"], row["tools"]) == (SYSTEM, None)
    extra = row["extra_info"]
    assert list(extra) == [*EXTRA_INFO_FIELDS, "data_source"]
    assert (extra["trust_mask"], extra["data_source"]) == ([1, 1, 0], "fidelity/terminal")


def test_tool_calls_and_tool_answers(tmp_path: Path) -> None:
    fidelity = TrajectoryFidelity(trust_horizon=5, verified=False)
    (row,) = _rows(tmp_path, (_notes(), fidelity))
    call = {"name": "write_note", "arguments": '{"title": "ünï"}'}
    assert row["messages"] == [
        _message("user", "Save a note called ünï."),
        _message(
            "assistant",
            "",
            True,
            tool_calls=[{"id": "call_1", "type": "function", "function": call}],
        ),
        _message("tool", "saved", tool_call_id="call_1"),
        _message(
            "assistant",
            "",
            True,
            tool_calls=[
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "list_notes", "arguments": "{}"},
                }
            ],
        ),
    ]
    assert row["conversations"] == [
        {"from": "human", "value": "Save a note called ünï."},
        {"from": "function_call", "value": '{"name": "write_note", "arguments": {"title": "ünï"}}'},
        {"from": "observation", "value": "saved"},
        {"from": "function_call", "value": '{"name": "list_notes", "arguments": {}}'},
    ]
    assert json.loads(row["tools"]) == TOOLS and row["system"] is None


def _sharegpt_is_valid(turns: list[dict[str, str]]) -> bool:
    """LLaMA-Factory's sharegpt rule (FORMATS.md): human/observation at even positions,
    gpt/function_call at odd ones, an even count ending on gpt or function_call."""
    even, odd = {"human", "observation"}, {"gpt", "function_call"}
    placed = all(t["from"] in (even if i % 2 == 0 else odd) for i, t in enumerate(turns))
    return placed and len(turns) % 2 == 0 and turns[-1]["from"] in odd


def test_sharegpt_turns_follow_llamafactorys_rule(tmp_path: Path) -> None:
    rows = _rows(
        tmp_path,
        (_terminal(), TRUSTED_TWO),
        (_notes(), TrajectoryFidelity(trust_horizon=1, verified=True)),
    )
    assert [_sharegpt_is_valid(r["conversations"]) for r in rows] == [True, True]


def test_no_trusted_action_gives_no_row(tmp_path: Path) -> None:
    rows = _rows(
        tmp_path,
        (_terminal(), TrajectoryFidelity(trust_horizon=0, verified=True)),
        (_notes(), TrajectoryFidelity(trust_horizon=9, verified=False)),
    )
    assert [r["extra_info"]["trajectory_id"] for r in rows] == ["t-notes"]


def test_a_trajectory_without_its_task_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    untasked = _terminal(instruction=None)
    path = tmp_path / "admitted.sft.parquet"
    require_module("pyarrow", "pip install pyarrow")
    with (
        pytest.raises(UsageError, match="'t-shell' has no instruction to prompt with"),
        RLWriter(path, ExportOptions(format="sft")) as writer,
    ):
        writer.write(_notes(), TRUSTED_TWO)
        writer.write(untasked, TRUSTED_TWO)
    assert list(tmp_path.iterdir()) == []


def test_rows_load_with_hf_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = require_module("datasets", "pip install 'fidelity[test]'")
    rows = _rows(tmp_path, (_terminal(), TRUSTED_TWO), (_notes(), TRUSTED_TWO))
    loaded = datasets.load_dataset(  # type: ignore[attr-defined]
        "parquet",
        data_files=str(tmp_path / "admitted.sft.parquet"),
        split="train",
        cache_dir=str(tmp_path / "hf"),
    )
    assert list(loaded) == rows
    assert [m["role"] for m in loaded[0]["messages"]][:2] == ["system", "user"]
    assert list(loaded[0]["trajectory"][0]) == list(MESSAGE_FIELDS)


def test_sft_is_parquet_and_not_an_rl_import_format() -> None:
    assert suffix("sft") == ".parquet"
    from fidelity.formats.rl_import import read_rl

    with pytest.raises(UsageError, match="unknown RL format 'sft'"):
        read_rl("sft", [])
