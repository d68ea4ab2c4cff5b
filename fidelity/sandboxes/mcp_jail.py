"""The bubblewrap jail every MCP server runs in (bundled or a trusted dataset's command).

A server sees what the terminal's bubblewrap sandbox sees (:mod:`.containment`'s shared
pieces): its own unprivileged host uid when fidelity runs as root (``agent``, uid 1000
inside), every namespace unshared (no network but its own loopback, its own PID
namespace: no auditor process is visible), no capabilities, read-only ``/usr`` and
``/etc`` with its own ``passwd``, a private ``/proc``, ``/dev`` and a bounded ``/tmp``,
as root one memory cgroup for a trajectory's servers together (``max_total_memory_mb``),
the read-only folders its install needs (:func:`~.mcp_servers.install_paths`, the
operator's ``read_only``), and its trajectory's state folder read-write at the same path
(so ``{root}``… and what the servers print stay as they were). No other host path.

Its environment is fixed (``PATH``, ``HOME`` = the state folder, ``LANG``, ``USER``,
``LOGNAME``, the server's own ``env``, the markers the sweeper looks for); the
processes outside it (the launcher, bwrap, bwrap's PID 1 the server can read) get the
same fixed values, so nothing of the auditor's environment is passed at all.

The state folder belongs to the sandbox uid; the auditor's own files in it (the owner
marker the sweeper reads, the servers' stderr logs, the ``passwd`` files) are root's,
in :data:`PRIVATE`, which inside the jail is covered by an empty tmpfs (a mount point:
it cannot be renamed, replaced or read from inside).

A bind source the sandbox uid cannot reach (the install under ``/root/.cache``) is
first bound by root, in a mount namespace of the launcher's own, onto a folder it can
reach (``unshare --mount``, then ``mount --bind``; nothing changes in the host's mounts).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from fidelity.errors import SandboxUnavailableError
from fidelity.sandboxes import containment
from fidelity.sandboxes.mcp_servers import OWNER_FILE
from fidelity.sandboxes.shell import GITCONFIG, SANDBOX_ENVIRONMENT

PRIVATE = ".fidelity-mcp"
"""The auditor's folder inside a state folder: stderr logs, ``passwd``; hidden in the jail."""
SERVER_ENVIRONMENT = {
    "PATH": SANDBOX_ENVIRONMENT["PATH"],
    "LANG": SANDBOX_ENVIRONMENT["LANG"],
    "USER": "agent",
    "LOGNAME": "agent",
}
"""Every server's fixed environment (``HOME`` is its state folder)."""
_LAUNCHER_ENVIRONMENT = {
    **SERVER_ENVIRONMENT,
    **{"HOME": "/nonexistent", "SHELL": "/bin/sh", "TERM": "dumb"},
}
"""Outside the jail (the SDK adds the auditor's HOME, USER, SHELL, TERM to what it is given:
these win). bwrap's PID 1, which the server can read, keeps it."""
_BIND_FIRST = (
    'while [ "$1" != -- ]; do mount --bind "$1" "$2" || exit 125; shift 2; done; shift; exec "$@"'
)
"""Root, in the launcher's own mount namespace: bind each SOURCE TARGET pair, run the rest."""


class McpJail:
    """The bwrap command lines of one trajectory's servers, sharing its state folder.

    *state* is :func:`~.mcp_servers.make_state`'s folder; it is handed to *uid* (None:
    fidelity is not root, the servers run as its own uid), but for :data:`PRIVATE` and
    the owner marker. *read_only*: host paths bound read-only at the same path.
    """

    def __init__(
        self,
        state: Path,
        uid: int | None,
        read_only: Sequence[Path],
        tmp_size_mb: int = 64,
        max_processes: int = 512,
        die_with_parent: bool = True,
        max_total_memory_mb: int = 2048,
    ) -> None:
        self.state = state
        self.uid = uid
        self.tmp_size_mb = tmp_size_mb
        self.max_processes = max_processes
        self.die_with_parent = die_with_parent
        self.max_total_memory_mb = max_total_memory_mb
        self.cgroup: containment.MemoryCgroup | None = None
        self.bwrap = _tool("bwrap", "apt-get install bubblewrap")
        self.private = state / PRIVATE
        blocked = containment.unreachable(state, uid)
        if blocked is not None:
            raise SandboxUnavailableError(
                f"mcp state folders go under {state.parent}, but {blocked} is not searchable "
                "by other users (chmod o+x it, or set TMPDIR to a folder like /tmp)"
            )
        missing = next((path for path in read_only if not path.exists()), None)
        if missing is not None:
            raise SandboxUnavailableError(f"mcp read_only: {missing} does not exist")
        self._read_only = _outermost([path.absolute() for path in read_only])
        self._prepare()
        if uid is not None:  # as root: the servers together in one memory cgroup
            name = f"{containment.CGROUP_PREFIX}{os.getpid()}-mcp-{state.name}"
            self.cgroup = containment.memory_cgroup(name, None)
            if self.cgroup is not None:
                self.cgroup.limit(max_total_memory_mb * 1024 * 1024)

    def close(self) -> None:
        """Remove the servers' memory cgroup (killing what is left in it)."""
        cgroup, self.cgroup = self.cgroup, None
        if cgroup is not None:
            cgroup.remove()

    def _prepare(self) -> None:
        (self.state / ".gitconfig").write_text(GITCONFIG)  # HOME: git commits need a name
        if self.uid is not None:
            containment.chown_tree(self.state, self.uid)
            os.chown(self.state / OWNER_FILE, 0, 0)
        self.private.mkdir()
        (self.private / "mnt").mkdir()
        containment.write_identity(self.private, str(self.state))  # passwd, group: 0644
        for path in (self.private, self.private / "mnt"):
            path.chmod(0o711)  # the sandbox uid reaches passwd and the mount targets, lists none

    def log(self, index: int) -> Path:
        """Where server number *index* writes its stderr (the auditor's, out of reach)."""
        return self.private / f"{index}.stderr"

    def launcher_environment(self, markers: dict[str, str]) -> dict[str, str]:
        """The environment of the processes outside the jail (the SDK's spawn)."""
        return {**_LAUNCHER_ENVIRONMENT, **markers}

    def server_environment(self, own: dict[str, str], markers: dict[str, str]) -> dict[str, str]:
        """The server's environment: the fixed one, its spec's ``env``, the markers."""
        return {**SERVER_ENVIRONMENT, "HOME": str(self.state), **own, **markers}

    def argv(self, command: list[str], env: dict[str, str], cwd: str) -> list[str]:
        """The command line that runs *command* in the jail, in *cwd*, with exactly *env*."""
        first: list[str] = []  # SOURCE TARGET pairs root binds before the uid changes
        binds: list[str] = []
        for index, path in enumerate(self._read_only):
            source = path
            if containment.unreachable(path, self.uid) is not None:
                source = self.private / "mnt" / str(index)
                if path.is_dir():
                    source.mkdir(exist_ok=True)
                else:
                    source.touch(exist_ok=True)
                first += [str(path), str(source)]
            binds += ["--ro-bind", str(source), str(path)]
        state, private = str(self.state), str(self.private)
        owner = str(self.state / OWNER_FILE)
        jail = [
            self.bwrap,
            *containment.isolation_args(self.die_with_parent),
            *containment.system_binds(),
            *containment.identity_binds(self.private),
            *("--proc", "/proc", "--dev", "/dev", "--remount-ro", "/dev"),
            *("--size", str(self.tmp_size_mb * 1024 * 1024), "--tmpfs", "/tmp"),
            *binds,
            *("--bind", state, state),
            *("--tmpfs", private, "--remount-ro", private),  # the auditor's files: hidden
            *("--ro-bind", owner, owner),  # the sweeper's marker: kept as it is
            *("--remount-ro", "/", "--chdir", cwd, "--clearenv"),
        ]
        for key, value in env.items():
            jail += ["--setenv", key, value]
        jail += ["--", *command]
        if self.uid is None:
            return jail
        as_uid = [
            _tool("prlimit", "util-linux"),
            f"--nproc={self.max_processes}",
            "--core=0",
            "--",
            _tool("setpriv", "util-linux"),
            f"--reuid={self.uid}",
            f"--regid={self.uid}",
            "--clear-groups",
            "--",
            *jail,
        ]
        # root moves the launcher into the cgroup before anything forks
        join = containment.joining([self.cgroup.procs_file] if self.cgroup is not None else [])
        if not first:
            return [*join, *as_uid]
        return [
            *join,
            _tool("unshare", "util-linux"),
            *("--mount", "--propagation", "private", "--"),
            *("/bin/sh", "-c", _BIND_FIRST, "fidelity-mcp", *first, "--", *as_uid),
        ]


def _tool(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise SandboxUnavailableError(f"the mcp backend runs its servers in {name} ({package})")
    return found


def _outermost(paths: list[Path]) -> list[Path]:
    """*paths* without those inside another one, or inside the system's read-only ``/usr``,
    ``/etc`` (bound anyway), and never ``/`` itself."""
    kept: list[Path] = []
    for path in sorted(set(paths), key=lambda p: len(p.parts)):
        covered = [*kept, Path("/usr"), Path("/etc")]
        if path != Path("/") and not any(path == o or o in path.parents for o in covered):
            kept.append(path)
    return kept
