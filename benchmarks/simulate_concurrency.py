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
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import openai

from fidelity.batch import simulate_suite
from fidelity.formats.jsonl import write_trajectories
from fidelity.pipeline import SimConfig
from fidelity.worldmodels import openai_compat  # noqa: F401  (imported before any timing)
from fidelity.worldmodels.base import Mode
from fidelity.worldmodels.prompting import build_messages
from tests.worldmodels.conftest import build_trajectory
from tests.worldmodels.wm_fake_server import MODEL

ROOT = Path(__file__).resolve().parent.parent
# (seconds per answer, trajectories): 50 ms is a short answer from a small model; a
# Qwen-AgentWorld observation of a few hundred tokens takes seconds on vLLM, so 250 ms
# is still on the fast side.
SETTINGS = ((0.05, 40), (0.25, 20))
DEPTH = 5
CACHED_TRAJECTORIES = 200  # 1000 steps for the cached rerun


@contextmanager
def fake_server(latency: float) -> Iterator[str]:
    """The fake endpoint in its own process; yields its base URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.worldmodels.wm_fake_server", "--latency", str(latency)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.kill()
        process.wait()


def main() -> None:
    for latency, count in SETTINGS:
        with tempfile.TemporaryDirectory() as tmp, fake_server(latency) as url:
            _compare(Path(tmp), url, latency, count)
    with tempfile.TemporaryDirectory() as tmp, fake_server(0.0) as url:
        print(f"cached rerun: {_cached(Path(tmp), url):.3f} s per 1000 steps (target < 1 s)")


def _compare(root: Path, url: str, latency: float, count: int) -> None:
    """Time the reference loop and ``fidelity simulate`` on *count* trajectories."""
    suite = root / "suite.jsonl"
    trajectories = [
        build_trajectory(f"t{i}", commands=tuple(f"echo {i}-{d}" for d in range(DEPTH)))
        for i in range(count)
    ]
    write_trajectories(suite, trajectories)
    sequential = _sequential(url, trajectories)
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


def _sequential(url: str, trajectories: list) -> float:  # type: ignore[type-arg]
    """The reference loop: synchronous client, one request after another."""
    client = openai.OpenAI(base_url=url, api_key="EMPTY", max_retries=0)
    started = time.perf_counter()
    for trajectory in trajectories:
        for depth, step in enumerate(trajectory.steps, start=1):
            messages = build_messages(trajectory, trajectory.steps[: depth - 1], step.action, depth)
            try:
                client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
            except openai.OpenAIError:
                continue  # the reference script turns a failure into an empty prediction
    client.close()
    return time.perf_counter() - started


def _cached(root: Path, url: str) -> float:
    suite = root / "big.jsonl"
    write_trajectories(
        suite,
        [
            build_trajectory(f"c{i}", commands=tuple(f"echo {i}-{d}" for d in range(DEPTH)))
            for i in range(CACHED_TRAJECTORIES)
        ],
    )
    sim = SimConfig(url=url, model=MODEL, concurrency=32, cache=root / "cache.duckdb")
    simulate_suite(suite, root / "warm.jsonl", sim, Mode.teacher_forced)  # fills the cache
    started = time.perf_counter()
    result = simulate_suite(suite, root / "rerun.jsonl", sim, Mode.teacher_forced)
    elapsed = time.perf_counter() - started
    assert result.cache == {"hits": result.steps, "misses": 0}, result.cache
    return elapsed / result.steps * 1000


if __name__ == "__main__":
    main()
