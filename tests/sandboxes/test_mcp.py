"""The mcp backend: real MCP servers over stdio (bundled npm and PyPI servers, a failure fake)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from fidelity.sandboxes.base import Sandbox
from fidelity.trajectory import EnvSpec, McpServer, ToolAction
from tests.conftest import require_binary, require_module
from tests.sandboxes.conformance_lifecycle import *  # noqa: F403 - backend-agnostic lifecycle

pytestmark = pytest.mark.slow
FAKE = Path(__file__).parent / "data" / "mcp_fake_server.py"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def servers() -> None:
    """The bundled servers, installed once into the cache (``sandbox build --domain mcp``)."""
    require_binary("node", "Debian nodejs; scripts/bootstrap.sh tests installs it")
    require_binary("npm", "Debian npm; scripts/bootstrap.sh tests installs it")
    require_module("mcp", "pip install 'fidelity[mcp]'")
    from fidelity.sandboxes import mcp_servers

    mcp_servers.build()


def fs_env() -> EnvSpec:
    return EnvSpec(backend="mcp", mcp_servers={"filesystem": McpServer(bundled="filesystem")})


def fake_env(mode: str) -> EnvSpec:
    fake = McpServer(command=sys.executable, args=[str(FAKE), mode])
    return EnvSpec(backend="mcp", mcp_servers={"fake": fake})


def trusted() -> Any:
    """The operator trusts the dataset's commands and lets them read this Python and the fake."""
    from fidelity.sandboxes.mcp import McpConfig

    return McpConfig(trust_commands=True, read_only=[sys.prefix, str(FAKE.parent)])


def call(tool: str, **args: object) -> ToolAction:
    return ToolAction(tool=tool, args=args)


@pytest.fixture
def sandbox(servers: None) -> Iterator[Sandbox]:
    from fidelity.sandboxes.mcp import McpSandbox

    box = McpSandbox()
    try:
        yield box
    finally:
        box.close()


@pytest.fixture
def trusting(servers: None) -> Iterator[Sandbox]:
    """A sandbox that runs the servers a trajectory names by command (contained)."""
    from fidelity.sandboxes.mcp import McpSandbox

    box = McpSandbox(trusted())
    try:
        yield box
    finally:
        box.close()


@pytest.fixture
def env() -> EnvSpec:
    return fs_env()


@pytest.fixture
def ok_action() -> ToolAction:
    return call("list_directory", path=".")


@pytest.fixture
def bad_action() -> ToolAction:
    return call("read_text_file", nonsense=1)


@pytest.fixture
def dirty_actions() -> list[ToolAction]:
    return [call("write_file", path="scratch.txt", content="dirty\n")]


@pytest.fixture
def probe_action() -> ToolAction:
    return call("list_directory", path=".")


@pytest.fixture
def leftovers() -> Callable[[Sandbox], list[str]]:
    from fidelity.sandboxes.mcp import McpSandbox, owned_processes

    def held(box: Sandbox) -> list[str]:
        assert isinstance(box, McpSandbox)
        state = box._state["state"] if box._state else None
        return [f"pid {pid}" for pid in owned_processes()] + (
            [state] if state and Path(state).exists() else []
        )

    return held


def text_of(observation_text: str) -> str:
    """The first text content of an MCPMark-serialized result."""
    result = json.loads(observation_text)
    return str(result["content"][0]["text"])


def test_observation_is_the_wire_result_as_mcpmark_serializes_it(sandbox: Sandbox) -> None:
    sandbox.reset(fs_env())
    observation = sandbox.step(call("read_text_file", path="notes/todo.txt"), timeout=60)
    result = json.loads(observation.text)
    assert result["content"][0]["type"] == "text"
    assert "WH-2" in result["content"][0]["text"]
    assert observation.state is not None and observation.state["isError"] is False
    assert observation.exit_code == 0


def test_write_then_read_and_fresh_state_per_trajectory(sandbox: Sandbox) -> None:
    sandbox.reset(fs_env())
    sandbox.step(call("write_file", path="notes/new.md", content="# new\n"), timeout=60)
    assert (
        text_of(sandbox.step(call("read_text_file", path="notes/new.md"), timeout=60).text)
        == "# new\n"
    )
    sandbox.reset(fs_env())
    again = sandbox.step(call("read_text_file", path="notes/new.md"), timeout=60)
    assert again.error is None and again.state is not None and again.state["isError"] is True


def test_reset_lists_the_servers_tools(sandbox: Sandbox) -> None:
    first = sandbox.reset(fs_env())
    assert first.state is not None
    names = {tool["name"] for tool in first.state["tools"]}
    assert {"read_text_file", "write_file", "list_directory"} <= names
    listed = json.loads(sandbox.step(call("tools/list"), timeout=60).text)
    assert {tool["name"] for tool in listed["tools"]} == names


def test_unknown_tool_is_the_servers_own_error(sandbox: Sandbox) -> None:
    sandbox.reset(fs_env())
    observation = sandbox.step(call("no_such_tool", path="."), timeout=60)
    assert observation.error is None
    assert "no_such_tool" in observation.text
    assert observation.exit_code == 1


def test_path_outside_the_root_is_denied_by_the_server(sandbox: Sandbox) -> None:
    sandbox.reset(fs_env())
    observation = sandbox.step(call("read_text_file", path="/etc/passwd"), timeout=60)
    assert observation.error is None and observation.exit_code == 1
    assert "root:" not in observation.text


@pytest.mark.parametrize(
    ("server", "action", "expected"),
    [
        ("git", call("git_log", repo_path=".", max_count=1), "Initial inventory tool"),
        (
            "time",
            call("convert_time", source_timezone="UTC", time="12:00", target_timezone="Asia/Tokyo"),
            "21:00",
        ),
        (
            "sqlite",
            call("read_query", query="SELECT name FROM products WHERE stock < 5 ORDER BY name"),
            "gaskets",
        ),
        ("memory", call("read_graph"), "entities"),
        ("everything", call("echo", message="hello mcp"), "hello mcp"),
    ],
)
def test_every_bundled_server_answers(
    sandbox: Sandbox, server: str, action: ToolAction, expected: str
) -> None:
    env = EnvSpec(backend="mcp", mcp_servers={server: McpServer(bundled=server)})  # type: ignore[arg-type]
    sandbox.reset(env)
    observation = sandbox.step(action, timeout=60)
    assert observation.error is None, observation.error
    assert expected in observation.text


def test_git_commit_hashes_repeat_between_trajectories(sandbox: Sandbox) -> None:
    env = EnvSpec(backend="mcp", mcp_servers={"git": McpServer(bundled="git")})
    sandbox.reset(env)
    first = sandbox.step(call("git_log", repo_path=".", max_count=1), timeout=60).text
    sandbox.reset(env)
    assert sandbox.step(call("git_log", repo_path=".", max_count=1), timeout=60).text == first


def test_a_users_own_server_from_its_command(trusting: Sandbox) -> None:
    first = trusting.reset(fake_env("ok"))
    assert first.state is not None and first.state["tools"][0]["name"] == "echo"
    assert text_of(trusting.step(call("echo", message="hi"), timeout=60).text) == "hi"


def test_server_that_fails_to_start_is_a_sandbox_error_with_stderr(trusting: Sandbox) -> None:
    from fidelity.errors import SandboxError

    with pytest.raises(SandboxError, match="cannot open its database"):
        trusting.reset(fake_env("crash"))


@pytest.mark.parametrize("mode", ["die", "garbage", "hang"])
def test_server_that_dies_garbles_or_hangs_is_an_infra_failure(
    trusting: Sandbox, mode: str
) -> None:
    trusting.reset(fake_env(mode))
    observation = trusting.step(call("echo", message="hi"), timeout=10)
    assert observation.error is not None
    assert f"call echo in mode {mode}" in observation.error  # the stderr tail
    later = trusting.step(call("echo", message="again"), timeout=10)
    assert later.error is not None  # the trajectory goes on, failing, without raising


def test_missing_bundled_install_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    require_module("mcp", "pip install 'fidelity[mcp]'")
    from fidelity.errors import SandboxUnavailableError
    from fidelity.sandboxes import mcp_servers

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    with pytest.raises(SandboxUnavailableError, match="sandbox build --domain mcp"):
        mcp_servers.resolve(McpServer(bundled="git"))


def test_env_spec_rejects_a_server_with_both_sources() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        McpServer(bundled="git", command="x")


_HOLDER = """
import sys, time
from fidelity.trajectory import EnvSpec, McpServer
from fidelity.sandboxes.mcp import McpSandbox, owned_processes
box = McpSandbox()
box.reset(EnvSpec(backend="mcp", mcp_servers={"fs": McpServer(bundled="filesystem"), "git": McpServer(bundled="git")}))
print(" ".join(map(str, owned_processes())), flush=True)
time.sleep(600)
"""


def _start_holder() -> subprocess.Popen[str]:
    """A process holding an MCP sandbox with two servers, once both run."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _HOLDER], cwd=REPO, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) >= 2, "both servers run"
    return proc


def _states_of(owner: int) -> list[Path]:
    from fidelity.sandboxes.mcp_servers import OWNER_FILE

    markers = Path(tempfile.gettempdir()).glob(f"tmp*/{OWNER_FILE}")
    return [m.parent for m in markers if m.read_text().strip() == str(owner)]


def _wait_until_gone(what: Callable[[], list[Any]]) -> list[Any]:
    deadline = time.monotonic() + 60  # a hang guard: the kernel and the reaper act at their pace
    while (found := what()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_no_orphan_server_after_the_auditor_is_killed(servers: None, sig: signal.Signals) -> None:
    """The servers die with the auditor; its state folders go (finally, or the reaper)."""
    from fidelity.sandboxes.mcp import owned_processes
    from tests.system.test_chaos import processes_with

    proc = _start_holder()
    assert _states_of(proc.pid)
    os.kill(proc.pid, sig)
    proc.wait(timeout=60)
    assert _wait_until_gone(lambda: owned_processes(proc.pid)) == []
    assert _wait_until_gone(lambda: processes_with(f"fidelity.sandboxes.reaper {proc.pid} ")) == []
    assert _states_of(proc.pid) == []


def test_sweep_removes_what_a_killed_auditor_and_its_reaper_left(servers: None) -> None:
    from fidelity.sandboxes import mcp_servers
    from fidelity.sandboxes.mcp import owned_processes, sweep
    from tests.system.test_chaos import kill_reaper

    proc = _start_holder()
    assert kill_reaper(proc.pid) == 1  # both die: a sweep is what is left
    proc.kill()
    proc.wait(timeout=60)
    assert _wait_until_gone(lambda: owned_processes(proc.pid)) == []  # pdeathsig
    left = _states_of(proc.pid)
    assert left, "SIGKILL skips every finally: the state folders stay"
    assert set(left) <= set(mcp_servers.stale_states())
    assert sweep() >= len(left)
    assert _states_of(proc.pid) == []


def test_the_reaper_sweeps_a_state_folder_while_its_owner_is_a_zombie(zombie_pid: int) -> None:
    """``kill -0`` finds a zombie: only the reaper's ``owner=`` says that it is dead."""
    from fidelity.sandboxes import sweep_owner
    from fidelity.sandboxes.mcp import sweep
    from fidelity.sandboxes.mcp_servers import OWNER_FILE

    state = Path(tempfile.mkdtemp())
    (state / OWNER_FILE).write_text(str(zombie_pid))
    try:
        assert sweep() == 0 and state.exists()  # a zombie may still be a live auditor's pid
        assert sweep_owner("mcp", zombie_pid) == 1
        assert not state.exists()
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_sandboxes_side_by_side_keep_their_own_servers(servers: None) -> None:
    from fidelity.sandboxes.mcp import McpSandbox

    with McpSandbox() as first, McpSandbox() as second:
        first.reset(fs_env())
        second.reset(fs_env())
        second.close()  # closing one must not touch the other's servers
        assert first.step(call("list_directory", path="."), timeout=60).error is None


def _audit(tmp_path: Path, domain: str, suite: Path) -> subprocess.CompletedProcess[str]:
    from tests.conftest import audit_argv

    argv = audit_argv(tmp_path, suite, tmp_path / "f.duckdb", f"{domain}-e2e", "--domain", domain)
    return subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False, cwd=REPO)


def test_audit_domain_mcp_end_to_end(servers: None, tmp_path: Path) -> None:
    import duckdb

    from fidelity.resources import default_suite

    suite = tmp_path / "suite.jsonl"
    lines = default_suite("mcp").read_text().splitlines()
    suite.write_text("\n".join(lines[:3]) + "\n")
    done = _audit(tmp_path, "mcp", suite)
    assert done.returncode in (0, 1), done.stderr  # 1: the copy baseline fails the gate
    with duckdb.connect(str(tmp_path / "f.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM trajectories").fetchone() == (3,)
    assert "0 failed to replay" in done.stdout, done.stdout
