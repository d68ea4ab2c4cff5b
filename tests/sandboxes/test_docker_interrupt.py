"""Signals with Docker sandboxes: zero containers after Ctrl-C, and after SIGKILL + next audit."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from fakes.trajectories import command_trajectory
from fidelity.formats.jsonl import write_trajectories
from fidelity.sandboxes.images import ensure_image
from tests.conftest import audit_argv, labelled_containers
from tests.system.test_chaos import kill_reaper

pytestmark = [pytest.mark.slow, pytest.mark.docker]


@pytest.fixture(scope="module")
def image(docker: None) -> str:
    return ensure_image("terminal")


def containers(owner: int | None = None, run_id: str | None = None) -> list[str]:
    return labelled_containers(f"fidelity.owner_pid={owner}" if owner else f"fidelity.run={run_id}")


def start(tmp_path: Path, run_id: str) -> subprocess.Popen[str]:
    suite = tmp_path / "suite.jsonl"
    slow = command_trajectory("slow", "echo start", "sleep 60", "echo end")
    quick = command_trajectory("quick", "echo hi")
    write_trajectories(suite, [quick, slow])
    proc = subprocess.Popen(
        audit_argv(tmp_path, suite, tmp_path / "f.duckdb", run_id, "--sandbox", "docker"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while not containers(run_id=run_id):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "no container started"
        time.sleep(0.1)
    time.sleep(2.0)  # let the slow trajectory reach `sleep 60`
    return proc


def test_sigint_leaves_no_container(tmp_path: Path, image: str) -> None:
    proc = start(tmp_path, "dk-int")
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert containers(owner=proc.pid) == []
    with duckdb.connect(str(tmp_path / "f.duckdb"), read_only=True) as con:
        assert con.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]


def test_sigkill_leftovers_are_swept_by_the_next_audit(tmp_path: Path, image: str) -> None:
    proc = start(tmp_path, "dk-kill")
    assert kill_reaper(proc.pid) == 1  # both die: the next audit's sweep is what is left
    proc.kill()
    proc.communicate(timeout=30)
    assert containers(owner=proc.pid)  # SIGKILL skips every finally: the container is left
    suite = tmp_path / "quick.jsonl"
    write_trajectories(suite, [command_trajectory("quick", "echo hi")])
    rerun = subprocess.run(
        audit_argv(tmp_path, suite, tmp_path / "g.duckdb", "dk-next", "--sandbox", "docker"),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert containers(owner=proc.pid) == []
    assert containers(run_id="dk-next") == []
