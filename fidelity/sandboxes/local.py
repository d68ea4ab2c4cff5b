"""The embedded default sandbox: one persistent bash per trajectory inside bubblewrap.

Isolation: every namespace unshared (no network but loopback, own PID, IPC,
UTS, user and mount namespaces), read-only system, a fresh writable copy of the
environment's workdir at ``/workspace``, a private ``/tmp`` (size-limited
tmpfs), a private ``/dev`` with a size-limited ``/dev/shm``, no capabilities,
and none of the auditor's environment (bwrap itself, PID 1 inside, starts with
only ``PATH``). When fidelity runs as root each sandbox runs as its own
unprivileged host uid, so ``RLIMIT_NPROC`` caps a fork bomb per sandbox; its
processes share one memory cgroup (``max_total_memory_mb``, see
:mod:`fidelity.sandboxes.containment`), and the workspace + home, ``/tmp`` and
``/dev/shm`` are tmpfs mounts bounded in size and inodes. Without root there is
no cgroup (only ``RLIMIT_AS`` per process) and workspace size and file count
are polled while a step runs, as the disk quota always was.

Protocol: :mod:`fidelity.sandboxes.shell` over the bwrap process's pipes
(:class:`~fidelity.sandboxes.shell.ProcessTransport`): the shell's stderr pipe
is the status channel, everything the command prints comes on stdout. On
timeout the whole sandbox (the PID namespace) is killed and a fresh shell is
started in the same workspace at the last known cwd.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Literal

from pydantic import Field

from fidelity.errors import SandboxError, SandboxUnavailableError
from fidelity.sandboxes import containment
from fidelity.sandboxes.base import (
    Sandbox,
    command_limit,
    dead_owner,
    keys_limits,
    owned_folder,
    stale_folders,
    track,
    untrack,
)
from fidelity.sandboxes.config import ShellLimits
from fidelity.sandboxes.shell import (
    CONTROL,
    GITCONFIG,
    HOME,
    MOUNT,
    SANDBOX_ENVIRONMENT,
    SANDBOX_UMASK,
    SHELL_ARGV,
    TAMPERED,
    ProcessTransport,
    ShellSession,
    Step,
    cut_short,
    exited,
    finished,
    quote,
    run_setup,
    typed,
    typed_until_exit,
)
from fidelity.trajectory import Action, CommandAction, EnvSpec, KeystrokesAction, Observation

_log = logging.getLogger(__name__)

_ROOT_PREFIX = "fidelity-local-"
_SHOWN = {"work": f"{MOUNT} and {HOME}", "tmp": "/tmp", "shm": "/dev/shm"}
_TRANSIENT_MOUNT_ERRORS = {errno.EAGAIN, errno.EBUSY, errno.EINTR, errno.ENOMEM}
_warned_errnos: set[int | None] = set()


class LocalConfig(ShellLimits):
    """Settings of the bubblewrap backend (limits: :class:`ShellLimits`)."""

    type: Literal["local"] = "local"
    shm_size_mb: int = Field(default=64, ge=1, description="size of the private /dev/shm")
    max_total_memory_mb: int = Field(
        default=4096, ge=64, description="memory cgroup of the whole sandbox (tmpfs pages count)"
    )
    bwrap: str = "bwrap"
    temp_root: str | None = Field(
        default=None, description="where sandbox folders go (default: $TMPDIR)"
    )


class LocalSandbox(Sandbox):
    """Bubblewrap sandbox with a persistent bash (see module docstring)."""

    name = "local"

    def __init__(self, config: LocalConfig | None = None) -> None:
        self.config = config or LocalConfig()
        self._bwrap = shutil.which(self.config.bwrap)
        self._root: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._shell: ShellSession | None = None
        self._env: EnvSpec | None = None
        self._cwd = MOUNT
        self._uid = containment.sandbox_uid()
        self._partial_keys = False
        self._closed = threading.Event()  # set by close(), possibly from another thread
        self._background_jobs = False  # did the last command leave jobs running?
        self._lifecycle = threading.RLock()  # guards starting and killing the shell
        self._cgroup: containment.MemoryCgroup | None = None
        self._pids_cgroup: Path | None = None
        self._hits_before = 0  # pids.events "max" when the step began
        self._count_before = 3  # sandbox processes when the step began (bwrap x2, bash)
        self._oom_before = 0  # the memory cgroup's OOM kills when the step began
        self._idle = False  # only bwrap x2 and an idle bash left: the readings below still hold
        self._mounted: list[Path] = []  # tmpfs mounts (root only), unmounted by close()
        self._full_at_start: str | None = None  # a bound already used up when the step began
        self._stdin_link: str | None = None  # the shell's stdin pipe, as /proc shows it
        self._stdin_owners: set[int] = set()  # bwrap and the shell: the pipe's rightful readers

    # -- lifecycle ---------------------------------------------------------

    def reset(self, env: EnvSpec) -> Observation:
        """Copy the workdir afresh, start bash, run the setup commands."""
        if self._bwrap is None:
            raise SandboxUnavailableError(
                f"bubblewrap ({self.config.bwrap}) not found: install it with "
                "`apt-get install bubblewrap` or choose another --sandbox"
            )
        self.close()
        self._closed.clear()
        self._check_temp_root()
        track(self)
        self._env = env
        self._cwd = MOUNT
        self._root = owned_folder(_ROOT_PREFIX, self.config.temp_root)
        self._root.chmod(0o711)  # the sandbox uid must traverse it to reach its binds
        self._mount_areas()
        self._prepare_tree(env)
        self._make_cgroup()
        self._start_shell()
        for index, command in enumerate(env.setup):
            self._run_setup(index, command)
        return Observation(text="", exit_code=0, cwd=self._cwd)

    def close(self) -> None:
        """Kill every process of the sandbox and delete its files. Idempotent.

        Safe to call from another thread while a step runs (Ctrl-C): that step
        then raises :class:`SandboxError` instead of starting a new shell.
        """
        self._closed.set()
        with self._lifecycle:  # two closers (Ctrl-C and the failing step) release in order
            self._kill_shell()
            untrack(self)
            cgroup, self._cgroup = self._cgroup, None
            if cgroup is not None:
                cgroup.remove()
            pids, self._pids_cgroup = self._pids_cgroup, None
            if pids is not None and pids.exists():
                containment.remove_cgroup(pids)
            mounted, self._mounted = self._mounted, []
            for path in mounted:
                containment.unmount(path)
            root, self._root = self._root, None
            if root is not None:
                shutil.rmtree(root, ignore_errors=True)

    def _mount_areas(self) -> None:
        """As root: the writable areas become tmpfs mounts bounded in size and inodes."""
        assert self._root is not None
        if self._uid is None:
            return
        cfg = self.config
        for name, size, mode in (
            ("work", cfg.max_disk_mb, 0o711),
            ("tmp", cfg.tmp_size_mb, 0o1777),
            ("shm", cfg.shm_size_mb, 0o1777),
        ):
            path = self._root / name
            path.mkdir()
            try:
                _mount_with_retry(path, size, cfg.max_inodes, mode)
            except OSError as exc:  # root without CAP_SYS_ADMIN (a container): poll instead
                _warn_unbounded(exc)
                for done in self._mounted:
                    containment.unmount(done)
                self._mounted = []
                return
            self._mounted.append(path)

    def _make_cgroup(self) -> None:
        """The sandbox's memory cgroup, or None where the machine gives none (see module doc)."""
        assert self._root is not None
        name = f"{containment.CGROUP_PREFIX}{os.getpid()}-{self._root.name}"
        self._cgroup = containment.memory_cgroup(name, self._uid)
        if self._cgroup is not None:
            self._cgroup.limit(self.config.max_total_memory_mb * 1024 * 1024)
        self._pids_cgroup = containment.pids_cgroup(name, self._uid, self._cgroup)
        if self._pids_cgroup is not None:  # below RLIMIT_NPROC: the cgroup counts the hit
            (self._pids_cgroup / "pids.max").write_text(str(self.config.max_processes - 1))

    def _pid_hits(self) -> int:
        """Forks that failed at the sandbox's ``pids.max`` so far (0 without a pids cgroup)."""
        group = self._pids_cgroup
        return containment.pids_limit_hits(group / "pids.events" if group else None)

    def _area(self, name: str) -> Path:
        """Host folder behind the sandbox's *name* (workspace, home): on the bounded tmpfs if any."""
        assert self._root is not None
        return self._root / ("work" if self._mounted else "") / name

    def _check_temp_root(self) -> None:
        """The sandbox uid must be able to reach its bind mounts through every parent folder."""
        if self._uid is None:
            return
        base = Path(self.config.temp_root or tempfile.gettempdir()).resolve()
        for folder in (base, *base.parents):
            if not folder.stat().st_mode & 0o001:
                raise SandboxUnavailableError(
                    f"sandbox folders go under {base}, but {folder} is not searchable by other "
                    "users (chmod o+x it, or set TMPDIR to a folder like /tmp)"
                )

    # -- stepping ------------------------------------------------------------

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        """Run *action*; failures of the action are observations, not exceptions."""
        if self._shell is None or self._root is None:
            raise SandboxError("step() before reset(): the sandbox is not running")
        if isinstance(action, CommandAction):
            limit = command_limit(action, timeout, self.config.step_timeout)
            return self._run_command(action.command, limit)
        if isinstance(action, KeystrokesAction):
            return self._send_keys(action, timeout)
        raise SandboxError(f"the local sandbox cannot run {type(action).__name__}")

    def _run_command(self, command: str, timeout: float) -> Observation:
        shell = self._shell
        if shell is None:
            raise SandboxError("the sandbox was closed while a step ran")
        if self._partial_keys:  # typed text without Enter: submit it so bash reads our line whole
            shell.send(b"\n")
            self._partial_keys = False
        left = [] if self._idle else self._stdin_thieves()  # e.g. `cat` typed as keystrokes
        containment.kill_all(left, self._stdin_link)
        if not self._idle:
            self._take_readings()
        self._idle = False
        step = shell.run(command, timeout, self._watch)
        status, why = step.done, step.why
        if status is not None:
            self._background_jobs = status.jobs
            self._idle = not status.jobs and self._only_the_shell_left()
            if self._under_process_pressure():
                status, why = None, f"process limit of {self.config.max_processes} reached"
        limit = self._new_limit()
        output = step.output
        if status is not None:
            self._cwd = status.cwd
            error = f"SandboxLimit: {limit}" if limit else None
            thieves = [] if self._idle else self._stdin_thieves()
            containment.kill_all(thieves, self._stdin_link)
            if error is None and thieves:
                error = containment.STDIN_THIEF.format(pids=thieves)
            elif error is None and left:
                error = containment.STDIN_LEFT.format(pids=left)
            elif error is None and step.tampered:
                error = TAMPERED
            return finished(output, status, error)
        if why == "exited":
            code = self._reap()
            self._start_shell()
            return exited(output, code, self._cwd, f"SandboxLimit: {limit}" if limit else None)
        self._restart_shell()
        return cut_short(output, self._cwd, why)

    def _take_readings(self) -> None:
        """The counters a step's limits are judged against: OOM kills, refused forks, tasks, full areas."""
        self._oom_before = self._cgroup.oom_kills() if self._cgroup is not None else 0
        self._hits_before = self._pid_hits()
        self._count_before = max(3, self._sandbox_count()) if self._uid else 3
        self._full_at_start = self._limit_hit()

    def _only_the_shell_left(self) -> bool:
        """Whether the sandbox holds just bwrap, its init and the idle shell (``pids.current``).

        Then nothing in it can run until the next step: no process can take the
        shell's stdin, fork, allocate or write, so the counters read after this
        step are the next step's starting readings and its stdin scan finds nobody.
        ``pids.current`` counts threads and unreaped zombies too: it only ever
        overstates, and anything above the three means "not idle".
        """
        if self._pids_cgroup is None or self._uid is None:
            return False
        with contextlib.suppress(OSError, ValueError):
            return int(containment.read_small(self._pids_cgroup / "pids.current")) <= 3
        return False

    def _watch(self, step: Step) -> str | None:
        """While a command runs: a size or inode bound it used up (polled)."""
        hit = self._limit_hit()
        return hit if hit and hit != self._full_at_start else None

    def _send_keys(self, action: KeystrokesAction, timeout: float | None) -> Observation:
        shell = self._shell
        if shell is None:
            raise SandboxError("the sandbox was closed while a step ran")
        self._idle = False  # whatever the keys start runs on past this step
        shell.send(action.keys.encode())
        self._partial_keys = not action.keys.endswith("\n") and bool(action.keys)
        wait, limit = keys_limits(action, timeout, self.config.step_timeout)
        output, alive = shell.read_keys(
            self.config.max_output_bytes, wait, limit, self.config.settle_s
        )
        if not alive or (self._proc is not None and self._proc.poll() is not None):
            code = self._reap()
            self._start_shell()
            return typed_until_exit(output, code)
        return typed(output)

    # -- shell process ---------------------------------------------------------

    def _start_shell(self) -> None:
        self._idle = False
        with self._lifecycle:  # close() from another thread either sees this shell or stops it
            if self._closed.is_set() or self._root is None:
                raise SandboxError("the sandbox was closed while a step ran")
            self._spawn()
        self._ready_check()

    def _spawn(self) -> None:
        assert self._env is not None and self._bwrap is not None
        try:
            proc = self.popen(self._argv())
        except OSError as exc:
            raise SandboxUnavailableError(f"cannot start bubblewrap: {exc}") from exc
        self._proc = proc
        self._shell = ShellSession(ProcessTransport(proc), self.config.max_output_bytes)

    def popen(self, argv: list[str]) -> subprocess.Popen[bytes]:
        """Start *argv* (this sandbox's :meth:`_argv`, or a variant) as its user, piped, own group."""
        return subprocess.Popen(
            argv,
            env={"PATH": SANDBOX_ENVIRONMENT["PATH"]},  # bwrap is PID 1 inside: no secrets
            cwd="/",  # nor the auditor's folder (a shell exports PWD)
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,  # the status channel (bwrap's own errors come there too)
            process_group=0,
            umask=SANDBOX_UMASK,  # files made inside do not depend on the auditor's umask
            user=self._uid,
            group=self._uid,
            extra_groups=[] if self._uid is not None else None,
            close_fds=True,
        )

    def _ready_check(self) -> None:
        """Fail fast with bwrap's own message when the sandbox cannot start."""
        assert self._shell is not None
        step = self._shell.run(f"cd {quote(self._cwd)} 2>/dev/null || cd {MOUNT}", 10.0)
        if step.done is None:
            self._kill_shell()
            shown = step.output.text() + step.status_bytes.decode("utf-8", errors="replace")
            detail = (shown.strip().splitlines()[-1:] or [step.why])[0]
            hint = ""
            if "uid map" in detail or "namespace" in detail or "not permitted" in detail:
                hint = " (enable unprivileged user namespaces: sysctl kernel.unprivileged_userns_clone=1)"
            raise SandboxUnavailableError(
                f"bubblewrap sandbox did not start ({step.why}): {detail}{hint}"
            )
        self._cwd = step.done.cwd
        self._stdin_link, self._stdin_owners = None, set()
        if self._uid is not None and self._proc is not None and self._proc.stdin is not None:
            self._stdin_link = f"pipe:[{os.fstat(self._proc.stdin.fileno()).st_ino}]"
            self._stdin_owners = set(self._holders())

    def _holders(self) -> list[int]:
        """Sandbox processes (host pids) with the shell's stdin open."""
        if self._uid is None or self._stdin_link is None:
            return []
        return containment.fd_holders(self._sandbox_pids(), self._stdin_link)

    def _sandbox_pids(self) -> list[int]:
        """Host pids of the sandbox's processes: its cgroup's list, else a /proc scan by uid."""
        for group in (self._pids_cgroup, self._cgroup and self._cgroup.path):
            if group:
                with contextlib.suppress(OSError, ValueError):
                    return [int(x) for x in containment.read_small(group / "cgroup.procs").split()]
        return containment.processes_of(self._uid) if self._uid is not None else []

    def _sandbox_count(self) -> int:
        """Tasks of the sandbox (``pids.current``), else its uid's processes, zombies included."""
        if self._pids_cgroup is not None:
            with contextlib.suppress(OSError, ValueError):
                return int(containment.read_small(self._pids_cgroup / "pids.current"))
        return _count_processes(self._uid, zombies=True) if self._uid is not None else 0

    def _stdin_thieves(self) -> list[int]:
        """Processes besides bwrap and the shell holding the shell's stdin (root only)."""
        if self._uid is None or self._stdin_link is None:
            return []
        others = [pid for pid in self._sandbox_pids() if pid not in self._stdin_owners]
        return containment.fd_holders(others, self._stdin_link)  # the owners' fds: not read

    def _argv(self, command: list[str] | None = None) -> list[str]:
        """bwrap in its cgroups and limits, running *command* (default: the persistent shell)."""
        assert self._root is not None and self._env is not None and self._bwrap is not None
        cfg = self.config
        argv = []
        joins = [str(self._cgroup.procs_file)] if self._cgroup is not None else []
        if self._pids_cgroup is not None and self._pids_cgroup != (
            self._cgroup and self._cgroup.path
        ):
            joins.append(str(self._pids_cgroup / "cgroup.procs"))
        argv += containment.joining(joins)  # join the cgroups before anything forks
        argv += [
            "prlimit",
            f"--nproc={cfg.max_processes}",
            f"--as={cfg.max_memory_mb * 1024 * 1024}",
            f"--fsize={cfg.max_file_mb * 1024 * 1024}",
            "--core=0",
            "--",
            self._bwrap,
            *containment.isolation_args(),
            *containment.system_binds(),
            *containment.identity_binds(self._root / "etc"),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            *self._scratch_areas(),
            "--remount-ro",
            "/dev",  # bwrap's /dev tmpfs belongs to the sandbox user: no files of its own there
            "--bind",
            str(self._area("workspace")),
            MOUNT,
            "--bind",
            str(self._area("home")),
            HOME,
            "--ro-bind",
            str(self._root / "control"),
            CONTROL,
            "--remount-ro",
            "/",  # the sandbox's own root (symlinks, mount points) too
            "--chdir",
            MOUNT,
            "--clearenv",
        ]
        for key, value in self._environment().items():
            argv += ["--setenv", key, value]
        argv += ["--", *(command or SHELL_ARGV)]
        return argv

    def _scratch_areas(self) -> list[str]:
        """``/tmp`` and ``/dev/shm``: the bounded host tmpfs mounts, or bwrap's sized tmpfs."""
        assert self._root is not None
        if self._mounted:
            return [
                *("--bind", str(self._root / "tmp"), "/tmp"),
                *("--bind", str(self._root / "shm"), "/dev/shm"),
            ]
        cfg = self.config
        return [
            *("--size", str(cfg.tmp_size_mb * 1024 * 1024), "--tmpfs", "/tmp"),
            *("--size", str(cfg.shm_size_mb * 1024 * 1024), "--tmpfs", "/dev/shm"),
        ]

    def _environment(self) -> dict[str, str]:
        assert self._env is not None
        return {**SANDBOX_ENVIRONMENT, **self._env.env}

    def _prepare_tree(self, env: EnvSpec) -> None:
        assert self._root is not None
        root = self._root
        workspace = self._area("workspace")
        if env.workdir:
            source = Path(env.workdir)
            if not source.is_dir():
                raise SandboxError(f"env.workdir {env.workdir}: not a directory")
            shutil.copytree(source, workspace, symlinks=True)
        else:
            workspace.mkdir()
        home = self._area("home")
        home.mkdir()
        (home / ".gitconfig").write_text(GITCONFIG)
        (root / "control").mkdir()
        (root / "control").chmod(0o755)  # read by the sandbox's user, whatever the umask
        containment.write_identity(root / "etc", HOME)
        for index, command in enumerate(env.setup):
            if command.startswith("@"):
                script = root / "control" / f"setup-{index}.sh"
                shutil.copyfile(command[1:], script)
                script.chmod(0o644)
        if self._uid is not None:
            for path in (workspace, home):
                containment.chown_tree(path, self._uid)

    def _run_setup(self, index: int, command: str) -> None:
        run_setup(self._run_command, index, command, self.config.step_timeout)

    def _restart_shell(self) -> None:
        self._kill_shell()
        self._start_shell()

    def _kill_shell(self) -> None:
        with self._lifecycle:  # each process and fd is taken by exactly one caller
            shell, self._shell = self._shell, None
            self._proc = None
        if shell is not None:
            shell.kill()
            self._wait_for_namespace_exit()
        self._partial_keys = False

    def _wait_for_namespace_exit(self, limit: float = 5.0) -> None:
        """The kernel kills a dead namespace's processes asynchronously; wait for them."""
        if self._uid is None:
            return
        deadline = time.monotonic() + limit
        while _count_processes(self._uid) and time.monotonic() < deadline:
            time.sleep(0.01)

    def _reap(self) -> int | None:
        proc = self._proc
        code = proc.wait() if proc is not None else None
        self._kill_shell()
        return code

    def _under_process_pressure(self) -> bool:
        """True when processes the command left behind approach RLIMIT_NPROC (a fork bomb).

        Only measurable with a dedicated sandbox uid (running as root); the
        three baseline processes are prlimit's bwrap, bwrap's init and bash.
        Background work that stays small (a server, a sleep) is left alone.
        """
        if self._uid is None:
            return False
        # bash's job table is exact at status time; /proc may not show a fresh fork yet
        if not self._background_jobs and (self._idle or _count_processes(self._uid) <= 3):
            return False
        # A fork bomb stalls below RLIMIT_NPROC as forks fail and retry; no agent command
        # legitimately leaves half the process budget running in the background. On a
        # loaded machine the bomb grows slowly: watch while it grows, stop once it is flat.
        # With a pids cgroup the kernel counts the failed forks; without one, growth decides.
        return containment.fork_bomb(
            self._pid_hits,
            self._sandbox_count,
            self._hits_before,
            0 if self._background_jobs and self._count_before <= 3 else self._count_before,
            int(self.config.max_processes * 0.5),
        )

    def _new_limit(self) -> str | None:
        """A bound the step ran into: the memory cgroup's OOM killer, or a full area.

        When the step left the sandbox idle, what is read here is also where the
        next step starts from (:meth:`_only_the_shell_left`).
        """
        oom = self._cgroup.oom_kills() if self._cgroup is not None else 0
        hit = self._limit_hit()
        oom_before, full_before = self._oom_before, self._full_at_start
        if self._idle:
            self._oom_before, self._full_at_start = oom, hit
            self._hits_before, self._count_before = self._pid_hits(), 3
        if oom > oom_before:
            return f"memory limit of {self.config.max_total_memory_mb} MB reached (OOM kill)"
        return hit if hit != full_before else None

    def _limit_hit(self) -> str | None:
        """Which size or inode bound of the writable areas is used up now, if any."""
        cfg = self.config
        if self._root is None:
            return None
        if self._mounted:
            sizes = {"work": cfg.max_disk_mb, "tmp": cfg.tmp_size_mb, "shm": cfg.shm_size_mb}
            for path in self._mounted:
                blocks, inodes = containment.filesystem_full(path)
                if inodes:
                    return f"inode limit of {cfg.max_inodes} files reached ({_SHOWN[path.name]})"
                if blocks:
                    return f"disk quota of {sizes[path.name]} MB exceeded ({_SHOWN[path.name]})"
            return None
        size, count = self._usage()
        if count > cfg.max_inodes:
            return f"inode limit of {cfg.max_inodes} files reached ({MOUNT} and {HOME})"
        if size > cfg.max_disk_mb * 1024 * 1024:
            return f"disk quota of {cfg.max_disk_mb} MB exceeded ({MOUNT} and {HOME})"
        return None

    def _usage(self) -> tuple[int, int]:
        """Bytes and inodes used in the workspace and home (the polled bound without root)."""
        total, count = 0, 0
        for folder in (self._area("workspace"), self._area("home")):
            for dirpath, dirs, files in os.walk(folder):
                count += len(dirs) + len(files)
                for name in files:
                    with contextlib.suppress(OSError):
                        total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
        return total, count


def _mount_with_retry(path: Path, size_mb: int, inodes: int, mode: int) -> None:
    """:func:`containment.mount_tmpfs`, tried once more when the kernel says "try again"."""
    try:
        containment.mount_tmpfs(path, size_mb, inodes, mode)
    except OSError as exc:
        if exc.errno not in _TRANSIENT_MOUNT_ERRORS:
            raise
        containment.mount_tmpfs(path, size_mb, inodes, mode)


def _warn_unbounded(error: OSError) -> None:
    """Say once per process and errno why sandboxes fall back to a polled workspace on disk.

    The fallback changes what some commands show (``ls -la`` lists a directory as 4096
    bytes on disk, 40 + 20 per entry on tmpfs), so it must never pass unseen.
    """
    if error.errno in _warned_errnos:
        return
    _warned_errnos.add(error.errno)
    _log.warning(
        "fidelity: sandbox areas are not tmpfs-bounded (%s); disk use is polled instead", error
    )


def _count_processes(uid: int, zombies: bool = False) -> int:
    """Processes whose effective uid is *uid* (the owner of ``/proc/PID``).

    Zombies count toward RLIMIT_NPROC (so they do for fork pressure) but not
    for "is the sandbox gone" (orphans of a killed namespace wait for init).
    """
    count = 0
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == uid and (
                    zombies or not _zombie(entry.path)
                ):
                    count += 1
    return count


def _zombie(proc_dir: str) -> bool:
    """A dead process waiting to be reaped (orphans of a killed namespace go to init)."""
    with open(os.path.join(proc_dir, "stat"), "rb") as handle:
        stat = handle.read()
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] in (b"Z", b"X")


def sweep_stale(temp_root: str | None = None, owner: int | None = None) -> int:
    """Delete sandbox folders, mounts and cgroups of dead fidelity processes; how many.

    With *owner*, only that (dead) process's leftovers, whatever ``kill -0`` says
    (a dead owner may still be a zombie).
    """
    removed = 0
    for folder in stale_folders(_ROOT_PREFIX, temp_root, owner):
        for name in ("work", "tmp", "shm"):
            if containment.is_mount(folder / name):
                containment.unmount(folder / name)
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    for parent in containment.cgroup_parents():
        for group in parent.glob(f"{containment.CGROUP_PREFIX}*"):
            pid_text = group.name[len(containment.CGROUP_PREFIX) :].split("-", 1)[0]
            if pid_text.isdigit() and dead_owner(int(pid_text), owner):
                removed += containment.remove_cgroup(group)
    return removed
