"""The Docker backend: one hardened container and one persistent bash per trajectory.

The sandbox, its isolation and its protocol are described in
:mod:`fidelity.sandboxes.docker.sandbox`. Every name other modules use is importable from
here, and so are the internals that tests reach (``_pools``, ``_none_labelled``).
"""

from __future__ import annotations

from fidelity.sandboxes.docker.archive import workdir_archive
from fidelity.sandboxes.docker.config import DockerConfig
from fidelity.sandboxes.docker.containers import LABEL_HOST, LABEL_OWNER, LABEL_RUN
from fidelity.sandboxes.docker.sandbox import (
    KEEPALIVE,
    DockerSandbox,
    ImageUnsuitableError,
)
from fidelity.sandboxes.docker.sweep import DEFAULT_SOCKET, sweep_stale
from fidelity.sandboxes.docker.sweep import _none_labelled as _none_labelled
from fidelity.sandboxes.docker.warm import _pools as _pools
from fidelity.sandboxes.docker.warm import close_pools

__all__ = [
    "DEFAULT_SOCKET",
    "KEEPALIVE",
    "LABEL_HOST",
    "LABEL_OWNER",
    "LABEL_RUN",
    "DockerConfig",
    "DockerSandbox",
    "ImageUnsuitableError",
    "close_pools",
    "sweep_stale",
    "workdir_archive",
]
