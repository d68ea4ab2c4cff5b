"""What a Docker sandbox copies into its container before it starts, as one tar
(``put_archive``): the workdir, ``~/.gitconfig``, ``@file`` setup scripts, the harness's
files."""

from __future__ import annotations

import io
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fidelity.errors import SandboxError
from fidelity.sandboxes.images import AGENT_UID
from fidelity.sandboxes.shell import CONTROL, GITCONFIG, HOME, MOUNT

if TYPE_CHECKING:
    from fidelity.trajectory import EnvSpec


def workdir_archive(
    env: EnvSpec,
    harness: dict[str, bytes] | None = None,
    owner: tuple[int, int] = (AGENT_UID, AGENT_UID),
) -> bytes:
    """A tar of the workdir (at ``workspace/``), ``~/.gitconfig``, setup scripts and the
    *harness* files (name under ``CONTROL``: bytes); the workdir and ``~`` owned by *owner*."""

    def owned(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid, info.gid = owner
        info.uname = info.gname = ""
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        if env.workdir:
            source = Path(env.workdir)
            if not source.is_dir():
                raise SandboxError(f"env.workdir {env.workdir}: not a directory")
            tar.add(str(source), arcname=MOUNT.lstrip("/"), filter=owned)
        _add_file(tar, f"{HOME.lstrip('/')}/.gitconfig", GITCONFIG.encode(), owned)
        for index, command in enumerate(env.setup):
            if command.startswith("@"):
                data = Path(command[1:]).read_bytes()
                _add_file(tar, f"{CONTROL.lstrip('/')}/setup-{index}.sh", data, None)
        for name, data in (harness or {}).items():
            _add_file(tar, f"{CONTROL.lstrip('/')}/{name}", data, None)
    return buffer.getvalue()


def _add_file(tar: tarfile.TarFile, name: str, data: bytes, owner: Any) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = int(time.time())
    if owner is not None:
        info = owner(info)
    tar.addfile(info, io.BytesIO(data))
