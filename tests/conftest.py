"""Shared fixtures. Real parts only: bubblewrap sandboxes, DuckDB files on disk."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from fakes.world_model import FakeLLM, serving
from fidelity.cli.options import ENVIRONMENT
from fidelity.resources import data_dir

IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
TERMINAL = data_dir("suites") / "terminal"


@pytest.fixture(autouse=True)
def _no_cli_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line's ``FIDELITY_*`` variables (``--db``, ``--sim-url`` …) of the shell
    running the tests are not the tests': every test starts without them."""
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)


def unavailable(message: str) -> NoReturn:
    """Skip on a developer machine; fail in CI, where the test command provides what tests need."""
    if IN_CI:
        pytest.fail(f"{message}: CI must run this test, the test command provides it")
    pytest.skip(message)


def public_agent_steps() -> Iterator[tuple[str, str | None]]:
    """``(command line, observation text or None)`` of every step of the public agent runs
    in ``../shared`` (unavailable when they are not beside this checkout)."""
    from devsets.calibration.devset_agents import SHARED, load_runs

    if not SHARED.is_dir():
        unavailable(f"{SHARED} is not beside this checkout")
    for run in load_runs():
        for step in run.trajectory.steps:
            text = step.observation.text if step.observation is not None else None
            yield step.action.render(), text or None


def require_binary(name: str, install_hint: str) -> None:
    """Skip when *name* is missing on a developer machine; fail in CI, where it must run."""
    if not shutil.which(name):
        unavailable(f"{name} is not installed ({install_hint})")


def require_module(name: str, install_hint: str) -> object:
    """Import *name*; skip when missing on a developer machine, fail in CI."""
    try:
        return importlib.import_module(name)
    except ImportError:
        unavailable(f"Python module {name} is not installed ({install_hint})")


@pytest.fixture
def bwrap() -> None:
    """Tests that start real bubblewrap sandboxes."""
    require_binary("bwrap", "apt-get install bubblewrap")


@pytest.fixture
def chromium() -> None:
    """Tests that drive the real Chromium on the bundled sites (datasette among them)."""
    from fidelity.sandboxes.browser import BrowserConfig

    require_binary(BrowserConfig().executable, "apt-get install chromium")
    require_module("playwright.sync_api", "pip install 'fidelity[web]'")
    require_module("datasette", "pip install 'fidelity[web]'")


@pytest.fixture(scope="session")
def docker() -> None:
    """Tests that start real Docker containers: the CLI and a daemon that answers."""
    require_binary("docker", "apt-get install docker.io; scripts/bootstrap.sh tests starts dockerd")
    from fidelity.errors import SandboxUnavailableError
    from fidelity.sandboxes.images import docker_client

    try:
        docker_client().close()
    except SandboxUnavailableError as exc:
        unavailable(f"{exc} (scripts/bootstrap.sh tests starts dockerd)")


def labelled_containers(label: str) -> list[str]:
    """Ids of the containers, running or not, that carry *label* (``KEY`` or ``KEY=VALUE``)."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label={label}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


def owned_containers(every_owner: bool = False) -> list[str]:
    """Ids of the containers fidelity's Docker backends labelled as this process's (or, with
    *every_owner*, as any process's)."""
    from fidelity.sandboxes.docker import LABEL_OWNER

    return labelled_containers(LABEL_OWNER if every_owner else f"{LABEL_OWNER}={os.getpid()}")


@contextlib.contextmanager
def no_new_containers(every_owner: bool = False) -> Iterator[None]:
    """Asserts that no owned container started inside the block is left after it (the shared
    sandbox pools, which keep containers on purpose, are closed first)."""
    from fidelity.sandboxes.pool import close_pools

    before = set(owned_containers(every_owner))
    yield
    close_pools()
    assert set(owned_containers(every_owner)) <= before


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A fresh DuckDB file path (the file itself is created by the code under test)."""
    return tmp_path / "fidelity.duckdb"


@pytest.fixture
def fixture_project() -> Path:
    """The bundled terminal fixture project."""
    return TERMINAL / "fixtures" / "project"


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """A real loopback OpenAI-compatible server with scriptable failures; shut down after."""
    with serving(FakeLLM()) as fake:
        yield fake


@pytest.fixture
def zombie_pid() -> Iterator[int]:
    """The pid of a process that has exited and is not reaped yet (``kill -0`` still finds it).

    A killed auditor is one of these when its reaper sweeps, until its parent waits for it.
    """
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 60  # a hang guard: `true` exits at its own pace
    while _process_state(child.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert _process_state(child.pid) == "Z"
    try:
        yield child.pid
    finally:
        child.wait()


def _process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def closed_port_url() -> str:
    """A loopback URL on which nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def audit_argv(tmp_path: Path, suite: Path, db: Path, run_id: str, *extra: str) -> list[str]:
    """``python -m fidelity audit`` of *suite* into *db* as a subprocess would run it
    (copy baseline, 120 s steps, report in *tmp_path*), plus *extra* options."""
    return [
        sys.executable,
        "-m",
        "fidelity",
        "audit",
        str(suite),
        *extra,
        "--db",
        str(db),
        "--run-id",
        run_id,
        "--timeout",
        "120",
        "--sim-baseline",
        "copy",
        "--report",
        str(tmp_path / "r.html"),
    ]
