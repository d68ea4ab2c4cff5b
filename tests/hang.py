"""Running a command that may hang, with no timing but a generous limit, and nothing left behind."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path


def run_or_hang(
    command: Sequence[str], limit: float, cwd: Path | None = None
) -> subprocess.CompletedProcess[str] | None:
    """*command*'s result (text output), or None when it ran past *limit* seconds: then its
    whole session is killed, the processes it forked too (a hung worker would outlive it)."""
    with subprocess.Popen(
        list(command),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        start_new_session=True,
    ) as process:
        try:
            out, err = process.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            return None
    return subprocess.CompletedProcess(list(command), process.returncode, out, err)
