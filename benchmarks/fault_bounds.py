"""What a hostile or failing world model costs, with the bounds of issue 17 and without.

Two measurements against the loopback fake endpoint of the tests (in this process,
real HTTP):

1. a server that drips one byte of an endless answer every 50 ms: wall time of one
   request with ``--sim-timeout 2`` against the naive client (no total deadline),
   which is stopped after ``NAIVE_LIMIT`` seconds (it would never end on its own);
2. a 10 MB answer: size of what ``fidelity audit --json`` prints with the default
   observation cap (64 KiB) and with the cap lifted (the naive way), one trajectory
   of two steps, real side in bubblewrap.

Run: ``.nox/tests/bin/python benchmarks/fault_bounds.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fakes.trajectories import command_trajectory
from fakes.world_model import MODEL, FakeLLM, FakeServer, Reply, make_handler
from fidelity.audit import AuditConfig, run_audit
from fidelity.formats.jsonl import write_trajectories
from fidelity.pipeline import SimConfig
from fidelity.worldmodels.base import Mode
from fidelity.worldmodels.openai_compat import OpenAICompatWorldModel, RequestFailedError

DEADLINE = 2.0
NAIVE_LIMIT = 20.0
ANSWER_BYTES = 10_000_000


def serve() -> tuple[FakeLLM, FakeServer]:
    """The fake endpoint on a loopback port, served from a thread."""
    fake = FakeLLM()
    server = FakeServer(("127.0.0.1", 0), make_handler(fake))
    fake.server = server
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return fake, server


async def one_request(url: str, deadline: float | None) -> tuple[float, str]:
    """Seconds one completion takes, and how it ended."""
    started = time.perf_counter()
    async with OpenAICompatWorldModel(url, MODEL, timeout=60, deadline=deadline) as model:
        try:
            await asyncio.wait_for(model.complete([{"role": "user", "content": "hi"}]), NAIVE_LIMIT)
            outcome = "answered"
        except TimeoutError:
            outcome = f"still dripping, stopped by the benchmark after {NAIVE_LIMIT:g} s"
        except RequestFailedError as error:  # the bounded client's expected outcome
            outcome = str(error).split(":")[0]
    return time.perf_counter() - started, outcome


def drip() -> None:
    fake, server = serve()
    fake.default = Reply.drip(0.05)
    bounded, how = asyncio.run(one_request(fake.url, DEADLINE))
    print(f"dripping server, --sim-timeout {DEADLINE:g}: {bounded:.2f} s ({how})")
    naive, how = asyncio.run(one_request(fake.url, None))
    print(f"dripping server, no deadline (naive): {naive:.2f} s ({how})")
    print(f"ratio naive/bounded: >= {naive / bounded:.1f}x (the naive one has no end)")
    fake.release()
    server.shutdown()


def huge_answer() -> None:
    fake, server = serve()
    fake.default = Reply.text("x" * ANSWER_BYTES)
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        folder = Path(tmp)
        folder.chmod(0o711)
        suite = folder / "suite.jsonl"
        write_trajectories(suite, [command_trajectory("t", "echo one", "echo two")])
        sim = SimConfig(url=fake.url, model=MODEL, max_retries=0, concurrency=1)
        sizes = {}
        for label, cap in (("cap 64 KiB (default)", 64 * 1024), ("no cap (naive)", 10**9)):
            config = AuditConfig(
                suite=suite,
                db=folder / f"{cap}.duckdb",
                sim=sim,
                mode=Mode.teacher_forced,
                observation_cap=cap,
            )
            sizes[label] = len(run_audit(config).model_dump_json())
            print(f"10 MB answers, audit --json with {label}: {sizes[label] / 1e6:.2f} MB")
        capped, naive = sizes.values()
        print(f"ratio naive/capped: {naive / capped:.0f}x")
    server.shutdown()


if __name__ == "__main__":
    drip()
    huge_answer()
