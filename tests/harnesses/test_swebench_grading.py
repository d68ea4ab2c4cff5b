"""SWE-bench instances replayed on a stand-in instance image and graded by swebench's code.

The image is a stand-in built locally (:mod:`tests.harnesses.standin`), tagged with the name
the ``swebench`` package computes for the instance; the grading is swebench's own eval script
(from the record) and report functions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fidelity.batch import replay_suite
from fidelity.cli import app
from fidelity.diffing import diff_files
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.pipeline import Replayed, replay_or_fail
from fidelity.sandboxes import sandbox_config
from fidelity.sandboxes.docker import LABEL_OWNER
from fidelity.sandboxes.images import docker_client
from fidelity.sandboxes.pool import close_pools
from fidelity.trajectory import (
    CommandAction,
    EnvSpec,
    InstanceSpec,
    Outcome,
    Step,
    Trajectory,
)
from tests.harnesses import standin
from tests.harnesses.conftest import MISSING_ID

pytestmark = pytest.mark.docker

LOOK = ["git status --short", "grep -n 'len(label) > 6' idna/core.py"]
CHECK = "python -c \"import idna; print(idna.valid_label_length('a' * 64))\""
FIX = "sed -i 's/if len(label) > 64:/if len(label) > 63:/' idna/core.py"
HANG = "printf 'def valid_label_length(label):\\n    while True:\\n        pass\\n' >> idna/core.py"

# id: (commands, the real outcome swebench's grading gives)
SUITE: dict[str, tuple[list[str], str]] = {
    "fixes": ([*LOOK, FIX, CHECK], "success"),
    "fixes-2": ([LOOK[1], FIX, "git diff --stat", CHECK], "success"),
    "looks-only": ([*LOOK, CHECK], "failure"),
    "breaks-more": ([*LOOK, "sed -i 's/> 64:/> 65:/' idna/core.py", CHECK], "failure"),
    "hangs": ([*LOOK, HANG], "unverifiable"),
}


def _trajectory(tid: str, commands: list[str], instance: str = standin.INSTANCE_ID) -> Trajectory:
    return Trajectory(
        id=tid,
        domain="swe",
        env=EnvSpec(
            backend="docker",
            instance=InstanceSpec(instance_id=instance, timeout=3 if tid == "hangs" else 300),
        ),
        steps=[Step(action=CommandAction(command=c)) for c in commands],
        source="sim",
        meta={"model": "toy-wm", "mode": "teacher-forced"},
        outcome=Outcome(success=True, claimed_by="simulation"),
    )


@pytest.fixture(scope="module")
def suite(instances_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("suite") / "suite.jsonl"
    write_trajectories(path, [_trajectory(t, c) for t, (c, _) in SUITE.items()])
    return path


@pytest.fixture(scope="module")
def replays(suite: Path, instances_file: Path) -> tuple[Path, Path]:
    """The suite replayed twice on the stand-in image (the second one kept as a dataset)."""
    first, second = suite.parent / "real1.jsonl", suite.parent / "real2.jsonl"
    for output in (first, second):
        result = replay_suite(suite, output, "docker", {"instances": instances_file})
        close_pools()
        assert result.failed_steps == 0 and result.trajectories == len(SUITE)
    return first, second


def _replay(trajectory: Trajectory, instances: Path) -> Replayed:
    config = sandbox_config("swe", "docker", {"instances": instances})
    try:
        return replay_or_fail(trajectory, config)
    finally:
        close_pools()


def test_the_shell_enters_testbed_and_swebench_grades_each_outcome(instances_file: Path) -> None:
    for tid, (commands, expected) in SUITE.items():
        replayed = _replay(_trajectory(tid, commands), instances_file)
        outcome = replayed.outcome
        assert outcome is not None and outcome.status == expected, (tid, outcome)
        steps = replayed.steps
        assert steps[0].observation.cwd == "/testbed"
        if commands[-1] == CHECK:  # `python` is the testbed environment's (Debian has python3)
            wanted = "False\n" if expected == "success" else "True\n"
            assert (steps[-1].observation.text, steps[-1].observation.exit_code) == (wanted, 0)
        if expected == "unverifiable":
            assert outcome.reason == "the eval script timed out after 3s"
        else:
            assert ">>>>> Start Test Output" in outcome.output and outcome.reason is None


def test_two_real_replays_drift_on_under_one_percent(replays: tuple[Path, Path]) -> None:
    result = diff_files(*replays)
    assert len(result.rows) == sum(len(c) for c, _ in SUITE.values())
    assert result.drift_rate < 0.01, [r.reasons for r in result.rows if r.drift][:5]
    real = {t.id: t.env.image for t in read_trajectories(replays[0])}
    assert set(real) == set(SUITE)


def test_audit_and_gate_replay_instance_trajectories(
    replays: tuple[Path, Path], instances_file: Path, tmp_path: Path
) -> None:
    dataset, db = replays[1], tmp_path / "f.duckdb"
    runner = CliRunner()
    audited = runner.invoke(
        app,
        [
            "audit", str(dataset), "--sandbox", "docker", "--instances", str(instances_file),
            "--db", str(db), "--sim-data", str(replays[0]), "--report", str(tmp_path / "r.html"),
            "--json", "--run-id", "a1",
        ],
    )  # fmt: skip
    close_pools()
    assert audited.exit_code == 0, audited.output
    summary = json.loads(audited.stdout)["summary"]
    assert summary["totals"]["drift_rate"] < 0.01
    [figures] = summary["outcomes"]
    assert figures["table"] == {
        "agree_success": 2, "false_success": 2, "false_failure": 0, "agree_failure": 0,
    }  # fmt: skip
    assert [u["trajectory_id"] for u in figures["unverifiable_cases"]] == ["hangs"]

    (tmp_path / "gate.toml").write_text(
        "[default]\nmax_drift_rate = 0.1\nmax_unverifiable_rate = 0.5\n"
        "max_false_success_rate = 1.0\nmax_outcome_unverifiable_rate = 0.5\n"
    )
    gated = runner.invoke(
        app,
        [
            "gate", str(dataset), "--policy", str(tmp_path / "gate.toml"), "--all",
            "--sandbox", "docker", "--instances", str(instances_file), "--db", str(db),
            "--run", "g1", "-o", str(tmp_path / "out"),
        ],
    )  # fmt: skip
    close_pools()
    assert gated.exit_code == 0, gated.output
    decisions = {
        d["trajectory_id"]: d
        for d in map(json.loads, (tmp_path / "out/decisions.jsonl").read_text().splitlines())
    }
    assert {t: d["outcome"] for t, d in decisions.items()} == {
        "fixes": "admitted", "fixes-2": "admitted", "looks-only": "quarantined",
        "breaks-more": "quarantined", "hangs": "quarantined",
    }  # fmt: skip
    quarantined = {t.id: t.meta for t in read_trajectories(tmp_path / "out/quarantined.jsonl")}
    assert {t: m["quarantine_reason"] for t, m in quarantined.items()} == {
        "looks-only": "outcome", "breaks-more": "outcome",
        "hangs": "outcome-unverifiable",  # its eval script timed out: the claim is unchecked
    }  # fmt: skip


@pytest.mark.parametrize(
    ("instance", "reason"),
    [
        (MISSING_ID, "is not here and is not pulled: --pull pulls it"),
        ("kjd__idna-404", "instance 'kjd__idna-404' is not in"),
    ],
)
def test_an_instance_that_cannot_be_had_is_unverifiable_and_leaves_nothing(
    instances_file: Path, instance: str, reason: str
) -> None:
    replayed = _replay(_trajectory("lost", LOOK, instance), instances_file)
    outcome = replayed.outcome
    assert outcome is not None and outcome.status == "unverifiable"
    assert reason in (outcome.reason or ""), outcome
    assert (replayed.error or "").startswith("EnvironmentUnavailableError: ")
    left = docker_client().containers.list(
        all=True, filters={"label": f"{LABEL_OWNER}={os.getpid()}"}
    )
    assert left == []
