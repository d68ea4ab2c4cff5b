"""A pool of Docker sandboxes shared by the trajectories of an audit or a replay.

At most ``size`` sandboxes run at once (default: the machine's cores). A
sandbox whose trajectory ended is kept warm; the next trajectory takes it and
:meth:`~fidelity.sandboxes.docker.DockerSandbox.recycle` resets it to a clean
state in the running container (for SWE: processes killed, the pinned commit
checked out again, ``git clean -fdx``), which costs a fraction of a container
start. A container that died is replaced by a fresh one; a backend without a
cheap reset (the terminal) starts a fresh container each time. Pools are
kept per set of sandbox options and closed at exit (or by :func:`close_pools`).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from fidelity.sandboxes.config import SandboxConfigBase
from fidelity.sandboxes.docker.config import DockerConfig
from fidelity.sandboxes.docker.sandbox import DockerSandbox
from fidelity.trajectory import EnvSpec

logger = logging.getLogger(__name__)


def new_sandbox(options: SandboxConfigBase | dict[str, Any]) -> DockerSandbox:
    """An unstarted Docker sandbox for *options* (the SWE one for the swe domain)."""
    config = _config(options)
    if config.domain == "swe":
        from fidelity.sandboxes.swe import SweSandbox

        return SweSandbox(config)
    return DockerSandbox(config)


class SandboxPool:
    """Up to *size* concurrent sandboxes of one configuration, reused between trajectories."""

    def __init__(
        self, options: SandboxConfigBase | dict[str, Any], size: int | None = None
    ) -> None:
        self.options = _config(options)
        self.size = size or os.cpu_count() or 2
        self._slots = threading.BoundedSemaphore(self.size)
        self._idle: list[DockerSandbox] = []
        self._lock = threading.Lock()
        self.started = 0
        """Sandboxes started with a full reset (a new container)."""
        self.recycled = 0
        """Leases served by resetting a warm container."""

    @contextlib.contextmanager
    def lease(self, env: EnvSpec) -> Iterator[DockerSandbox]:
        """A sandbox reset to *env*, returned to the pool afterwards (closed if it failed)."""
        with self._slots:
            sandbox = self._ready(env)
            try:
                yield sandbox
            except BaseException:
                sandbox.close()
                raise
            self._put(sandbox)

    def _ready(self, env: EnvSpec) -> DockerSandbox:
        with self._lock:
            warm = self._idle.pop() if self._idle else None
        if warm is not None and (initial := warm.recycle(env)) is not None:
            warm.last_reset = initial
            with self._lock:
                self.recycled += 1
            logger.debug("sandbox %s: warm, recycled for the next trajectory", warm.label)
            return warm
        sandbox = warm or new_sandbox(self.options)
        logger.debug("sandbox %s: reset (%s)", sandbox.label, "warm" if warm else "new")
        try:
            sandbox.last_reset = sandbox.reset(env)
        except BaseException:
            sandbox.close()
            raise
        with self._lock:
            self.started += 1
        return sandbox

    def _put(self, sandbox: DockerSandbox) -> None:
        if not sandbox.alive():
            sandbox.close()
            return
        with self._lock:
            self._idle.append(sandbox)

    def close(self) -> int:
        """Close the idle sandboxes (leased ones close when their lease ends); how many."""
        with self._lock:
            idle, self._idle = self._idle, []
        for sandbox in idle:
            sandbox.close()
        return len(idle)


_pools: dict[str, SandboxPool] = {}
_pools_lock = threading.Lock()


def shared_pool(
    options: SandboxConfigBase | dict[str, Any], size: int | None = None
) -> SandboxPool:
    """The process-wide pool for these sandbox options (created on first use)."""
    key = _config(options).model_dump_json()
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = SandboxPool(options, size)
    return pool


def close_pools() -> int:
    """Close every shared pool's idle sandboxes; how many were closed."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    return sum(pool.close() for pool in pools)


atexit.register(close_pools)


def _config(options: SandboxConfigBase | dict[str, Any]) -> DockerConfig:
    if isinstance(options, DockerConfig):
        return options
    if isinstance(options, SandboxConfigBase):
        options = options.model_dump()
    return DockerConfig(**options)
