"""The task of a trajectory into training data, end to end: a dataset whose trajectories carry
``instruction`` and ``system_prompt`` gated ``--to verl --to sft`` (real bubblewrap replays),
the rows read back, imported and exported again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory
from tests.conftest import require_module

runner = CliRunner()
SYSTEM = "You are a careful shell agent."
WORDS = ["alpha", "beta", "gamma", "delta"]


def _dataset(tmp_path: Path, instruction: str | None = "Echo the four words.") -> Path:
    """Two simulated trajectories: one faithful, one wrong from its third step."""
    trajectories = []
    for tid, first_bad in (("clean", None), ("late", 3)):
        steps = []
        for depth, word in enumerate(WORDS, start=1):
            wrong = first_bad is not None and depth >= first_bad
            text = f"ghost_{word}.txt: No such file or directory\n" if wrong else f"{word}\n"
            steps.append(
                Step(
                    action=CommandAction(command=f"echo {word}"),
                    observation=Observation(text=text, exit_code=1 if wrong else 0),
                )
            )
        trajectories.append(
            Trajectory(
                id=tid,
                domain="terminal",
                instruction=instruction,
                system_prompt=SYSTEM if instruction else None,
                steps=steps,
                source="sim",
                meta={"model": "toy-wm", "mode": "open-loop"},
            )
        )
    path = tmp_path / "sim.jsonl"
    write_trajectories(path, trajectories)
    return path


def _gate(tmp_path: Path, dataset: Path, *to: str) -> Any:
    policy = tmp_path / "gate.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.9\n")
    args = ["gate", str(dataset), "--policy", str(policy), "--all", "--cut-at-horizon", "--db"]
    args += [str(tmp_path / "g.duckdb"), "-o", str(tmp_path / "out"), "--run", "g1"]
    for fmt in to:
        args += ["--to", fmt]
    return runner.invoke(app, [*args, "--data-source", "sim-shell-v1"])


@pytest.mark.bwrap
def test_gated_rows_carry_the_task_and_the_trust(tmp_path: Path, bwrap: None) -> None:
    pq = require_module("pyarrow.parquet", "pip install pyarrow")
    result = _gate(tmp_path, _dataset(tmp_path), "verl", "sft")
    assert result.exit_code == 0, result.output
    out = tmp_path / "out"
    verl = {
        r["extra_info"]["trajectory_id"]: r
        for r in pq.read_table(out / "admitted.verl.parquet").to_pylist()
    }  # type: ignore[attr-defined]
    assert sorted(verl) == ["clean", "late"]
    for row in verl.values():  # every row's prompt holds the system prompt and the instruction
        assert row["prompt"] == [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Echo the four words."},
        ]
        assert row["data_source"] == "sim-shell-v1"
    assert verl["late"]["extra_info"]["trust_mask"] == [1, 1]  # cut at its horizon
    sft = {
        r["extra_info"]["trajectory_id"]: r
        for r in pq.read_table(out / "admitted.sft.parquet").to_pylist()  # type: ignore[attr-defined]
    }
    for row in sft.values():  # the system prompt, then the task, then the actions
        assert [(m["role"], m["content"]) for m in row["messages"][:3]] == [
            ("system", SYSTEM),
            ("user", "Echo the four words."),
            ("assistant", "echo alpha"),
        ]
    late = [(m["content"], m["step_loss_mask"]) for m in sft["late"]["trajectory"]]
    assert late[2:] == [("echo alpha", 1), ("alpha\n", 1), ("echo beta", 1)]
    assert sft["clean"]["extra_info"]["trust_mask"] == [1, 1, 1, 1]
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["rl_paths"]) == ["sft", "verl"]


@pytest.mark.bwrap
def test_export_import_export_keeps_instruction_system_prompt_and_data_source(
    tmp_path: Path, bwrap: None
) -> None:
    pq = require_module("pyarrow.parquet", "pip install pyarrow")
    assert _gate(tmp_path, _dataset(tmp_path), "verl").exit_code == 0
    first = tmp_path / "out" / "admitted.verl.parquet"
    imported = tmp_path / "back.jsonl"
    assert runner.invoke(app, ["import", "verl", str(first), "-o", str(imported)]).exit_code == 0
    back = {t.id: t for t in read_trajectories(imported)}
    assert back["late"].instruction == "Echo the four words."
    assert back["late"].system_prompt == SYSTEM
    assert back["late"].meta["data_source"] == "sim-shell-v1"
    again = tmp_path / "again"
    again.mkdir()
    policy = tmp_path / "gate.toml"
    result = runner.invoke(
        app,
        [
            "gate", str(imported), "--policy", str(policy), "--all", "--to", "verl",
            "--db", str(again / "g.duckdb"), "-o", str(again / "out"), "--run", "g2",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    before = pq.read_table(first).to_pylist()  # type: ignore[attr-defined]
    after = pq.read_table(again / "out" / "admitted.verl.parquet").to_pylist()  # type: ignore[attr-defined]
    fields = ("prompt", "data_source", "ability", "reward_model")
    assert [{k: r[k] for k in fields} for r in after] == [{k: r[k] for k in fields} for r in before]


def test_a_trajectory_without_its_task_is_refused_before_any_replay(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path, instruction=None)
    result = _gate(tmp_path, dataset, "verl")
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {dataset}:1: instruction: missing: the --to exports prompt with the task (give "
        "the trajectory `instruction`, or export with --prompt conversation; sft needs it always)\n"
    )
    assert not (tmp_path / "g.duckdb").exists()
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_gate_export_options_are_checked(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path)
    policy = tmp_path / "gate.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.9\n")
    base = ["gate", str(dataset), "--policy", str(policy), "--db", str(tmp_path / "g.duckdb")]
    cases = {
        (
            "--to",
            "verl",
            "--prompt",
            "whole",
        ): "--prompt 'whole': choose instruction or conversation",
        ("--prompt", "conversation"): "--prompt, --data-source and --sft-tokenizer go with --to",
        ("--to", "verl", "--sft-tokenizer", str(tmp_path)): "--sft-tokenizer goes with --to sft",
        ("--to", "sft", "--prompt", "conversation"): (
            "--prompt is for the RL rows (--to verl|skyrl|openrlhf|slime), not sft"
        ),
        ("--to", "sft", "--sft-tokenizer", str(tmp_path / "none")): (
            f"--sft-tokenizer {tmp_path / 'none'}: not a folder (a tokenizer saved locally)"
        ),
    }
    for args, expected in cases.items():
        result = runner.invoke(app, [*base, *args])
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr == f"error: {expected}\n"
    assert not (tmp_path / "g.duckdb").exists()


def test_a_terminal_bench_folder_brings_its_instruction() -> None:
    """A trajectory naming a Terminal-Bench task (``env.task``) without a task of its own gets
    ``task.yaml``'s instruction when the suite is read: the world model sees it on turn 1."""
    import yaml  # type: ignore[import-untyped]

    from fidelity.pipeline import load_suite
    from fidelity.resources import data_dir
    from fidelity.worldmodels.prompting import build_messages

    tasks = data_dir("suites") / "terminal" / "tasks"
    yaml_file = tasks / "count-server-errors" / "task.yaml"
    instruction = yaml.safe_load(yaml_file.read_text(encoding="utf-8"))["instruction"]
    trajectories = load_suite(tasks / "suite.jsonl")
    assert trajectories and all(t.instruction == instruction for t in trajectories)
    first = trajectories[0]
    turn = build_messages(first, [], first.steps[0].action, 1)[-1]["content"]
    assert "**Task Instruction:**\n" + instruction.strip() in turn
