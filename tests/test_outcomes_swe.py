"""Outcomes on the bundled swe suite: its unittest checks decide the real outcome, and a
labelled dataset over the suite (claimed outcomes partly false) is gated in real Docker."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fidelity.analysis.models import OutcomeTable
from fidelity.analysis.summary import summarize
from fidelity.analysis.tallies import read_tallies
from fidelity.formats.jsonl import write_trajectories
from fidelity.gate import GateOptions, evaluate, gate_dataset, load_policy
from fidelity.gate.evidence import population_evidence
from fidelity.pipeline import load_suite, replay
from fidelity.report.html import render_report
from fidelity.resources import data_dir, default_suite
from fidelity.sandboxes import sandbox_config
from fidelity.sandboxes.images import ensure_image
from fidelity.store import Store
from fidelity.trajectory import Outcome, Step, Trajectory

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SWE = data_dir("suites") / "swe"

# The labelled fixture: id -> (bundled trajectory, indices of the steps left out, the claimed
# outcome, the label). Leaving out a trajectory's fixing edit leaves its planted bug in place.
LABELLED: dict[str, tuple[str, tuple[int, ...], Outcome, str]] = {
    "lru-fixed": (
        "swe-cachetools-lru-order",
        (),
        Outcome(success=True, claimed_by="simulation"),
        "agree_success",
    ),
    "hyphen-fixed": (
        "swe-idna-hyphen",
        (),
        Outcome(success=True, reward=1.0, claimed_by="simulation"),
        "agree_success",
    ),
    "clip-fixed": (
        "swe-webcolors-clip-integer",
        (),
        Outcome(success=True, claimed_by="dataset"),
        "agree_success",
    ),
    "ttl-unfixed": (  # the str_replace that fixes expire() is left out
        "swe-cachetools-ttl-expiry",
        (3,),
        Outcome(success=True, claimed_by="simulation"),
        "false_success",
    ),
    "label-length-unfixed": (
        "swe-idna-label-length",
        (4,),
        Outcome(success=True, reward=1.0, claimed_by="simulation"),
        "false_success",
    ),
    # neither the agent's new test nor the fix: only the check's own regression test sees it
    "hashkey-untested": (
        "swe-cachetools-hashkey-kwargs",
        (2, 3, 4, 5),
        Outcome(success=True, claimed_by="simulation"),
        "false_success",
    ),
    "hashkey-fixed": (
        "swe-cachetools-hashkey-kwargs",
        (),
        Outcome(success=False, reward=0.0, claimed_by="simulation"),
        "false_failure",
    ),
    "short-hex-unfixed": (
        "swe-webcolors-short-hex",
        (3, 4),
        Outcome(success=False, claimed_by="simulation"),
        "agree_failure",
    ),
    "clip-unfixed": (
        "swe-webcolors-clip-integer",
        (6,),
        Outcome(success=False, reward=0.0, claimed_by="dataset"),
        "agree_failure",
    ),
}
REAL = {"agree_success": "success", "false_success": "failure"}
REAL |= {"false_failure": "success", "agree_failure": "failure"}


@pytest.fixture(scope="module")
def swe_image(docker: None) -> str:
    """The swe image (sdists from PyPI on first build), cached by recipe hash."""
    return ensure_image("swe")


def _bundled() -> dict[str, dict[str, Any]]:
    """The bundled suite's trajectories by id, their setup scripts as absolute paths."""
    found = {}
    for line in (SWE / "suite.jsonl").read_text().splitlines():
        trajectory = json.loads(line)
        env = trajectory["env"]
        env["setup"] = [f"@{SWE / entry[1:]}" for entry in env["setup"]]
        found[trajectory["id"]] = trajectory
    return found


@pytest.fixture(scope="module")
def labelled(swe_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The labelled dataset: each trajectory's observations are those of a real replay (the
    simulation agreed with reality step by step), its claimed outcome partly false; the
    label is in ``meta.label``. Asserts that each check's real verdict is the label's."""
    bundled = _bundled()
    config = sandbox_config("swe", None, {}, "labelled-fixture")
    trajectories = []
    for tid, (source, left_out, claimed, label) in LABELLED.items():
        steps = [s for i, s in enumerate(bundled[source]["steps"]) if i not in left_out]
        base = Trajectory.model_validate({**bundled[source], "id": tid, "steps": steps})
        real = replay(base, config)
        assert real.outcome is not None and real.outcome.status == REAL[label], (tid, real)
        simulated = [
            Step(action=step.action, observation=timed.observation)
            for step, timed in zip(base.steps, real.steps, strict=True)
        ]
        meta = {"model": "toy-wm", "mode": "open-loop", "label": label}
        trajectories.append(
            base.model_copy(
                update={"steps": simulated, "source": "sim", "meta": meta, "outcome": claimed}
            )
        )
    dataset = tmp_path_factory.mktemp("labelled") / "swe-labelled.jsonl"
    write_trajectories(dataset, trajectories)
    return dataset


def test_bundled_suite_checks_succeed_on_every_fixing_trajectory(swe_image: str) -> None:
    suite = load_suite(default_suite("swe"), "swe")
    config = sandbox_config("swe", None, {}, "bundled-checks")
    for trajectory in suite:
        assert trajectory.env.check is not None, trajectory.id
        outcome = replay(trajectory, config).outcome
        assert outcome is not None and outcome.status == "success", (trajectory.id, outcome)
        assert "Ran " in outcome.output and "OK" in outcome.output


def test_labelled_swe_dataset_gives_the_labelled_table(labelled: Path, tmp_path: Path) -> None:
    labels = {
        json.loads(line)["id"]: json.loads(line)["meta"]["label"]
        for line in labelled.read_text().splitlines()
    }
    policy = tmp_path / "gate.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.5\nmax_false_success_rate = 0.5\n")
    out, db = tmp_path / "out", tmp_path / "gate.duckdb"
    options = GateOptions(
        dataset=labelled,
        policy_path=policy,
        output_dir=out,
        db=db,
        run_id="swe-labelled",
        sample=None,
        allowed_roots=[SWE],
    )
    manifest = gate_dataset(options, load_policy(policy))
    with Store(db, read_only=True) as store:
        summary = summarize(store, "swe-labelled")
        # --all replayed the whole dataset: its rates are known (the gate's exact evidence)
        evidence = population_evidence(list(read_tallies(store, "swe-labelled").values()))
    [figures] = summary.outcomes
    counts = Counter(labels.values())
    assert figures.domain == "swe" and figures.unverifiable == 0
    assert figures.table == OutcomeTable(**counts)
    assert sorted(c.trajectory_id for c in figures.false_successes) == sorted(
        tid for tid, label in labels.items() if label == "false_success"
    )
    assert figures.false_success_rate is not None and figures.false_success_rate.value == 0.5

    quarantined = {q["id"]: q["meta"] for q in _lines(out / "quarantined.jsonl")}
    wrong = {tid for tid, label in labels.items() if label in ("false_success", "false_failure")}
    assert set(quarantined) == wrong, quarantined
    assert all(quarantined[tid]["quarantine_reason"] == "outcome" for tid in wrong)
    assert {a["id"] for a in _lines(out / "admitted.jsonl")} == set(labels) - wrong

    html = render_report(summary)
    row = "".join(
        f'<td class="num">{counts[c]}</td>'
        for c in ("agree_success", "false_success", "false_failure", "agree_failure")
    )
    assert f"<tr><td>swe</td>{row}" in html
    assert "false success <code>hashkey-untested</code>" in html

    assert manifest.verdict.exit_code == 0  # 3 of 6 claimed successes are false: 0.5 <= 0.5
    stricter = tmp_path / "stricter.toml"
    stricter.write_text("[default]\nmax_drift_rate = 0.5\nmax_false_success_rate = 0.4\n")
    verdict = evaluate(summary, load_policy(stricter), evidence)
    assert verdict.exit_code == 1
    [failed] = [c for c in verdict.checks if not c.passed]
    assert failed.name.startswith("false_success_rate") and failed.value == 0.5


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]
