"""Chaos: ``fidelity audit`` killed with SIGKILL mid-run leaves nothing of its run behind.

SIGKILL skips every ``finally`` and ``atexit``; the audit's reaper
(:mod:`fidelity.sandboxes.reaper`) sees the owner's pipe close and removes
what the run left. Each test starts a real audit as a subprocess, waits until
its sandbox runs the agent's command, kills the auditor, and counts the
leftovers of THAT run only (its owner pid, its unique command, its own TMPDIR),
since other test runs share the machine. The verdict polls (up to 60 s) for
zero, so a slow machine takes longer but never fails it.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fakes.trajectories import command_trajectory
from fidelity.formats.jsonl import write_trajectories
from fidelity.pipeline import load_suite
from fidelity.resources import default_suite
from fidelity.trajectory import BrowserAction, Step
from tests.conftest import audit_argv

pytestmark = pytest.mark.slow
WAIT_S = 60.0


@pytest.fixture
def sandbox_tmp() -> Iterator[Path]:
    """A TMPDIR of this test only (the sandbox uid can traverse it)."""
    folder = Path(tempfile.mkdtemp(prefix="fidelity-chaos-", dir="/tmp"))
    folder.chmod(0o711)
    try:
        yield folder
    finally:
        subprocess.run(["rm", "-rf", str(folder)], check=False)


def processes_with(marker: str) -> list[int]:
    """Live (non-zombie) processes whose command line holds *marker*."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def start_audit(
    tmp_path: Path, sandbox_tmp: Path, suite: Path, *extra: str
) -> subprocess.Popen[bytes]:
    argv = audit_argv(tmp_path, suite, tmp_path / "c.duckdb", f"chaos-{secrets.token_hex(3)}")
    return subprocess.Popen(
        [*argv, *extra],
        env={**os.environ, "TMPDIR": str(sandbox_tmp)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def wait_until(condition: Callable[[], object], what: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300  # image builds and a busy machine: generous, not a verdict
    while not condition():
        assert proc.poll() is None, f"the audit ended (exit {proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"never saw {what}"
        time.sleep(0.1)


def leftovers_vanish(count: Callable[[], dict[str, int]]) -> dict[str, int]:
    """Poll *count* until every leftover is gone or :data:`WAIT_S` passed; the last count."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = {name: n for name, n in count().items() if n}
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(timeout=30)


def kill_reaper(owner: int) -> int:
    """SIGKILL the reaper of *owner* (to leave leftovers for the next audit's sweep)."""
    killed = 0
    for pid in processes_with(f"fidelity.sandboxes.reaper {owner} "):
        os.kill(pid, 9)
        killed += 1
    return killed


@pytest.mark.bwrap
def test_sigkill_of_a_bubblewrap_audit_leaves_nothing(
    bwrap: None, tmp_path: Path, sandbox_tmp: Path
) -> None:
    from fidelity.sandboxes import containment

    marker = f"sleep {3000 + secrets.randbelow(999)}"
    suite = tmp_path / "suite.jsonl"
    write_trajectories(suite, [command_trajectory("slow", "echo start", marker)])
    proc = start_audit(tmp_path, sandbox_tmp, suite)
    wait_until(lambda: processes_with(marker), "the agent's command running", proc)
    kill(proc)
    parents = containment.cgroup_parents()

    def count() -> dict[str, int]:
        return {
            "agent processes": len(processes_with(marker)),
            "sandbox folders": len(list(sandbox_tmp.glob("fidelity-local-*"))),
            "tmpfs mounts": sum(
                str(sandbox_tmp) in line
                for line in Path("/proc/self/mounts").read_text().splitlines()
            ),
            "cgroups": sum(len(list(p.glob(f"fidelity-{proc.pid}-*"))) for p in parents),
        }

    assert leftovers_vanish(count) == {}


@pytest.mark.docker
def test_sigkill_of_a_docker_audit_leaves_nothing(
    docker: None, tmp_path: Path, sandbox_tmp: Path
) -> None:
    from fidelity.sandboxes.images import ensure_image

    ensure_image("terminal")  # built before the clock of the audit starts
    marker = f"sleep {4000 + secrets.randbelow(999)}"
    suite = tmp_path / "suite.jsonl"
    write_trajectories(suite, [command_trajectory("slow", "echo start", marker)])
    proc = start_audit(tmp_path, sandbox_tmp, suite, "--sandbox", "docker")
    wait_until(lambda: processes_with(marker), "the agent's command running", proc)
    kill(proc)

    def count() -> dict[str, int]:
        listed = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=fidelity.owner_pid={proc.pid}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        return {"containers": len(listed), "agent processes": len(processes_with(marker))}

    assert leftovers_vanish(count) == {}


@pytest.mark.browser
def test_sigkill_of_a_browser_audit_leaves_nothing(tmp_path: Path, sandbox_tmp: Path) -> None:
    from fidelity.sandboxes.browser import BrowserConfig
    from fidelity.sandboxes.sites import OWNER_FLAG
    from tests.conftest import require_binary, require_module

    require_binary(BrowserConfig().executable, "apt-get install chromium")
    require_module("playwright.sync_api", "pip install 'fidelity[web]'")
    require_module("datasette", "pip install 'fidelity[web]'")
    (trajectory,) = [t for t in load_suite(default_suite("web")) if t.id == "web-lib-search"]
    waiting = Step(action=BrowserAction(action="noop(wait_ms=90000)"))  # mid-run at the kill
    trajectory = trajectory.model_copy(update={"steps": [waiting, *trajectory.steps]})
    suite = tmp_path / "suite.jsonl"
    write_trajectories(suite, [trajectory])
    proc = start_audit(tmp_path, sandbox_tmp, suite)
    owner = f"{OWNER_FLAG}={proc.pid}"

    def browser_running() -> bool:
        return any("chrom" in _cmdline(pid) for pid in processes_with(owner))

    wait_until(browser_running, "Chromium running", proc)
    kill(proc)

    def count() -> dict[str, int]:
        return {
            "browser and site processes": len(processes_with(owner)),
            "folders": len(list(sandbox_tmp.glob("fidelity-browser-*"))),
        }

    assert leftovers_vanish(count) == {}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return ""
