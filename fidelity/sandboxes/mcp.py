"""The ``mcp`` backend: real MCP servers over stdio, driven by the official ``mcp`` SDK.

Each trajectory gets fresh server state (:func:`~fidelity.sandboxes.mcp_servers.make_state`)
and its own server processes, started at ``reset`` (start-up is not part of a
step's time), reused by every step, and killed at ``close``. Every server runs in
bubblewrap (:mod:`~fidelity.sandboxes.mcp_jail`: its own uid, no network, its own PID
namespace, a fixed environment, no host path but the system, its install and its
state), with ``--die-with-parent`` and a marker in its environment, so none outlives
a killed auditor (and :func:`sweep` finds any that did).

A server a trajectory names by ``command`` comes with the dataset: it runs only when
the operator trusts the dataset's commands (:attr:`McpConfig.trust_commands`, the CLI's
``--trust-dataset-commands``); otherwise ``reset`` raises
:class:`~fidelity.sandboxes.images.EnvironmentUnavailableError` (the trajectory is
unverifiable) and nothing runs. What a server prints on stderr reaches an error message
only through :func:`~fidelity.trust.redact`, as do its answers.

Actions are :class:`~fidelity.trajectory.ToolAction`: ``tool`` is the MCP tool name
(``tools/list`` lists every server's tools), ``args`` its arguments. The
observation is what MCPMark shows an agent: ``json.dumps`` of the JSON-RPC
``result`` as it came over the wire, a protocol error as ``Error: Tool call
failed: {"code": …, "message": …}``; ``isError`` is kept in ``state``. A
server that fails to start, dies, answers garbage or hangs is an
infrastructure failure carrying its stderr tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import ConfigDict, Field

from fidelity.errors import SandboxError, SandboxUnavailableError
from fidelity.sandboxes import containment, mcp_servers
from fidelity.sandboxes.base import Sandbox, dead_owner, track, untrack
from fidelity.sandboxes.config import SandboxConfigBase
from fidelity.sandboxes.images import EnvironmentUnavailableError
from fidelity.sandboxes.mcp_jail import McpJail
from fidelity.trajectory import Action, EnvSpec, McpServer, Observation, ToolAction
from fidelity.trust import TRUST_FLAG, redact

OWNER_ENV = "FIDELITY_MCP_OWNER"
"""Set in every server's environment: ``<auditor pid>``."""
STATE_ENV = "FIDELITY_MCP_STATE"
"""Set in every server's environment: its trajectory's state folder."""
STDERR_TAIL = 800
_TRANSPORT_ERRORS = {-32000, -32001}
"""JSON-RPC codes the SDK raises itself: connection closed, request timed out."""
DEFAULT_SERVERS = {"filesystem": McpServer(bundled="filesystem")}
_T = TypeVar("_T")


class McpConfig(SandboxConfigBase):
    """Options of the ``mcp`` backend."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["mcp"] = "mcp"
    start_timeout: float = Field(default=60.0, gt=0, description="seconds for start + initialize")
    pdeathsig: bool = Field(default=True, description="kill servers when the auditor dies")
    trust_commands: bool = Field(
        default=False,
        description="run the MCP server commands a trajectory names; the CLI sets it from "
        f"{TRUST_FLAG}",
    )
    read_only: list[str] = Field(
        default_factory=list,
        description="host folders a trusted command server may read, bound read-only at the "
        "same path (the operator's; /usr, /etc and the bundled install always are)",
    )
    tmp_size_mb: int = Field(default=64, ge=1, description="size of each server's private /tmp")
    max_processes: int = Field(
        default=512, ge=16, description="RLIMIT_NPROC of a trajectory's servers (as root)"
    )
    max_total_memory_mb: int = Field(
        default=2048,
        ge=64,
        description="memory cgroup of a trajectory's servers together (as root, where the "
        "machine has one); a server past it is killed and its calls fail",
    )


class _Server:
    """One running server: its session lives in a task of the sandbox's event loop."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], stderr: Path) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.stderr = stderr
        self.session: Any = None
        self.tools: list[dict[str, Any]] = []
        self.tool_names: set[str] = set()
        self.ready: asyncio.Future[None] | None = None
        self.stop: asyncio.Event | None = None
        self.task: asyncio.Task[None] | None = None
        self.dead: str | None = None

    async def run(self) -> None:
        """Start, initialize, list tools, then hold the session until ``stop``."""
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert self.ready is not None and self.stop is not None
        params = StdioServerParameters(  # the jail's command line; cwd: bwrap's --chdir
            command=self.argv[0], args=self.argv[1:], env=self.env, cwd="/"
        )
        try:
            with open(self.stderr, "w", opener=_private) as errlog:
                async with (
                    stdio_client(params, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    listed = await session.list_tools()
                    self.tools = _redacted([_wire(tool) for tool in listed.tools])
                    self.tool_names = {tool["name"] for tool in self.tools}
                    self.session = session
                    self.ready.set_result(None)
                    await self.stop.wait()
        except BaseException as exc:
            self.dead = f"{type(exc).__name__}: {exc}"
            if not self.ready.done():
                self.ready.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
        finally:
            self.session = None
            if self.dead is None:
                self.dead = "the server was stopped"

    def stderr_tail(self) -> str:
        """The last lines the server wrote on stderr, secrets of the auditor's redacted, on
        one line (``|`` between them)."""
        try:
            text = self.stderr.read_text(errors="replace")
        except OSError:
            return ""
        lines = [line.strip() for line in redact(text)[-STDERR_TAIL:].splitlines()]
        return " | ".join(line for line in lines if line)


def _private(path: str, flags: int) -> int:
    """Open a log file only root (the auditor) can read."""
    return os.open(path, flags, 0o600)


def _redacted(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*tools* with :func:`~fidelity.trust.redact` applied to every string (walked only
    when the serialized list holds something to redact)."""
    text = json.dumps(tools, ensure_ascii=False)
    if redact(text) == text:
        return tools
    return [_redact_strings(tool) for tool in tools]


def _redact_strings(value: Any) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        return [_redact_strings(item) for item in value]
    if isinstance(value, dict):
        return {redact(key): _redact_strings(item) for key, item in value.items()}
    return value


def _wire(model: Any) -> dict[str, Any]:
    """What came over the wire: the SDK's model without the fields it adds itself."""
    dumped: dict[str, Any] = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    return dumped


class McpSandbox(Sandbox):
    """Real MCP servers over stdio, fresh for every trajectory."""

    name = "mcp"

    def __init__(self, config: McpConfig | None = None) -> None:
        require_sdk()
        self.config = config or McpConfig()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._servers: list[_Server] = []
        self._state: dict[str, str] | None = None
        self._jail: McpJail | None = None
        self._uid = containment.sandbox_uid()
        self._closed = False
        self._lock = threading.RLock()

    # -- lifecycle ------------------------------------------------------------------------

    def reset(self, env: EnvSpec) -> Observation:
        """Fresh state and freshly started servers; the observation lists their tools."""
        with self._lock:
            self._stop_all()
            servers = env.mcp_servers or DEFAULT_SERVERS
            self._refuse_untrusted(servers)
            self._closed = False
            track(self)
            self._state = mcp_servers.make_state(Path(env.workdir) if env.workdir else None)
            try:
                self._jail = self._new_jail(servers, Path(self._state["state"]))
                self._start_loop()
                for name, spec in servers.items():
                    self._servers.append(self._start(name, spec))
            except BaseException:
                self._stop_all()
                raise
            tools = [tool for server in self._servers for tool in server.tools]
            return Observation(text="", state={"tools": tools})

    def _refuse_untrusted(self, servers: dict[str, McpServer]) -> None:
        """A server the dataset names by its command runs only when the operator trusts it."""
        if self.config.trust_commands:
            return
        for name, spec in servers.items():
            if spec.command is not None:
                raise EnvironmentUnavailableError(
                    f"env.mcp_servers.{name}.command: a dataset's command is not run on this "
                    f"host (pass {TRUST_FLAG} to run it contained)"
                )

    def _new_jail(self, servers: dict[str, McpServer], state: Path) -> McpJail:
        """The jail of this trajectory's servers: the bundled install read-only if one runs."""
        read_only = [Path(path) for path in self.config.read_only]
        if any(spec.bundled is not None for spec in servers.values()):
            read_only += mcp_servers.install_paths()
        return McpJail(
            state,
            self._uid,
            read_only,
            tmp_size_mb=self.config.tmp_size_mb,
            max_processes=self.config.max_processes,
            die_with_parent=self.config.pdeathsig,
            max_total_memory_mb=self.config.max_total_memory_mb,
        )

    def _start_loop(self) -> None:
        if self._loop is not None:
            return
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fidelity-mcp", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread

    def _start(self, name: str, spec: McpServer) -> _Server:
        assert self._state is not None and self._loop is not None and self._jail is not None
        launch_spec = mcp_servers.resolve(spec)
        command = [mcp_servers.fill(arg, self._state) for arg in launch_spec.argv]
        cwd = mcp_servers.fill(launch_spec.cwd or "{state}", self._state)
        markers = {OWNER_ENV: str(os.getpid()), STATE_ENV: self._state["state"]}
        own = {k: mcp_servers.fill(v, self._state) for k, v in launch_spec.env.items()}
        env = self._jail.server_environment(own, markers)
        argv = self._jail.argv(command, env, cwd)
        log = self._jail.log(len(self._servers))
        server = _Server(name, argv, self._jail.launcher_environment(markers), log)

        async def launch() -> None:
            server.ready = asyncio.get_running_loop().create_future()
            server.stop = asyncio.Event()
            server.task = asyncio.create_task(server.run())
            await server.ready

        try:
            self._call(launch(), self.config.start_timeout)
        except TimeoutError:
            self._servers.append(server)  # stopped by close
            raise SandboxError(
                f"mcp server {name!r} did not initialize within {self.config.start_timeout:g}s; "
                f"stderr: {server.stderr_tail() or '(empty)'}"
            ) from None
        except Exception as exc:
            cause: BaseException = exc
            while isinstance(cause, BaseExceptionGroup) and len(cause.exceptions) == 1:
                cause = cause.exceptions[0]  # anyio's task group wraps the one real cause
            raise SandboxError(
                f"mcp server {name!r} failed to start ({type(cause).__name__}: "
                f"{redact(str(cause))}); stderr: {server.stderr_tail() or '(empty)'}"
            ) from exc
        return server

    def _call(self, coro: Coroutine[Any, Any, _T], timeout: float | None) -> _T:
        assert self._loop is not None
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            raise

    def close(self) -> None:
        """Stop every server (their processes die with the session) and remove the state."""
        with self._lock:
            self._closed = True
            self._stop_all()
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
            if loop is not None and thread is not None:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(10)
                if not thread.is_alive():
                    loop.close()
            untrack(self)

    def _stop_all(self) -> None:
        servers, self._servers = self._servers, []
        if servers and self._loop is not None:
            for server in servers:
                if server.stop is not None:
                    self._loop.call_soon_threadsafe(server.stop.set)

            async def wait() -> None:
                tasks = [s.task for s in servers if s.task is not None]
                if tasks:
                    _, pending = await asyncio.wait(tasks, timeout=5)
                    for task in pending:
                        task.cancel()
                    if pending:
                        await asyncio.wait(pending, timeout=5)

            with contextlib.suppress(TimeoutError):
                self._call(wait(), 15)
        if self._state is not None:  # any server that outlived its session (this sandbox's only)
            _kill_owned(os.getpid(), self._state["state"])
            shutil.rmtree(self._state["state"], ignore_errors=True)
            self._state = None
        if self._jail is not None:
            self._jail.close()
        self._jail = None

    # -- steps ----------------------------------------------------------------------------

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        """Call one tool (or ``tools/list``) and return what the agent would see."""
        if self._closed or self._loop is None:
            raise SandboxError("mcp sandbox is closed (or was never reset)")
        if not isinstance(action, ToolAction):
            return Observation(
                text=f"Error: the mcp backend runs tool calls, not {action.type!r} actions",
                exit_code=1,
            )
        if action.tool == "tools/list":
            tools = [tool for server in self._servers for tool in server.tools]
            return Observation(text=json.dumps({"tools": tools}, ensure_ascii=False), exit_code=0)
        server = self._route(action.tool)
        if server.dead is not None or server.session is None:
            return self._died(server)
        try:
            result = self._call(server.session.call_tool(action.tool, action.args), timeout)
        except TimeoutError:
            return Observation(
                timed_out=True,
                error=f"McpServerHung: {server.name!r} gave no answer within {timeout}s; "
                f"stderr: {server.stderr_tail() or '(empty)'}",
            )
        except Exception as exc:  # noqa: BLE001 - whatever broke, the agent saw no answer
            return self._failure(server, exc)
        wire = _wire(result)
        is_error = bool(wire.get("isError", False))
        return Observation(
            text=redact(json.dumps(wire, ensure_ascii=False)),
            exit_code=1 if is_error else 0,
            state={"isError": is_error, "server": server.name},
        )

    def _route(self, tool: str) -> _Server:
        """The server listing *tool*; else the first (it answers with its own error)."""
        if not self._servers:
            raise SandboxError("mcp sandbox has no server running")
        return next((s for s in self._servers if tool in s.tool_names), self._servers[0])

    def _failure(self, server: _Server, exc: Exception) -> Observation:
        from mcp.shared.exceptions import MCPError

        if isinstance(exc, MCPError) and exc.error.code in _TRANSPORT_ERRORS:
            return self._died(server, exc)  # the SDK's own code: the connection, not the tool
        if isinstance(exc, MCPError) and server.dead is None:
            error = exc.error
            body: dict[str, Any] = {"code": error.code, "message": error.message}
            if error.data is not None:
                body["data"] = error.data
            text = "Error: Tool call failed: " + redact(json.dumps(body, ensure_ascii=False))
            return Observation(text=text, exit_code=1, state={"isError": True, "protocol": True})
        return self._died(server, exc)

    def _died(self, server: _Server, exc: Exception | None = None) -> Observation:
        cause = f"{type(exc).__name__}: {exc}" if exc is not None else server.dead
        return Observation(
            error=f"McpServerDied: {server.name!r} ({redact(cause or '')}); "
            f"stderr: {server.stderr_tail() or '(empty)'}"
        )


def _kill_owned(owner: int, state: str) -> int:
    """SIGKILL server processes whose marker names *owner* and whose argv or env names *state*."""
    killed = 0
    for pid, environ, _ in _marked_processes():
        if environ.get(OWNER_ENV) != str(owner):
            continue
        if environ.get(STATE_ENV) != state:
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def _marked_processes() -> list[tuple[int, dict[str, str], str]]:
    """``(pid, environment, command line)`` of every process carrying :data:`OWNER_ENV`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "environ").read_bytes()
            if OWNER_ENV.encode() not in raw:
                continue
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        environ = dict(
            item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item
        )
        found.append((int(entry.name), environ, cmdline))
    return found


def owned_processes(owner: int | None = None) -> list[int]:
    """Pids of live MCP server processes started by *owner* (default: this process)."""
    owner = os.getpid() if owner is None else owner
    return [
        pid
        for pid, environ, _ in _marked_processes()
        if environ.get(OWNER_ENV) == str(owner) and _state_of(pid) != "Z"
    ]


def _state_of(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "Z"
    return stat.rsplit(")", 1)[-1].split()[0]


def build(config: McpConfig | None = None) -> McpSandbox:
    """A sandbox of this backend (the registry's builder)."""
    return McpSandbox(config)


def sweep(owner: int | None = None) -> int:
    """Kill servers and remove state folders left by auditors that are gone; returns how many.

    With *owner*, only that (dead) process's, whatever ``kill -0`` says (its reaper
    runs while it may still be a zombie).
    """
    removed = 0
    for pid, environ, _ in _marked_processes():
        started_by = environ.get(OWNER_ENV, "")
        if started_by.isdigit() and dead_owner(int(started_by), owner):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                removed += 1
    for folder in mcp_servers.stale_states(owner):
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    return removed


def require_sdk() -> None:
    """Raise :class:`SandboxUnavailableError` when the ``mcp`` SDK is not installed."""
    try:
        import mcp  # noqa: F401
    except ImportError:
        raise SandboxUnavailableError(
            "the mcp backend needs the mcp SDK: pip install 'fidelity[mcp]'"
        ) from None


__all__ = ["McpConfig", "McpSandbox", "build", "owned_processes", "sweep"]

"""This backend's config model (the registry builds it from the audit's options)."""
