"""Per-step latency of the local (bubblewrap) sandbox against a fresh sandbox per command.

The naive way starts one ``bwrap … bash -c CMD`` per command (no persistent
shell, so no cwd or environment carried between steps). Prints median and p95
per step for both, the ratio, and the cost of a reset (copy + git setup).

    python benchmarks/local_sandbox_latency.py [--steps 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from replay_cli import print_replay

from fidelity.model import CommandAction, EnvSpec
from fidelity.pipeline import load_suite
from fidelity.resources import default_suite
from fidelity.sandboxes.local import LocalSandbox

COMMANDS = [
    "ls -la",
    "cat README.md",
    "grep -rn def src | sort | head -5",
    "git log --oneline",
    "wc -l data/*",
]


def persistent(steps: int, env: EnvSpec) -> list[float]:
    timings = []
    with LocalSandbox() as box:
        box.reset(env)
        for index in range(steps):
            started = time.perf_counter()
            box.step(CommandAction(command=COMMANDS[index % len(COMMANDS)]))
            timings.append(time.perf_counter() - started)
    return timings


def naive(steps: int, env: EnvSpec) -> list[float]:
    """One throwaway bubblewrap + bash per command over the same prepared workspace."""
    timings = []
    with LocalSandbox() as box:
        box.reset(env)  # the same copy + git history, then bind it into fresh sandboxes
        assert box._root is not None
        workspace = str(box._root / "workspace")
        for index in range(steps):
            started = time.perf_counter()
            subprocess.run(
                [
                    "bwrap",
                    "--unshare-all",
                    "--die-with-parent",
                    "--ro-bind",
                    "/",
                    "/",
                    "--proc",
                    "/proc",
                    "--dev",
                    "/dev",
                    "--tmpfs",
                    "/tmp",
                    "--bind",
                    workspace,
                    "/workspace",
                    "--chdir",
                    "/workspace",
                    "bash",
                    "-c",
                    COMMANDS[index % len(COMMANDS)],
                ],
                capture_output=True,
                check=False,
            )
            timings.append(time.perf_counter() - started)
    return timings


def resets(count: int, env: EnvSpec) -> list[float]:
    timings = []
    with LocalSandbox() as box:
        for _ in range(count):
            started = time.perf_counter()
            box.reset(env)
            timings.append(time.perf_counter() - started)
    return timings


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[int(0.95 * (len(ordered) - 1))]
    return f"median {statistics.median(values) * 1000:7.2f} ms   p95 {p95 * 1000:7.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    env = load_suite(default_suite("terminal"))[0].env
    fast = persistent(args.steps, env)
    slow = naive(args.steps, env)
    reset = resets(20, env)
    print(f"local sandbox, {args.steps} steps of {len(COMMANDS)} realistic commands")
    print(f"  persistent bash in bwrap : {_ms(fast)}")
    print(f"  fresh bwrap per command  : {_ms(slow)}")
    print(
        f"  ratio (naive / persistent, medians): {statistics.median(slow) / statistics.median(fast):.1f}x"
    )
    print(f"  reset (copy workdir + git setup + shell): {_ms(reset)}")
    print_replay(default_suite("terminal"), "--sandbox", "local")


if __name__ == "__main__":
    main()
