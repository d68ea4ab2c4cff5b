"""Outcomes: claimed against real (``env.check``), the 2×2 table, the gate's outcome quarantine,
and the RL export of the admitted trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from fidelity.analysis.models import OutcomeTable
from fidelity.analysis.outcomes import bootstrap_kappa, cohen_kappa, domain_outcomes
from fidelity.analysis.summary import summarize
from fidelity.cli import app
from fidelity.drift import compare_runs, outcome_lines
from fidelity.formats.jsonl import write_trajectories
from fidelity.formats.swe_agent import claimed_outcome
from fidelity.gate import GateOptions, gate_dataset, load_policy
from fidelity.report.html import render_report
from fidelity.store import Store
from fidelity.trajectory import (
    CommandAction,
    EnvSpec,
    Observation,
    Outcome,
    OutcomeCheck,
    Step,
    Trajectory,
)
from tests.conftest import unavailable

AGENT_DATA = Path(__file__).resolve().parents[2] / "shared" / "agent-trajectories"
"""``../shared/agent-trajectories`` beside the checkout (public agent runs; not in the repo)."""
FORMATS_DATA = Path(__file__).resolve().parent / "formats" / "data"

# id: (whether the steps make done.txt, claimed success, the check, the real status)
LABELLED: dict[str, tuple[bool, bool, str, str]] = {
    "agree-success": (True, True, "test -f done.txt", "success"),
    "false-success": (False, True, "test -f done.txt", "failure"),
    "false-success-2": (False, True, "test -f done.txt", "failure"),
    "false-failure": (True, False, "test -f done.txt", "success"),
    "agree-failure": (False, False, "test -f done.txt", "failure"),
    "agree-success-2": (True, True, "test -f done.txt", "success"),
    "hangs": (True, True, "sleep 120", "unverifiable"),
    "crashes": (True, True, "sh -c 'kill -SEGV $$'", "unverifiable"),
    "garbage": (True, True, "printf '\\377\\376\\000garbage'; exit 3", "unverifiable"),
}


def _trajectory(tid: str, makes: bool, claimed: bool, check: str) -> Trajectory:
    steps = [
        Step(
            action=CommandAction(command="echo start"),
            observation=Observation(text="start\n", exit_code=0),
        )
    ]
    if makes:
        steps.append(
            Step(
                action=CommandAction(command="touch done.txt"), observation=Observation(exit_code=0)
            )
        )
    return Trajectory(
        id=tid,
        domain="terminal",
        instruction=f"Make the check of {tid} pass.",
        # only the hanging check waits out its timeout; the others get room on a loaded machine
        env=EnvSpec(check=OutcomeCheck(command=check, timeout=2 if tid == "hangs" else 120)),
        steps=steps,
        source="sim",
        meta={"model": "toy-wm", "mode": "open-loop"},
        outcome=Outcome(success=claimed, claimed_by="simulation"),
    )


def _gate(
    tmp_path: Path, db: Path, limit: float, to: list[str] | None = None, run_id: str = "g1"
) -> tuple[int, Path]:
    dataset = tmp_path / "sim.jsonl"
    write_trajectories(
        dataset, [_trajectory(tid, m, c, check) for tid, (m, c, check, _) in LABELLED.items()]
    )
    policy = tmp_path / "gate.toml"
    policy.write_text(
        f"[default]\nmax_drift_rate = 0.9\nmax_false_success_rate = {limit}\n"
        "max_outcome_unverifiable_rate = 0.5\n"  # 3 of the 9 claims cannot be checked
    )
    out = tmp_path / f"out-{run_id}"
    options = GateOptions(
        dataset=dataset,
        policy_path=policy,
        output_dir=out,
        db=db,
        run_id=run_id,
        sample=None,
        to=to or [],
    )
    manifest = gate_dataset(options, load_policy(policy))
    return manifest.verdict.exit_code, out


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.bwrap
def test_labelled_dataset_gives_the_exact_table_and_quarantines_false_outcomes(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    code, out = _gate(tmp_path, db_path, limit=0.5)
    with Store(db_path, read_only=True) as store:
        summary = summarize(store, "g1")
    [figures] = summary.outcomes
    html = render_report(summary)
    assert "false success <code>false-success</code>: first drifting step none" in html
    assert "unverifiable <code>hangs</code>: the check timed out after 2s" in html
    assert figures.table == OutcomeTable(
        agree_success=2, false_success=2, false_failure=1, agree_failure=1
    )
    assert figures.false_success_rate is not None and figures.false_success_rate.value == 0.5
    assert figures.false_failure_rate is not None and figures.false_failure_rate.value == 0.5
    assert figures.agreement is not None and figures.agreement.value == 0.5
    assert sorted(c.trajectory_id for c in figures.false_successes) == [
        "false-success",
        "false-success-2",
    ]
    assert all(c.real_exit_code == 1 for c in figures.false_successes)
    reasons = {c.trajectory_id: c.reason or "" for c in figures.unverifiable_cases}
    assert sorted(reasons) == ["crashes", "garbage", "hangs"]
    assert "timed out" in reasons["hangs"]
    assert "signal 11" in reasons["crashes"]
    assert "exited 3" in reasons["garbage"]
    assert code == 0  # 0.5 <= 0.5
    quarantined = {q["id"]: q["meta"] for q in _lines(out / "quarantined.jsonl")}  # type: ignore[index]
    assert sorted(quarantined) == [
        "crashes", "false-failure", "false-success", "false-success-2", "garbage", "hangs",
    ]  # fmt: skip
    for tid in ("false-success", "false-success-2", "false-failure"):
        assert quarantined[tid]["quarantine_reason"] == "outcome"  # type: ignore[index]
    for tid in ("hangs", "crashes", "garbage"):  # a claim nothing could check: never admitted
        assert quarantined[tid]["quarantine_reason"] == "outcome-unverifiable"  # type: ignore[index]
    admitted = {a["id"] for a in _lines(out / "admitted.jsonl")}  # type: ignore[misc]
    assert admitted == {"agree-success", "agree-success-2", "agree-failure"}


@pytest.mark.bwrap
def test_false_success_rate_over_the_limit_fails_the_gate(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    code, _ = _gate(tmp_path, db_path, limit=0.4)
    assert code == 1


@pytest.mark.bwrap
def test_gate_writes_rl_formats_with_the_trust_fields(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    _, out = _gate(tmp_path, db_path, limit=0.5, to=["verl", "openrlhf"])
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["rl_paths"]) == ["openrlhf", "verl"]
    admitted = {a["id"] for a in _lines(out / "admitted.jsonl")}  # type: ignore[misc]
    rows = pq.read_table(out / "admitted.verl.parquet").to_pylist()
    assert {r["extra_info"]["trajectory_id"] for r in rows} == admitted
    by_id = {r["extra_info"]["trajectory_id"]: r for r in rows}
    ok = by_id["agree-success"]
    assert ok["extra_info"]["verified"] is True
    assert ok["extra_info"]["outcome_agreement"] is True
    assert ok["extra_info"]["trust_horizon"] == 2
    assert ok["extra_info"]["trust_mask"] == [1, 1]
    assert [t["score"] for t in ok["extra_info"]["turns"]] == [1.0, 1.0]
    assert ok["reward_model"]["ground_truth"] == "1.0"  # a string, as verl's scorers take
    assert ok["extra_info"]["outcome"]["success"] is True
    assert ok["prompt"][0] == {"role": "user", "content": "Make the check of agree-success pass."}
    assert "hangs" not in by_id  # its claim could not be checked: no reward is exported
    lines = _lines(out / "admitted.openrlhf.jsonl")
    assert {line["metadata"]["trajectory_id"] for line in lines} == admitted  # type: ignore[index]
    assert all(line["metadata"]["gate_run_id"] == "g1" for line in lines)  # type: ignore[index]


@pytest.mark.bwrap
def test_drift_gives_the_outcome_figures_of_both_runs(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    _gate(tmp_path, db_path, limit=0.5, run_id="g1")
    _gate(tmp_path, db_path, limit=0.5, run_id="g2")
    with Store(db_path, read_only=True) as store:
        report = compare_runs(store, "g1", "g2", min_steps=1)
    [row] = report.outcomes
    assert row.domain == "terminal" and row.baseline is not None and row.current is not None
    table = OutcomeTable(agree_success=2, false_success=2, false_failure=1, agree_failure=1)
    assert row.baseline.table == row.current.table == table
    kappa = row.current.kappa_interval
    assert kappa is not None and kappa.value == 0.0 and kappa.low < 0 < kappa.high
    lines = outcome_lines(report)
    assert "outcomes terminal, current g2" in lines
    assert "  false success false-success: first drifting step none" in lines
    assert any(line.startswith("  agreement 50.0% [") and "kappa 0.00 [" in line for line in lines)
    assert "  unverifiable hangs: the check timed out after 2s" in lines
    args = ["drift", "--baseline", "g1", "--current", "g2", "--db", str(db_path)]
    text = CliRunner().invoke(app, [*args, "--min-steps", "1"])
    assert "false-success rate 50.0% [" in text.output, text.output
    shown = CliRunner().invoke(app, [*args, "--min-steps", "1", "--json"])
    outcomes = json.loads(shown.output)["outcomes"]
    assert outcomes[0]["current"]["table"] == table.model_dump()
    assert outcomes[0]["current"]["false_success_rate"]["value"] == 0.5


def test_kappa_interval() -> None:
    claims = np.array([1, 1, 1, 0, 0, 0, 1, 0], dtype=float)
    perfect = bootstrap_kappa(claims, claims, seed=1, resamples=300)
    assert perfect is not None and perfect.value == perfect.low == perfect.high == 1.0
    reals = np.array([1, 0, 1, 0, 1, 0, 1, 0], dtype=float)
    partial = bootstrap_kappa(claims, reals, seed=1, resamples=300)
    assert partial is not None and partial.value == 0.5 and -1 <= partial.low < 0.5 < partial.high
    assert bootstrap_kappa(claims, np.ones_like(claims), seed=1) is not None
    assert bootstrap_kappa(np.ones(3), np.ones(3), seed=1) is None  # kappa undefined
    assert bootstrap_kappa(np.array([]), np.array([]), seed=1) is None


def test_kappa_and_rates_from_rows() -> None:
    rows = [
        ("swe", "a", True, "success", None, 0, None),
        ("swe", "b", True, "failure", None, 1, 3),
        ("swe", "c", False, "failure", None, 1, 2),
        ("swe", "d", False, "success", None, 0, None),
        ("swe", "e", True, "unverifiable", "the check timed out after 2s", None, None),
        ("swe", "f", None, "success", None, 0, None),
    ]
    figures = domain_outcomes("swe", rows, resamples=200)
    assert figures.table == OutcomeTable(
        agree_success=1, false_success=1, false_failure=1, agree_failure=1
    )
    assert figures.kappa == 0.0
    assert [c.first_drift for c in figures.false_successes] == [3]
    assert figures.unverifiable == 1 and figures.claimed == 5 and figures.checked == 6
    assert figures.horizon.covered == 2 and figures.horizon.covered_agreement == 0.5
    assert figures.horizon.cut == 2 and figures.horizon.cut_agreement == 0.5
    assert figures.kappa_interval is not None and figures.kappa_interval.value == 0.0
    assert cohen_kappa(OutcomeTable(agree_success=3, agree_failure=2)) == 1.0
    assert cohen_kappa(OutcomeTable(agree_success=3)) is None


def test_a_run_claims_success_only_for_a_submitted_patch() -> None:
    claimed = [
        claimed_outcome(info)
        for info in (
            {"exit_status": "submitted", "submission": "diff --git a/x b/x\n"},
            {"exit_status": "Submitted", "submission": "diff"},
            {"exit_status": "submitted", "submission": "  \n"},  # nothing submitted
            {"exit_status": "submitted"},
            {"exit_status": "exit_cost", "submission": "diff"},
            {"exit_status": "", "submission": "diff"},
            {},
        )
    ]
    success, failure = (
        Outcome(success=True, claimed_by="dataset"),
        Outcome(success=False, claimed_by="dataset"),
    )
    assert claimed == [success, success, failure, failure, failure, None, None]


@pytest.mark.parametrize(
    ("fmt", "run"),
    [
        ("swe-agent", "swe_agent/astropy__astropy-12907.traj"),
        ("mini-swe-agent", "mini_swe_agent/astropy__astropy-14182.traj.json"),
    ],
)
def test_importers_read_the_claimed_outcome(fmt: str, run: str, tmp_path: Path) -> None:
    """The runs recorded in the tests' data, as they are and with their ``info`` changed."""
    from fidelity.formats.mini_swe_agent import read_mini_swe_agent
    from fidelity.formats.swe_agent import read_swe_agent

    read = read_swe_agent if fmt == "swe-agent" else read_mini_swe_agent
    source = FORMATS_DATA / run
    assert read(source).outcome == Outcome(success=True, claimed_by="dataset")  # a patch
    data = json.loads(source.read_text(encoding="utf-8"))
    for info, outcome in (
        ({**data["info"], "submission": ""}, Outcome(success=False, claimed_by="dataset")),
        ({"exit_status": "exit_context"}, Outcome(success=False, claimed_by="dataset")),
        ({}, None),
    ):
        changed = tmp_path / source.name
        changed.write_text(json.dumps({**data, "info": info}), encoding="utf-8")
        assert read(changed).outcome == outcome, info


def test_importers_read_the_claimed_outcome_of_public_runs() -> None:
    """Public agent runs (``../shared/agent-trajectories`` beside the checkout)."""
    from fidelity.formats.mini_swe_agent import read_mini_swe_agent
    from fidelity.formats.swe_agent import read_swe_agent

    if not AGENT_DATA.is_dir():
        unavailable(f"{AGENT_DATA} is not beside this checkout")
    mini = read_mini_swe_agent(AGENT_DATA / "mini-swe-agent" / "pylint-dev__pylint-7080.traj.json")
    assert mini.outcome == Outcome(success=False, claimed_by="dataset")  # empty submission
    ctf = next((AGENT_DATA / "swe-agent-ctf").rglob("*.traj"))
    assert read_swe_agent(ctf).outcome == Outcome(success=True, claimed_by="dataset")
