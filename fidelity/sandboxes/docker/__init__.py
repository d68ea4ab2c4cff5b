"""The Docker backend: one hardened container and one persistent bash per trajectory.

The sandbox, its isolation and its protocol are described in
:mod:`fidelity.sandboxes.docker.sandbox`; its config is :mod:`.config`, the warm pool
:mod:`.warm`, the workdir archive :mod:`.archive`, the containers' labels
:mod:`.containers` and the sweep of killed runs' containers :mod:`.sweep`. Every name other
modules use is importable from here, loaded on first use: an audit that only sweeps (every
audit does) or only reads the config loads no sandbox code.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "workdir_archive": "archive",
    "DockerConfig": "config",
    "LABEL_HOST": "containers",
    "LABEL_OWNER": "containers",
    "LABEL_RUN": "containers",
    "KEEPALIVE": "sandbox",
    "DockerSandbox": "sandbox",
    "ImageUnsuitableError": "sandbox",
    "DEFAULT_SOCKET": "sweep",
    "sweep_stale": "sweep",
    "_none_labelled": "sweep",
    "_pools": "warm",
    "close_pools": "warm",
}

__all__ = [name for name in _HOMES if not name.startswith("_")]


def __getattr__(name: str) -> Any:
    """A name of the Docker backend, imported from its module on first use."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'fidelity.sandboxes.docker' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fidelity.sandboxes.docker.{home}"), name)
