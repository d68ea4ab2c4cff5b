"""Shared by the sandbox latency scripts: ``fidelity replay`` end to end, as a user runs it.

Not a benchmark of its own (the ``benchmarks`` step imports it, never runs it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def replay_cli(suite: Path, *options: str) -> tuple[float, int, int]:
    """Replay *suite* with ``python -m fidelity replay`` in a fresh process.

    Returns (wall seconds, process start and imports included; trajectories; steps).
    """
    with tempfile.TemporaryDirectory() as folder:
        out = Path(folder) / "real.jsonl"
        command = [sys.executable, "-m", "fidelity", "replay", str(suite), "-o", str(out)]
        started = time.perf_counter()
        subprocess.run([*command, *options], check=True, stdout=subprocess.DEVNULL)
        seconds = time.perf_counter() - started
        lines = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return seconds, len(lines), sum(len(t["steps"]) for t in lines)


def print_replay(suite: Path, *options: str) -> None:
    """Print the end-to-end replay figure of *suite* (one line)."""
    seconds, trajectories, steps = replay_cli(suite, *options)
    command = " ".join(["fidelity replay", f"{suite.parent.name}/{suite.name}", *options])
    print(
        f"  end to end: `{command}`: {trajectories} "
        f"trajectories, {steps} steps in {seconds:.1f} s wall ({steps / seconds:.1f} steps/s, "
        f"{seconds / steps * 1000:.0f} ms a step, process start, resets and imports included)"
    )
