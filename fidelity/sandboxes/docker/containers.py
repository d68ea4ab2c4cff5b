"""fidelity's containers: the labels that name their run and owner (what
:func:`~fidelity.sandboxes.docker.sweep.sweep_stale` reads), their names, their removal."""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
from typing import Any

LABEL_OWNER = "fidelity.owner_pid"
LABEL_HOST = "fidelity.owner_host"
LABEL_RUN = "fidelity.run"
_counter = itertools.count(1)


def _container_name() -> str:
    return f"fidelity-{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}"


def _remove(container: Any) -> None:
    import docker

    with contextlib.suppress(docker.errors.NotFound):
        try:
            container.remove(force=True, v=True)  # with the image's anonymous VOLUMEs
        except docker.errors.APIError as exc:
            if "already in progress" not in str(exc):
                raise
