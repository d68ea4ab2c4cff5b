"""Kernel bounds for host-process sandboxes: a memory cgroup and size/inode-bounded tmpfs.

Memory: each bubblewrap sandbox gets its own memory cgroup holding every
process of the sandbox, so several processes each under ``RLIMIT_AS`` cannot
together exceed the total. cgroup v2 is used where its root lists the
``memory`` controller (``/sys/fs/cgroup/cgroup.controllers``), else cgroup v1's
``memory`` hierarchy (``/sys/fs/cgroup/memory``), in a child of the cgroup
fidelity itself runs in. Creating a cgroup needs write access there (root, or a
delegated subtree); where neither works, :func:`memory_cgroup` returns None and
the only memory bound left is ``RLIMIT_AS`` per process (README's containment
table says so). Processes: a pids cgroup (:func:`pids_cgroup`) whose
``pids.events`` counts forks refused at the limit (:func:`fork_bomb`).

Disk and inodes: :func:`mount_tmpfs` mounts a tmpfs with ``size=`` and
``nr_inodes=`` (root only), so filling the disk or creating millions of empty
files ends in ENOSPC inside the sandbox, not on the host.

The shell's stdin: :func:`fd_holders` finds processes holding the harness
shell's input pipe open (they would eat the next command), to kill them.

bubblewrap: the pieces every bwrap sandbox shares (the terminal's, each MCP server's):
:func:`sandbox_uid` (an unprivileged host uid of its own when fidelity runs as root),
:func:`isolation_args` (every namespace, no capabilities, that uid inside),
:func:`system_binds` (the read-only system), :func:`write_identity` /
:func:`identity_binds` (its own ``/etc/passwd`` and ``/etc/group``) and
:func:`unreachable` (a bind source the sandbox uid cannot reach).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PREFIX = "fidelity-"
INSIDE_UID = 1000
"""The sandbox user's uid (and gid) inside every bubblewrap sandbox."""
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_uid_lock = threading.Lock()
_uid_counter = 0


def sandbox_uid() -> int | None:
    """A fresh unprivileged host uid per sandbox when running as root, else None (own uid)."""
    global _uid_counter
    if os.geteuid() != 0:
        return None
    with _uid_lock:
        _uid_counter += 1
        return 200_000 + (os.getpid() % 4096) * 256 + _uid_counter % 256


def isolation_args(die_with_parent: bool = True) -> list[str]:
    """bwrap's isolation: every namespace (no network but its own loopback, own PID
    namespace), its own session, no capabilities, :data:`INSIDE_UID` inside."""
    return [
        "--unshare-all",
        *(["--die-with-parent"] if die_with_parent else []),
        "--new-session",
        *("--cap-drop", "ALL"),
        *("--hostname", "sandbox"),
        *("--uid", str(INSIDE_UID)),
        *("--gid", str(INSIDE_UID)),
    ]


def system_binds() -> list[str]:
    """bwrap's read-only system: ``/usr``, ``/etc`` and the top-level ``bin``/``lib``
    folders (a symlink into ``/usr`` stays a symlink)."""
    argv = ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in SYSTEM_DIRS:
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    return argv


def write_identity(folder: Path, home: str) -> None:
    """``passwd`` and ``group`` in *folder* naming root, the sandbox user (``agent``,
    :data:`INSIDE_UID`, home *home*) and nobody: what :func:`identity_binds` mounts."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "passwd").write_text(
        f"root:x:0:0:root:/root:/bin/bash\nagent:x:{INSIDE_UID}:{INSIDE_UID}:agent:{home}:/bin/bash\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
    )
    (folder / "group").write_text(f"root:x:0:\nagent:x:{INSIDE_UID}:\nnogroup:x:65534:\n")
    # whatever the auditor's umask: bwrap reads them as the sandbox's user
    for name in ("passwd", "group"):
        (folder / name).chmod(0o644)
    folder.chmod(folder.stat().st_mode | 0o111)


def identity_binds(folder: Path) -> list[str]:
    """bwrap arguments mounting :func:`write_identity`'s files over the host's, read-only."""
    return [
        *("--ro-bind", str(folder / "passwd"), "/etc/passwd"),
        *("--ro-bind", str(folder / "group"), "/etc/group"),
    ]


def unreachable(path: Path, uid: int | None) -> Path | None:
    """The first folder above *path* that host uid *uid* cannot search (so bwrap, running
    as *uid*, cannot bind *path*); None when every one can be (or *uid* is None: our own)."""
    if uid is None:
        return None
    for folder in reversed(path.parents):
        info = folder.stat()
        if not (info.st_mode & 0o001 or (info.st_uid == uid and info.st_mode & 0o100)):
            return folder
    return None


def chown_tree(path: Path, uid: int) -> None:
    """Give *path* and everything below it (symlinks themselves, not their targets) to *uid*."""
    os.chown(path, uid, uid, follow_symlinks=False)
    for dirpath, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


class MemoryCgroup:
    """One sandbox's memory cgroup (v1 or v2): limit, membership, OOM kill count, removal."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version

    @property
    def procs_file(self) -> Path:
        """The file a process writes its pid to in order to join."""
        return self.path / "cgroup.procs"

    def limit(self, limit_bytes: int) -> None:
        """Bound the memory (and swap) of everything in the cgroup to *limit_bytes*."""
        if self.version == 2:
            (self.path / "memory.max").write_text(str(limit_bytes))
            with contextlib.suppress(OSError):
                (self.path / "memory.swap.max").write_text("0")
            return
        (self.path / "memory.limit_in_bytes").write_text(str(limit_bytes))
        with contextlib.suppress(OSError):  # absent without swap accounting
            (self.path / "memory.memsw.limit_in_bytes").write_text(str(limit_bytes))

    def oom_kills(self) -> int:
        """How many processes the kernel killed for this cgroup's limit so far."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = read_small(self.path / name)
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def pids(self) -> list[int]:
        """Processes in the cgroup."""
        try:
            return [int(x) for x in self.procs_file.read_text().split()]
        except (OSError, ValueError):
            return []

    def remove(self) -> None:
        """Kill what is left in the cgroup and remove it (best effort, bounded)."""
        remove_cgroup(self.path)


def memory_cgroup(name: str, owner_uid: int | None) -> MemoryCgroup | None:
    """A new memory cgroup *name* under fidelity's own, joinable by *owner_uid*; None if impossible."""
    found = _memory_parent()
    if found is None:
        return None
    parent, version = found
    path = parent / name
    try:
        path.mkdir()
    except OSError:
        return None
    group = MemoryCgroup(path, version)
    try:
        if owner_uid is not None:  # the sandbox's first process moves itself in
            _let_traverse(path)
            os.chown(group.procs_file, owner_uid, owner_uid)
        return group
    except OSError:
        group.remove()
        return None


def _let_traverse(path: Path) -> None:
    """Let the sandbox's user reach *path*'s files: a restrictive umask (027) leaves a new
    cgroup folder 0750, and the sandbox could not move itself in."""
    os.chmod(path, os.stat(path).st_mode | 0o055)


_JOIN = 'for f in $0 $1; do [ -n "$f" ] && { echo $$ > "$f" || exit 1; }; done; shift; exec "$@"'
"""Write this shell's PID into ``$0`` and ``$1`` (each a ``cgroup.procs``; empty: none),
then run the rest."""


def joining(procs_files: Sequence[str | Path]) -> list[str]:
    """The argv prefix that moves a process into the cgroups whose ``cgroup.procs`` are
    *procs_files* (one or two) before it runs the rest, so nothing it starts forks outside
    them; ``[]`` for none."""
    if not procs_files:
        return []
    if len(procs_files) > 2:
        raise ValueError(f"at most two cgroups to join, not {len(procs_files)}")
    return ["/bin/sh", "-c", _JOIN, *[*map(str, procs_files), ""][:2]]


def pids_cgroup(name: str, owner_uid: int | None, memory: MemoryCgroup | None) -> Path | None:
    """The folder of a new pids cgroup *name* (v1), or the v2 memory cgroup's when it has pids."""
    if memory is not None and memory.version == 2:
        return memory.path if (memory.path / "pids.max").is_file() else None
    v1 = CGROUP_ROOT / "pids"
    if not (v1 / "cgroup.procs").is_file():
        return None
    path = v1 / _own_cgroups().get("pids", "/").lstrip("/") / name
    try:
        path.mkdir()
    except OSError:
        return None
    try:
        if owner_uid is not None:
            _let_traverse(path)
            os.chown(path / "cgroup.procs", owner_uid, owner_uid)
        return path
    except OSError:
        remove_cgroup(path)
        return None


def cgroup_parents() -> list[Path]:
    """Where this process creates sandbox cgroups (memory, and pids under cgroup v1)."""
    parents = []
    found = _memory_parent()
    if found is not None:
        parents.append(found[0])
        if found[1] == 1:
            parents.append(CGROUP_ROOT / "pids" / _own_cgroups().get("pids", "/").lstrip("/"))
    return parents


def _memory_parent() -> tuple[Path, int] | None:
    """The folder new memory cgroups go in (fidelity's own cgroup) and the cgroup version."""
    controllers = CGROUP_ROOT / "cgroup.controllers"
    own = _own_cgroups()
    if controllers.is_file():
        if "memory" not in controllers.read_text().split():
            return None
        return CGROUP_ROOT / own.get("", "/").lstrip("/"), 2
    v1 = CGROUP_ROOT / "memory"
    if (v1 / "cgroup.procs").is_file():
        return v1 / own.get("memory", "/").lstrip("/"), 1
    return None


def _own_cgroups() -> dict[str, str]:
    """``controller -> path`` from ``/proc/self/cgroup`` ("" is the v2 hierarchy)."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for controller in controllers.split(","):
                found[controller] = path
    return found


def read_small(path: Path) -> str:
    """The text of a small kernel file (cgroup counters): one open and read, no buffered layers.

    Read at every step, so the cost of :meth:`Path.read_text` shows (it is twice this).
    """
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = [os.read(fd, 65536)]
        while chunks[-1]:
            chunks.append(os.read(fd, 65536))
        return b"".join(chunks).decode()
    finally:
        os.close(fd)


def cgroup_pids(path: Path) -> list[int]:
    """The pids in cgroup folder *path*; none where it cannot be read (gone, not permitted)."""
    try:
        return [int(x) for x in read_small(path / "cgroup.procs").split()]
    except (OSError, ValueError):
        return []


def remove_cgroup(path: Path, limit: float = 5.0) -> bool:
    """SIGKILL the processes of cgroup *path* and remove it; False when it stayed."""
    deadline = time.monotonic() + limit
    while True:
        for pid in cgroup_pids(path):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)


_MNT_DETACH = 2


def mount_tmpfs(target: Path, size_mb: int, inodes: int, mode: int = 0o711) -> None:
    """Mount a tmpfs bounded to *size_mb* and *inodes* on *target*; OSError when not permitted."""
    libc = _libc()
    options = f"size={size_mb}m,nr_inodes={inodes},mode={mode:o}".encode()
    flags = 0x2 | 0x4  # MS_NOSUID | MS_NODEV (not noexec: agents run their own scripts)
    if libc.mount(b"fidelity", str(target).encode(), b"tmpfs", flags, options) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount tmpfs on {target}: {os.strerror(errno)}")


def unmount(target: Path) -> None:
    """Lazily unmount *target* if something is mounted there."""
    libc = _libc()
    libc.umount2(str(target).encode(), _MNT_DETACH)  # EINVAL: nothing mounted there


def is_mount(target: Path) -> bool:
    """Whether *target* is a mount point (listed in /proc/self/mounts)."""
    wanted = str(target)
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 1 and fields[1].replace("\\040", " ") == wanted:
                return True
    return False


@functools.cache
def _libc() -> ctypes.CDLL:
    """The C library, loaded once: ``find_library`` runs ``ldconfig -p`` in a child process
    at every call (six per sandbox: its mounts and unmounts)."""
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def filesystem_full(path: Path) -> tuple[bool, bool]:
    """``(no blocks left, no inodes left)`` of the filesystem holding *path*."""
    try:
        stats = os.statvfs(path)
    except OSError:
        return False, False
    return stats.f_bavail == 0, stats.f_files > 0 and stats.f_favail == 0


def fd_holders(pids: list[int], link: str) -> list[int]:
    """Which of *pids* have a file descriptor open on *link* (e.g. ``pipe:[1234]``)."""
    found = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == link:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def kill_all(pids: list[int], link: str | None = None) -> None:
    """SIGKILL each of *pids*; with *link*, wait (5 s at most) until none holds it open."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while link is not None and pids and fd_holders(pids, link) and time.monotonic() < deadline:
        time.sleep(0.005)


def processes_of(uid: int) -> list[int]:
    """Pids of the processes owned by host uid *uid*."""
    found = []
    with os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if entry.stat(follow_symlinks=False).st_uid == uid:
                        found.append(int(entry.name))
    return found


STDIN_THIEF = (
    "SandboxTampered: process(es) {pids} of this step held the harness shell's stdin "
    "(they would read the next command); killed"
)
STDIN_LEFT = (
    "SandboxInterrupted: process(es) {pids} left by an earlier step (keystrokes, or a "
    "delayed reader) were reading the shell's input; killed, and this command ran"
)


def pids_limit_hits(events: Path | None) -> int:
    """How often a fork failed at the ``pids.max`` of the cgroup whose ``pids.events`` is *events*."""
    if events is None:
        return 0
    try:
        for line in read_small(events).splitlines():
            key, _, value = line.partition(" ")
            if key == "max" and value.strip().isdigit():
                return int(value)
    except OSError:
        return 0
    return 0


def fork_bomb(
    hits: Callable[[], int], count: Callable[[], int], before: int, baseline: int, limit: int
) -> bool:
    """Whether what a step left behind is a fork bomb, decided by the kernel's counter.

    A bomb grows until a fork fails at the cgroup's ``pids.max`` (the counter
    *hits* passes *before*); background work that is not a bomb stops growing.
    Growth is watched for as long as it goes on, so a bomb starved by a busy
    machine is still seen; only one second without any growth ends the watch.
    *baseline*: how many processes the sandbox had when the step began (or
    needs anyway); a step that left no more than that left no bomb.
    """
    if hits() > before:
        return True
    previous = count()
    if previous <= baseline:
        return False
    quiet_since = time.monotonic()
    while time.monotonic() - quiet_since < 1.0:
        time.sleep(0.02)
        if hits() > before:
            return True
        current = count()
        if current >= limit:
            return True
        if current > previous:
            previous, quiet_since = current, time.monotonic()
    return hits() > before
