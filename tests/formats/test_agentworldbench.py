"""AgentWorldBench files in their real shape: import, the reference's messages, predictions, export.

The fixtures (``data/agentworldbench``, written by ``data/make_agentworldbench.py``)
follow the shape in the shared REFERENCE: ``{domain}_test.jsonl``, plain task
names, integer ids repeated across files, ``### Turn N`` prompts with the task
instruction and current state on turn 1, a fenced JSON action, the benchmark
suffix on the evaluated prompt, ``**Environment Observation:**`` responses, raw
U+2028 in search rows, one repeated android (id, turn_idx) pair and a
``predictions.jsonl`` with ``gen`` beside them.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fakes.world_model import MODEL, FakeLLM, Reply
from fidelity.batch import simulate_suite
from fidelity.cli import app
from fidelity.diffing import diff_files
from fidelity.errors import InputFormatError
from fidelity.formats.agentworldbench import (
    export_predictions,
    import_agentworldbench,
    read_agentworldbench,
    split_prompt,
)
from fidelity.formats.convert import import_trajectories
from fidelity.formats.jsonl import read_trajectories, split_lines
from fidelity.pipeline import SimConfig
from fidelity.trajectory import AndroidAction, KeystrokesAction, ToolAction
from fidelity.worldmodels.base import Mode

DATA = Path(__file__).parent / "data" / "agentworldbench"
OFFICIAL = Path(__file__).parent / "data" / "official_prompts"


def _rows(name: str) -> list[dict[str, Any]]:
    text = (DATA / name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.split("\n") if line.strip()]


def test_fixtures_have_the_real_shape() -> None:
    search = (DATA / "search_test.jsonl").read_text(encoding="utf-8")
    assert "\u2028" in search  # raw, as in the real search rows
    assert len(search.splitlines()) > len(split_lines(search.rstrip("\n")))  # splitlines breaks it
    for name in ("terminal_test.jsonl", "search_test.jsonl", "mcp_test.jsonl"):
        for row in _rows(name):
            assert isinstance(row["id"], int) and "/" not in row["task"]
            assert all(p.startswith(f"### Turn {n}") for n, p in enumerate(row["prompt"], 1))
            assert row["prompt"][-1].startswith(row["current_prompt"])
            assert row["prompt"][-1] != row["current_prompt"]  # the suffix
            assert all(r.startswith("**Environment Observation:**") for r in row["response"])


def test_folder_import_reads_only_test_files_and_namespaces_ids() -> None:
    imported = import_agentworldbench([DATA])
    ids = [t.id for t in imported.trajectories]
    assert ids == [
        "android-1-t1",
        "android-1-t1-dup2",
        "mcp-1-t1",
        "search-1-t1",
        "search-7-t2",
        "terminal-1-t1",
        "terminal-1-t3",
        "terminal-2-t2",
    ]
    assert all(t.source == "real" for t in imported.trajectories)  # predictions.jsonl not read
    assert len(imported.duplicates) == 1
    assert "android_test.jsonl:2: android-1-t1 kept as android-1-t1-dup2" in imported.duplicates[0]


def test_prompts_split_into_task_state_and_action() -> None:
    trajectories = {t.id: t for t in read_agentworldbench(DATA)}
    terminal = trajectories["terminal-1-t3"]
    assert terminal.instruction == "List the files, then show app.py."
    assert "task_instruction" not in terminal.meta
    assert terminal.env.initial_observation == "root@sandbox:/app# "
    assert terminal.steps[0].action == KeystrokesAction(keys="ls -la\n", duration=0.5)
    assert terminal.steps[2].action == KeystrokesAction(keys="sleep 100\n\x03", duration=1.5)
    assert trajectories["mcp-1-t1"].steps[0].action == ToolAction(
        tool="list_issues", args={"repo": "acme/widgets"}
    )
    assert trajectories["android-1-t1"].steps[0].action == AndroidAction(
        action_type="open_app", app_name="Clock"
    )
    search = trajectories["search-7-t2"]
    assert "\u2028" in search.steps[1].observation.text  # type: ignore[union-attr]
    assert not search.steps[0].observation.text.startswith("**")  # type: ignore[union-attr]
    assert split_prompt("no structure at all").action is None


def test_import_write_read_round_trip_keeps_u2028(tmp_path: Path) -> None:
    out = tmp_path / "gt.jsonl"
    result = import_trajectories("agentworldbench", [DATA], out)
    assert result.trajectories == 8 and result.duplicates
    raw = out.read_text(encoding="utf-8")
    assert "\u2028" not in raw and "\\u2028" in raw  # written escaped
    again = {t.id: t for t in read_trajectories(out)}
    assert "\u2028" in again["search-1-t1"].steps[0].observation.text  # type: ignore[union-attr]


def test_cli_import_reports_the_duplicates(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["import", "agentworldbench", str(DATA), "-o", str(tmp_path / "gt.jsonl")]
    )
    assert result.exit_code == 0, result.output
    assert "imported 8 trajectories" in result.output
    assert "repeated sample" in result.output and "android-1-t1-dup2" in result.output


def test_bad_sample_names_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "x_test.jsonl"
    record = _rows("mcp_test.jsonl")[0]
    record["turn_idx"] = 3
    bad.write_text("\n" + json.dumps(record) + "\n")
    with pytest.raises(
        InputFormatError, match=r"x_test.jsonl:2: prompt: has 1 turns, turn_idx is 3"
    ):
        read_agentworldbench(bad)


def _reference_messages(row: dict[str, Any]) -> list[dict[str, str]]:
    """What ``eval.py infer`` sends, rebuilt from the rules in REFERENCE (not from fidelity)."""
    k = row["turn_idx"]
    messages = [{"role": "system", "content": row["system_str"]}]
    for prompt, response in zip(row["prompt"][: k - 1], row["response"][: k - 1], strict=True):
        messages += [
            {"role": "user", "content": prompt},
            {"role": "assistant", "content": response},
        ]
    return [*messages, {"role": "user", "content": row["prompt"][k - 1]}]


def test_simulate_evaluated_sends_the_reference_messages_byte_for_byte(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    gt = tmp_path / "gt.jsonl"
    import_trajectories("agentworldbench", [DATA], gt)
    result = CliRunner().invoke(
        app,
        [
            "simulate", str(gt), "-o", str(tmp_path / "sim.jsonl"),
            "--sim-url", fake_llm.url, "--sim-model", MODEL, "--no-sim-cache",
            "--prompts-dir", str(OFFICIAL), "--turns", "evaluated",
            "--sampling", "agentworldbench", "--sim-concurrency", "1",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    rows = [r for name in sorted(DATA.glob("*_test.jsonl")) for r in _rows(name.name)]
    expected = sorted(json.dumps(_reference_messages(r)) for r in rows)
    sent = sorted(json.dumps(body["messages"]) for body in fake_llm.requests)
    assert sent == expected  # one request per sample, the reference's messages exactly
    for body in fake_llm.requests:  # the reference sends temperature and max_tokens only
        assert {k: v for k, v in body.items() if k != "messages"} == {
            "model": MODEL,
            "temperature": 0.6,
            "max_tokens": 32768,
        }
    simulated = {t.id: t for t in read_trajectories(tmp_path / "sim.jsonl")}
    three = simulated["terminal-1-t3"]
    assert [s.observation is None for s in three.steps] == [True, True, False]
    assert three.meta["world_model"]["prompts_kind"] == "official"
    assert three.meta["world_model"]["prompt_hash"]


def test_reference_predictions_import_as_a_simulated_recording_and_diff(tmp_path: Path) -> None:
    gt, preds = tmp_path / "gt.jsonl", tmp_path / "preds.jsonl"
    import_trajectories("agentworldbench", [DATA], gt)
    import_trajectories("agentworldbench", [DATA / "predictions.jsonl"], preds)
    simulated = {t.id: t for t in read_trajectories(preds)}
    assert all(t.source == "sim" for t in simulated.values())
    failed = simulated["search-7-t2"].steps[1].observation
    assert failed is not None and failed.failed and "empty gen" in str(failed.error)
    result = diff_files(gt, preds)
    by_id = {row.trajectory_id: row for row in result.rows}
    assert set(by_id) == set(simulated)  # one row per prediction: only the evaluated turn
    assert by_id["search-7-t2"].infra_failure and by_id["search-7-t2"].step == 2
    assert by_id["terminal-1-t1"].score == pytest.approx(1.0)  # the same screen, parsed
    cli = CliRunner().invoke(app, ["diff", str(gt), str(preds), "--format", "json"])
    assert cli.exit_code == 0, cli.output


def test_import_simulate_export_round_trip(tmp_path: Path, fake_llm: FakeLLM) -> None:
    work = tmp_path / "awb"
    work.mkdir()
    shutil.copy(DATA / "terminal_test.jsonl", work)
    imported = tmp_path / "awb.jsonl"
    import_trajectories("agentworldbench", [work], imported)
    fake_llm.default = Reply.text(
        "<think>hm</think><predicted_observation>\n**Environment Observation:**\nSIM\n"
        "</predicted_observation>"
    )
    sim = SimConfig(url=fake_llm.url, model=MODEL, concurrency=1, cache=None, turns="evaluated")
    simulate_suite(imported, tmp_path / "sim.jsonl", sim, Mode.teacher_forced)
    exported = export_predictions(tmp_path / "sim.jsonl", tmp_path / "preds.jsonl")
    assert (exported.samples, exported.failed, exported.skipped) == (3, 0, 0)
    rows = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == [1, 1, 2]
    assert all(set(_rows("terminal_test.jsonl")[0]) <= set(r) for r in rows)
    assert rows[0]["gen"] == (
        "<predicted_observation>\n**Environment Observation:**\nSIM\n</predicted_observation>"
    )
    back = import_agentworldbench([tmp_path / "preds.jsonl"]).trajectories  # gen reads back
    assert all(t.source == "sim" for t in back)


def test_failed_prediction_is_exported_with_its_error(tmp_path: Path, fake_llm: FakeLLM) -> None:
    imported = tmp_path / "awb.jsonl"
    import_trajectories("agentworldbench", [DATA / "mcp_test.jsonl"], imported)
    fake_llm.script(Reply.http(400))
    sim = SimConfig(url=fake_llm.url, model=MODEL, max_retries=0, turns="evaluated")
    simulate_suite(imported, tmp_path / "sim.jsonl", sim, Mode.teacher_forced)
    exported = export_predictions(tmp_path / "sim.jsonl", tmp_path / "preds.jsonl")
    row = json.loads((tmp_path / "preds.jsonl").read_text())
    assert exported.failed == 1
    assert row["gen"] == ""
    assert "HTTP 400" in row["gen_error"]


def test_judge_gives_per_domain_normalized_scores_for_reference_predictions(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    gt, preds, db = tmp_path / "gt.jsonl", tmp_path / "preds.jsonl", tmp_path / "f.duckdb"
    import_trajectories("agentworldbench", [DATA], gt)
    import_trajectories("agentworldbench", [DATA / "predictions.jsonl"], preds)
    runner = CliRunner()
    stored = runner.invoke(app, ["diff", str(gt), str(preds), "--db", str(db), "-f", "json"])
    assert stored.exit_code == 0, stored.output
    verdict = {
        "scores": dict.fromkeys(("format", "factuality", "consistency", "realism", "quality"), 4)
    }
    fake_llm.default = Reply.text(
        "ok\n```json\n" + json.dumps({**verdict, "total_score": 4}) + "\n```"
    )
    args = ["judge", "--db", str(db), "--judge-url", fake_llm.url, "--judge-model", MODEL]
    result = runner.invoke(app, [*args, "--prompts-dir", str(OFFICIAL), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    # four evaluated turns judged (the failed search prediction and earlier turns are not)
    assert data["judged"] == 4
    assert data["domain_scores"] == {
        "android": 75.0, "mcp": 75.0, "search": 75.0, "terminal": 75.0, "overall": 75.0,
    }  # fmt: skip
    systems = {body["messages"][0]["content"] for body in fake_llm.requests}
    assert systems == {
        (OFFICIAL / d / "judge_system_prompt.txt").read_text()
        for d in ("android", "mcp", "search", "terminal")
    }


def test_unusable_id_is_an_input_error_not_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "mcp_test.jsonl"
    record = _rows("mcp_test.jsonl")[0]
    bad.write_text(json.dumps({**record, "id": "a\nb"}) + "\n")
    with pytest.raises(InputFormatError, match=r"mcp_test.jsonl:1: id: "):
        read_agentworldbench(bad)
