"""Docker sandbox latency: persistent session vs one `docker exec` per command, start, throughput.

Prints (nothing is asserted):
- container start time (create + copy workdir + start + shell ready: one ``reset``), and
  the same ``reset`` taking a container started ahead by the warm pool,
- per-step latency of the persistent shell against one ``docker exec`` per command, and the ratio,
- throughput (steps/s) of 1..N concurrent sandboxes.

Run: ``python benchmarks/docker_latency.py [--steps 100] [--max-concurrency N]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from replay_cli import print_replay

from fidelity.errors import SandboxUnavailableError
from fidelity.resources import default_suite
from fidelity.sandboxes.docker import DockerConfig, DockerSandbox, close_pools
from fidelity.sandboxes.images import docker_client, ensure_image
from fidelity.trajectory import CommandAction, EnvSpec

COMMAND = "echo hello; ls >/dev/null"


def _ms(values: list[float]) -> str:
    return f"mean {statistics.mean(values) * 1000:7.1f} ms  median {statistics.median(values) * 1000:7.1f} ms"


def start_times(image: str, env: EnvSpec, runs: int, warm: int = 0) -> list[float]:
    times = []
    for _ in range(runs):
        with DockerSandbox(DockerConfig(image=image, warm=warm)) as box:
            started = time.perf_counter()
            box.reset(env)
            times.append(time.perf_counter() - started)
        time.sleep(0.5)  # a trajectory's own steps: the pool refills meanwhile
    close_pools()
    return times


def persistent_steps(image: str, env: EnvSpec, steps: int) -> list[float]:
    with DockerSandbox(DockerConfig(image=image)) as box:
        box.reset(env)
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            box.step(CommandAction(command=COMMAND))
            times.append(time.perf_counter() - started)
    return times


def exec_per_command(image: str, env: EnvSpec, steps: int) -> list[float]:
    with DockerSandbox(DockerConfig(image=image)) as box:
        box.reset(env)
        container = box._container
        times = []
        for _ in range(steps):
            started = time.perf_counter()
            container.exec_run(["/bin/bash", "-c", COMMAND], workdir="/workspace", demux=True)
            times.append(time.perf_counter() - started)
    return times


def throughput(image: str, env: EnvSpec, workers: int, steps: int) -> float:
    def one(_: int) -> int:
        with DockerSandbox(DockerConfig(image=image)) as box:
            box.reset(env)
            for _ in range(steps):
                box.step(CommandAction(command=COMMAND))
        return steps

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        done = sum(pool.map(one, range(workers)))
    return done / (time.perf_counter() - started)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--starts", type=int, default=5)
    parser.add_argument("--max-concurrency", type=int, default=max(2, (os.cpu_count() or 2) * 2))
    args = parser.parse_args()
    try:
        docker_client().close()
    except SandboxUnavailableError as exc:
        print(f"docker_latency: skipped: {exc}")
        return 0
    image = ensure_image("terminal")
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "hello.txt").write_text("hello\n")
        env = EnvSpec(workdir=tmp)
        print(f"image {image}, {os.cpu_count()} cores, command {COMMAND!r}")
        starts = start_times(image, env, args.starts)
        print(f"container start (reset)       {_ms(starts)}  (n={len(starts)})")
        pooled = start_times(image, env, args.starts, warm=2)[1:]  # the first fills the pool
        print(f"reset from the warm pool      {_ms(pooled)}  (n={len(pooled)})")
        session = persistent_steps(image, env, args.steps)
        execs = exec_per_command(image, env, args.steps)
        print(f"step, persistent shell        {_ms(session)}  (n={len(session)})")
        print(f"step, one docker exec each    {_ms(execs)}  (n={len(execs)})")
        ratio = statistics.mean(execs) / statistics.mean(session)
        print(f"docker exec / persistent      {ratio:7.1f}x")
        workers = 1
        while workers <= args.max_concurrency:
            rate = throughput(image, env, workers, args.steps)
            print(f"throughput, {workers:2d} concurrent      {rate:8.1f} steps/s")
            workers *= 2
    print_replay(default_suite("terminal"), "--sandbox", "docker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
