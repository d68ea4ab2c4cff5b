"""The base of every sandbox backend's pydantic config (the SWE-ReX pattern).

Each backend module defines one config class deriving from
:class:`SandboxConfigBase` (or :class:`ShellLimits` for backends that run a
shell) with a ``type: Literal["name"]`` discriminator. Configs are plain data:
they serialize (``model_dump_json``), so a trajectory task carrying one can be
shipped to another process or machine and rebuilt there with :meth:`build`.
The registry (:mod:`fidelity.sandboxes.registry`) maps ``type`` to the backend's
factory, sweeper and domains.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from fidelity.defaults import STEP_TIMEOUT
from fidelity.sandboxes.registry import backend

if TYPE_CHECKING:
    from fidelity.sandboxes.base import Sandbox
    from fidelity.trajectory import EnvSpec, Observation

logger = logging.getLogger(__name__)


class SandboxConfigBase(BaseModel):
    """What every backend's config has: its ``type`` and the seconds a step may take."""

    model_config = ConfigDict(extra="forbid")

    type: str
    step_timeout: float = Field(default=STEP_TIMEOUT, gt=0, description="seconds per step")

    def build(self) -> Sandbox:
        """An unstarted sandbox of this backend configured by this config."""
        sandbox: Sandbox = backend(self.type).build(self)
        return sandbox

    def sweep(self) -> int:
        """Remove what sandboxes of this backend left behind when their run was killed."""
        return backend(self.type).sweep()

    @contextlib.contextmanager
    def lease(self, env: EnvSpec) -> Iterator[tuple[Sandbox, Observation]]:
        """A sandbox reset to *env* and its initial observation; closed (or pooled) afterwards."""
        entry = backend(self.type)
        if entry.pooled:
            with entry.shared_pool(self).lease(env) as leased:
                yield leased, leased.last_reset or _empty()
            return
        sandbox = self.build()
        try:
            logger.debug("sandbox %s: resetting for %s", sandbox.label, _described(env))
            yield sandbox, sandbox.reset(env)
        finally:
            sandbox.close()


class ShellLimits(SandboxConfigBase):
    """Resource limits shared by the backends that run a persistent shell (bwrap, Docker)."""

    max_output_bytes: int = Field(default=1_000_000, gt=0)
    max_processes: int = Field(default=256, ge=8, description="processes of the sandbox user")
    max_memory_mb: int = Field(default=2048, ge=64, description="memory per process")
    max_file_mb: int = Field(default=256, ge=1, description="RLIMIT_FSIZE")
    max_disk_mb: int = Field(
        default=1024, ge=1, description="writable workspace; polled while a step runs"
    )
    tmp_size_mb: int = Field(default=256, ge=1, description="size of the private /tmp")
    max_inodes: int = Field(
        default=100_000,
        ge=100,
        description="files and folders in the writable areas (polled, and tmpfs nr_inodes)",
    )
    settle_s: float = Field(
        default=0.15, ge=0, description="quiet time that ends a keystrokes step"
    )


def _empty() -> Observation:
    from fidelity.trajectory import Observation

    return Observation()


def _described(env: EnvSpec) -> str:
    """What the log says of an environment: its image, task, instance or workdir."""
    parts = [
        f"{name} {value}"
        for name, value in (
            ("image", env.image),
            ("instance", env.instance.instance_id if env.instance is not None else None),
            ("task", env.task),
            ("workdir", env.workdir),
        )
        if value
    ]
    return ", ".join(parts) or "the default environment"
