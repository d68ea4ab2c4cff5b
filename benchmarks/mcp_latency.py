"""Per-step latency and start-up of the mcp backend against calling the server directly.

The floor is the official SDK driving the same bundled server in one event loop
(``stdio_client`` + ``ClientSession.call_tool``), with no sandbox around it. Prints,
per server: median and p95 per step and steps/s for both, their ratio, and the
start-up of a fresh trajectory (state folder + start + initialize + tools/list)
against starting and initializing the server directly.

    python benchmarks/mcp_latency.py [--steps 100] [--starts 5]
    (needs `fidelity sandbox build --domain mcp` first)
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from typing import Any

from replay_cli import print_replay

from fidelity.resources import default_suite
from fidelity.sandboxes import mcp_servers
from fidelity.sandboxes.mcp import McpSandbox
from fidelity.trajectory import EnvSpec, McpServer, ToolAction

CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "filesystem": ("read_text_file", {"path": "notes/todo.txt"}),
    "sqlite": ("read_query", {"query": "SELECT name, stock FROM products ORDER BY name"}),
    "git": ("git_status", {"repo_path": "."}),
    "memory": ("read_graph", {}),
}


def env(server: str) -> EnvSpec:
    return EnvSpec(backend="mcp", mcp_servers={server: McpServer(bundled=server)})  # type: ignore[arg-type]


def through_sandbox(server: str, steps: int) -> list[float]:
    tool, args = CALLS[server]
    timings = []
    with McpSandbox() as box:
        box.reset(env(server))
        for _ in range(steps):
            started = time.perf_counter()
            box.step(ToolAction(tool=tool, args=args), timeout=60)
            timings.append(time.perf_counter() - started)
    return timings


async def _direct(server: str, steps: int, state: dict[str, str]) -> tuple[float, list[float]]:
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    launch = mcp_servers.resolve(McpServer(bundled=server))  # type: ignore[arg-type]
    argv = [mcp_servers.fill(arg, state) for arg in launch.argv]
    params = StdioServerParameters(
        command=argv[0],
        args=argv[1:],
        env={k: mcp_servers.fill(v, state) for k, v in launch.env.items()},
        cwd=mcp_servers.fill(launch.cwd or "{state}", state),
    )
    tool, args = CALLS[server]
    timings = []
    started = time.perf_counter()
    with open("/dev/null", "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            startup = time.perf_counter() - started
            for _ in range(steps):
                began = time.perf_counter()
                await session.call_tool(tool, args)
                timings.append(time.perf_counter() - began)
    return startup, timings


def direct(server: str, steps: int) -> tuple[float, list[float]]:
    state = mcp_servers.make_state(None)
    try:
        return asyncio.run(_direct(server, steps, state))
    finally:
        import shutil

        shutil.rmtree(state["state"], ignore_errors=True)


def sandbox_startup(server: str) -> float:
    with McpSandbox() as box:
        started = time.perf_counter()
        box.reset(env(server))
        return time.perf_counter() - started


def p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--starts", type=int, default=5)
    options = parser.parse_args()
    mcp_servers.build()
    print(
        f"{'server':<11} {'sandbox ms/step':>16} {'direct ms/step':>15} {'ratio':>6} "
        f"{'sandbox steps/s':>16} {'direct steps/s':>15} {'start s (sandbox/direct)':>25}"
    )
    for server in CALLS:
        ours = through_sandbox(server, options.steps)
        starts = [direct(server, options.steps if i == 0 else 1) for i in range(options.starts)]
        floor = starts[0][1]
        box_starts = [sandbox_startup(server) for _ in range(options.starts)]
        mine, theirs = statistics.median(ours), statistics.median(floor)
        print(
            f"{server:<11} {mine * 1000:>9.2f} (p95 {p95(ours) * 1000:.1f}) {theirs * 1000:>8.2f} "
            f"(p95 {p95(floor) * 1000:.1f}) {mine / theirs:>5.2f}x {len(ours) / sum(ours):>16.0f} "
            f"{len(floor) / sum(floor):>15.0f} {statistics.median(box_starts):>12.2f} / "
            f"{statistics.median(s for s, _ in starts):.2f}"
        )
    print_replay(default_suite("mcp"))


if __name__ == "__main__":
    main()
