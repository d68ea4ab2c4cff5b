"""Terminal-Bench tasks (``env.task``): built and run as the trajectory's docker sandbox, the
task's own tests as the real outcome, the labelled dataset gated on it, bad input refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from fidelity.analysis.models import OutcomeTable
from fidelity.analysis.summary import summarize
from fidelity.batch import replay_suite
from fidelity.diffing import diff_files
from fidelity.errors import InputFormatError
from fidelity.gate import GateOptions, gate_dataset, load_policy
from fidelity.harnesses.terminal_bench import parse_pytest
from fidelity.pipeline import load_suite, replay_or_fail, unverifiable_reason
from fidelity.resources import data_dir
from fidelity.sandboxes.docker import DockerConfig
from fidelity.sandboxes.pool import close_pools
from fidelity.store import Store
from fidelity.trajectory import CommandAction, EnvSpec, Step, Trajectory
from tests.conftest import no_new_containers

TASKS = data_dir("suites") / "terminal" / "tasks"
SUITE = TASKS / "suite.jsonl"
TASK = TASKS / "count-server-errors"
LABELS = {  # the suite's claimed outcome against what its actions really do
    "tb-solves": "agree_success",
    "tb-miscounts": "false_success",
    "tb-gives-up": "agree_failure",
    "tb-solves-unclaimed": "false_failure",
}

SUMMARY = """\
=========================== short test summary info ============================
PASSED ../tests/test_outputs.py::test_errors_file_exists
FAILED ../tests/test_outputs.py::test_errors_file_holds_the_count - AssertionError: assert 9 == 8
========================= 1 failed, 1 passed in 0.22s ==========================
"""


def test_the_pytest_summary_is_read_as_terminal_bench_reads_it() -> None:
    assert parse_pytest("collected 2 items\n" + SUMMARY) == {
        "test_errors_file_exists": True,
        "test_errors_file_holds_the_count": False,
    }
    xpassed = SUMMARY.replace("FAILED", "XPASS").replace(" - AssertionError: assert 9 == 8", "")
    assert parse_pytest(xpassed.replace("PASSED", "SKIPPED")) == {
        "test_errors_file_exists": True,
        "test_errors_file_holds_the_count": False,
    }
    assert parse_pytest("\x00\xff garbage\nPASSED a::b\n") is None


def _suite_with(tmp_path: Path, task: Path) -> Path:
    suite = tmp_path / "suite.jsonl"
    row = json.loads(SUITE.read_text().splitlines()[0])
    row["env"]["task"] = str(task.relative_to(tmp_path))
    suite.write_text(json.dumps(row) + "\n")
    return suite


def _task_copy(tmp_path: Path, name: str = "task") -> Path:
    folder = tmp_path / name
    shutil.copytree(TASK, folder)
    return folder


def test_a_task_folder_without_tests_is_one_line_naming_the_file(tmp_path: Path) -> None:
    folder = _task_copy(tmp_path)
    shutil.rmtree(folder / "tests")
    with pytest.raises(InputFormatError) as caught:
        load_suite(_suite_with(tmp_path, folder))
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 2
    assert message.startswith(f"{tmp_path / 'suite.jsonl'}:1: env.task: ")
    assert f"{folder / 'tests'}: missing" in message


def test_a_malformed_task_yaml_is_one_line_naming_the_file_and_field(tmp_path: Path) -> None:
    folder = _task_copy(tmp_path)
    text = (folder / "task.yaml").read_text()
    (folder / "task.yaml").write_text(
        text.replace("max_test_timeout_sec: 60", "max_test_timeout_sec: soon")
    )
    suite = _suite_with(tmp_path, folder)
    with pytest.raises(InputFormatError, match=r"task\.yaml: max_test_timeout_sec: "):
        load_suite(suite)
    (folder / "task.yaml").write_text("instruction: [unclosed\n")
    with pytest.raises(InputFormatError, match=r"task\.yaml:\d+: not valid YAML"):
        load_suite(suite)
    result = subprocess.run(
        [sys.executable, "-m", "fidelity", "replay", str(suite), "--sandbox", "docker",
         "--output", str(tmp_path / "out.jsonl")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if "task.yaml" in line]
    assert len(errors) == 1 and "not valid YAML" in errors[0]


def test_an_edited_task_is_read_again(tmp_path: Path) -> None:
    """A task loaded once is not served from memory after its task.yaml changed."""
    from fidelity.harnesses.terminal_bench import load_task

    folder = _task_copy(tmp_path)
    assert load_task(folder).config.max_test_timeout_sec == 60
    assert load_task(folder) is load_task(folder)  # unchanged: read once
    text = (folder / "task.yaml").read_text()
    (folder / "task.yaml").write_text(
        text.replace("max_test_timeout_sec: 60", "max_test_timeout_sec: 90")
    )
    assert load_task(folder).config.max_test_timeout_sec == 90


# -- real containers -----------------------------------------------------------------


@pytest.fixture
def no_leftovers(docker: None) -> Iterator[None]:
    with no_new_containers():
        yield


@pytest.fixture(scope="module")
def replays(docker: None, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The Terminal-Bench suite replayed twice in its task's image."""
    folder = tmp_path_factory.mktemp("tb")
    first, second = folder / "real1.jsonl", folder / "real2.jsonl"
    for out in (first, second):
        result = replay_suite(SUITE, out, sandbox="docker")
        assert result.trajectories == 4 and result.failed_steps == 0
    close_pools()
    return first, second


@pytest.mark.docker
def test_two_real_replays_of_the_task_drift_on_under_one_percent(
    replays: tuple[Path, Path],
) -> None:
    result = diff_files(*replays)
    assert len(result.rows) == 11 and not result.only_real and not result.only_sim
    assert result.drift_rate < 0.01, [r.reasons for r in result.rows if r.drift]


@pytest.mark.docker
def test_the_labelled_dataset_gives_the_exact_table_and_quarantines_false_outcomes(
    replays: tuple[Path, Path], tmp_path: Path, db_path: Path, no_leftovers: None
) -> None:
    dataset = tmp_path / "sim.jsonl"
    shutil.copy(replays[0], dataset)  # recorded observations, claimed outcomes of the suite
    policy = tmp_path / "gate.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.5\nmax_false_success_rate = 0.4\n")
    out = tmp_path / "out"
    options = GateOptions(
        dataset=dataset,
        policy_path=policy,
        output_dir=out,
        db=db_path,
        run_id="tb",
        sample=None,
        sandbox="docker",
        allowed_roots=[TASKS],
    )
    manifest = gate_dataset(options, load_policy(policy))
    with Store(db_path, read_only=True) as store:
        [figures] = summarize(store, "tb").outcomes
    assert figures.table == OutcomeTable(
        agree_success=1, false_success=1, false_failure=1, agree_failure=1
    )
    assert [c.trajectory_id for c in figures.false_successes] == ["tb-miscounts"]
    assert manifest.verdict.exit_code == 1  # 1 false success of 2 claimed: 0.5 > 0.4
    quarantined = {
        row["id"]: row["meta"]
        for row in map(json.loads, (out / "quarantined.jsonl").read_text().splitlines())
    }
    wrong = [tid for tid, cell in LABELS.items() if cell.startswith("false")]
    assert sorted(quarantined) == sorted(wrong)
    assert all(quarantined[tid]["quarantine_reason"] == "outcome" for tid in wrong)


@pytest.mark.docker
def test_fidelity_audit_replays_the_task_and_leaves_no_container(
    docker: None, tmp_path: Path
) -> None:
    from tests.conftest import audit_argv

    db = tmp_path / "f.duckdb"
    argv = audit_argv(tmp_path, SUITE, db, "tb-audit", "--sandbox", "docker")
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert result.returncode in (0, 1), result.stderr[-2000:]
    with Store(db, read_only=True) as store:
        [figures] = summarize(store, "tb-audit").outcomes
    assert figures.table == OutcomeTable(
        agree_success=1, false_success=1, false_failure=1, agree_failure=1
    )
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "label=fidelity.run=tb-audit"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert left.strip() == ""


def _trajectory(task: Path) -> Trajectory:
    return Trajectory(
        id="tb-bad",
        domain="terminal",
        env=EnvSpec(backend="docker", task=str(task)),
        steps=[Step(action=CommandAction(command="echo 8 > errors.txt"))],
    )


@pytest.mark.docker
def test_a_dockerfile_that_fails_to_build_leaves_the_trajectory_unverifiable(
    tmp_path: Path, no_leftovers: None
) -> None:
    folder = _task_copy(tmp_path, "broken-build")
    with (folder / "Dockerfile").open("a") as handle:
        handle.write("RUN echo the build breaks here && false\n")
    replayed = replay_or_fail(_trajectory(folder), DockerConfig(step_timeout=30))
    reason = unverifiable_reason(replayed.error)
    assert reason is not None and "building the Terminal-Bench task 'broken-build' failed" in reason
    assert replayed.outcome is not None and replayed.outcome.status == "unverifiable"


@pytest.mark.docker
def test_a_hanging_test_script_is_an_unverifiable_outcome(
    tmp_path: Path, no_leftovers: None
) -> None:
    folder = _task_copy(tmp_path, "hangs")
    text = (folder / "task.yaml").read_text()
    (folder / "task.yaml").write_text(
        text.replace("max_test_timeout_sec: 60", "max_test_timeout_sec: 2")
    )
    (folder / "run-tests.sh").write_text("#!/bin/bash\nsleep 600\n")
    replayed = replay_or_fail(_trajectory(folder), DockerConfig(step_timeout=30))
    assert replayed.error is None
    assert replayed.outcome is not None and replayed.outcome.status == "unverifiable"
    assert replayed.outcome.reason == "the tests timed out after 2s (max_test_timeout_sec)"


@pytest.mark.docker
def test_a_test_script_printing_garbage_is_an_unverifiable_outcome(
    tmp_path: Path, no_leftovers: None
) -> None:
    folder = _task_copy(tmp_path, "garbage")
    (folder / "run-tests.sh").write_text("#!/bin/bash\nprintf '\\377\\376 PASSED a::b'\nexit 0\n")
    replayed = replay_or_fail(_trajectory(folder), DockerConfig(step_timeout=30))
    assert replayed.outcome is not None and replayed.outcome.status == "unverifiable"
    assert replayed.outcome.reason == "run-tests.sh (exit 0) printed no pytest short test summary"
