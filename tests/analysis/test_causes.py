"""Drifting steps grouped by cause: the classification of one comparison, and an audit's
``summary.causes`` (whose steps add up to the drifting steps) in ``--json`` and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fidelity.analysis.causes import CAUSES, Drifting, cause_of
from fidelity.cli import app
from fidelity.compare import CompareContext, get_comparator
from fidelity.formats.jsonl import write_trajectories
from fidelity.trajectory import CommandAction, Observation, Trajectory


def _drifting(
    reasons: list[str],
    hallucinations: list[str] | None = None,
    omissions: list[str] | None = None,
    stale: list[str] | None = None,
) -> Drifting:
    return Drifting(reasons, hallucinations or [], omissions or [], stale or [])


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (
            _drifting(["exit_code 0 != 2", "hallucinated file:a.py"], ["file:a.py"]),
            "wrong_exit_code",
        ),
        (_drifting(["timed_out True != False"]), "wrong_exit_code"),
        (_drifting(["hallucinated path:src/x.py"], ["path:src/x.py", "number:3"]), "invented_name"),
        (_drifting(["stale file:old.txt"], [], [], ["file:old.txt"]), "stale_state"),
        (_drifting(["inconsistent file:new.txt (created at step 2)"]), "lost_state"),
        (
            _drifting(["hallucinated number:71"], ["number:71", "line:total 71"], ["number:17"]),
            "wrong_number",
        ),
        (_drifting(["value $.count: 3 != 4"], ["value:4"]), "wrong_number"),
        (_drifting(["test test_a: passed != failed"]), "wrong_test_outcome"),
        (_drifting(["prop button 'OK': disabled != -"]), "wrong_value"),
        (_drifting(["flags Switch 'Wi-Fi': checked != -"]), "wrong_value"),
        (_drifting(["diff hunks 0.40 < 0.80"]), "wrong_diff"),
        (
            _drifting(["omitted line:3 passed"], [], ["line:3 passed", "test:test_b"]),
            "omitted_lines",
        ),
        (_drifting(["lines reordered: 2 of 5"]), "reordered_output"),
        (_drifting(["score 0.6 < 0.8"], ["moved:b.txt"]), "reordered_output"),
        (_drifting(["blank lines differ: 1"]), "format_whitespace"),
        (_drifting(["score 0.7 < 0.8"], ["line:a  b"], ["line:a b"]), "format_whitespace"),
        (
            _drifting(["score 0.2 < 0.8"], ["line:buy eggs", "word:eggs"], ["line:buy milk"]),
            "changed_text",
        ),
        (_drifting(["drift probability 0.84 >= 0.04"]), "other"),
    ],
)
def test_each_step_gets_the_first_cause_it_shows(step: Drifting, expected: str) -> None:
    cause, shown = cause_of(step)
    assert cause == expected and cause in CAUSES and shown


def test_the_terminal_comparators_verdicts_classify() -> None:
    """Real comparisons, not hand-written ones: what the terminal comparator records names
    the cause."""
    comparator = get_comparator("terminal")
    cat = CommandAction(command="cat notes.txt")

    def cause(real: Observation, sim: Observation) -> str:
        verdict = comparator.compare(real, sim, CompareContext(action=cat))
        assert verdict.drift
        step = _drifting(verdict.reasons, verdict.hallucinations, verdict.omissions, verdict.stale)
        return cause_of(step)[0]

    ok = Observation(text="buy milk\nfrom the shop at 10 Main Street\n", exit_code=0)
    assert cause(ok, ok.model_copy(update={"exit_code": 1})) == "wrong_exit_code"
    invented = "buy milk\nfrom the shop at 10 Main Street\nsee /srv/orders/list.csv\n"
    assert cause(ok, Observation(text=invented, exit_code=0)) == "invented_name"
    number = "buy milk\nfrom the shop at 12 Main Street\n"
    assert cause(ok, Observation(text=number, exit_code=0)) == "wrong_number"


# -- an audit end to end: --json carries summary.causes, the report shows them ---------------

REAL_COMMANDS = ["echo alpha", "echo 17", "ls /workspace/missing"]


def _suite(tmp_path: Path) -> tuple[Path, Path]:
    """A two-trajectory suite and a recording of a world model that drifts three ways."""
    wrong = {
        "a": [
            "alpha\n",
            "71\n",
            "ls: cannot access '/workspace/missing': No such file or directory\n",
        ],
        "b": ["alpha\n", "17\n", "notes.txt\n"],
    }
    codes = {"a": [0, 0, 0], "b": [0, 0, 2]}  # a: the exit code alone; b: a name
    suite, recorded = [], []
    for tid in ("a", "b"):
        trajectory = Trajectory.model_validate(
            {
                "id": tid,
                "domain": "terminal",
                "instruction": "Print two words, then look for a folder.",
                "steps": [{"action": {"type": "command", "command": c}} for c in REAL_COMMANDS],
            }
        )
        suite.append(trajectory)
        sims = [
            Observation(text=text, exit_code=code, cwd="/workspace")
            for text, code in zip(wrong[tid], codes[tid], strict=True)
        ]
        recorded.append(trajectory.with_observations(sims, "sim", mode="teacher-forced"))
    write_trajectories(tmp_path / "suite.jsonl", suite)
    write_trajectories(tmp_path / "recorded.jsonl", recorded)
    return tmp_path / "suite.jsonl", tmp_path / "recorded.jsonl"


@pytest.mark.bwrap
def test_audit_json_carries_the_causes_and_they_add_up(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    suite, recorded = _suite(tmp_path)
    report = tmp_path / "report.html"
    runner = CliRunner()
    args = ["audit", str(suite), "--sim-data", str(recorded), "--db", str(db_path)]
    result = runner.invoke(app, [*args, "--run-id", "a1", "--report", str(report), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)["summary"]
    totals = summary["totals"]
    drifting = round(totals["drift_rate"] * totals["compared_steps"])
    causes = summary["causes"]
    assert sum(c["steps"] for c in causes) == drifting == 3
    by_cause = {c["cause"]: c for c in causes}
    assert sorted(by_cause) == ["invented_name", "wrong_exit_code", "wrong_number"]
    assert by_cause["wrong_number"]["examples"] == [
        {"trajectory_id": "a", "depth": 2, "detail": "hallucinated number:71"}
    ]
    assert by_cause["wrong_exit_code"]["by_depth"] == [{"depth": 3, "steps": 1}]
    assert by_cause["invented_name"]["examples"][0]["trajectory_id"] == "b"
    assert all(c["domain"] == "terminal" for c in causes)
    assert sum(c["share"] for c in causes) == pytest.approx(1.0)
    html = report.read_text(encoding="utf-8")
    assert 'id="causes"' in html and "<code>wrong_number</code>" in html
    out = tmp_path / "pairs.jsonl"
    pairs = runner.invoke(app, ["export", "wm-dpo", "--db", str(db_path), "-o", str(out)])
    assert pairs.exit_code == 0, pairs.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert sorted((r["trajectory_id"], r["depth"], r["cause"]) for r in rows) == [
        ("a", 2, "wrong_number"),
        ("b", 3, "invented_name"),
    ]  # a's third step drifted on its exit code alone: both answers read the same
    assert all("**Task Instruction:**\nPrint two words" in r["prompt"][1]["content"] for r in rows)
    assert all("17" in r["chosen"][0]["content"] for r in rows if r["depth"] == 2)
