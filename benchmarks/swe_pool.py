"""SWE sandbox pool: container start vs warm-pool reset, and suite throughput 1..N sandboxes.

Prints (nothing is asserted):
- a fresh SWE sandbox ``reset`` (create + start a container, shell, setup, baseline commit)
  against a warm-pool lease of a used container (processes killed, ``git checkout -f`` of the
  pinned commit, ``git clean -fdx``, scratch folders emptied, setup, baseline), and the ratio;
- throughput of the bundled SWE suite (trajectories/s and steps/s) through a pool of
  1..N concurrent sandboxes, each trajectory leasing a warm container.

Run: ``python benchmarks/swe_pool.py [--runs 8] [--max-concurrency N] [--rounds 2]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from replay_cli import print_replay

from fidelity import pipeline
from fidelity.errors import SandboxUnavailableError
from fidelity.resources import default_suite
from fidelity.sandboxes.images import ensure_image
from fidelity.sandboxes.pool import SandboxPool, new_sandbox
from fidelity.trajectory import EnvSpec, Trajectory


def _ms(values: list[float]) -> str:
    return f"mean {statistics.mean(values) * 1000:7.1f} ms  median {statistics.median(values) * 1000:7.1f} ms"


def fresh_starts(options: dict[str, object], env: EnvSpec, runs: int) -> list[float]:
    """Seconds of ``reset`` on a new sandbox (a new container each time)."""
    times = []
    for _ in range(runs):
        with new_sandbox(options) as box:
            started = time.perf_counter()
            box.reset(env)
            times.append(time.perf_counter() - started)
    return times


def warm_resets(options: dict[str, object], env: EnvSpec, runs: int) -> list[float]:
    """Seconds to lease a used, warm container again (the pool's recycle)."""
    pool = SandboxPool(options, size=1)
    try:
        with pool.lease(env) as box:
            box.step(pipeline.load_suite(default_suite("swe"))[0].steps[0].action)
        times = []
        for _ in range(runs):
            started = time.perf_counter()
            with pool.lease(env):
                times.append(time.perf_counter() - started)
        assert pool.recycled == runs, "the pool started containers instead of recycling"
        return times
    finally:
        pool.close()


def throughput(
    options: dict[str, object], suite: list[Trajectory], workers: int
) -> tuple[float, float]:
    """(trajectories/s, steps/s) replaying *suite* through a pool of *workers* sandboxes."""
    pool = SandboxPool(options, size=workers)

    def one(trajectory: Trajectory) -> int:
        with pool.lease(trajectory.env) as box:
            for step in trajectory.steps:
                box.step(step.action, timeout=60)
        return len(trajectory.steps)

    try:
        with ThreadPoolExecutor(workers) as executor:  # warm the pool: one lease per worker
            list(executor.map(one, suite[:workers]))
            started = time.perf_counter()
            steps = sum(executor.map(one, suite))
            elapsed = time.perf_counter() - started
    finally:
        pool.close()
    return len(suite) / elapsed, steps / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--max-concurrency", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--rounds", type=int, default=2, help="suite copies per throughput run")
    args = parser.parse_args()
    try:
        image = ensure_image("swe", log=lambda line: print(line, file=sys.stderr))
    except SandboxUnavailableError as exc:
        print(f"cannot benchmark: {exc}", file=sys.stderr)
        return 1
    options: dict[str, object] = {"image": image, "domain": "swe"}
    suite = pipeline.load_suite(default_suite("swe"))
    env = suite[0].env
    print(f"image {image}; cpus {os.cpu_count()}; suite {len(suite)} trajectories")
    fresh = fresh_starts(options, env, args.runs)
    warm = warm_resets(options, env, args.runs)
    print(f"fresh container reset   {_ms(fresh)}")
    print(f"warm pool reset         {_ms(warm)}")
    print(f"ratio fresh / warm      {statistics.median(fresh) / statistics.median(warm):7.2f}x")
    print("throughput (suite replayed through the pool)")
    base = None
    for workers in range(1, args.max_concurrency + 1):
        per_s, steps_s = throughput(options, suite * args.rounds, workers)
        base = base or per_s
        print(
            f"  {workers:2d} sandboxes  {per_s:6.2f} trajectories/s  {steps_s:7.1f} steps/s  "
            f"(x{per_s / base:4.2f})"
        )
    print_replay(default_suite("swe"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
