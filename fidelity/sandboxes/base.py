"""The Sandbox interface every real backend implements."""

from __future__ import annotations

import atexit
import logging
import os
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType

from fidelity.processes import alive
from fidelity.trajectory import Action, CommandAction, EnvSpec, KeystrokesAction, Observation

logger = logging.getLogger(__name__)


class Sandbox(ABC):
    """A real environment that executes actions.

    ``reset`` starts (or restarts) the environment described by an
    :class:`EnvSpec`; ``step`` executes one action and returns its observation
    with exit code, cwd, timed-out flag and error in structured fields;
    ``close`` is idempotent and must be called in ``finally`` (or use ``with``).
    A step that times out is not an exception: it is an observation with
    ``timed_out=True`` (the harness kills what the action started).
    """

    name: str = "abstract"

    @property
    def label(self) -> str:
        """How the log names this sandbox: its backend and a number unique while it lives
        (a backend may name its container or folder instead)."""
        return f"{self.name}-{id(self):x}"

    @abstractmethod
    def reset(self, env: EnvSpec) -> Observation:
        """Start a fresh environment for *env* and return the initial observation."""

    @abstractmethod
    def step(self, action: Action, timeout: float | None = None) -> Observation:
        """Execute *action*; never raises for failures of the action itself."""

    @abstractmethod
    def close(self) -> None:
        """Release every resource (processes, temp files). Safe to call twice."""

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


_live: set[Sandbox] = set()
_live_lock = threading.Lock()


def command_limit(action: CommandAction, run_limit: float | None, default: float) -> float:
    """Seconds a command may run: the run's step timeout (*run_limit*, else the sandbox's
    *default*), shortened by the action's own ``timeout``, never lengthened: a dataset
    names the action, and a step of ``sleep infinity`` with ``"timeout": 1e308`` would
    otherwise hold the audit for as long as it says."""
    limit = run_limit or default
    return min(limit, action.timeout) if action.timeout else limit


def keys_limits(
    action: KeystrokesAction, run_limit: float | None, default: float
) -> tuple[float, float]:
    """``(wait, limit)`` of a keystrokes step: the action's ``duration`` to wait, cut to the
    run's step timeout (*run_limit*, else *default*), and that timeout for the output to
    settle after it; a dataset's ``duration`` (up to 600 s) never holds a step past it."""
    limit = run_limit or default
    return min(action.duration, limit), limit


def track(sandbox: Sandbox) -> None:
    """Remember a started sandbox so :func:`close_all` can stop it at exit.

    Also makes sure a reaper (:mod:`fidelity.sandboxes.reaper`) removes what the
    sandbox leaves should this process be killed with SIGKILL.
    """
    from fidelity.sandboxes.reaper import watch

    watch(sandbox.name)
    with _live_lock:
        _live.add(sandbox)
    logger.debug("sandbox %s started", sandbox.label)


def untrack(sandbox: Sandbox) -> None:
    """Forget a closed sandbox."""
    with _live_lock:
        known = sandbox in _live
        _live.discard(sandbox)
    if known:
        logger.debug("sandbox %s closed", sandbox.label)


def close_all() -> int:
    """Close every sandbox still running (interpreter exit, Ctrl-C); returns how many."""
    with _live_lock:
        sandboxes = list(_live)
    if sandboxes:
        logger.info("closing %d sandboxes still running", len(sandboxes))
    for sandbox in sandboxes:
        sandbox.close()
    return len(sandboxes)


atexit.register(close_all)


def owned_folder(prefix: str, temp_root: str | None) -> Path:
    """A new folder ``PREFIX<pid>-<random>`` under *temp_root* (``$TMPDIR``), owned by this process.

    The owner is in the name, not in a file written after ``mkdtemp``: a sweep running
    beside (the audit's own, on a thread, or another audit's) never meets the folder
    without its owner, which it would take for a dead process's leftover.
    """
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=temp_root))


def stale_folders(prefix: str, temp_root: str | None, owner: int | None) -> Iterator[Path]:
    """The folders of :func:`owned_folder` under *temp_root* that :func:`dead_owner` sweeps.

    A folder named without a pid (``PREFIX<random>``, by an earlier version) is owned by
    the pid in its ``owner.pid`` file, and by no one without it.
    """
    for folder in Path(temp_root or tempfile.gettempdir()).glob(f"{prefix}*"):
        if dead_owner(_folder_owner(folder, prefix), owner):
            yield folder


def _folder_owner(folder: Path, prefix: str) -> int:
    head, dash, _ = folder.name[len(prefix) :].partition("-")
    if dash and head.isdigit():
        return int(head)
    try:
        text = (folder / "owner.pid").read_text().strip()
    except OSError:
        return -1
    return int(text) if text.isdigit() else -1


def dead_owner(pid: int, owner: int | None) -> bool:
    """Whether leftovers of process *pid* are to be swept (a sweeper's test).

    With *owner*, only that (dead) process's, whatever ``kill -0`` says (a dead
    owner may still be a zombie); without, those of every dead process.
    """
    if owner is not None:
        return pid == owner
    return not (pid > 0 and (pid == os.getpid() or alive(pid)))
