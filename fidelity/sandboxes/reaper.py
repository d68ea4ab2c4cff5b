"""A watcher that outlives a killed auditor and removes its sandboxes.

SIGKILL skips every ``finally`` and ``atexit``: bubblewrap dies with its parent
(``--die-with-parent``), but Docker containers keep running the agent's last
command, and sandbox folders, tmpfs mounts, memory cgroups and site servers
stay. So the first sandbox an auditor process starts also starts this reaper
(``python -m fidelity.sandboxes.reaper OWNER_PID``) in its own session, joined
to the owner by a pipe that only the owner holds. The owner writes the name of
each backend it uses; when the owner ends, however it ends, the kernel closes
the pipe, the reaper reads end-of-file and sweeps that owner's leftovers of
those backends, then exits. A normal exit has nothing left to sweep.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from fidelity.errors import FidelityError

_lock = threading.Lock()
_pipe: tuple[int, int] | None = None  # (owner pid, write end)
_announced: set[str] = set()


def watch(backend: str) -> None:
    """Make sure this process has a reaper and that it will sweep *backend*."""
    global _pipe
    with _lock:
        if _pipe is None or _pipe[0] != os.getpid():  # none yet, or a forked child
            _pipe = (os.getpid(), _start())
            _announced.clear()
        if backend in _announced:
            return
        _announced.add(backend)
        os.write(_pipe[1], f"{backend}\n".encode())


def _start() -> int:
    read_end, write_end = os.pipe()  # both close-on-exec: no sandbox inherits the write end
    try:
        subprocess.Popen(
            [sys.executable, "-m", "fidelity.sandboxes.reaper", str(os.getpid())],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # holding the audit's stderr would delay its readers' EOF
            start_new_session=True,  # a Ctrl-C or kill of the audit's group spares it
            env={k: v for k, v in os.environ.items() if k in ("PATH", "PYTHONPATH", "TMPDIR")},
        )
    finally:
        os.close(read_end)
    return write_end


def reap(owner: int, backends: list[str]) -> int:
    """Sweep *owner*'s leftovers of *backends*; how many were removed.

    A failure (e.g. the Docker daemon went away meanwhile) is written to
    ``$TMPDIR/fidelity-reaper-OWNER.log``; the next audit's sweep retries.
    """
    from fidelity.sandboxes.registry import sweep_owner

    removed = 0
    for backend in backends:
        try:
            removed += sweep_owner(backend, owner)
        except FidelityError as exc:
            log = Path(tempfile.gettempdir()) / f"fidelity-reaper-{owner}.log"
            with log.open("a") as handle:
                handle.write(f"{backend}: {exc}\n")
    return removed


def main() -> None:
    """``python -m fidelity.sandboxes.reaper OWNER_PID``: wait for EOF on stdin, then sweep."""
    owner = int(sys.argv[1])
    # The first gettempdir() of a process probes the folder with a randomly named file.
    # Done now, while the owner lives, so the sweep at its death adds nothing to $TMPDIR,
    # not even for a moment.
    tempfile.gettempdir()
    backends: list[str] = []
    for line in sys.stdin:
        name = line.strip()
        if name and name not in backends:
            backends.append(name)
    reap(owner, backends)


if __name__ == "__main__":
    main()
