"""Docker sandboxes: one hardened container and one persistent bash per trajectory.

Isolation: no network (``network_mode=none``), every capability dropped (a
recipe may add some back through ``cap_add``), ``no-new-privileges``, PID,
memory and CPU limits of the container's cgroup, ``RLIMIT_DATA`` and
``RLIMIT_FSIZE`` per process, a size-limited ``/tmp`` tmpfs, an unprivileged
``agent`` user (uid 1000), and labels (``fidelity.run``,
``fidelity.owner_pid``) so :func:`~fidelity.sandboxes.docker.sweep.sweep_stale` can remove
what a killed audit left. The workdir, ``~/.gitconfig`` and ``@file`` setup scripts are
copied in with ``put_archive`` before the container starts, fresh for every reset
(:func:`~fidelity.sandboxes.docker.archive.workdir_archive`).

An image is data: its ``ENTRYPOINT``, ``CMD`` and ``HEALTHCHECK`` never run (the
container's process is fidelity's keepalive), the variables of its ``ENV`` that make
bash or the loader run code are blanked (:func:`~fidelity.sandboxes.images.withheld_variable`),
and an image that is not here is pulled only as the operator allows (``pull``,
``pull_registries``): otherwise the trajectory is unverifiable.

Protocol: :mod:`fidelity.sandboxes.shell` over a ``docker exec -i``
(:class:`~fidelity.sandboxes.shell.DockerExecTransport`), whose multiplexed
stream keeps stdout and stderr apart: the exec's stderr stream is the status
channel, everything the command prints comes on stdout. On a
timeout, a process or memory limit, a disk quota or a shell that exited, the
container is killed and started again (its files survive, its processes and
``/tmp`` do not) and a fresh shell starts at the last known cwd.
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tarfile
import threading
import time
from pathlib import Path
from typing import Any

from fidelity.errors import SandboxError, UsageError
from fidelity.sandboxes import containment
from fidelity.sandboxes.base import Sandbox, command_limit, keys_limits, track, untrack
from fidelity.sandboxes.docker.archive import workdir_archive
from fidelity.sandboxes.docker.config import DockerConfig
from fidelity.sandboxes.docker.containers import (
    LABEL_HOST,
    LABEL_OWNER,
    LABEL_RUN,
    _container_name,
    _remove,
)
from fidelity.sandboxes.docker.warm import _warm_pool
from fidelity.sandboxes.images import (
    AGENT_UID,
    ImageProfile,
    docker_client,
    ensure_image,
    resolve_image,
)
from fidelity.sandboxes.shell import (
    MOUNT,
    SANDBOX_ENVIRONMENT,
    SHELL_ARGV,
    TAMPERED,
    DockerExecTransport,
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

_TMUX = "tmux -L fidelity"
_image_cache: dict[str, str] = {}
_image_lock = threading.Lock()
_BASH = "/bin/bash"
KEEPALIVE = ["sleep", "infinity"]
"""The container's own process: it replaces the image's ENTRYPOINT and CMD, which never run."""
_ACTIVATE = (
    "if [ -r /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate "
    "&& conda activate testbed; fi >/dev/null 2>&1; "
)
"""An own image with SWE-bench's layout: its shell enters the ``testbed`` conda environment,
as SWE-bench's eval scripts do (images without ``/opt/miniconda3`` are left as they are)."""


class ImageUnsuitableError(UsageError):
    """A trajectory's image lacks what the harness needs inside it (bash, coreutils, ...)."""


class DockerSandbox(Sandbox):
    """Docker container with a persistent bash (see module docstring)."""

    name = "docker"

    def __init__(self, config: DockerConfig | None = None) -> None:
        self.config = config or DockerConfig()
        self._client: Any = None
        self._container: Any = None
        self._shell: ShellSession | None = None
        self._exec_id: str | None = None  # the shell's docker exec
        self._env: EnvSpec | None = None
        self._profile: ImageProfile | None = None  # a trajectory's own image (env.image)
        self._cwd = MOUNT
        self._partial_keys = False
        self._cgroup: dict[str, Path] = {}
        self._upper: Path | None = None
        self._pid_baseline = 4
        self._pids_before = 0  # container processes when the step began
        self._stolen: list[int] = []  # processes of earlier steps that read this step's line
        self._shell_pid: int | None = None
        self._keepalive: int | None = None
        self._closed = threading.Event()
        self._lifecycle = threading.RLock()
        self._stdin_link: str | None = None  # the shell's stdin pipe, as /proc shows it
        self._shell_host_pid = 0

    # -- lifecycle ---------------------------------------------------------

    def reset(self, env: EnvSpec) -> Observation:
        """Start a fresh container with a fresh copy of the workdir, then run the setup."""
        self.close()
        self._closed.clear()
        if self._client is None:
            self._client = docker_client()
        image = self._image(env)
        track(self)
        self._env = env
        self._cwd = self._start_dir(env)
        warm = _warm_pool(self._client, image, self._create_options(), self.config.warm)
        with self._lifecycle:
            if self._closed.is_set():
                raise SandboxError("the sandbox was closed while it started")
            taken = warm.take() if warm is not None else None
            self._container = taken or self._client.containers.create(
                image, name=_container_name(), **self._create_options()
            )
        container = self._container
        archive = workdir_archive(env, self._harness_files(), self._owner(container))
        if not container.put_archive("/", archive):
            raise SandboxError("copying the workdir into the container failed")
        self._start_container(running=taken is not None)
        for index, command in enumerate(env.setup):
            self._run_setup(index, command)
        return Observation(text="", exit_code=0, cwd=self._cwd)

    last_reset: Observation | None = None
    """What the last reset (or recycle) showed; a pool's lease keeps it for the caller."""

    def recycle(self, env: EnvSpec) -> Observation | None:
        """Reset this running container to *env* without a new start, or None (then ``reset``).

        A terminal container has no reset cheaper than a new container (the
        agent may have changed anything it can write): it is closed and None
        returned. :class:`~fidelity.sandboxes.swe.SweSandbox` resets its repos.
        """
        self.close()
        return None

    def _start_dir(self, env: EnvSpec) -> str:
        """Where the shell starts (and the setup runs): the workdir copy, else the WORKDIR
        of the trajectory's own image."""
        if self._profile is not None and self._profile.workdir and not env.workdir:
            return self._profile.workdir
        return MOUNT

    def alive(self) -> bool:
        """Whether the container is still running (a pool restarts a dead one)."""
        import docker

        with self._lifecycle:
            container = self._container
        if container is None or self._shell is None:
            return False
        try:
            container.reload()
        except docker.errors.DockerException:
            return False
        return bool(container.status == "running")

    def close(self) -> None:
        """Remove the container and everything in it. Idempotent, safe from another thread."""
        self._closed.set()
        with self._lifecycle:
            shell, self._shell = self._shell, None
            container, self._container = self._container, None
        if shell is not None:
            shell.close()
        if container is not None:
            _remove(container)
        untrack(self)

    def _image(self, env: EnvSpec) -> str:
        """The image of *env*: its own (``env.image``, resolved), else the configured one."""
        self._profile = None
        if env.image:
            self._profile = resolve_image(self._client, env.image, self.config.pull_policy())
            return env.image
        if self.config.image:
            return self.config.image
        with _image_lock:
            if self.config.domain not in _image_cache:
                _image_cache[self.config.domain] = ensure_image(self.config.domain)
            return _image_cache[self.config.domain]

    def _create_options(self) -> dict[str, Any]:
        import docker

        cfg = self.config
        memory = cfg.max_memory_mb * 1024 * 1024
        file_size = cfg.max_file_mb * 1024 * 1024
        withheld = self._profile.withheld if self._profile is not None else ()
        return {
            # the image's ENTRYPOINT, CMD and HEALTHCHECK never run: only fidelity's keepalive
            "entrypoint": KEEPALIVE,
            "healthcheck": {"test": ["NONE"]},
            # init and the keepalive run as (capability-less) root, so the agent's
            # `kill -9 -1` cannot stop the container under its own shell
            "user": "0:0",
            "hostname": "sandbox",
            "working_dir": MOUNT,
            # the image's withheld ENV (BASH_ENV, LD_PRELOAD...) blanked for every process
            "environment": {**SANDBOX_ENVIRONMENT, **dict.fromkeys(withheld, "")},
            "network_mode": "none",
            "cap_drop": ["ALL"],
            "cap_add": cfg.cap_add or None,
            "security_opt": ["no-new-privileges"],
            "pids_limit": cfg.max_processes,
            "mem_limit": memory,
            "memswap_limit": memory,
            "nano_cpus": int(cfg.cpus * 1e9),
            "ulimits": [
                docker.types.Ulimit(name="data", soft=memory, hard=memory),
                docker.types.Ulimit(name="fsize", soft=file_size, hard=file_size),
                docker.types.Ulimit(name="core", soft=0, hard=0),
            ],
            "tmpfs": {
                "/tmp": f"size={cfg.tmp_size_mb}m,nr_inodes={cfg.max_inodes},mode=1777",
                "/dev/shm": f"size=64m,nr_inodes={cfg.max_inodes},mode=1777,nosuid,nodev",
            },
            "init": True,
            "labels": {
                LABEL_RUN: cfg.run_label or "adhoc",
                LABEL_OWNER: str(os.getpid()),
                LABEL_HOST: socket.gethostname(),
            },
        }

    def _environment(self) -> dict[str, str]:
        """The shell's environment: the harness's, the own image's ENV, the trajectory's."""
        own = self._profile.env if self._profile is not None else {}
        return {**SANDBOX_ENVIRONMENT, **own, **(self._env.env if self._env else {})}

    def _user(self) -> str:
        """Who the shell runs as: the own image's USER (root when it names none), else agent."""
        if self._profile is not None:
            return self._profile.user or "0:0"
        return f"{AGENT_UID}:{AGENT_UID}"

    def _owner(self, container: Any) -> tuple[int, int]:
        """Who owns the workdir copy: the shell's user (an own image's USER, looked up in its
        ``/etc/passwd`` and ``/etc/group``), else the agent."""
        if self._profile is None:
            return AGENT_UID, AGENT_UID
        user, _, group = (self._profile.user or "0").partition(":")
        uid, gid = _lookup(container, "/etc/passwd", user)
        if group:
            gid = _lookup(container, "/etc/group", group)[0]
        return uid, gid

    def _harness_files(self) -> dict[str, bytes]:
        """Files the harness copies into an own image (path under ``CONTROL``: bytes)."""
        return {}

    def _requirements(self) -> list[str]:
        """Commands the harness runs inside the image, besides bash."""
        return ["cat", "ls"]

    def _check_image(self) -> None:
        """An own image lacking bash or a required command: ImageUnsuitableError (one line)."""
        if self._profile is None:
            return
        names = " ".join(self._requirements())
        script = f'for c in {names}; do command -v "$c" >/dev/null 2>&1 || printf "%s " "$c"; done'
        code, text = self._exec([_BASH, "--noprofile", "--norc", "-c", script], user="0:0")
        if code in (126, 127) or code is None:
            missing = f"bash ({_BASH})"
        elif code != 0 or not text.strip():
            return
        else:
            missing = ", ".join(text.split())
        raise ImageUnsuitableError(
            f"env.image {self._profile.reference!r} lacks {missing}, which the "
            f"{self.name} backend runs inside the image"
        )

    def _start_container(self, running: bool = False) -> None:
        """Start (or restart) the container, then a shell at the last known cwd."""
        with self._lifecycle:
            if self._closed.is_set() or self._container is None:
                raise SandboxError("the sandbox was closed while a step ran")
            container = self._container
        if not running:
            container.start()
        container.reload()
        self._check_image()
        self._locate_cgroup(container)
        self._pid_baseline = 4  # docker-init, sleep, the two bash processes of the shell
        self._keepalive = self._keepalive_pid()
        self._start_shell()
        if self.config.terminal == "tmux":
            self._start_tmux()
            self._pid_baseline = max(self._pid_baseline, self._pids())

    def _start_tmux(self) -> None:
        columns, rows = self.config.tmux_size
        started = self._run_command(
            f"TERM=xterm-256color {_TMUX} new-session -d -s main -x {columns} -y {rows} "
            f"-c {quote(self._cwd)} && {_TMUX} set-option -g status off",
            10.0,
        )
        if started.exit_code != 0:
            raise SandboxError(f"tmux did not start: {started.text.strip()[-300:]}")

    def _start_shell(self) -> None:
        with self._lifecycle:
            if self._closed.is_set() or self._container is None:
                raise SandboxError("the sandbox was closed while a step ran")
            api = self._client.api
            exec_id = api.exec_create(
                self._container.id,
                SHELL_ARGV,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                user=self._user(),
                workdir=MOUNT,
                environment=self._environment(),
            )["Id"]
            shell = ShellSession(DockerExecTransport(api, exec_id), self.config.max_output_bytes)
            self._shell, self._exec_id = shell, exec_id
        enter = f"cd {quote(self._cwd)} 2>/dev/null || cd {MOUNT}; printf %s $$"
        if self._profile is not None:
            # the image's withheld ENV is blanked in the container; unset, it is gone from
            # the agent's shell and its children too (SHELLOPTS and BASHOPTS stay: readonly)
            names = [n for n in self._profile.withheld if n.isascii() and n.isidentifier()]
            unset = f"unset {' '.join(names)} 2>/dev/null; " if names else ""
            enter = unset + _ACTIVATE + enter
        step = shell.run(enter, 30.0)
        text = step.output.text()
        if step.done is None:
            raise SandboxError(f"the container shell did not start ({step.why}): {text[-300:]}")
        self._cwd = step.done.cwd
        # The exec'd shell leads its own session and process group: the step timeout kills it.
        self._shell_pid = int(text) if text.isdigit() else None
        self._stdin_link = None
        # Found through the container's cgroup: docker's exec_inspect may still report Pid 0
        # for a shell that has already run a command (1 reset in 30 here), and without the
        # shell's stdin no process left reading it would ever be caught.
        self._shell_host_pid = self._host_pid(self._shell_pid) or 0
        if not self._shell_host_pid:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                self._shell_host_pid = int(api.exec_inspect(exec_id)["Pid"])
        if self._shell_host_pid:
            with contextlib.suppress(OSError):
                self._stdin_link = os.readlink(f"/proc/{self._shell_host_pid}/fd/0")

    def _host_pid(self, container_pid: int | None) -> int | None:
        """The host pid of the container's process *container_pid* (the innermost pid in its
        ``NSpid``), among the container cgroup's processes; None where that is not readable."""
        procs = self._cgroup.get("pids")
        if container_pid is None or procs is None:
            return None
        for pid in containment.cgroup_pids(procs.parent):
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue  # it ended meanwhile
            nspid = next(
                (line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), []
            )
            if nspid and nspid[-1] == str(container_pid):
                return pid
        return None

    def _stdin_thieves(self) -> list[int]:
        """Processes besides the shell holding the shell's stdin (they would eat commands).

        Checked from the host (root) through the container's cgroup; nothing where
        that is not readable.
        """
        procs = self._cgroup.get("pids")
        if self._stdin_link is None or procs is None:
            return []
        pids = containment.cgroup_pids(procs.parent)
        others = [pid for pid in pids if pid != self._shell_host_pid]
        return containment.fd_holders(others, self._stdin_link)

    def _exec(
        self, argv: list[str], timeout: float = 30.0, user: str | None = None
    ) -> tuple[int | None, str]:
        """Run *argv* as the agent (or *user*) in a separate ``docker exec``; (code, output)."""
        with self._lifecycle:
            if self._closed.is_set() or self._container is None:
                raise SandboxError("the sandbox was closed while a step ran")
            container = self._container
        api = self._client.api
        environment = self._environment() if self._profile is not None else None
        exec_id = api.exec_create(
            container.id, argv, user=user or self._user(), environment=environment
        )["Id"]
        output = api.exec_start(exec_id, stream=False)
        code = api.exec_inspect(exec_id).get("ExitCode")
        return code, output.decode(errors="replace")

    def _keepalive_pid(self) -> int | None:
        """The container command (``sleep infinity``, pid 1's first child), spared by kills."""
        code, text = self._exec(["cat", "/proc/1/task/1/children"])
        first = text.split()[:1]
        return int(first[0]) if code == 0 and first and first[0].isdigit() else None

    def _interrupt(self) -> None:
        """After a step timeout: kill the shell's process group and every process the step left.

        The container (its files and ``/tmp``) lives on and a fresh shell starts
        at the last known cwd; where that is not possible (tmux mode, an
        unknown shell pid) the container is restarted instead.
        """
        if self.config.terminal == "tmux" or self._shell_pid is None or self._keepalive is None:
            self._restart()
            return
        spared = f" 1 {self._keepalive} $$ "
        script = (
            f"kill -KILL -- -{self._shell_pid} 2>/dev/null; "
            f'for d in /proc/[0-9]*; do p=${{d#/proc/}}; case "{spared}" in *" $p "*) ;; '
            "*) kill -KILL $p 2>/dev/null;; esac; done; true"
        )
        with self._lifecycle:
            shell, self._shell = self._shell, None
        if shell is not None:
            shell.close()
        code, _ = self._exec(["/bin/bash", "--noprofile", "--norc", "-c", script])
        if code != 0:
            self._restart()
            return
        self._partial_keys = False
        self._start_shell()

    def _restart(self) -> None:
        """Kill every process of the container and start it again (files survive)."""
        with self._lifecycle:
            shell, self._shell = self._shell, None
            container = self._container
        if shell is not None:
            shell.close()
        self._partial_keys = False
        if container is None or self._closed.is_set():
            raise SandboxError("the sandbox was closed while a step ran")
        import docker

        with contextlib.suppress(docker.errors.APIError):
            container.kill()
        container.wait(timeout=30)
        self._start_container()

    def _run_setup(self, index: int, command: str) -> None:
        run_setup(self._run_command, index, command, self.config.step_timeout)

    # -- stepping ------------------------------------------------------------

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        """Run *action*; failures of the action are observations, not exceptions.

        A container removed from outside (``docker rm``, a sweep) is a
        :class:`SandboxError`: the trajectory fails as a sandbox failure.
        """
        import docker

        try:
            return self._step(action, timeout)
        except docker.errors.NotFound as exc:
            raise SandboxError(f"the container is gone ({exc.explanation or exc})") from exc

    def _step(self, action: Action, timeout: float | None) -> Observation:
        if self._shell is None or self._container is None:
            raise SandboxError("step() before reset(): the sandbox is not running")
        if isinstance(action, CommandAction):
            limit = command_limit(action, timeout, self.config.step_timeout)
            return self._run_command(action.command, limit)
        if isinstance(action, KeystrokesAction):
            wait, limit = keys_limits(action, timeout, self.config.step_timeout)
            if self.config.terminal == "tmux":
                return self._tmux_keys(action, wait, limit)
            return self._send_keys(action, wait, limit)
        raise SandboxError(f"the docker sandbox cannot run {type(action).__name__}")

    def _run_command(self, command: str, timeout: float, internal: bool = False) -> Observation:
        """Run *command* in the shell; *internal* (tmux plumbing) skips the fork-bomb check."""
        shell = self._shell
        if shell is None:
            raise SandboxError("the sandbox was closed while a step ran")
        if self._partial_keys:
            shell.send(b"\n")
            self._partial_keys = False
        left = [] if internal else self._stdin_thieves()  # e.g. `cat` typed as keystrokes
        containment.kill_all(left, self._stdin_link)
        oom_before, hits_before = self._oom_kills(), self._pid_hits()
        full_before = self._tmpfs_full()
        self._pids_before = self._pids()
        self._stolen = []
        step = shell.run(command, timeout, lambda running: self._watch(running, internal))
        status, why = step.done, step.why
        if status is not None and not internal and self._under_process_pressure(hits_before):
            status, why = None, f"process limit of {self.config.max_processes} reached"
        oom = self._oom_kills() > oom_before
        output = step.output
        if status is not None:
            self._cwd = status.cwd
            error = None
            thieves = [] if internal else self._stdin_thieves()
            if thieves:
                containment.kill_all(thieves, self._stdin_link)
            full = self._tmpfs_full()
            if oom:
                error = f"SandboxLimit: memory limit of {self.config.max_memory_mb} MB reached (OOM kill)"
            elif full and full != full_before:
                error = f"SandboxLimit: {full}"
            elif thieves:
                error = containment.STDIN_THIEF.format(pids=thieves)
            elif left or self._stolen:
                error = containment.STDIN_LEFT.format(pids=left + self._stolen)
            elif step.tampered:
                error = TAMPERED
            return finished(output, status, error)
        if why == "exited":
            code = self._exit_code()
            self._restart()
            return exited(
                output,
                code,
                self._cwd,
                "SandboxLimit: memory limit reached (OOM kill)" if oom else None,
            )
        if why == "timeout":
            self._interrupt()
        else:
            self._restart()
        return cut_short(output, self._cwd, why)

    def _send_keys(self, action: KeystrokesAction, wait: float, limit: float) -> Observation:
        shell = self._shell
        if shell is None:
            raise SandboxError("the sandbox was closed while a step ran")
        shell.send(action.keys.encode())
        self._partial_keys = not action.keys.endswith("\n") and bool(action.keys)
        output, alive = shell.read_keys(
            self.config.max_output_bytes, wait, limit, self.config.settle_s
        )
        if not alive:
            code = self._exit_code()
            self._restart()
            return typed_until_exit(output, code)
        return typed(output)

    def _tmux_keys(self, action: KeystrokesAction, wait: float, limit: float) -> Observation:
        """tmux send-keys (key names such as ``C-c``, ``Enter`` or literal text), then settle.

        After *wait* seconds (the action's ``duration``, cut to the step timeout) the pane is
        captured until it is unchanged for ``settle_reads`` captures in a row (or *limit*
        seconds, the step timeout, pass).
        """
        if action.keys:
            sent = self._run_command(
                f"{_TMUX} send-keys -t main -- {quote(action.keys)}", 10.0, internal=True
            )
            if sent.exit_code != 0:
                return Observation(
                    text=sent.text, error=f"SandboxError: tmux send-keys: {sent.text}"
                )
        time.sleep(wait)
        deadline = time.monotonic() + limit
        screen, same = self._capture(), 0
        while same < self.config.settle_reads - 1 and time.monotonic() < deadline:
            time.sleep(self.config.settle_interval_s)
            current = self._capture()
            same = same + 1 if current == screen else 0
            screen = current
        return Observation(text=screen, timed_out=same < self.config.settle_reads - 1)

    def _capture(self) -> str:
        """The visible tmux pane, trailing blank lines dropped."""
        captured = self._run_command(f"{_TMUX} capture-pane -p -t main", 10.0, internal=True)
        return captured.text.rstrip("\n") + "\n"

    # -- while a command runs ------------------------------------------------------

    def _watch(self, step: Step, internal: bool) -> str | None:
        """Twice a second: a disk bound the step used up; a late stdin thief is caught."""
        hit = self._limit_hit()
        if hit:
            return hit
        if step.status is None and not internal:
            self._catch_thieves(step)
        return None

    def _catch_thieves(self, step: Step) -> None:
        """A process that opened the shell's stdin late may have eaten this command: kill it, resend.

        (One that held it when its step ended was killed then; this is one that
        waited, e.g. ``(sleep 5; cat /proc/$$/fd/0) &``.) What it echoed of the
        harness's line is removed from the output.
        """
        thieves = self._stdin_thieves()
        shell = self._shell
        if not thieves or shell is None:
            return
        containment.kill_all(thieves, self._stdin_link)
        self._stolen += thieves
        shell.resend(step)

    def _exit_code(self) -> int | None:
        """Exit code of the shell's exec, once docker sees it ended (None if unknown)."""
        import docker

        exec_id = self._exec_id
        if exec_id is None or self._closed.is_set():  # closed: the step ends as closed
            return None
        deadline = time.monotonic() + 2
        while True:
            try:
                info = self._client.api.exec_inspect(exec_id)
            except docker.errors.NotFound:  # the container went with it: restarting says so
                return None
            if not info.get("Running") or time.monotonic() > deadline:
                code = info.get("ExitCode")
                return int(code) if code is not None else None
            time.sleep(0.02)

    # -- limits ------------------------------------------------------------------

    def _locate_cgroup(self, container: Any) -> None:
        """Host paths of the container's cgroup files (cgroup v1 or v2), and its upper dir."""
        cid = container.id
        candidates = {
            "pids": [
                f"/sys/fs/cgroup/pids/docker/{cid}/pids.current",
                f"/sys/fs/cgroup/docker/{cid}/pids.current",
                f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/pids.current",
            ],
            "oom": [
                f"/sys/fs/cgroup/memory/docker/{cid}/memory.oom_control",
                f"/sys/fs/cgroup/docker/{cid}/memory.events",
                f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.events",
            ],
        }
        self._cgroup = {}
        for key, paths in candidates.items():
            for path in paths:
                if os.path.exists(path):
                    self._cgroup[key] = Path(path)
                    break
        upper = (container.attrs.get("GraphDriver") or {}).get("Data", {}).get("UpperDir")
        self._upper = Path(upper) if upper and os.access(upper, os.R_OK | os.X_OK) else None

    def _pids(self) -> int:
        path = self._cgroup.get("pids")
        if path is None:
            return 0
        try:
            return int(path.read_text().strip())
        except (OSError, ValueError):
            return 0

    def _oom_kills(self) -> int:
        path = self._cgroup.get("oom")
        if path is None:
            return 0
        try:
            text = path.read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def _pid_hits(self) -> int:
        """Forks that failed at the container's PID limit so far (``pids.events``)."""
        path = self._cgroup.get("pids")
        return containment.pids_limit_hits(path.parent / "pids.events" if path else None)

    def _under_process_pressure(self, hits_before: int) -> bool:
        """True when what the step left is a fork bomb (see :func:`containment.fork_bomb`)."""
        return containment.fork_bomb(
            self._pid_hits,
            self._pids,
            hits_before,
            max(self._pid_baseline, self._pids_before),
            int(self.config.max_processes * 0.5),
        )

    def _tmpfs_full(self) -> str | None:
        """Which of the container's ``/tmp`` and ``/dev/shm`` tmpfs mounts is full now, if any.

        Read through the shell's ``/proc/PID/root`` (its mount namespace): a write
        that filled one fails inside with ENOSPC and the command goes on, so the
        step is told here, as under bubblewrap.
        """
        if not self._shell_host_pid:
            return None
        sizes = {"/tmp": f"{self.config.tmp_size_mb} MB", "/dev/shm": "64 MB"}
        for mount, size in sizes.items():
            blocks, inodes = containment.filesystem_full(
                Path(f"/proc/{self._shell_host_pid}/root{mount}")
            )
            if inodes:
                return f"inode limit of {self.config.max_inodes} files reached ({mount})"
            if blocks:
                return f"disk quota of {size} exceeded ({mount})"
        return None

    def _limit_hit(self) -> str | None:
        """The disk quota or inode bound of the writable layer, when exceeded (polled)."""
        if self._upper is None:
            return None
        total, count = 0, 0
        for dirpath, dirs, files in os.walk(self._upper):
            count += len(dirs) + len(files)
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
        if count > self.config.max_inodes:
            return f"inode limit of {self.config.max_inodes} files reached"
        if total > self.config.max_disk_mb * 1024 * 1024:
            return f"disk quota of {self.config.max_disk_mb} MB exceeded"
        return None


def _lookup(container: Any, table: str, name: str) -> tuple[int, int]:
    """(id, group id) of user or group *name* (or a number) in the container's *table*."""
    if name.isdigit():
        return int(name), int(name)
    chunks, _ = container.get_archive(table)
    with tarfile.open(fileobj=io.BytesIO(b"".join(chunks))) as tar:
        member = tar.extractfile(tar.getmembers()[0])
        text = member.read().decode(errors="replace") if member is not None else ""
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[0] == name and fields[2].isdigit():
            gid = fields[3] if len(fields) > 3 and fields[3].isdigit() else fields[2]
            return int(fields[2]), int(gid)
    raise ImageUnsuitableError(f"the image's USER names {name!r}, which its {table} lacks")
