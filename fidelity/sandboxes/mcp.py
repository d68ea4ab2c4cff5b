"""The ``mcp`` backend: real MCP servers over stdio, driven by the official ``mcp`` SDK.

Each trajectory gets fresh server state (:func:`~fidelity.sandboxes.mcp_servers.make_state`)
and its own server processes, started at ``reset`` (start-up is not part of a
step's time), reused by every step, and killed at ``close``. Servers run under
``setpriv --pdeathsig KILL`` and carry a marker in their environment, so none
outlives a killed auditor (and :func:`sweep` finds any that did).

Actions are :class:`~fidelity.model.ToolAction`: ``tool`` is the MCP tool name
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
from fidelity.model import Action, EnvSpec, McpServer, Observation, ToolAction
from fidelity.sandboxes import mcp_servers
from fidelity.sandboxes.base import Sandbox, dead_owner, track, untrack
from fidelity.sandboxes.config import SandboxConfigBase

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


class _Server:
    """One running server: its session lives in a task of the sandbox's event loop."""

    def __init__(
        self, name: str, argv: list[str], env: dict[str, str], cwd: str, stderr: Path
    ) -> None:
        self.name = name
        self.cwd = cwd
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
        params = StdioServerParameters(
            command=self.argv[0], args=self.argv[1:], env=self.env, cwd=self.cwd
        )
        try:
            with self.stderr.open("w") as errlog:
                async with (
                    stdio_client(params, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    listed = await session.list_tools()
                    self.tools = [_wire(tool) for tool in listed.tools]
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
        """The last lines the server wrote on stderr."""
        try:
            text = self.stderr.read_text(errors="replace")
        except OSError:
            return ""
        return text[-STDERR_TAIL:].strip()


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
        self._closed = False
        self._lock = threading.RLock()

    # -- lifecycle ------------------------------------------------------------------------

    def reset(self, env: EnvSpec) -> Observation:
        """Fresh state and freshly started servers; the observation lists their tools."""
        with self._lock:
            self._stop_all()
            self._closed = False
            track(self)
            self._state = mcp_servers.make_state(Path(env.workdir) if env.workdir else None)
            self._start_loop()
            try:
                for name, spec in (env.mcp_servers or DEFAULT_SERVERS).items():
                    self._servers.append(self._start(name, spec))
            except BaseException:
                self._stop_all()
                raise
            tools = [tool for server in self._servers for tool in server.tools]
            return Observation(text="", state={"tools": tools})

    def _start_loop(self) -> None:
        if self._loop is not None:
            return
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fidelity-mcp", daemon=True)
        thread.start()
        self._loop, self._thread = loop, thread

    def _start(self, name: str, spec: McpServer) -> _Server:
        assert self._state is not None and self._loop is not None
        launch_spec = mcp_servers.resolve(spec)
        command = launch_spec.argv[0]
        if shutil.which(command) is None and not Path(command).is_file():
            raise SandboxError(f"mcp server {name!r}: command {command!r} not found")
        argv = [mcp_servers.fill(arg, self._state) for arg in launch_spec.argv]
        cwd = mcp_servers.fill(launch_spec.cwd or "{state}", self._state)
        if self.config.pdeathsig and shutil.which("setpriv"):
            argv = ["setpriv", "--pdeathsig", "KILL", "--", *argv]
        from mcp.client.stdio import get_default_environment

        env = {**get_default_environment(), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        env.update({k: mcp_servers.fill(v, self._state) for k, v in launch_spec.env.items()})
        env[OWNER_ENV] = str(os.getpid())
        env[STATE_ENV] = self._state["state"]
        server = _Server(name, argv, env, cwd, Path(self._state["state"]) / f"{name}.stderr")

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
                f"mcp server {name!r} failed to start ({type(cause).__name__}: {cause}); "
                f"stderr: {server.stderr_tail() or '(empty)'}"
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
            text=json.dumps(wire, ensure_ascii=False),
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
            text = "Error: Tool call failed: " + json.dumps(body, ensure_ascii=False)
            return Observation(text=text, exit_code=1, state={"isError": True, "protocol": True})
        return self._died(server, exc)

    def _died(self, server: _Server, exc: Exception | None = None) -> Observation:
        cause = f"{type(exc).__name__}: {exc}" if exc is not None else server.dead
        return Observation(
            error=f"McpServerDied: {server.name!r} ({cause}); "
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
