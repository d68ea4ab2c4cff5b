"""RL import: verl/SkyRL Parquet and OpenRLHF/slime JSONL rows back into trajectories.

Rows are written by the library as ``fidelity gate --to`` writes them (:class:`RLWriter`)
or by hand in the stacks' documented shapes, then read back by ``fidelity import``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.formats.jsonl import read_trajectories
from fidelity.formats.rl_export import (
    RL_FORMATS,
    ExportOptions,
    RLWriter,
    StepVerdict,
    TrajectoryFidelity,
    suffix,
)
from fidelity.formats.rl_import import rebuild_action
from fidelity.trajectory import Outcome, ToolAction, Trajectory
from fidelity.worldmodels.prompting import TASK_META
from tests.conftest import require_module

runner = CliRunner()


def _import(fmt: str, source: Path, output: Path) -> Any:
    return runner.invoke(app, ["import", fmt, str(source), "-o", str(output)])


def _trajectories() -> list[Trajectory]:
    """Four domains, four outcomes: success, failure, a reward, none."""
    terminal = {
        "id": "t-terminal",
        "domain": "terminal",
        "instruction": "list the files, then read a.txt",
        "system_prompt": "You are a shell agent.\n\nOne command a turn.",
        "source": "sim",
        "env": {"initial_observation": "agent@box:/w$", "workdir": "/w"},
        "steps": [
            {
                "action": {"type": "command", "command": "ls"},
                "observation": {"text": "a.txt\n", "exit_code": 0},
            },
            {
                "action": {"type": "command", "command": "cat a.txt"},
                "observation": {"text": "naïve — 日本語 \u2028 🎉\n", "exit_code": 0},
            },
        ],
        "outcome": {"success": True, "claimed_by": "simulation"},
    }
    mcp = {
        "id": "t-mcp",
        "domain": "mcp",
        "source": "sim",
        "meta": {TASK_META: "write a note"},  # the older files' key: read, then exported
        "env": {"description": "a notes server", "tools": [{"name": "write_note"}]},
        "steps": [
            {
                "action": {
                    "type": "tool",
                    "tool": "write_note",
                    "args": {"title": "a, b='c'", "tags": ["x", 1, None], "opts": {"pin": True}},
                },
                "observation": {"text": "saved", "state": {"notes": 1}},
            },
            {"action": {"type": "tool", "tool": "list_notes"}},
        ],
        "outcome": {"success": False, "claimed_by": "dataset"},
    }
    web = {
        "id": "t-web",
        "domain": "web",
        "source": "sim",
        "steps": [
            {"action": {"type": "browser", "action": "click('12')"}, "observation": {"text": "ok"}}
        ],
        "outcome": {"reward": 0.5, "claimed_by": "simulation"},
    }
    android = {
        "id": "t-android",
        "domain": "android",
        "source": "sim",
        "steps": [
            {
                "action": {
                    "type": "android",
                    "action_type": "input_text",
                    "text": "hi",
                    "index": 3,
                },
                "observation": {"text": "typed"},
            }
        ],
    }
    return [Trajectory.model_validate(t) for t in (terminal, mcp, web, android)]


def _fidelity(trajectory: Trajectory) -> TrajectoryFidelity:
    steps = [StepVerdict(score=0.9, drift=False)] * len(trajectory.steps)
    return TrajectoryFidelity(trust_horizon=1, verified=True, steps=steps, gate_run_id="g1")


def _written(
    fmt: str, folder: Path, trajectories: list[Trajectory], keep: int | None = None, **options: Any
) -> Path:
    """*trajectories* as the gate writes them: one row each, its outcome as ground truth."""
    if fmt in ("verl", "skyrl"):
        require_module("pyarrow", "pip install pyarrow")
    path = folder / f"admitted.{fmt}{suffix(fmt)}"  # type: ignore[arg-type]
    with RLWriter(path, ExportOptions(format=fmt, prompt="conversation", **options)) as writer:
        for index, trajectory in enumerate(trajectories, start=1):
            writer.write(
                trajectory, _fidelity(trajectory), trajectory.outcome, index=index, keep=keep
            )
    return path


def _seen(trajectory: Trajectory) -> list[tuple[str, int | None, Any] | None]:
    return [
        None
        if s.observation is None
        else (s.observation.text, s.observation.exit_code, s.observation.state)
        for s in trajectory.steps
    ]


@pytest.mark.parametrize("fmt", RL_FORMATS)
def test_round_trip(tmp_path: Path, fmt: str) -> None:
    originals = _trajectories()
    source = _written(fmt, tmp_path, originals)
    result = _import(fmt, source, tmp_path / "back.jsonl")
    assert result.exit_code == 0, result.output
    assert "imported 4 trajectories (6 steps" in result.stdout
    back = {t.id: t for t in read_trajectories(tmp_path / "back.jsonl")}
    assert list(back) == [t.id for t in originals]
    for original in originals:
        imported = back[original.id]
        assert imported.domain == original.domain
        assert [s.action for s in imported.steps] == [s.action for s in original.steps]
        assert _seen(imported) == _seen(original)
        assert imported.outcome == original.outcome
        assert imported.env == original.env
        assert imported.source == "sim"
        assert imported.instruction == original.task_instruction
        assert imported.system_prompt == original.system_prompt
        assert imported.meta["data_source"] == f"fidelity/{original.domain.value}"
        assert imported.meta["rl_record"]["gate_run_id"] == "g1"
    assert [back[t.id].outcome for t in originals] == [
        Outcome(success=True, claimed_by="simulation"),
        Outcome(success=False, claimed_by="dataset"),
        Outcome(reward=0.5, claimed_by="simulation"),
        None,
    ]


def _verl_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """Rows in verl's documented shape (data_source, prompt, ability, reward_model, extra_info)."""
    pa = require_module("pyarrow", "pip install pyarrow")
    pq = require_module("pyarrow.parquet", "pip install pyarrow")
    pq.write_table(pa.Table.from_pylist(rows), str(path))  # type: ignore[attr-defined]


def _chat(*turns: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": role, "content": content} for role, content in turns]


def test_verl_row_with_a_full_multi_turn_prompt(tmp_path: Path) -> None:
    source = tmp_path / "train.parquet"
    prompt = _chat(
        ("system", "You are a shell agent."),
        ("user", "Read a.txt."),
        ("assistant", "ls"),
        ("user", "a.txt\n"),
        ("assistant", "cat a.txt"),
        ("tool", "hello\n"),
        ("assistant", "echo done"),
    )
    row = {
        "data_source": "my-agent-data",
        "prompt": prompt,
        "ability": "terminal",
        "reward_model": {"style": "rule", "ground_truth": 1.0},
        "extra_info": {"index": 0, "split": "train"},
    }
    _verl_rows(source, [row])
    result = _import("verl", source, tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.output
    (imported,) = read_trajectories(tmp_path / "out.jsonl")
    assert imported.id == "train-1" and imported.domain == "terminal"
    assert [s.action.render() for s in imported.steps] == ["ls", "cat a.txt", "echo done"]
    assert {s.action.type for s in imported.steps} == {"command"}
    assert [None if s.observation is None else s.observation.text for s in imported.steps] == [
        "a.txt\n",
        "hello\n",
        None,
    ]
    assert imported.outcome == Outcome(reward=1.0, claimed_by="dataset")
    assert imported.instruction == "Read a.txt."
    assert imported.system_prompt == "You are a shell agent."
    assert imported.meta["data_source"] == "my-agent-data"


def test_foreign_jsonl_row_takes_its_domain_from_data_source(tmp_path: Path) -> None:
    source = tmp_path / "rows.jsonl"
    prompt = _chat(
        ("user", "Find x."),
        ("assistant", "search(query='x, y')"),
        ("user", "3 results"),
        ("assistant", "I am done."),
    )
    line = {"prompt": prompt, "label": True, "metadata": {"data_source": "fidelity/search"}}
    source.write_text(json.dumps(line) + "\n")
    result = _import("openrlhf", source, tmp_path / "out.jsonl")
    assert result.exit_code == 0, result.output
    (imported,) = read_trajectories(tmp_path / "out.jsonl")
    assert imported.domain == "search"
    assert imported.steps[0].action == ToolAction(tool="search", args={"query": "x, y"})
    assert imported.steps[1].action.type == "text"  # not a call: kept as text
    assert imported.outcome == Outcome(success=True, claimed_by="dataset")


def test_rebuild_action_refuses_what_is_not_a_call() -> None:
    with pytest.raises(ValueError, match="name\\(key=value"):
        rebuild_action("tool", "write_note")
    with pytest.raises(ValueError):
        rebuild_action("tool", "f('positional')")


def _one_line_error(result: Any, expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr == f"error: {expected}\n"


def test_a_bare_task_prompt_is_refused(tmp_path: Path) -> None:
    gated = _written("openrlhf", tmp_path, _trajectories()[:1], keep=0)
    result = _import("openrlhf", gated, tmp_path / "out.jsonl")
    _one_line_error(
        result, f"{gated}:1: metadata.turns: no turns (a bare task prompt): nothing to replay"
    )
    bare = tmp_path / "bare.jsonl"
    for prompt in (_chat(("system", "Be brief."), ("user", "Do it.")), "Do it."):
        bare.write_text(json.dumps({"prompt": prompt, "label": None}) + "\n")
        result = _import("slime", bare, tmp_path / "out.jsonl")
        _one_line_error(
            result, f"{bare}:1: prompt: no turns (a bare task prompt): nothing to replay"
        )
    assert not (tmp_path / "out.jsonl").exists()


def test_bad_jsonl_rows_name_file_row_and_field(tmp_path: Path) -> None:
    gated = _written("slime", tmp_path, _trajectories()[:1])
    good = json.loads(gated.read_text())
    bad = tmp_path / "bad.jsonl"

    def refused(line: str, expected: str) -> None:
        bad.write_text(json.dumps(good) + "\n\n" + line + "\n")
        _one_line_error(_import("slime", bad, tmp_path / "out.jsonl"), f"{bad}:3: {expected}")

    refused('{"prompt": [', "invalid JSON (Expecting value at column 13)")
    foreign = {"prompt": good["prompt"], "label": [1, 2], "metadata": {"data_source": "x"}}
    refused(
        json.dumps(foreign),
        (
            "label: expected a bool (success), a number (reward), a string (an answer) or "
            "{success, reward, claimed_by}, got list"
        ),
    )
    outcome = {**good, "metadata": {**good["metadata"], "outcome": {"success": "maybe"}}}
    refused(
        json.dumps(outcome),
        "metadata.outcome.success: Input should be a valid boolean, unable to interpret input",
    )
    broken_env = {**good, "metadata": {**good["metadata"], "env": "{not json"}}
    refused(
        json.dumps(broken_env),
        "metadata.env: invalid JSON (Expecting property name enclosed in double quotes at column 2)",
    )
    turn = {**good["metadata"]["turns"][0], "action_type": "android"}
    wrong_turn = {**good, "metadata": {**good["metadata"], "turns": [turn]}}
    refused(
        json.dumps(wrong_turn),
        "metadata.turns[0].action: not a android action (Expecting value: line 1 column 1 (char 0))",
    )
    refused(json.dumps({"label": True}), "prompt: missing")
    refused(
        json.dumps({**good, "prompt": 5}),
        ("prompt: expected a list of {role, content} messages, got int"),
    )
    assert not (tmp_path / "out.jsonl").exists()


def test_bad_parquet_inputs_name_file_row_and_field(tmp_path: Path) -> None:
    no_prompt = tmp_path / "no_prompt.parquet"
    _verl_rows(no_prompt, [{"data_source": "x", "ability": "terminal"}])
    _one_line_error(
        _import("verl", no_prompt, tmp_path / "o.jsonl"), f"{no_prompt}: prompt: missing column"
    )
    math = tmp_path / "math.parquet"
    prompt = _chat(("user", "2+2?"), ("assistant", "4"))
    _verl_rows(math, [{"data_source": "gsm8k", "prompt": prompt, "ability": "math"}])
    result = _import("verl", math, tmp_path / "o.jsonl")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {math}:1: ability: no fidelity domain")
    assert result.stderr.count("\n") == 1
    not_parquet = tmp_path / "x.parquet"
    not_parquet.write_text("not parquet\n")
    result = _import("skyrl", not_parquet, tmp_path / "o.jsonl")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: {not_parquet}: not a readable Parquet file")
    truth = tmp_path / "truth.parquet"
    spec = {"method": "rule", "ground_truth": [4, 2]}
    _verl_rows(truth, [{"prompt": prompt, "env_class": "terminal", "reward_spec": spec}])
    result = _import("skyrl", truth, tmp_path / "o.jsonl")
    assert result.exit_code == 2
    assert result.stderr.startswith(f"error: {truth}:1: reward_spec.ground_truth: expected a bool")
    assert not (tmp_path / "o.jsonl").exists()


def test_a_text_ground_truth_is_the_claimed_answer(tmp_path: Path) -> None:
    """verl's stock scorers read a string ground truth (gsm8k: the number after ``####``): it
    is kept as the answer, and the outcome stays unknown until the environment's check."""
    source = tmp_path / "gsm.parquet"
    prompt = _chat(("user", "Natalia sold 48 clips... How many?"), ("assistant", "echo 72"))
    row = {
        "data_source": "openai/gsm8k",
        "prompt": prompt,
        "ability": "terminal",
        "reward_model": {"style": "rule", "ground_truth": "72"},
    }
    _verl_rows(source, [row])
    assert _import("verl", source, tmp_path / "out.jsonl").exit_code == 0
    (imported,) = read_trajectories(tmp_path / "out.jsonl")
    assert imported.outcome == Outcome(answer="72", claimed_by="dataset")
    assert imported.outcome.success is None  # not graded: env.check decides
    assert imported.meta["data_source"] == "openai/gsm8k"
    again = tmp_path / "again.parquet"
    fidelity = TrajectoryFidelity(trust_horizon=1, verified=False)
    with RLWriter(again, ExportOptions(format="verl")) as writer:
        writer.write(imported, fidelity, imported.outcome)
    pq = require_module("pyarrow.parquet", "pip install pyarrow")
    (written,) = pq.read_table(again).to_pylist()  # type: ignore[attr-defined]
    assert written["reward_model"]["ground_truth"] == "72"
    assert written["data_source"] == "openai/gsm8k"
    assert written["prompt"] == [{"role": "user", "content": "Natalia sold 48 clips... How many?"}]


@pytest.mark.parametrize("fmt", RL_FORMATS)
def test_export_import_export_is_lossless(tmp_path: Path, fmt: str) -> None:
    """The instruction, the system prompt, the data source and the outcome survive a round trip:
    the rows written again from the imported trajectories are the rows written first."""
    originals = _trajectories()
    first = _written(fmt, tmp_path, originals, data_source="agent-sim-v1")
    assert _import(fmt, first, tmp_path / "back.jsonl").exit_code == 0
    imported = read_trajectories(tmp_path / "back.jsonl")
    second_folder = tmp_path / "again"
    second_folder.mkdir()
    second = _written(fmt, second_folder, imported)  # no --data-source: the imported one
    assert _rows(fmt, second) == _rows(fmt, first)
    terminal = _rows(fmt, first)[0]
    prompt = terminal["prompt"]
    assert prompt[0] == {
        "role": "system",
        "content": "You are a shell agent.\n\nOne command a turn.",
    }
    assert prompt[1]["content"].startswith("list the files, then read a.txt")


def _rows(fmt: str, path: Path) -> list[dict[str, Any]]:
    if suffix(fmt) == ".parquet":  # type: ignore[arg-type]
        pq = require_module("pyarrow.parquet", "pip install pyarrow")
        return list(pq.read_table(path).to_pylist())  # type: ignore[attr-defined]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
