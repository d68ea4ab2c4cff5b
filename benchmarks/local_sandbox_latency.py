"""Per-step latency of the local (bubblewrap) sandbox against a fresh sandbox per command.

The naive way starts one ``bash -c CMD`` per command in a fresh sandbox (no
persistent shell, so no cwd or environment carried between steps) with the
same containment as the persistent shell: the same bwrap arguments, its own
uid, the sandbox's cgroups and ``prlimit`` bounds (``LocalSandbox._argv``).
A bare ``bwrap --unshare-all … bash -c CMD`` (no cgroups, no uid, no limits)
is printed for reference. Prints median and p95 per step, the ratio of the
naive way to the persistent shell, and the cost of a reset (copy + git setup).

    python benchmarks/local_sandbox_latency.py [--steps 200]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from replay_cli import print_replay

from fidelity.pipeline import load_suite
from fidelity.resources import default_suite
from fidelity.sandboxes.local import LocalSandbox
from fidelity.trajectory import CommandAction, EnvSpec

COMMANDS = [
    "ls -la",
    "cat README.md",
    "grep -rn def src | sort | head -5",
    "git log --oneline",
    "wc -l data/*",
]


BARE = [
    "bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc",
    "--dev", "/dev", "--tmpfs", "/tmp",
    # the workspace belongs to the sandbox uid, not to bare bwrap's: git must still read it
    "--setenv", "GIT_CONFIG_COUNT", "1", "--setenv", "GIT_CONFIG_KEY_0", "safe.directory",
    "--setenv", "GIT_CONFIG_VALUE_0", "*",
]  # fmt: skip
BARE_MOUNT = "/tmp/workspace"  # the read-only / has no /workspace to mount on


def interleaved(steps: int, env: EnvSpec) -> tuple[list[float], list[float], list[float]]:
    """Seconds per step of the three ways, taking turns so each sees the same machine load.

    The persistent shell, then a fresh sandbox contained as the persistent shell is
    (the same cgroups, uid and bwrap arguments: ``LocalSandbox._argv``), then a
    bare bwrap (no cgroups, uid or limits), all over the same prepared workspace.
    """
    fast, slow, bare = [], [], []
    with LocalSandbox() as box, LocalSandbox() as fresh:
        box.reset(env)
        fresh.reset(env)  # the same copy + git history, cgroups and uid for the fresh sandboxes
        assert fresh._root is not None
        workspace = fresh._root / ("work" if fresh._mounted else "") / "workspace"
        for index in range(steps):
            command = COMMANDS[index % len(COMMANDS)]
            started = time.perf_counter()
            box.step(CommandAction(command=command))
            fast.append(time.perf_counter() - started)
            started = time.perf_counter()
            proc = fresh.popen(fresh._argv(["/bin/bash", "--noprofile", "--norc", "-c", command]))
            proc.communicate()
            slow.append(time.perf_counter() - started)
            assert proc.returncode == 0, proc.returncode
            started = time.perf_counter()
            bind = ["--bind", str(workspace), BARE_MOUNT, "--chdir", BARE_MOUNT]
            subprocess.run([*BARE, *bind, "bash", "-c", command], capture_output=True, check=True)
            bare.append(time.perf_counter() - started)
    return fast, slow, bare


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
    fast, slow, reference = interleaved(args.steps, env)
    reset = resets(20, env)
    print(f"local sandbox, {args.steps} steps of {len(COMMANDS)} realistic commands")
    print(f"  persistent bash in bwrap               : {_ms(fast)}")
    print(f"  fresh bwrap per command, same bounds   : {_ms(slow)}")
    print(f"  fresh bare bwrap per command (no bounds): {_ms(reference)}")
    ratio = statistics.median(slow) / statistics.median(fast)
    print(f"  ratio (fresh same bounds / persistent, medians): {ratio:.2f}x")
    ratio = statistics.median(reference) / statistics.median(fast)
    print(f"  ratio (fresh bare / persistent, medians): {ratio:.2f}x")
    print(f"  reset (copy workdir + git setup + shell): {_ms(reset)}")
    print_replay(default_suite("terminal"), "--sandbox", "local")


if __name__ == "__main__":
    main()
