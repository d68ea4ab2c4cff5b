"""``fidelity export wm-sft|wm-dpo``: a stored run's compared steps as training data for the
world model. The runs are stored by ``fidelity diff --db`` (real comparisons, no sandbox);
the messages are checked against ``build_messages`` and the answers against
``render_answer``, the files loaded with Hugging Face ``datasets``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.formats.jsonl import read_trajectories
from fidelity.trajectory import Observation
from fidelity.worldmodels.prompting import build_messages, render_answer
from tests.conftest import require_module

runner = CliRunner()
INSTRUCTION = "List the files, then read notes.txt."


def _line(steps: list[tuple[str, str, int]], **fields: Any) -> str:
    data = {
        "id": "t1",
        "domain": "terminal",
        "steps": [
            {
                "action": {"type": "command", "command": command},
                "observation": {"text": text, "exit_code": code, "cwd": "/workspace"},
            }
            for command, text, code in steps
        ],
        **fields,
    }
    return json.dumps(data) + "\n"


REAL = [
    ("ls", "notes.txt\nsrc\n", 0),
    ("cat notes.txt", "buy milk\n", 0),
    ("date", "Sat Dec  6 05:07:01 UTC 2026\n", 0),
    ("test -d src", "", 0),
]
SIM = [
    ("ls", "notes.txt\nsrc\n", 0),
    ("cat notes.txt", "buy eggs from shop.example.com/eggs.html\n", 0),  # invented
    ("date", "Mon Jan  5 10:00:00 UTC 2026\n", 0),  # a volatile value: not drift
    ("test -d src", "", 1),  # drifts on the exit code alone, which a screen does not show
]


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A run ``r1`` whose second and fourth steps drift."""
    real, sim = tmp_path / "real.jsonl", tmp_path / "sim.jsonl"
    real.write_text(
        _line(REAL, instruction=INSTRUCTION, system_prompt="You are a shell agent.", source="real")
    )
    sim.write_text(_line(SIM, source="sim", meta={"mode": "teacher-forced"}))
    db = tmp_path / "runs.duckdb"
    done = runner.invoke(app, ["diff", str(real), str(sim), "--db", str(db), "--run", "r1"])
    assert done.exit_code == 0, done.output
    return db


def _export(*args: str) -> Any:
    return runner.invoke(app, ["export", *args])


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_dpo_pairs_real_chosen_and_the_models_answer_rejected(stored: Path, tmp_path: Path) -> None:
    out = tmp_path / "pairs.jsonl"
    result = _export("wm-dpo", "--db", str(stored), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"exported 1 wm-dpo rows of run r1 (terminal: 1; target real) → {out}; "
        "left out: 1 identical\n"
    )
    (pair,) = _jsonl(out)
    (real,) = read_trajectories(tmp_path / "real.jsonl")
    step = real.steps[1]
    assert pair["prompt"] == build_messages(real, real.steps[:1], step.action, 2)
    assert "**Task Instruction:**\n" + INSTRUCTION in pair["prompt"][1]["content"]
    assert pair["chosen"] == [
        {
            "role": "assistant",
            "content": render_answer(step.observation, step.action, "/workspace", "terminal"),
        }  # type: ignore[arg-type]
    ]
    model = Observation(text="buy eggs from shop.example.com/eggs.html\n", exit_code=0)
    assert pair["rejected"] == [
        {
            "role": "assistant",
            "content": render_answer(model, step.action, "/workspace", "terminal"),
        }
    ]
    assert pair["chosen"][0]["content"] == (
        "<predicted_observation>\nagent@sandbox:/workspace$ cat notes.txt\nbuy milk\n"
        "agent@sandbox:/workspace$ \n</predicted_observation>"
    )
    meta = {k: v for k, v in pair.items() if k not in ("prompt", "chosen", "rejected")}
    assert meta == {
        "trajectory_id": "t1",
        "depth": 2,
        "mode": "teacher-forced",
        "sample": 0,
        "domain": "terminal",
        "drift": True,
        "score": meta["score"],
        "cause": "invented_name",
        "run_id": "r1",
        "target": "real",
    }


def test_sft_rows_hold_every_compared_step_with_the_real_answer(
    stored: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sft.jsonl"
    result = _export("wm-sft", "--db", str(stored), "--run", "r1", "-o", str(out))
    assert result.exit_code == 0, result.output
    rows = _jsonl(out)
    assert [(r["depth"], r["drift"]) for r in rows] == [
        (1, False),
        (2, True),
        (3, False),
        (4, True),
    ]
    (real,) = read_trajectories(tmp_path / "real.jsonl")
    for row in rows:
        step = real.steps[row["depth"] - 1]
        history = real.steps[: row["depth"] - 1]
        answer = render_answer(step.observation, step.action, "/workspace", "terminal")  # type: ignore[arg-type]
        assert row["messages"] == [
            *build_messages(real, history, step.action, row["depth"]),
            {"role": "assistant", "content": answer},
        ]
    drifting = tmp_path / "drift.jsonl"
    options = ["--only-drift", "--max-depth", "3", "--domain", "terminal"]
    assert _export("wm-sft", "--db", str(stored), *options, "-o", str(drifting)).exit_code == 0
    assert [r["depth"] for r in _jsonl(drifting)] == [2]


def test_the_normalized_target_keeps_all_but_the_volatile_values(
    stored: Path, tmp_path: Path
) -> None:
    out = tmp_path / "sft.jsonl"
    assert (
        _export("wm-sft", "--db", str(stored), "--target", "normalized", "-o", str(out)).exit_code
        == 0
    )
    answers = {r["depth"]: r["messages"][-1]["content"] for r in _jsonl(out)}
    assert "\n<TIMESTAMP>\n" in answers[3] and "2026" not in answers[3]
    assert "buy milk" in answers[2]
    assert all(r["target"] == "normalized" for r in _jsonl(out))


@pytest.mark.parametrize("kind", ["wm-sft", "wm-dpo"])
def test_parquet_and_jsonl_load_with_hf_datasets(
    stored: Path, tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    datasets = require_module("datasets", "pip install 'fidelity[test]'")
    require_module("pyarrow", "pip install pyarrow")
    for name in ("rows.jsonl", "rows.parquet"):
        out = tmp_path / name
        assert _export(kind, "--db", str(stored), "-o", str(out)).exit_code == 0
        loaded = datasets.load_dataset(  # type: ignore[attr-defined]
            "json" if name.endswith(".jsonl") else "parquet",
            data_files=str(out),
            split="train",
            cache_dir=str(tmp_path / "hf" / name),
        )
        first = loaded[0]
        if kind == "wm-dpo":
            assert first["chosen"][0]["role"] == "assistant"
            assert "buy milk" in first["chosen"][0]["content"]
            assert "buy eggs" in first["rejected"][0]["content"]
        else:
            assert loaded.num_rows == 4 and first["messages"][0]["role"] == "system"


def _one_line(result: Any, expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr == f"error: {expected}\n"


def test_bad_input_is_one_line_and_writes_nothing(stored: Path, tmp_path: Path) -> None:
    out = tmp_path / "never.jsonl"
    _one_line(
        _export("wm-xyz", "-o", str(out)),
        "unknown export format 'wm-xyz'; formats: agentworldbench, wm-sft, wm-dpo",
    )
    _one_line(
        _export("wm-dpo", "--db", str(stored), "--max-depth", "1", "-o", str(out)),
        "run 'r1': no drifting steps to export (--max-depth 1)",
    )
    _one_line(
        _export("wm-sft", "--db", str(stored), "--domain", "web", "-o", str(out)),
        "run 'r1': no compared steps to export (--domain web)",
    )
    _one_line(
        _export("wm-sft", "--db", str(stored), "-o", str(tmp_path / "x.csv")),
        f"-o {tmp_path / 'x.csv'}: write .jsonl or .parquet",
    )
    _one_line(
        _export("wm-sft", str(tmp_path / "real.jsonl"), "--db", str(stored), "-o", str(out)),
        "wm-sft reads a stored run (--db, --run), not a file argument",
    )
    _one_line(
        _export("wm-sft", "--db", str(stored), "--target", "exact", "-o", str(out)),
        "--target 'exact': choose real or normalized",
    )
    real, failed = tmp_path / "real.jsonl", tmp_path / "failed.jsonl"
    lost = [
        {
            "action": {"type": "command", "command": c},
            "observation": {"text": "", "error": "Timeout: lost"},
        }
        for c, _, _ in REAL
    ]
    failed.write_text(
        json.dumps({"id": "t1", "domain": "terminal", "source": "sim", "steps": lost}) + "\n"
    )
    stored_infra = runner.invoke(
        app, ["diff", str(real), str(failed), "--db", str(stored), "--run", "r-infra"]
    )
    assert stored_infra.exit_code == 0, stored_infra.output
    _one_line(
        _export("wm-sft", "--db", str(stored), "--run", "r-infra", "-o", str(out)),
        "run 'r-infra' has no compared steps: nothing to export",
    )
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_the_store_keeps_the_task_and_older_rows_fall_back_to_the_suite(
    stored: Path, tmp_path: Path
) -> None:
    moved = tmp_path / "elsewhere.jsonl"
    (tmp_path / "real.jsonl").rename(moved)
    out = tmp_path / "sft.jsonl"
    kept = _export("wm-sft", "--db", str(stored), "-o", str(out))
    assert kept.exit_code == 0 and kept.stderr == ""  # the suite is gone, the store has it
    assert INSTRUCTION in _jsonl(out)[0]["messages"][1]["content"]
    # rows written before the store kept the task (schema 7): the suite, when it is given
    with duckdb.connect(str(stored)) as connection:
        connection.execute("UPDATE trajectories SET task = NULL")
    lost = _export("wm-sft", "--db", str(stored), "-o", str(out))
    assert lost.exit_code == 0
    assert lost.stderr == (
        "warning: 1 trajectories without their instruction: the store keeps none and the "
        "run's suite is not here (pass --suite)\n"
    )
    assert "Task Instruction" not in _jsonl(out)[0]["messages"][1]["content"]
    found = _export("wm-sft", "--db", str(stored), "--suite", str(moved), "-o", str(out), "--json")
    assert found.exit_code == 0 and found.stderr == ""
    assert json.loads(found.stdout)["without_task"] == 0
    assert INSTRUCTION in _jsonl(out)[0]["messages"][1]["content"]
