"""The warm pool: Docker containers created and started ahead of need (``DockerConfig.warm``),
one pool per image and container options in a process, emptied at exit."""

from __future__ import annotations

import atexit
import json
import threading
from typing import Any

from fidelity.sandboxes.docker.containers import _container_name, _remove


class _WarmPool:
    """Containers created and started ahead of need, refilled in the background.

    A sandbox takes a started container on ``reset`` (then only the workdir
    copy and the shell remain to do). A container is used by one trajectory
    only: ``close`` removes it, so every trajectory starts from the image's
    clean state; the pool starts a replacement while the next one runs.
    """

    def __init__(self, client: Any, image: str, options: dict[str, Any], size: int) -> None:
        self.client = client
        self.image = image
        self.options = options
        self.size = size
        self.ready: list[Any] = []
        self.pending = 0
        self.lock = threading.Lock()
        self.idle = threading.Condition(self.lock)
        self.closed = False
        self.errors: list[str] = []

    def take(self) -> Any | None:
        """A started container, or None when none is ready (the caller creates one)."""
        with self.lock:
            container = self.ready.pop(0) if self.ready else None
        self.refill()
        return container

    def refill(self) -> None:
        with self.lock:
            missing = 0 if self.closed else self.size - len(self.ready) - self.pending
            self.pending += max(missing, 0)
        for _ in range(max(missing, 0)):
            threading.Thread(target=self._make, name="fidelity-warm", daemon=True).start()

    def _make(self) -> None:
        import docker

        container = None
        try:
            container = self.client.containers.create(
                self.image, name=_container_name(), **self.options
            )
            container.start()
        except docker.errors.DockerException as exc:
            self.errors.append(str(exc))  # reset() creates its own container instead
            if container is not None:
                _remove(container)
            container = None
        with self.lock:
            keep = container is not None and not self.closed
            if keep:
                self.ready.append(container)
        if container is not None and not keep:
            _remove(container)
        with self.idle:
            self.pending -= 1
            self.idle.notify_all()

    def close(self) -> int:
        """Remove the ready containers, after waiting for those being started."""
        with self.idle:
            self.closed = True
            self.idle.wait_for(lambda: self.pending == 0, timeout=60)
            ready, self.ready = self.ready, []
        for container in ready:
            _remove(container)
        return len(ready)


_pools: dict[str, _WarmPool] = {}
_pools_lock = threading.Lock()


def _warm_pool(client: Any, image: str, options: dict[str, Any], size: int) -> _WarmPool | None:
    """The pool of *image* with these container options (one per process), or None."""
    if size <= 0:
        return None
    key = json.dumps([image, options], sort_keys=True, default=repr)
    with _pools_lock:
        pool = _pools.get(key)
        if pool is None or pool.closed:
            pool = _pools[key] = _WarmPool(client, image, options, size)
    return pool


def close_pools() -> int:
    """Remove every warm container of this process (at exit, and after an audit)."""
    with _pools_lock:
        pools = list(_pools.values())
        _pools.clear()
    return sum(pool.close() for pool in pools)


atexit.register(close_pools)
