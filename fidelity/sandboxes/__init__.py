"""Real environments behind one :class:`~fidelity.sandboxes.base.Sandbox` interface.

The registry (SWE-ReX pattern). Each backend is one module holding a pydantic
config with a ``type: Literal["name"]`` discriminator (deriving from
:class:`~fidelity.sandboxes.config.SandboxConfigBase`), a sandbox factory and a
sweeper of what killed runs left behind. **Adding a backend** touches its module
and this file only: one :class:`Backend` entry in :data:`REGISTRY` and its config
class in the :data:`SandboxConfig` union. Everything else (CLI ``--sandbox``,
domain checks, tasks shipped to other machines, ``fidelity sandbox sweep``) reads
the registry.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from fidelity.errors import UsageError
from fidelity.sandboxes.adb import AdbConfig
from fidelity.sandboxes.base import Sandbox
from fidelity.sandboxes.browser import BrowserConfig
from fidelity.sandboxes.config import SandboxConfigBase
from fidelity.sandboxes.desktop import DesktopConfig
from fidelity.sandboxes.docker import DockerConfig
from fidelity.sandboxes.local import LocalConfig
from fidelity.sandboxes.mcp import McpConfig
from fidelity.sandboxes.search import SearchConfig


@dataclass(frozen=True)
class Backend:
    """One registry entry: the config class, what builds and sweeps, which domains it replays."""

    config: type[SandboxConfigBase]
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
    pooled: bool = False
    """Sandboxes come from a shared pool of warm ones (reset between trajectories)."""

    def build(self, config: SandboxConfigBase) -> Sandbox:
        """An unstarted sandbox for *config*."""
        sandbox: Sandbox = _resolve(self.factory)(config)
        return sandbox

    def sweep(self, owner: int | None = None) -> int:
        """Remove what killed runs of this backend left behind (of one dead *owner* pid, or all)."""
        removed: int = _resolve(self.sweeper)(owner=owner)
        return removed


REGISTRY: dict[str, Backend] = {
    "local": Backend(
        LocalConfig,
        "fidelity.sandboxes.local:LocalSandbox",
        "fidelity.sandboxes.local:sweep_stale",
        domains=("terminal",),
        default_for=("terminal",),
    ),
    "docker": Backend(
        DockerConfig,
        "fidelity.sandboxes.pool:new_sandbox",  # the swe domain's sandbox adds its tools
        "fidelity.sandboxes.docker:sweep_stale",
        domains=("terminal", "swe"),
        default_for=("swe",),
        pooled=True,
    ),
    "browser": Backend(
        BrowserConfig,
        "fidelity.sandboxes.browser:BrowserSandbox",
        "fidelity.sandboxes.browser:sweep_stale",
        domains=("web",),
        default_for=("web",),
    ),
    "mcp": Backend(
        McpConfig,
        "fidelity.sandboxes.mcp:build",
        "fidelity.sandboxes.mcp:sweep",
        domains=("mcp",),
        default_for=("mcp",),
    ),
    "search": Backend(
        SearchConfig,
        "fidelity.sandboxes.search:build",
        "fidelity.sandboxes.search:sweep",
        domains=("search",),
        default_for=("search",),
    ),
    "desktop": Backend(
        DesktopConfig,
        "fidelity.sandboxes.desktop:build",
        "fidelity.sandboxes.desktop:sweep",
        domains=("os",),
        default_for=("os",),
    ),
    "adb": Backend(
        AdbConfig,
        "fidelity.sandboxes.adb:build",
        "fidelity.sandboxes.adb:sweep",
        domains=("android",),
    ),
}
"""Every sandbox backend, by its config's ``type``."""

SandboxConfig = Annotated[
    LocalConfig
    | DockerConfig
    | BrowserConfig
    | McpConfig
    | SearchConfig
    | DesktopConfig
    | AdbConfig,
    Field(discriminator="type"),
]
"""Any backend's config, told apart by ``type`` (serializes and validates back)."""

_ADAPTER: TypeAdapter[Any] = TypeAdapter(SandboxConfig)

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


def sandbox_config(
    domain: str,
    name: str | None = None,
    options: dict[str, Any] | None = None,
    run_id: str = "",
) -> SandboxConfigBase:
    """The typed config of the backend replaying *domain* (*name*, or the domain's own).

    *options* are the user's settings (they win); a backend whose config names
    the domain or a run label gets this run's. UsageError for an option the
    backend does not have or a value it rejects.
    """
    chosen = backend_for(domain, name)
    fields = backend(chosen).config.model_fields
    defaults: dict[str, Any] = {"domain": domain, "run_label": run_id}
    data = {k: v for k, v in defaults.items() if k in fields}
    try:
        config: SandboxConfigBase = _ADAPTER.validate_python(
            {**data, **(options or {}), "type": chosen}
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "options"
        raise UsageError(f"sandbox {chosen!r}: {where}: {first['msg']}") from None
    return config


def parse_sandbox_config(data: dict[str, Any] | str) -> SandboxConfigBase:
    """A config back from its JSON or dict form (what a task carries between processes)."""
    if isinstance(data, str):
        config: SandboxConfigBase = _ADAPTER.validate_json(data)
    else:
        config = _ADAPTER.validate_python(data)
    return config


def sweep_owner(name: str, owner: int) -> int:
    """Remove what sandboxes of backend *name* started by process *owner* (now dead) left."""
    return backend(name).sweep(owner)


def sweep_all() -> int:
    """Sweep dead owners' leftovers of every backend (Docker only where a daemon answers)."""
    from fidelity.errors import SandboxUnavailableError

    removed = 0
    for entry in REGISTRY.values():
        try:
            removed += entry.sweep()
        except SandboxUnavailableError:
            continue  # e.g. no Docker daemon answers, so no container can have been left
    return removed


def get_sandbox(name: str, **config: Any) -> Sandbox:
    """A sandbox of backend *name* configured by keyword options (see :func:`sandbox_config`)."""
    return parse_sandbox_config({**config, "type": name}).build()


def sweep(name: str) -> int:
    """Remove what sandboxes of backend *name* left behind when their audit was killed."""
    return backend(name).sweep()


def _resolve(target: str) -> Callable[..., Any]:
    module, _, attribute = target.partition(":")
    function: Callable[..., Any] = getattr(importlib.import_module(module), attribute)
    return function
