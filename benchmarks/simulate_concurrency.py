"""`fidelity simulate` with 32 concurrent requests vs AgentWorldBench's one-at-a-time loop.

Server: the loopback OpenAI-compatible fake of the tests, run as its own
process (as vLLM or SGLang would be), HTTP/1.1 keep-alive, answering each
request after a fixed latency (SETTINGS, like a GPU server whose batching
keeps per-request latency flat under load). A CPU `transformers serve` is
not used here: it generates one request at a time, so it cannot show what
concurrency buys against vLLM/SGLang. Both sides are timed after every
import (the openai package alone takes ~0.7 s to import). Prints both wall
times, their ratio (target >= 10x) and the cached rerun time per thousand
steps (target < 1 s).

The failures mode (the retry tail): a 200 ms server whose every fifth request
fails with HTTP 500 (after the same 200 ms). Prints the wall time of
`fidelity simulate --sim-concurrency 32`, when 95% of the answers and the last
one were in, the answers lost, and the ratio against a sequential loop that
simply drops failed answers, measured in the same run (target >= 10x).

    python benchmarks/simulate_concurrency.py                 # every mode, quick size
    python benchmarks/simulate_concurrency.py --only failures --trajectories 100
"""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai

from fakes.trajectories import build_trajectory
from fakes.world_model import MODEL, FakeLLM, FakeServer, Reply, make_handler
from fidelity.batch import simulate_suite
from fidelity.formats.jsonl import write_trajectories
from fidelity.pipeline import SimConfig
from fidelity.trajectory import Trajectory
from fidelity.worldmodels import openai_compat  # imported before any timing
from fidelity.worldmodels.base import Mode
from fidelity.worldmodels.prompting import build_messages

ROOT = Path(__file__).resolve().parent.parent
# (seconds per answer, trajectories): 50 ms is a short answer from a small model; a
# Qwen-AgentWorld observation of a few hundred tokens takes seconds on vLLM, so 250 ms
# is still on the fast side.
SETTINGS = ((0.05, 40), (0.25, 20))
DEPTH = 5
CACHED_TRAJECTORIES = 200  # 1000 steps for the cached rerun
FAILING_LATENCY = 0.2
FAIL_EVERY = 5
FAILING_TRAJECTORIES = 40  # 200 steps: the quick size
MODES = ("latency", "failures", "cached")


@contextmanager
def fake_server(latency: float, fail_every: int = 0) -> Iterator[str]:
    """The fake endpoint in its own process; yields its base URL. *fail_every* > 0: every
    such request fails with HTTP 500 (after the same latency)."""
    if fail_every:
        argv = [__file__, "--serve", str(latency), "--fail-every", str(fail_every)]
    else:
        argv = ["-m", "fakes.world_model", "--latency", str(latency)]
    process = subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.kill()
        process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=MODES, action="append", help="run only these modes")
    parser.add_argument(
        "--trajectories",
        type=int,
        default=FAILING_TRAJECTORIES,
        help=f"failures mode: trajectories of {DEPTH} steps",
    )
    parser.add_argument("--serve", type=float, help=argparse.SUPPRESS)  # the server process
    parser.add_argument("--fail-every", type=int, default=FAIL_EVERY, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        _serve(args.serve, args.fail_every)
        return
    modes = args.only or MODES
    if "latency" in modes:
        for latency, count in SETTINGS:
            with tempfile.TemporaryDirectory() as tmp, fake_server(latency) as url:
                _compare(Path(tmp), url, latency, count)
    if "failures" in modes:
        with tempfile.TemporaryDirectory() as tmp, fake_server(FAILING_LATENCY, FAIL_EVERY) as url:
            _failures(Path(tmp), url, args.trajectories)
    if "cached" in modes:
        with tempfile.TemporaryDirectory() as tmp, fake_server(0.0) as url:
            print(f"cached rerun: {_cached(Path(tmp), url):.3f} s per 1000 steps (target < 1 s)")


def _compare(root: Path, url: str, latency: float, count: int) -> None:
    """Time the reference loop and ``fidelity simulate`` on *count* trajectories."""
    suite = root / "suite.jsonl"
    trajectories = _suite(suite, count)
    sequential, _ = _sequential(url, trajectories)
    sim = SimConfig(url=url, model=MODEL, concurrency=32)
    started = time.perf_counter()
    simulate_suite(suite, root / "sim.jsonl", sim, Mode.teacher_forced)
    concurrent = time.perf_counter() - started
    print(
        f"{count * DEPTH} steps, {latency * 1000:.0f} ms per request (loopback fake, own process)"
    )
    print(f"  one request at a time (AgentWorldBench loop): {sequential:.2f} s")
    print(f"  fidelity simulate, concurrency 32:            {concurrent:.2f} s")
    print(f"  ratio: {sequential / concurrent:.1f}x (target >= 10x)")


def _failures(root: Path, url: str, count: int) -> None:
    """The retry tail: the sequential drop-failures loop vs ``fidelity simulate``."""
    suite = root / "suite.jsonl"
    trajectories = _suite(suite, count)
    sequential, dropped = _sequential(url, trajectories)
    sim = SimConfig(url=url, model=MODEL, concurrency=32)
    with _arrivals() as arrivals:
        started = time.perf_counter()
        result = simulate_suite(suite, root / "sim.jsonl", sim, Mode.teacher_forced)
        concurrent = time.perf_counter() - started
    times = sorted(t - started for t in arrivals)
    p95 = times[max(0, -(-len(times) * 95 // 100) - 1)]
    print(
        f"{count * DEPTH} steps, {FAILING_LATENCY * 1000:.0f} ms per request, every "
        f"{FAIL_EVERY}th request fails with HTTP 500 (loopback fake, own process)"
    )
    print(f"  sequential loop dropping failed answers: {sequential:.2f} s, {dropped} answers lost")
    print(
        f"  fidelity simulate, concurrency 32:       {concurrent:.2f} s, "
        f"{result.failed_steps} answers lost; 95% in by {p95:.2f} s, last at {times[-1]:.2f} s"
    )
    print(f"  ratio: {sequential / concurrent:.1f}x (target >= 10x)")


class _FailingLLM(FakeLLM):
    """The fake whose every *every*-th request (counted across threads) gets HTTP 500."""

    def __init__(self, latency: float, every: int) -> None:
        super().__init__(default=Reply.slow(latency))
        self.failure = dataclasses.replace(Reply.http(500), delay=latency)
        self.every = every
        self.count = 0

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.count += 1
            return self.failure if self.count % self.every == 0 else self.default


def _serve(latency: float, every: int) -> None:
    """The failing server, run as this script's own process; prints its port."""
    fake = _FailingLLM(latency, every)

    class Handler(make_handler(fake)):  # type: ignore[misc]
        def _answer(self, reply: Reply, body: dict[str, Any]) -> None:
            if reply.kind == "status":
                time.sleep(reply.delay)  # a failure costs the server the same time
            super()._answer(reply, body)

    server = FakeServer(("127.0.0.1", 0), Handler)
    fake.server = server
    print(server.server_address[1], flush=True)
    server.serve_forever()


@contextmanager
def _arrivals() -> Iterator[list[float]]:
    """When each prediction came back (``perf_counter``) while the block runs."""
    arrivals: list[float] = []
    lock = threading.Lock()
    original = openai_compat.OpenAICompatWorldModel.predict

    async def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        observation = await original(self, *args, **kwargs)
        with lock:
            arrivals.append(time.perf_counter())
        return observation

    openai_compat.OpenAICompatWorldModel.predict = timed  # type: ignore[method-assign]
    try:
        yield arrivals
    finally:
        openai_compat.OpenAICompatWorldModel.predict = original  # type: ignore[method-assign]


def _suite(path: Path, count: int) -> list[Trajectory]:
    """*count* trajectories of ``DEPTH`` echo commands, written to *path*."""
    trajectories = [
        build_trajectory(f"t{i}", commands=tuple(f"echo {i}-{d}" for d in range(DEPTH)))
        for i in range(count)
    ]
    write_trajectories(path, trajectories)
    return trajectories


def _sequential(url: str, trajectories: list[Trajectory]) -> tuple[float, int]:
    """The reference loop: synchronous client, one request after another, a failure not
    retried but dropped. Returns (seconds, answers dropped)."""
    client = openai.OpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    dropped = 0
    started = time.perf_counter()
    for trajectory in trajectories:
        for depth, step in enumerate(trajectory.steps, start=1):
            messages = build_messages(trajectory, trajectory.steps[: depth - 1], step.action, depth)
            try:
                client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
            except openai.OpenAIError:
                dropped += 1  # the reference script turns a failure into an empty prediction
    elapsed = time.perf_counter() - started
    client.close()
    return elapsed, dropped


def _cached(root: Path, url: str) -> float:
    suite = root / "big.jsonl"
    _suite(suite, CACHED_TRAJECTORIES)
    sim = SimConfig(url=url, model=MODEL, concurrency=32, cache=root / "cache.duckdb")
    simulate_suite(suite, root / "warm.jsonl", sim, Mode.teacher_forced)  # fills the cache
    started = time.perf_counter()
    result = simulate_suite(suite, root / "rerun.jsonl", sim, Mode.teacher_forced)
    elapsed = time.perf_counter() - started
    assert result.cache == {"hits": result.steps, "misses": 0}, result.cache
    return elapsed / result.steps * 1000


if __name__ == "__main__":
    main()
