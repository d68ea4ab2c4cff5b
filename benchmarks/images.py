"""Per-trajectory images (``env.image``): resolve + start, cold and warm, against the bundled
image's reset; a suite spread over several images against the same suite on one image.

Prints (nothing is asserted), medians with their spread (min–max) over ``--runs``:
- ``resolve_image`` alone (``docker image inspect``, the profile: WORKDIR, USER, ENV);
- a ``reset`` on a user's image the first time a container is made from it (cold: the image
  was just built, no container of it has run) and on later uses (warm), against the same
  ``reset`` on the bundled terminal image (what a trajectory without ``env.image`` gets), and
  the ratios;
- steps/s of a suite of ``--trajectories`` trajectories spread over ``--images`` user images
  against the same suite with every trajectory on one user image, ``--concurrency`` at once
  (every image used once before, untimed: the cold cost is the figure above).

The user images are built here ``FROM`` the local fidelity-base image (no registry: a pull is
not timed; cold here is the first container of an image already in the local store), each
with its own USER, WORKDIR and ENV, and removed at the end.

Run: ``python benchmarks/images.py [--runs 5] [--images 4] [--trajectories 16]``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fidelity.errors import SandboxUnavailableError
from fidelity.pipeline import replay
from fidelity.sandboxes.docker import DockerConfig, DockerSandbox
from fidelity.sandboxes.images import docker_client, ensure_base, ensure_image, resolve_image
from fidelity.trajectory import CommandAction, EnvSpec, Step, Trajectory

USER_IMAGE = """\
USER root
RUN useradd -m -u 1234 appuser && mkdir -p /srv/app && echo {nonce} > /srv/app/README \\
 && chown -R appuser /srv/app
ENV APP_MODE=theirs
USER appuser
WORKDIR /srv/app
"""
COMMANDS = ["cat README", "echo $APP_MODE", "ls -la | wc -l", "id -un", "pwd"]


def _figure(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return f"median {statistics.median(ms):7.1f} ms  ({min(ms):.1f}–{max(ms):.1f}, n={len(ms)})"


def build_user_image(base: str, folder: Path) -> str:
    """A fresh user image (its own nonce, so a tag no container has used yet)."""
    nonce = secrets.token_hex(6)
    tag = f"fidelity-bench-user:{nonce}"
    context = folder / nonce
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {base}\n{USER_IMAGE.format(nonce=nonce)}")
    subprocess.run(
        ["docker", "build", "-q", "--network", "none", "-t", tag, str(context)],
        check=True,
        capture_output=True,
    )
    return tag


def timed_reset(env: EnvSpec, config: DockerConfig) -> float:
    with DockerSandbox(config) as box:
        started = time.perf_counter()
        box.reset(env)
        return time.perf_counter() - started


def start_figures(base: str, bundled: str, runs: int, folder: Path) -> list[str]:
    client = docker_client()
    resolve: list[float] = []
    cold: list[float] = []
    warm: list[float] = []
    plain: list[float] = []
    built: list[str] = []
    try:
        for _ in range(runs):
            image = build_user_image(base, folder)
            built.append(image)
            started = time.perf_counter()
            resolve_image(client, image)
            resolve.append(time.perf_counter() - started)
            own = EnvSpec(backend="docker", image=image)
            cold.append(timed_reset(own, DockerConfig()))
            warm.append(timed_reset(own, DockerConfig()))
            plain.append(timed_reset(EnvSpec(backend="docker"), DockerConfig(image=bundled)))
    finally:
        remove(built)
    bundled_median = statistics.median(plain)
    return [
        f"resolve_image (inspect)          {_figure(resolve)}",
        f"reset, user image, cold          {_figure(cold)}",
        f"reset, user image, warm          {_figure(warm)}",
        f"reset, bundled image             {_figure(plain)}",
        f"cold / bundled                   {statistics.median(cold) / bundled_median:7.2f}x",
        f"warm / bundled                   {statistics.median(warm) / bundled_median:7.2f}x",
    ]


def suite(images: list[str], trajectories: int) -> list[Trajectory]:
    return [
        Trajectory(
            id=f"t{index}",
            domain="terminal",
            env=EnvSpec(backend="docker", image=images[index % len(images)]),
            steps=[Step(action=CommandAction(command=c)) for c in COMMANDS],
        )
        for index in range(trajectories)
    ]


def steps_per_second(trajectories: list[Trajectory], concurrency: int) -> float:
    config = DockerConfig(step_timeout=30)

    def one(trajectory: Trajectory) -> int:
        replayed = replay(trajectory, config)
        assert replayed.error is None, replayed.error
        return len(replayed.steps)

    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        steps = sum(pool.map(one, trajectories))
    return steps / (time.perf_counter() - started)


def remove(images: list[str]) -> None:
    if images:
        subprocess.run(["docker", "rmi", "-f", *images], check=False, capture_output=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--trajectories", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3, help="suite replays per layout")
    args = parser.parse_args()
    try:
        client = docker_client()
    except SandboxUnavailableError as exc:
        print(f"images: skipped: {exc}")
        return 0
    base = ensure_base(client, lambda message: None)
    bundled = ensure_image("terminal")
    print(f"base {base}, bundled {bundled}, {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory(prefix="fidelity-bench-images-") as tmp:
        for line in start_figures(base, bundled, args.runs, Path(tmp)):
            print(line)
        images = [build_user_image(base, Path(tmp)) for _ in range(args.images)]
        try:
            spread = suite(images, args.trajectories)
            one = suite(images[:1], args.trajectories)
            steps_per_second(suite(images, len(images)), 1)  # first containers: not timed
            rates: dict[str, list[float]] = {"spread": [], "one": []}
            for _ in range(args.rounds):  # interleaved, so load on the machine hits both
                rates["spread"].append(steps_per_second(spread, args.concurrency))
                rates["one"].append(steps_per_second(one, args.concurrency))
        finally:
            remove(images)
    for name, label in (("spread", f"over {args.images} images"), ("one", "on one image")):
        values = rates[name]
        print(
            f"suite {label:<17}  median {statistics.median(values):6.1f} steps/s  "
            f"({min(values):.1f}–{max(values):.1f}, {args.trajectories} trajectories × "
            f"{len(COMMANDS)} steps, {args.concurrency} at once, n={len(values)})"
        )
    ratio = statistics.median(rates["spread"]) / statistics.median(rates["one"])
    print(f"spread / one image                 {ratio:7.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
