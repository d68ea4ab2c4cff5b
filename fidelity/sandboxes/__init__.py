"""Real environments behind one :class:`~fidelity.sandboxes.base.Sandbox` interface.

The registry (SWE-ReX pattern). Each backend is one module holding a pydantic
config with a ``type: Literal["name"]`` discriminator (deriving from
:class:`~fidelity.sandboxes.config.SandboxConfigBase`), a sandbox factory and a
sweeper of what killed runs left behind. **Adding a backend** touches its module,
one :class:`~fidelity.sandboxes.registry.Backend` entry in :data:`REGISTRY`
(:mod:`fidelity.sandboxes.registry`, which imports no backend) and its config
class in the :data:`SandboxConfig` union here. Everything else (CLI ``--sandbox``,
domain checks, tasks shipped to other machines, ``fidelity sandbox sweep``) reads
the registry.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field, TypeAdapter, ValidationError

from fidelity.errors import UsageError
from fidelity.sandboxes.adb import AdbConfig
from fidelity.sandboxes.base import Sandbox
from fidelity.sandboxes.browser import BrowserConfig
from fidelity.sandboxes.config import SandboxConfigBase
from fidelity.sandboxes.desktop import DesktopConfig
from fidelity.sandboxes.docker.config import DockerConfig
from fidelity.sandboxes.local import LocalConfig
from fidelity.sandboxes.mcp import McpConfig
from fidelity.sandboxes.registry import (
    BACKENDS,
    DEFAULT_BACKEND,
    DOMAINS,
    REGISTRY,
    Backend,
    backend,
    backend_for,
    resolve_target,
    sweep,
    sweep_all,
    sweep_owner,
    trajectory_backend,
)
from fidelity.sandboxes.search import SearchConfig

__all__ = [
    "BACKENDS",
    "DEFAULT_BACKEND",
    "DOMAINS",
    "REGISTRY",
    "WORLD_OPTIONS",
    "Backend",
    "SandboxChooser",
    "SandboxConfig",
    "backend",
    "backend_for",
    "get_sandbox",
    "parse_sandbox_config",
    "resolve_target",
    "sandbox_config",
    "sweep",
    "sweep_all",
    "sweep_owner",
    "trajectory_backend",
]

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


WORLD_OPTIONS = frozenset(
    {
        "sites",
        "trust_commands",
        "instances",
        "swebench_namespace",
        "instance_images",
        "pull",
        "pull_registries",
    }
)
"""Options of the user's world (``--site``, ``--instances``, ``--trust-dataset-commands``,
``--pull`` …, and an ``--env-defaults`` file's keys) that only some backends take: a
backend without the field ignores them (a dataset may mix backends; a defaults file may
serve several domains). Any other option a backend does not have is a usage error."""


def sandbox_config(
    domain: str,
    name: str | None = None,
    options: dict[str, Any] | None = None,
    run_id: str = "",
) -> SandboxConfigBase:
    """The typed config of the backend replaying *domain* (*name*, or the domain's own).

    *options* are the user's settings (they win); a backend whose config names
    the domain or a run label gets this run's; :data:`WORLD_OPTIONS` it does not have
    are left out. UsageError for another option the backend does not have or a value it
    rejects.
    """
    chosen = backend_for(domain, name)
    fields = backend(chosen).config.model_fields
    defaults: dict[str, Any] = {"domain": domain, "run_label": run_id}
    data = {k: v for k, v in defaults.items() if k in fields}
    given = {k: v for k, v in (options or {}).items() if k in fields or k not in WORLD_OPTIONS}
    try:
        config: SandboxConfigBase = _ADAPTER.validate_python({**data, **given, "type": chosen})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:]) or "options"
        raise UsageError(f"sandbox {chosen!r}: {where}: {first['msg']}") from exc
    return config


class SandboxChooser:
    """Each trajectory's sandbox config: the backend its environment names, else the run's
    (:func:`trajectory_backend`); one config per backend, built once."""

    def __init__(
        self, chosen: str | None, options: dict[str, Any] | None = None, run_id: str = ""
    ) -> None:
        self.chosen = chosen
        self.options = options or {}
        self.run_id = run_id
        self._configs: dict[tuple[str, str], SandboxConfigBase] = {}

    def backend_of(self, domain: str, env: Any) -> str:
        """The backend replaying a trajectory of *domain* in *env* (UsageError: it cannot)."""
        return trajectory_backend(domain, env, self.chosen)

    def config_for(self, domain: str, env: Any) -> SandboxConfigBase:
        """The config of the backend replaying a trajectory of *domain* in *env*."""
        name = self.backend_of(domain, env)
        key = (domain, name)
        if key not in self._configs:
            self._configs[key] = sandbox_config(domain, name, self.options, self.run_id)
        return self._configs[key]


def parse_sandbox_config(data: dict[str, Any] | str) -> SandboxConfigBase:
    """A config back from its JSON or dict form (what a task carries between processes)."""
    if isinstance(data, str):
        config: SandboxConfigBase = _ADAPTER.validate_json(data)
    else:
        config = _ADAPTER.validate_python(data)
    return config


def get_sandbox(name: str, **config: Any) -> Sandbox:
    """A sandbox of backend *name* configured by keyword options (see :func:`sandbox_config`)."""
    return parse_sandbox_config({**config, "type": name}).build()
