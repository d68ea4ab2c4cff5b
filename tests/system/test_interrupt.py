"""Signals: nothing outlives an interrupted audit, and the next run finishes the job."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from fakes.trajectories import command_trajectory
from fidelity.cli import app
from fidelity.formats.jsonl import write_trajectories
from fidelity.store import ReplayedRecord, Store
from tests.conftest import audit_argv
from tests.system.test_chaos import kill_reaper, processes_with

pytestmark = [pytest.mark.slow, pytest.mark.bwrap, pytest.mark.usefixtures("bwrap")]

SLOW_STEP = "sleep 59.731"  # a command line no other test runs


@pytest.fixture
def sandbox_tmp() -> Iterator[Path]:
    """A TMPDIR the sandbox uid can traverse (pytest's own tmp folders are private)."""
    folder = Path(tempfile.mkdtemp(prefix="fidelity-test-", dir="/tmp"))
    folder.chmod(0o711)
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def start_audit(tmp_path: Path, sandbox_tmp: Path, run_id: str) -> subprocess.Popen[str]:
    suite = tmp_path / "suite.jsonl"
    if not suite.exists():
        slow = command_trajectory("slow", "touch started", SLOW_STEP, "echo end")
        quick = command_trajectory("quick", "echo hi")
        write_trajectories(suite, [quick, slow])
    argv = audit_argv(tmp_path, suite, tmp_path / "f.duckdb", run_id)
    env = {**os.environ, "TMPDIR": str(sandbox_tmp)}
    return subprocess.Popen(
        argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for_sandbox(proc: subprocess.Popen[str]) -> None:
    """Wait until the slow trajectory is in its long step (its process shows in ``ps``; the
    workspace is a tmpfs of the sandbox's own): no fixed sleep racing the sandbox's start."""
    deadline = time.monotonic() + 300  # a hang guard, not a speed requirement
    while not processes_with(SLOW_STEP):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the slow trajectory never started"
        time.sleep(0.05)


def sandbox_processes() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in ps.splitlines() if "bwrap" in line and "fidelity-local-" in line]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_stops_every_sandbox_and_keeps_stored_work(
    tmp_path: Path, sandbox_tmp: Path, sig: signal.Signals
) -> None:
    proc = start_audit(tmp_path, sandbox_tmp, "r1")
    wait_for_sandbox(proc)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=300)  # a hang guard, not a speed requirement
    assert proc.returncode == 130, stderr
    assert "resume with: fidelity audit --run-id r1" in stderr
    assert "Traceback" not in stderr
    assert list(sandbox_tmp.iterdir()) == []
    assert sandbox_processes() == []
    with duckdb.connect(str(tmp_path / "f.duckdb"), read_only=True) as con:
        assert con.execute("SELECT status FROM runs").fetchall() == [("interrupted",)]
        stored = con.execute("SELECT trajectory_id FROM trajectories").fetchall()
    # The slow one is in its long step, so it cannot be stored; the quick one may or may not
    # be yet (that depends on speed): what is printed must match what was kept.
    assert stored in ([], [("quick",)])
    assert f"interrupted: sandboxes stopped; {len(stored)} of 2 trajectories stored whole" in stderr


def test_sigkill_leftovers_are_swept_by_the_next_audit(tmp_path: Path, sandbox_tmp: Path) -> None:
    proc = start_audit(tmp_path, sandbox_tmp, "r2")
    wait_for_sandbox(proc)
    assert kill_reaper(proc.pid) == 1  # both die: the next audit's sweep is what is left
    proc.kill()
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 60  # a hang guard: the kernel ends them, at its own pace
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes() == []  # bwrap --die-with-parent took the sandbox down
    assert list(sandbox_tmp.glob("fidelity-local-*"))  # only its folder was left behind

    suite = tmp_path / "suite.jsonl"
    quick = command_trajectory("quick", "echo hi")
    write_trajectories(suite, [quick])
    rerun = subprocess.run(
        [
            sys.executable,
            "-m",
            "fidelity",
            "audit",
            str(suite),
            "--db",
            str(tmp_path / "g.duckdb"),
            "--sim-baseline",
            "copy",
            "--report",
            str(tmp_path / "r.html"),
        ],
        env={**os.environ, "TMPDIR": str(sandbox_tmp)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert rerun.returncode == 0, rerun.stderr
    assert list(sandbox_tmp.iterdir()) == []


def test_ctrl_c_of_the_retrieval_audit_keeps_every_finished_replay(
    tmp_path: Path, sandbox_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default baseline needs every real replay before it predicts: the replays done
    when Ctrl-C comes are stored, said so, and not replayed again by the resume."""
    monkeypatch.setenv("TMPDIR", str(sandbox_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    quick = [command_trajectory(f"q{i}", "cat /proc/sys/kernel/random/uuid") for i in range(3)]
    suite, db = tmp_path / "suite.jsonl", tmp_path / "f.duckdb"
    write_trajectories(suite, [*quick, command_trajectory("blocked", "sleep 600")])
    argv = ["audit", str(suite), "--db", str(db), "--run-id", "r", "--concurrency", "4"]
    argv += ["--report", str(tmp_path / "r.html")]
    interrupt_once_stored(monkeypatch, 3)
    first = CliRunner().invoke(app, [*argv, "--timeout", "900"])
    assert first.exit_code == 130, first.output
    assert first.stderr.splitlines()[-1] == (
        "interrupted: sandboxes stopped; 0 of 4 trajectories stored whole, 3 more replayed "
        "for real (kept: a resume does not replay them)"
    )
    kept = replayed_texts(db)
    assert sorted(kept) == ["q0", "q1", "q2"]

    # The resume reuses the three replays (their random output is the stored one) and
    # replays only the blocked trajectory, whose `sleep 600` now times out after 1 s.
    second = CliRunner().invoke(app, [*argv, "--timeout", "1", "--json"])
    assert second.exit_code == 0, second.output
    with duckdb.connect(str(db), read_only=True) as con:
        real = dict(
            con.execute(
                "SELECT trajectory_id, text FROM observations WHERE side = 'real'"
            ).fetchall()
        )
        assert con.execute("SELECT DISTINCT status FROM trajectories").fetchall() == [("done",)]
        assert con.execute("SELECT status FROM runs").fetchall() == [("done",)]
    assert {tid: real[tid] for tid in kept} == kept
    assert json.loads(second.stdout)["summary"]["totals"]["trajectories"] == 4


def interrupt_once_stored(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """Send this process SIGINT, as Ctrl-C does, right after the audit has committed its
    *count*-th real replay (``Store.write_replayed`` returns once the row is committed).

    The audit's own file cannot be opened beside it: its writer attaches the file to an
    in-memory database, and DuckDB refuses a second handle on it in one process (a poller
    doing so never saw a row, and only its 300 s guard ended the audit).
    """
    original = Store.write_replayed
    stored: list[str] = []
    lock = threading.Lock()

    def write_replayed(self: Store, run_id: str, record: ReplayedRecord) -> None:
        original(self, run_id, record)
        with lock:
            stored.append(record.trajectory.id)
            if len(stored) == count:
                os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(Store, "write_replayed", write_replayed)


def replayed_texts(db: Path) -> dict[str, str]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            """SELECT o.trajectory_id, o.text FROM observations o
               JOIN trajectories t USING (run_id, trajectory_id)
               WHERE t.status = 'replayed' AND o.side = 'real'"""
        ).fetchall()
    return dict(rows)
