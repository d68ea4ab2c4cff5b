"""The desktop backend (os domain): a real headless desktop per trajectory, OSWorld's format.

``reset`` starts a session leader (:mod:`fidelity.sandboxes.desktop_session`)
on Debian's ``/usr/bin/python3``, because the AT-SPI bindings exist only for
the system interpreter. The leader owns Xvfb, a D-Bus session, the AT-SPI bus,
openbox and the project's GTK3 applications (``suites/os/<project>/``:
``desktop.json`` lists them in the order they start, ``home/`` seeds a fresh
home folder), with the clock zone and locale fixed. It dumps OSWorld's
accessibility tree on request and kills everything when its stdin closes, so
the desktop dies with the audit even when the audit is SIGKILLed.

``step`` runs an OSWorld action: ``WAIT`` (sleep), ``DONE``/``FAIL`` (no-op),
or pyautogui code in the desktop's *action runner* (:data:`_ACTION_SERVER`):
one Python process per desktop, started at ``reset`` under bubblewrap so that
it sees only this desktop's X socket and home (no network, no other display,
``FAILSAFE`` off as OSWorld sets it). It imports pyautogui once and runs one
action per JSON line on stdin, each in fresh globals with pyautogui's
settings, the environment and the working folder put back as they were, and
answers the action's exit status on stdout once the X server has handled its
events (XSync); what the action writes on stderr comes through its stderr pipe
(the last line is the error). pyautogui's ``PAUSE`` (0.1 s) still separates
an action's calls, but is slept before the next call rather than after each
one, so the last call's pause does not delay the observation. A runner that
dies (a crash, ``os._exit``, a timeout: its sandbox is killed) is started
again for the next action; it dies with the desktop (``close``, the token
sweep, ``--die-with-parent`` when the audit is SIGKILLed). Then the tree is
read every ``settle_interval`` until two reads are equal (bounded), and when
they still equal the tree before the action, until it stayed so for
``settle_quiet`` (the applications may not have handled the events yet).
The observation's text is OSWorld's linearised table, its state the XML tree
(``tree``), the action's error and an optional screenshot path.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fidelity.defaults import STEP_TIMEOUT
from fidelity.errors import SandboxError, SandboxUnavailableError, UsageError
from fidelity.resources import suite_project
from fidelity.sandboxes.base import Sandbox, dead_owner, owned_folder, stale_folders, track, untrack
from fidelity.sandboxes.config import SandboxConfigBase
from fidelity.sandboxes.desktop_tree import linearize, parse_xml
from fidelity.trajectory import Action, CodeAction, EnvSpec, Observation

logger = logging.getLogger(__name__)

_ROOT_PREFIX = "fidelity-desktop-"
_OWNER_FLAG = "--fidelity-owner"
_TOKEN_FLAG = "--fidelity-desktop"
TOKEN_VAR = "FIDELITY_DESKTOP_TOKEN"
_LEADER = Path(__file__).with_name("desktop_session.py")
_ACTION_SERVER = r"""
import contextlib, json, os, sys, time, traceback

requests = os.fdopen(os.dup(0), "r", encoding="utf-8")
answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)  # an action can neither eat the next request nor forge an answer
os.dup2(null, 1)
os.close(null)
import pyautogui

pyautogui.FAILSAFE = False
owed = [0.0]  # when the PAUSE after the last pyautogui call ends


def pause_later(pause):
    # pyautogui sleeps PAUSE after every call; here the next call sleeps what is left of it
    # instead, so calls keep their spacing but the last one's pause does not delay the tree
    if pause:
        owed[0] = time.monotonic() + pyautogui.PAUSE


def pause_then_check(check=pyautogui.failSafeCheck):
    left = owed[0] - time.monotonic()
    if left > 0:
        time.sleep(left)
    check()


def sync(exit_code):
    # XSync: the X server has handled every event the action sent before the tree is read
    # (pyautogui syncs after each event; this covers an action's own use of the connection)
    display = getattr(getattr(pyautogui, "platformModule", None), "_display", None)
    try:
        display.sync()
    except Exception as exc:  # the action broke the connection: it failed, the runner is done
        if exit_code == 0:
            with contextlib.suppress(OSError, ValueError):  # the action closed stderr
                print(f"XSync after the action failed: {exc!r}", file=sys.stderr, flush=True)
        os._exit(exit_code or 1)


pyautogui._handlePause, pyautogui.failSafeCheck = pause_later, pause_then_check
settings = {k: v for k, v in vars(pyautogui).items() if k.isupper()}
settings.update(_handlePause=pause_later, failSafeCheck=pause_then_check)
environ, home = dict(os.environ), os.getcwd()


def status(exc):
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


for line in requests:
    code = json.loads(line)["code"]
    fresh = {k: v.copy() if isinstance(v, (list, dict, set)) else v for k, v in settings.items()}
    vars(pyautogui).update(fresh)
    os.environ.clear()
    os.environ.update(environ)
    os.chdir(home)
    owed[0] = 0.0
    try:
        exec(compile(code, "<action>", "exec"), {"pyautogui": pyautogui, "time": time})
        exit_code = 0
    except SystemExit as exc:
        exit_code = status(exc)
    except BaseException:
        traceback.print_exc()
        exit_code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # the action closed it
            stream.flush()
    sync(exit_code)
    answers.write(json.dumps({"exit": exit_code}) + "\n")
    answers.flush()
"""
REQUIRED_BINARIES = ("Xvfb", "openbox", "dbus-daemon", "xprop", "bwrap")
SHOWN_HOME = "/home/user"
"""The home folder as observations show it (the live one is a fresh temporary folder)."""


def _interpreter_binds() -> list[str]:
    """``--ro-bind`` arguments for this Python's folders that the action's fresh /tmp would hide.

    Actions run ``sys.executable`` with pyautogui from its environment; a checkout
    (and so its virtual environment) may well lie under /tmp.
    """
    folders = {sys.prefix, sys.base_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    binds: list[str] = []
    for folder in sorted(folders):
        if Path(folder).resolve().is_relative_to("/tmp"):
            binds += ["--ro-bind", folder, folder]
    return binds


class DesktopApp(BaseModel):
    """One application of a desktop project, started in list order."""

    model_config = ConfigDict(extra="forbid")

    argv: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)


class DesktopProject(BaseModel):
    """``suites/os/<project>/desktop.json``: what runs on the desktop."""

    model_config = ConfigDict(extra="forbid")

    description: str = ""
    apps: list[DesktopApp] = Field(default_factory=list)


class DesktopConfig(SandboxConfigBase):
    """Settings of the desktop backend."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["desktop"] = "desktop"
    python: str = Field(default="/usr/bin/python3", description="interpreter with pyatspi")
    width: int = Field(default=1920, ge=320)
    height: int = Field(default=1080, ge=240)
    timezone: str = "UTC"
    locale: str = "C.UTF-8"
    fake_time: str | None = Field(
        default="2024-06-01 12:00:00",
        description="the applications' clock starts here (libfaketime); None: the real clock",
    )
    run_as: str | None = Field(
        default="nobody", description="when the audit runs as root, the desktop runs as this user"
    )
    step_timeout: float = Field(default=STEP_TIMEOUT, gt=0, description="seconds per action run")
    start_timeout: float = Field(default=180.0, gt=0, description="seconds to start a desktop")
    dump_timeout: float = Field(default=60.0, gt=0, description="seconds per tree dump")
    settle_interval: float = Field(default=0.05, ge=0, description="seconds between tree reads")
    settle_quiet: float = Field(
        default=0.5,
        ge=0,
        description="a tree still the one before the action is settled only after this long",
    )
    settle_timeout: float = Field(default=10.0, ge=0, description="settle gives up after this")
    wait_seconds: float = Field(default=2.0, ge=0, description="what WAIT sleeps (OSWorld: 2)")
    screenshot_dir: str | None = Field(default=None, description="save a PNG per observation")
    temp_root: str | None = None


class StepTiming(BaseModel):
    """Seconds spent by the last step: running the action, settling, the final dump."""

    model_config = ConfigDict(extra="forbid")

    action: float = 0.0
    settle: float = 0.0
    dump: float = 0.0
    reads: int = 0


def project_dir(project: str) -> Path:
    """The folder of desktop project *project*; UsageError for an unknown name."""
    return suite_project("os", project, "desktop.json", "desktop")


def load_project(folder: Path) -> DesktopProject:
    """The :class:`DesktopProject` of *folder*; UsageError naming the file when invalid."""
    path = folder / "desktop.json"
    try:
        return DesktopProject.model_validate_json(path.read_text())
    except (OSError, ValidationError) as exc:
        first = str(exc).strip().splitlines()
        raise UsageError(f"{path}: {' '.join(first[:3])}") from None


class _Leader:
    """The session leader process and its JSON-lines channel."""

    def __init__(self, argv: list[str], spec: dict[str, Any]) -> None:
        told = logger.isEnabledFor(logging.DEBUG)  # its diagnostics: to the log, or dropped
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if told else subprocess.DEVNULL,
            start_new_session=True,  # the terminal's Ctrl-C reaches the audit, which closes us
        )
        if told:
            threading.Thread(
                target=_forward, args=(self.proc,), name="desktop-session-log", daemon=True
            ).start()
        self._buffer = b""
        self.send(spec)

    def send(self, message: dict[str, Any]) -> None:
        """Write one request line."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps(message).encode() + b"\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            raise SandboxError("the desktop session is gone") from None

    def receive(self, timeout: float) -> dict[str, Any]:
        """The next answer line within *timeout* seconds."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            try:
                ready = left > 0 and select.select([fd], [], [], left)[0]
                chunk = os.read(fd, 1 << 20) if ready else None
            except (OSError, ValueError):
                chunk = b""
            if chunk is None:
                raise SandboxError(f"the desktop session did not answer in {timeout:.0f} s")
            if not chunk:
                raise SandboxError("the desktop session ended")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        answer: dict[str, Any] = json.loads(line)
        return answer

    def ask(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send *request* and return its answer; SandboxError when it failed."""
        self.send(request)
        answer = self.receive(timeout)
        if not answer.get("ok"):
            raise SandboxError(f"desktop session: {answer.get('error', 'failed')}")
        return answer

    def stop(self, timeout: float = 10.0) -> None:
        """Close stdin (the leader cleans up and exits); kill it when it does not."""
        with contextlib.suppress(OSError, ValueError):
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def _forward(proc: subprocess.Popen[bytes]) -> None:
    """The session leader's stderr, line by line, to the log (until it closes)."""
    assert proc.stderr is not None
    with proc.stderr:
        for line in proc.stderr:
            logger.debug("leader %d: %s", proc.pid, line.decode(errors="replace").rstrip())


class _ActionRunner:
    """One desktop's action runner (:data:`_ACTION_SERVER` under bubblewrap) and its pipes.

    Started once per desktop; a runner that died or ran past an action's
    timeout is killed and replaced by the caller. The stderr pipe is drained
    while an action runs, so a chatty action cannot block on a full pipe.
    """

    _TAIL = 1 << 16  # stderr bytes kept per action (the last line is the error)

    def __init__(self, argv: list[str]) -> None:
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._out = self.proc.stdout.fileno()
        self._err = self.proc.stderr.fileno()
        os.set_blocking(self._out, False)
        os.set_blocking(self._err, False)
        self._buffer = b""

    def alive(self) -> bool:
        """Whether the runner still runs."""
        return self.proc.poll() is None

    def run(self, code: str, timeout: float) -> tuple[int, str | None, bool]:
        """Run *code*; ``(exit code, last stderr line when it failed, timed out)``."""
        errors = bytearray()
        self._read(self._err, errors)  # what earlier actions' threads left: not this action's
        errors.clear()
        stdin = self.proc.stdin
        assert stdin is not None
        with contextlib.suppress(OSError, ValueError):  # a dead runner: the read sees the end
            stdin.write(json.dumps({"code": code}).encode() + b"\n")
            stdin.flush()
        line = self._answer(time.monotonic() + timeout, errors)
        if line is None:
            self.kill()
            return -9, f"the action ran past {timeout:g} s", True
        try:
            exit_code = int(json.loads(line)["exit"]) if line else self._ended(errors)
        except (ValueError, KeyError, TypeError):  # the action wrote into the channel
            self.kill()
            return 1, "the action wrote into the action runner's answer channel", False
        lines = errors.decode(errors="replace").strip().splitlines()
        return exit_code, (lines[-1] if exit_code and lines else None), False

    def _answer(self, deadline: float, errors: bytearray) -> bytes | None:
        """The answer line; b"" when the runner ended, None at *deadline*."""
        watched = [self._out, self._err]
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            try:
                ready = select.select(watched, [], [], max(left, 0))[0]
            except (OSError, ValueError):  # closed by close() from another thread
                return b""
            if not ready and left <= 0:
                return None
            if self._err in ready and not self._read(self._err, errors):
                watched.remove(self._err)  # the action closed its stderr: only stdout ends a run
            if self._out in ready:
                chunk = bytearray()
                ended = not self._read(self._out, chunk)
                self._buffer += chunk
                if ended and b"\n" not in self._buffer:
                    return b""
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _ended(self, errors: bytearray) -> int:
        """The exit status of a runner whose answer channel closed, its last stderr gathered."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)  # exiting on its own: keep its status; else it is killed
        self.signal()
        self.proc.wait()
        self._read(self._err, errors)
        return self.kill()

    def _read(self, fd: int, into: bytearray) -> bool:
        """Append what *fd* has now (keeping the last :attr:`_TAIL` bytes); False at its end."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return True
            except (OSError, ValueError):
                return False
            if not chunk:
                return False
            into += chunk
            del into[: -self._TAIL]

    def signal(self) -> None:
        """SIGKILL the runner's sandbox (from any thread); :meth:`kill` reaps it."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    def kill(self) -> int:
        """Kill, reap and close the runner; its exit status."""
        self.signal()
        code = self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        return code


class DesktopSandbox(Sandbox):
    """A headless desktop driven by pyautogui, observed through AT-SPI (see module docstring)."""

    name = "desktop"

    def __init__(self, config: DesktopConfig | None = None) -> None:
        self.config = config or DesktopConfig()
        self.token = secrets.token_hex(8)
        self._lock = threading.RLock()
        self._leader: _Leader | None = None
        self._root: Path | None = None
        self._display = ""
        self._closed = threading.Event()
        self._runner: _ActionRunner | None = None
        self._shots = 0
        self._shown: str | None = None  # the last observation's tree, as the session sent it
        self.last_timing = StepTiming()

    # -- Sandbox -------------------------------------------------------------

    def reset(self, env: EnvSpec) -> Observation:
        """Start a fresh desktop for *env* (its project's apps, a fresh home) and observe it."""
        self._check_available()
        project = load_project(project_dir(env.project)) if env.project else DesktopProject()
        home_seed = project_dir(env.project) / "home" if env.project else None
        with self._lock:
            self._stop()
            self._closed.clear()
            track(self)
            self._start(project, home_seed, env)
        for index, code in enumerate(env.setup):
            observation = self.step(CodeAction(code=code))
            if observation.exit_code not in (0, None):
                error = (observation.state or {}).get("last_action_error")
                raise SandboxError(f"env.setup[{index}] failed: {error}")
        return self._observe(None, None)

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        """Run one OSWorld action, settle, and return the tree."""
        if self._leader is None or self._closed.is_set():
            raise SandboxError("step() before reset() or after close(): no desktop is running")
        if not isinstance(action, CodeAction):
            raise SandboxError(f"the desktop sandbox cannot run {type(action).__name__}")
        started = time.monotonic()
        code = action.code.strip()
        exit_code: int | None = None
        error: str | None = None
        timed_out = False
        if code == "WAIT":
            time.sleep(self.config.wait_seconds)
        elif code not in ("DONE", "FAIL"):
            budget = timeout if timeout is not None else self.config.step_timeout
            exit_code, error, timed_out = self._run_code(action.code, budget)
        acted = time.monotonic() - started
        before = self._shown if exit_code is not None else None
        observation = self._observe(exit_code, error, timed_out=timed_out, before=before)
        self.last_timing = self.last_timing.model_copy(update={"action": acted})
        return observation

    def close(self) -> None:
        """Stop the desktop and everything it started; delete its folder. Idempotent."""
        self._closed.set()
        runner = self._runner
        if runner is not None:
            runner.signal()  # ends an action in flight; _stop reaps it
        leader = self._leader
        if leader is not None and leader.proc.poll() is None:
            leader.proc.terminate()  # ends a dump in flight: the leader cleans up and exits
        with self._lock:
            self._stop()
        untrack(self)

    # -- starting and stopping -----------------------------------------------

    def _check_available(self) -> None:
        missing = [
            name for name in (self.config.python, *REQUIRED_BINARIES) if not shutil.which(name)
        ]
        if missing:
            raise SandboxUnavailableError(
                f"the desktop backend needs {', '.join(missing)}: scripts/bootstrap.sh installs "
                "them (Debian: xvfb openbox dbus x11-utils at-spi2-core python3-pyatspi bubblewrap)"
            )
        if importlib.util.find_spec("pyautogui") is None:
            raise SandboxUnavailableError("pyautogui is missing: pip install 'fidelity[desktop]'")

    def _start(self, project: DesktopProject, home_seed: Path | None, env: EnvSpec) -> None:
        root = owned_folder(_ROOT_PREFIX, self.config.temp_root)
        self._root = root
        home = root / "home"
        if home_seed is not None and home_seed.is_dir():
            shutil.copytree(home_seed, home, symlinks=True)
        else:
            home.mkdir()
        if env.workdir:
            shutil.copytree(Path(env.workdir), home, dirs_exist_ok=True, symlinks=True)
        config = self.config
        if config.fake_time:  # seeded files carry the fake clock's time, not the copy's
            stamp = datetime.fromisoformat(config.fake_time).replace(tzinfo=UTC).timestamp()
            for path in [home, *home.rglob("*")]:
                os.utime(path, (stamp, stamp), follow_symlinks=False)
        spec = {
            "root": str(root),
            "token": self.token,
            "timezone": config.timezone,
            "locale": config.locale,
            "width": config.width,
            "height": config.height,
            "fake_time": config.fake_time,
            "run_as": config.run_as,
            "env": dict(env.env),
            "apps": [app.model_dump() for app in project.apps],
        }
        argv = [
            config.python,
            str(_LEADER),
            f"{_OWNER_FLAG}={os.getpid()}",
            f"{_TOKEN_FLAG}={self.token}",
        ]
        self._leader = _Leader(argv, spec)
        try:
            answer = self._leader.receive(config.start_timeout)
        except BaseException:  # a hung start, Ctrl-C: nothing may stay behind
            self._stop()
            raise
        if not answer.get("ready"):
            log = str(answer.get("log", "")).strip().splitlines()[-3:]
            logger.debug("sandbox %s: the desktop did not start: %s", self.label, answer)
            self._stop()
            raise SandboxError(
                f"the desktop did not start: {answer.get('error')} {' | '.join(log)}"
            )
        self._display = str(answer["display"])
        logger.debug("sandbox %s: desktop on display %s in %s", self.label, self._display, root)
        self._runner = _ActionRunner(self.action_argv(["-c", _ACTION_SERVER]))

    def _stop(self) -> None:
        self._shown = None
        runner, self._runner = self._runner, None
        if runner is not None:
            runner.kill()
        leader, self._leader = self._leader, None
        if leader is not None:
            leader.stop()
        kill_token(self.token)
        root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)

    # -- acting and observing --------------------------------------------------

    def _run_code(self, code: str, timeout: float) -> tuple[int, str | None, bool]:
        """Run pyautogui *code* in the action runner; ``(exit code, last error line, timed out)``."""
        with self._lock:
            if self._root is None or self._closed.is_set():
                raise SandboxError("the desktop sandbox was closed")
            runner = self._runner
            if runner is None or not runner.alive():  # it died (or timed out): a fresh one
                if runner is not None:
                    logger.debug("sandbox %s: the action runner died; a fresh one", self.label)
                    runner.kill()
                runner = self._runner = _ActionRunner(self.action_argv(["-c", _ACTION_SERVER]))
        result = runner.run(code, timeout)
        if self._closed.is_set():
            raise SandboxError("the desktop sandbox was closed while a step ran")
        return result

    def action_argv(self, python_args: list[str]) -> list[str]:
        """bwrap confining a Python to this desktop's display and home, running *python_args*."""
        root = self._root
        if root is None:
            raise SandboxError("the desktop sandbox was closed")
        number = self._display.lstrip(":")
        socket = f"/tmp/.X11-unix/X{number}"
        home = str(root / "home")
        return [
            "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--tmpfs", "/tmp", *_interpreter_binds(), "--bind", socket, socket, "--bind", home, home,
            "--unshare-all", "--die-with-parent", "--new-session", "--clearenv",
            "--setenv", "DISPLAY", self._display, "--setenv", "HOME", home,
            "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "LANG", self.config.locale,
            "--setenv", TOKEN_VAR, self.token, "--chdir", home,
            sys.executable, *python_args,
        ]  # fmt: skip

    def _dump(self) -> str:
        with self._lock:
            leader = self._leader
            if leader is None or self._closed.is_set():
                raise SandboxError("the desktop sandbox was closed")
            return str(leader.ask({"op": "tree"}, self.config.dump_timeout)["xml"])

    def _settled_tree(self, before: str | None = None) -> tuple[str, StepTiming]:
        """Read the tree until two reads are equal or ``settle_timeout`` passes.

        Two equal reads that are still *before* (the tree the action started on)
        may only mean the applications have not handled the events yet: that is
        settled once the tree stayed so for ``settle_quiet`` seconds.
        """
        config = self.config
        started = time.monotonic()
        deadline = started + config.settle_timeout
        last_started = time.monotonic()
        current = self._dump()
        reads = 1
        while time.monotonic() < deadline:
            time.sleep(config.settle_interval)
            last_started = time.monotonic()
            previous, current = current, self._dump()
            reads += 1
            if current == previous and (
                current != before or last_started - started >= config.settle_quiet
            ):
                break
        ended = time.monotonic()
        timing = StepTiming(settle=last_started - started, dump=ended - last_started, reads=reads)
        return current, timing

    def _observe(
        self,
        exit_code: int | None,
        error: str | None,
        *,
        timed_out: bool = False,
        before: str | None = None,
    ) -> Observation:
        xml, timing = self._settled_tree(before)
        self.last_timing = timing
        self._shown = xml
        if self._root is not None:
            xml = xml.replace(str(self._root / "home"), SHOWN_HOME)
        root = parse_xml(xml)
        if root is None:
            raise SandboxError("the desktop session returned a tree that is not XML")
        state: dict[str, Any] = {"tree": xml, "last_action_error": error}
        if self.config.screenshot_dir:
            state["screenshot"] = self._screenshot()
        return Observation(
            text=linearize(root) + "\n", exit_code=exit_code, timed_out=timed_out, state=state
        )

    def _screenshot(self) -> str:
        folder = Path(self.config.screenshot_dir or ".")
        folder.mkdir(parents=True, exist_ok=True)
        self._shots += 1
        path = folder / f"{self.token}-{self._shots:04d}.png"
        with self._lock:
            leader = self._leader
            if leader is None:
                raise SandboxError("the desktop sandbox was closed")
            leader.ask({"op": "screenshot", "path": str(path.resolve())}, 60)
        return str(path)


def build(config: DesktopConfig) -> DesktopSandbox:
    """A desktop sandbox for *config* (the typed registry's entry point)."""
    return DesktopSandbox(config)


def pids_with_token(token: str) -> list[int]:
    """Processes whose environment carries the desktop *token* (Xvfb, buses, apps, actions)."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def kill_token(token: str) -> int:
    """SIGKILL every process of the desktop *token*; returns how many."""
    killed = 0
    for pid in pids_with_token(token):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def sweep(temp_root: str | None = None, owner: int | None = None) -> int:
    """Kill desktops whose audit died and delete their folders; returns how many things went.

    With *owner*, only that (dead) process's, whatever ``kill -0`` says (its reaper
    runs while it may still be a zombie).
    """
    removed = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        started_by = next(
            (a.split("=", 1)[1] for a in cmdline if a.startswith(f"{_OWNER_FLAG}=")), ""
        )
        token = next((a.split("=", 1)[1] for a in cmdline if a.startswith(f"{_TOKEN_FLAG}=")), "")
        if started_by.isdigit() and token and dead_owner(int(started_by), owner):
            removed += kill_token(token)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
    for folder in stale_folders(_ROOT_PREFIX, temp_root, owner):
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    return removed
