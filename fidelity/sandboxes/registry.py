"""The sandbox backend registry: which backends exist, what they replay, how to reach them.

The bottom floor of :mod:`fidelity.sandboxes`: it imports no backend module.
Each entry names its config class, factory, sweeper and (for a pooled backend)
pool as ``module:attribute`` strings, imported when first used (the SWE-ReX
pattern), so a backend's config (:meth:`~fidelity.sandboxes.config.SandboxConfigBase.build`)
reaches its factory through here without an import circle, and a command that
uses one backend never imports the others. The package (:mod:`fidelity.sandboxes`)
adds what needs the config classes themselves: their union and its validation.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fidelity.errors import SandboxUnavailableError, UsageError

if TYPE_CHECKING:
    from fidelity.trajectory import EnvSpec

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backend:
    """One registry entry: the config class, what builds and sweeps, which domains it replays."""

    config_class: str
    """``module:class`` of the backend's pydantic config (see :attr:`config`)."""
    factory: str
    """``module:callable`` taking the config and returning an unstarted sandbox."""
    sweeper: str
    """``module:callable(owner=None)`` removing leftovers of killed runs; returns how many.

    With ``owner``, only that process's, which is dead even if ``kill -0`` still finds
    it: its reaper sweeps while it may be a zombie (see :func:`~fidelity.sandboxes.base.dead_owner`).
    """
    domains: tuple[str, ...]
    default_for: tuple[str, ...] = ()
    """The domains whose audits use this backend when ``--sandbox`` is not given."""
    pool: str | None = None
    """``module:callable`` giving the shared pool of warm sandboxes for a config (reset
    between trajectories); None: each trajectory builds its own sandbox."""

    @property
    def pooled(self) -> bool:
        """Sandboxes come from a shared pool of warm ones (reset between trajectories)."""
        return self.pool is not None

    @property
    def config(self) -> type[Any]:
        """The backend's config class (a :class:`~fidelity.sandboxes.config.SandboxConfigBase`)."""
        module, _, name = self.config_class.partition(":")
        config: type[Any] = getattr(importlib.import_module(module), name)
        return config

    def build(self, config: Any) -> Any:
        """An unstarted sandbox for *config*."""
        return resolve_target(self.factory)(config)

    def sweep(self, owner: int | None = None) -> int:
        """Remove what killed runs of this backend left behind (of one dead *owner* pid, or all)."""
        removed: int = resolve_target(self.sweeper)(owner=owner)
        whose = "dead runs" if owner is None else f"dead process {owner}"
        logger.debug(
            "swept %d leftovers of %s (%s)", removed, self.sweeper.partition(":")[0], whose
        )
        return removed

    def shared_pool(self, config: Any) -> Any:
        """The pool of warm sandboxes for *config* (only for a :attr:`pooled` backend)."""
        if self.pool is None:
            raise UsageError(f"sandbox {config.type!r} is not pooled")
        return resolve_target(self.pool)(config)


REGISTRY: dict[str, Backend] = {
    "local": Backend(
        "fidelity.sandboxes.local:LocalConfig",
        "fidelity.sandboxes.local:LocalSandbox",
        "fidelity.sandboxes.local:sweep_stale",
        domains=("terminal",),
        default_for=("terminal",),
    ),
    "docker": Backend(
        "fidelity.sandboxes.docker.config:DockerConfig",
        "fidelity.sandboxes.pool:new_sandbox",  # the swe domain's sandbox adds its tools
        "fidelity.sandboxes.docker.sweep:sweep_stale",
        domains=("terminal", "swe"),
        default_for=("swe",),
        pool="fidelity.sandboxes.pool:shared_pool",
    ),
    "browser": Backend(
        "fidelity.sandboxes.browser:BrowserConfig",
        "fidelity.sandboxes.browser:BrowserSandbox",
        "fidelity.sandboxes.browser:sweep_stale",
        domains=("web",),
        default_for=("web",),
    ),
    "mcp": Backend(
        "fidelity.sandboxes.mcp:McpConfig",
        "fidelity.sandboxes.mcp:build",
        "fidelity.sandboxes.mcp:sweep",
        domains=("mcp",),
        default_for=("mcp",),
    ),
    "search": Backend(
        "fidelity.sandboxes.search:SearchConfig",
        "fidelity.sandboxes.search:build",
        "fidelity.sandboxes.search:sweep",
        domains=("search",),
        default_for=("search",),
    ),
    "desktop": Backend(
        "fidelity.sandboxes.desktop:DesktopConfig",
        "fidelity.sandboxes.desktop:build",
        "fidelity.sandboxes.desktop:sweep",
        domains=("os",),
        default_for=("os",),
    ),
    "adb": Backend(
        "fidelity.sandboxes.adb:AdbConfig",
        "fidelity.sandboxes.adb:build",
        "fidelity.sandboxes.adb:sweep",
        domains=("android",),
    ),
}
"""Every sandbox backend, by its config's ``type``."""

BACKENDS = tuple(REGISTRY)

DOMAINS: dict[str, tuple[str, ...]] = {name: entry.domains for name, entry in REGISTRY.items()}
"""The domains each backend can replay; an audit of another pair fails before any work."""

DEFAULT_BACKEND: dict[str, str] = {
    domain: name for name, entry in REGISTRY.items() for domain in entry.default_for
}
"""The backend an audit of a domain uses when ``--sandbox`` is not given."""


def backend(name: str) -> Backend:
    """The registry entry of *name*; UsageError naming the known backends otherwise."""
    entry = REGISTRY.get(name)
    if entry is None:
        raise UsageError(f"unknown sandbox backend {name!r}; choose one of: {', '.join(BACKENDS)}")
    return entry


def backend_for(domain: str, name: str | None) -> str:
    """*name*, or *domain*'s default; UsageError when that backend cannot replay *domain*."""
    if name is None:
        if domain not in DEFAULT_BACKEND:
            able = [n for n, entry in REGISTRY.items() if domain in entry.domains]
            if able:  # a backend needs something the user brings (a device: android's adb)
                raise UsageError(f"domain {domain!r} needs --sandbox {' or '.join(able)}")
            auditable = ", ".join(sorted(DEFAULT_BACKEND))
            raise UsageError(f"domain {domain!r} cannot be replayed yet; auditable: {auditable}")
        return DEFAULT_BACKEND[domain]
    if domain not in backend(name).domains:
        able = [n for n, entry in REGISTRY.items() if domain in entry.domains]
        hint = f"use --sandbox {' or '.join(able)}" if able else "no backend replays it yet"
        raise UsageError(f"sandbox {name!r} cannot replay domain {domain!r}; {hint}")
    return name


CONTAINER_FIELDS = ("image", "instance", "task")
"""``env`` fields that name a container world: a trajectory with one replays in Docker."""


def trajectory_backend(domain: str, env: EnvSpec, chosen: str | None) -> str:
    """The backend that replays a trajectory of *domain* whose environment is *env*.

    A trajectory that names a container world (``env.backend = "docker"``, or an
    ``env.image``, ``env.instance`` or ``env.task``) replays in Docker whatever the run's
    default; any other replays in *chosen* (``--sandbox``) or the domain's own backend,
    so a dataset may mix them. Never a silent substitution: :class:`UsageError` when the
    trajectory's world cannot be had that way (a backend that cannot replay its domain,
    an image with ``env.backend = "local"``, a container world under ``--sandbox local``).
    """
    named = env.backend if "backend" in env.model_fields_set else None
    if named is not None and domain not in backend(named).domains:
        raise UsageError(f"env.backend {named!r} cannot replay domain {domain!r}")
    container = next((name for name in CONTAINER_FIELDS if getattr(env, name) is not None), None)
    if container is not None and named not in (None, "docker"):
        raise UsageError(f"env.{container} names a container image, but env.backend is {named!r}")
    if container is None and named != "docker":
        return backend_for(domain, chosen)
    if chosen not in (None, "docker"):
        why = f"env.{container}" if container else "env.backend 'docker'"
        raise UsageError(f"{why} replays in Docker, but --sandbox {chosen} was given")
    return backend_for(domain, "docker")


def sweep_owner(name: str, owner: int) -> int:
    """Remove what sandboxes of backend *name* started by process *owner* (now dead) left."""
    return backend(name).sweep(owner)


def sweep_all() -> int:
    """Sweep dead owners' leftovers of every backend (Docker only where a daemon answers)."""
    removed = 0
    for entry in REGISTRY.values():
        try:
            removed += entry.sweep()
        except SandboxUnavailableError:
            continue  # e.g. no Docker daemon answers, so no container can have been left
    return removed


def sweep(name: str) -> int:
    """Remove what sandboxes of backend *name* left behind when their audit was killed."""
    return backend(name).sweep()


def resolve_target(target: str) -> Callable[..., Any]:
    module, _, attribute = target.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), attribute)
    return function
