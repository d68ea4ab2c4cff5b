"""Time and peak memory of a command as its own, for the benchmarks' fresh processes.

Linux starts a child's peak RSS (``ru_maxrss``) at its parent's: the forked copy
of the parent's memory map carries the parent's high-water mark through
``exec``. A benchmark that built its input in memory would report that as the
command's peak. So the command runs under a small launcher (a fresh
interpreter: its own high-water mark is a few MB), which forks it, waits for it
and hands back its resource usage.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO

_LAUNCHER = """
import json, os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as out:
    json.dump({"code": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime,
               "peak_kib": usage.ru_maxrss}, out)
"""


@dataclass(frozen=True)
class Usage:
    """What one run of a command cost."""

    wall: float
    cpu: float
    peak_mib: float
    returncode: int


def run_measured(command: list[str], stdout: int | IO[str] | None = None) -> Usage:
    """Run *command* to completion; its wall and CPU seconds, its own peak RSS, exit code."""
    with tempfile.NamedTemporaryFile("r", suffix=".json") as report:
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", _LAUNCHER, report.name, *command], stdout=stdout, check=True
        )
        wall = time.perf_counter() - started
        data = json.loads(report.read())
    return Usage(wall, data["cpu"], data["peak_kib"] / 1024, data["code"])


if __name__ == "__main__":  # a check of the launcher: a big parent, a small child
    ballast = bytearray(300 * 1024 * 1024)
    ballast[:: os.sysconf("SC_PAGE_SIZE")] = b"x" * len(ballast[:: os.sysconf("SC_PAGE_SIZE")])
    small = run_measured([sys.executable, "-c", "pass"])
    print(f"child of a 300 MiB parent: peak RSS {small.peak_mib:.0f} MiB (its own)")
