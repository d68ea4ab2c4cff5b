"""The persistent-shell protocol of the bubblewrap and Docker backends, over a small transport.

Both backends run one ``bash`` per trajectory (:data:`SHELL_ARGV`) and talk
to it the same way; only how bytes reach the shell differs, behind a
:class:`Transport`: write bytes to the shell's stdin, read what arrives on its
stdout and stderr until a deadline, kill it. :class:`ProcessTransport` is a
local process's pipes (bubblewrap), :class:`DockerExecTransport` the hijacked
socket of a ``docker exec -i`` (stdout and stderr multiplexed in frames).

The protocol (:class:`ShellSession`):

- The shell starts with its stderr moved to fd 3 (the *status channel*), its
  stdout saved on fd 4 (the *mark fd*) and fd 2 merged into stdout, so
  everything a command prints arrives on the transport's stdout and only the
  harness writes to its stderr.
- A command is one input line (:func:`wrap`): the command runs through
  ``eval`` with stdin from ``/dev/null`` and without fds 3 and 4 (it can
  neither swallow the next input line nor forge a status), then the shell
  writes the status record ``<nonce> <exit code> <background job pids>\\x1f<cwd>\\0``
  to fd 3 and the end marker ``\\0<nonce>\\0`` to fd 4. Output is never
  scraped for prompts.
- A command is done when its status record has arrived and the marker has
  been seen on stdout (the two streams may be reordered on the way, as dockerd
  copies them in separate goroutines); the marker is cut from the output.
  Bytes on the status channel besides the record mean the command wrote into
  it through ``/proc`` (:data:`TAMPERED`). The caller's deadline ends a
  command that runs too long, end of file one whose shell died, and a *watch*
  callback, called twice a second, one that ran into a limit.

Both backends turn what came back into the step's :class:`~fidelity.trajectory.Observation`
with the same functions: :func:`finished` (the status arrived), :func:`exited` (the shell
died), :func:`cut_short` (deadline or limit), :func:`typed` and :func:`typed_until_exit`
(keystrokes, read by :meth:`ShellSession.read_keys`); :func:`run_setup` runs an
environment's setup commands.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from fidelity.errors import SetupFailedError
from fidelity.trajectory import Observation

STATUS_FD = 3
MARK_FD = 4
SHELL_ARGV = [
    "/bin/bash",
    "--noprofile",
    "--norc",
    "-c",
    f"exec {STATUS_FD}>&2 {MARK_FD}>&1 2>&1; exec /bin/bash --noprofile --norc",
]
"""The shell every backend starts: fd 3 = the status channel (stderr), fd 4 = stdout."""

MOUNT = "/workspace"
HOME = "/home/agent"
CONTROL = "/run/fidelity"
# What every backend's shell sees (the conformance suite expects the same on all of them).
SANDBOX_ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    "HOME": HOME,
    "USER": "agent",
    "LOGNAME": "agent",
    "SHELL": "/bin/bash",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "TERM": "dumb",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GIT_CONFIG_NOSYSTEM": "1",
}
SANDBOX_UMASK = 0o022
"""The umask a shell starts with on every backend (Docker's default): never the auditor's."""
GITCONFIG = """[user]
\tname = agent
\temail = agent@sandbox.invalid
[init]
\tdefaultBranch = main
[advice]
\tdetachedHead = false
[core]
\tpager = cat
[color]
\tui = false
"""
"""The agent's ``~/.gitconfig`` in every shell sandbox."""

TAMPERED = (
    "SandboxTampered: the command wrote into the harness's status channel "
    f"(the shell's fd {STATUS_FD} through /proc); its own status was still read"
)
WATCH_EVERY = 0.5  # seconds between calls of a step's watch callback
_READ_SLICE = 0.25  # longest single wait for bytes, so deadlines and watches are kept


# -- transports --------------------------------------------------------------------


class Received(NamedTuple):
    """What one :meth:`Transport.read` brought: stdout bytes, status bytes, end of file."""

    output: bytes
    status: bytes
    eof: bool


class Transport(Protocol):
    """How bytes reach one shell and come back from it."""

    def write(self, data: bytes) -> None:
        """Send *data* to the shell's stdin; a gone shell is seen by :meth:`read`, not here."""

    def read(self, deadline: float) -> Received:
        """Bytes that arrived by *deadline* (``time.monotonic``); returns once any did."""

    def kill(self) -> None:
        """Stop the shell's end of the connection for good (idempotent, any thread)."""


class ProcessTransport:
    """A local process's stdin, stdout and stderr pipes (the process leads its own group).

    End of file is the stderr pipe's (the status channel closes when the shell
    and the processes around it are gone); stdout is drained then.
    """

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self.proc = proc
        self._stdout = proc.stdout.fileno()
        self._stderr = proc.stderr.fileno()
        os.set_blocking(self._stdout, False)
        os.set_blocking(self._stderr, False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._stdout, selectors.EVENT_READ, "out")
        self._selector.register(self._stderr, selectors.EVENT_READ, "status")
        self._killed = False

    def write(self, data: bytes) -> None:
        """Write to the shell's stdin (a gone shell: the next read sees end of file)."""
        stdin = self.proc.stdin
        assert stdin is not None
        with contextlib.suppress(BrokenPipeError, ValueError, OSError):
            stdin.write(data)
            stdin.flush()

    def read(self, deadline: float) -> Received:
        """Read both pipes until something arrives or *deadline* passes."""
        output, status = bytearray(), bytearray()
        while not self._killed:
            try:
                ready = self._selector.select(max(deadline - time.monotonic(), 0))
            except (ValueError, OSError):  # killed from another thread
                break
            for key, _ in ready:
                if key.data == "out":
                    if not _read_available(self._stdout, output):
                        with contextlib.suppress(KeyError, ValueError):
                            self._selector.unregister(self._stdout)
                elif not _read_available(self._stderr, status):
                    _read_available(self._stdout, output)
                    return Received(bytes(output), bytes(status), True)
            if output or status or time.monotonic() >= deadline:
                return Received(bytes(output), bytes(status), False)
        return Received(bytes(output), bytes(status), True)

    def kill(self) -> None:
        """Kill the process group, reap the process, close the pipes."""
        self._killed = True
        proc = self.proc
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.kill()
        proc.wait()
        with contextlib.suppress(OSError, ValueError):
            self._selector.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


class DockerExecTransport:
    """The hijacked socket of one ``docker exec -i`` (no tty): stdin out, framed stdout/stderr in.

    dockerd frames each stream's bytes with an 8-byte header (stream number,
    length); a partial frame waits in a buffer for the rest.
    """

    def __init__(self, api: Any, exec_id: str) -> None:
        self.exec_id = exec_id
        self._response = api.exec_start(exec_id, socket=True)
        self.sock: socket.socket = getattr(self._response, "_sock", self._response)
        self.sock.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.sock, selectors.EVENT_READ)
        self._buffer = b""
        self._eof = False

    def write(self, data: bytes) -> None:
        """Write to the exec's stdin (a gone shell: the next read sees end of file)."""
        with contextlib.suppress(OSError):
            self.sock.setblocking(True)
            try:
                self.sock.sendall(data)
            finally:
                self.sock.setblocking(False)

    def read(self, deadline: float) -> Received:
        """Read and demultiplex what arrives until something does or *deadline* passes."""
        if self._eof:
            return Received(b"", b"", True)
        try:
            ready = self._selector.select(max(deadline - time.monotonic(), 0))
        except (ValueError, OSError):  # closed by kill() from another thread
            self._eof = True
            return Received(b"", b"", True)
        if ready:
            self._receive()
        output, status = self._demux()
        return Received(output, status, self._eof)

    def _receive(self) -> None:
        chunks = [self._buffer]
        while True:
            try:
                chunk = self.sock.recv(65536)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                self._eof = True
                break
            chunks.append(chunk)
        self._buffer = b"".join(chunks)

    def _demux(self) -> tuple[bytes, bytes]:
        output, status = bytearray(), bytearray()
        buffer, start = self._buffer, 0
        while len(buffer) - start >= 8:
            stream, size = buffer[start], struct.unpack(">I", buffer[start + 4 : start + 8])[0]
            if len(buffer) - start < 8 + size:
                break
            payload = buffer[start + 8 : start + 8 + size]
            (status if stream == 2 else output).extend(payload)
            start += 8 + size
        self._buffer = buffer[start:]
        return bytes(output), bytes(status)

    def kill(self) -> None:
        """Close the socket (the backend kills the processes it leaves)."""
        self._eof = True
        with contextlib.suppress(OSError, ValueError):
            self._selector.close()
        with contextlib.suppress(OSError):
            self.sock.close()
        with contextlib.suppress(OSError, AttributeError):
            self._response.close()


def _read_available(fd: int, into: bytearray) -> bool:
    """Append what *fd* has now; False at end of file."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        except OSError:
            return False
        if not chunk:
            return False
        into += chunk


# -- the protocol ---------------------------------------------------------------------


class Output:
    """Captured bytes with a cap; the rest is counted (:attr:`received`), not kept."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.truncated = False
        self.received = 0

    def add(self, chunk: bytes) -> None:
        """Keep *chunk*, or what fits of it."""
        self.received += len(chunk)
        room = self.limit - len(self.data)
        if len(chunk) > room:
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        self.data += chunk

    def text(self) -> str:
        """The kept bytes as text (invalid UTF-8 replaced)."""
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Status:
    """A command's status record: exit code, cwd after it, whether it left background jobs."""

    exit_code: int
    cwd: str
    jobs: bool


@dataclass
class Step:
    """One command sent to the shell, and what came back so far."""

    line: bytes
    nonce: str
    output: Output
    status_bytes: bytes = b""
    status: Status | None = None
    why: str = "running"  # done | timeout | exited | the message of a watch's limit
    tampered: bool = False

    @property
    def done(self) -> Status | None:
        """The status of a command that finished (None if it timed out, died or hit a limit)."""
        return self.status if self.why == "done" else None


Watch = Callable[[Step], str | None]
"""Called about twice a second while a step runs: a limit's message ends the step."""


class ShellSession:
    """One persistent shell spoken to through a :class:`Transport` (see module docstring)."""

    def __init__(self, transport: Transport, max_output_bytes: int) -> None:
        self.transport = transport
        self.max_output_bytes = max_output_bytes
        self._marker: bytes | None = None  # end of the running command's stdout, still to come
        self._held = b""  # stdout that may be the start of the marker
        self._status = b""  # status bytes read but not yet claimed by a step
        self._eof = False

    def run(self, command: str, timeout: float, watch: Watch | None = None) -> Step:
        """Send *command* and read until its status and marker arrive, or it ends otherwise."""
        nonce = secrets.token_hex(8)
        step = Step(wrap(command, nonce).encode(), nonce, Output(self.max_output_bytes))
        self._marker, self._held = marker(nonce), b""
        self.transport.write(step.line)
        deadline = time.monotonic() + timeout
        next_watch = time.monotonic() + WATCH_EVERY
        while True:
            now = time.monotonic()
            if now >= deadline:
                return self._end(step, "timeout")
            alive = self._receive(step.output, min(deadline, now + _READ_SLICE))
            if self._status:
                step.status_bytes += self._status
                self._status = b""
                step.status = parse_status(step.status_bytes, nonce)
            if step.status is not None and self._marker is None:
                step.tampered = status_junk(step.status_bytes, nonce)
                step.why = "done"
                return step
            if not alive:
                return self._end(step, "exited")
            if watch is not None and time.monotonic() >= next_watch:
                next_watch = time.monotonic() + WATCH_EVERY
                hit = watch(step)
                if hit:
                    return self._end(step, hit)

    def send(self, data: bytes) -> None:
        """Write raw bytes (keystrokes) to the shell's stdin."""
        self.transport.write(data)

    def resend(self, step: Step) -> None:
        """A process ate *step*'s line from the shell's stdin: send it again.

        What that process echoed of the harness's line is removed from the output.
        """
        step.output.add(self._held)
        self._held = b""
        step.output.data = bytearray(bytes(step.output.data).replace(step.line, b""))
        self._marker = marker(step.nonce)
        self.transport.write(b"\n" + step.line)

    def pump(self, output: Output, deadline: float, quiet: float | None) -> bool:
        """Read until *deadline*, or no output for *quiet* s; False if the shell ended."""
        last = time.monotonic()
        while (now := time.monotonic()) < deadline:
            if quiet is not None and now - last >= quiet:
                return True
            until = deadline if quiet is None else min(deadline, last + quiet)
            before = output.received
            if not self._receive(output, until):
                return False
            if output.received != before:
                last = time.monotonic()
        return True

    def read_keys(
        self, limit: int, duration: float, timeout: float, quiet: float
    ) -> tuple[Output, bool]:
        """What keystrokes just sent print (at most *limit* bytes kept): everything for
        *duration* s, then until *quiet* s pass without output or *timeout* s have passed;
        with False if the shell ended."""
        output = Output(limit)
        alive = self.pump(output, time.monotonic() + duration, quiet=None) and self.pump(
            output, time.monotonic() + timeout, quiet=quiet
        )
        return output, alive

    def kill(self) -> None:
        """Stop the shell (see :meth:`Transport.kill`)."""
        self.transport.kill()

    close = kill

    def _receive(self, output: Output, deadline: float) -> bool:
        """One transport read into *output* and the status buffer; False at end of file."""
        if self._eof:
            return False
        received = self.transport.read(deadline)
        if received.output:
            self._stdout(received.output, output)
        self._status += received.status
        self._eof = received.eof
        return not received.eof

    def _stdout(self, payload: bytes, output: Output) -> None:
        """Pass stdout on, holding back what may be the start of the end marker."""
        if self._marker is None:
            output.add(payload)
            return
        data = self._held + payload
        index = data.find(self._marker)
        if index >= 0:
            output.add(data[:index])
            output.add(data[index + len(self._marker) :])
            self._marker, self._held = None, b""
            return
        keep = len(self._marker) - 1
        output.add(data[:-keep])
        self._held = data[-keep:]

    def _end(self, step: Step, why: str) -> Step:
        """The command will not finish: what was held back is output after all."""
        step.output.add(self._held)
        self._held, self._marker = b"", None
        step.why = why
        return step


def wrap(command: str, nonce: str) -> str:
    """One input line: run *command* in this shell, then report on fds 3 and 4.

    The command runs with stdin from /dev/null and without the two fds, so it
    can neither swallow the next input line nor forge a status record; the
    group's redirections are undone afterwards even if it ran ``exec``.
    """
    return (
        f"__fidelity_cmd={ansi_c_quote(command)}; "
        f'{{ eval "$__fidelity_cmd"; }} </dev/null {STATUS_FD}>&- {MARK_FD}>&-; '
        f"printf '%s %s ' {nonce} \"$?\" >&{STATUS_FD}; jobs -p >&{STATUS_FD}; "
        f"printf '\\037%s\\0' \"$PWD\" >&{STATUS_FD}; printf '\\0%s\\0' {nonce} >&{MARK_FD}\n"
    )


def marker(nonce: str) -> bytes:
    """The bytes that end a command's stdout."""
    return b"\0" + nonce.encode() + b"\0"


def parse_status(buffer: bytes, nonce: str) -> Status | None:
    """The status record for *nonce* in *buffer*, once it is complete.

    Format: ``<nonce> <exit code> <background job pids>\\x1f<cwd>\\0``; bytes a
    command wrote into the channel may come before it.
    """
    for record in buffer.split(b"\0")[:-1]:
        text = record.decode("utf-8", errors="replace")
        start = text.find(f"{nonce} ")
        if start < 0:
            continue
        head, separator, cwd = text[start:].partition("\x1f")
        parts = head.split(" ", 2)
        if not separator or len(parts) < 2 or not parts[1].lstrip("-").isdigit():
            continue
        jobs = bool(parts[2].strip()) if len(parts) == 3 else False
        return Status(int(parts[1]), cwd, jobs)
    return None


def status_junk(buffer: bytes, nonce: str) -> bool:
    """Whether *buffer* holds bytes besides the status record for *nonce* (written by the agent)."""
    mark = nonce.encode() + b" "
    start = buffer.find(mark)
    if start < 0:
        return bool(buffer)
    end = buffer.find(b"\0", start)
    return start > 0 or bool(buffer[end + 1 :].strip(b"\0"))


def ansi_c_quote(text: str) -> str:
    """Quote *text* as a bash ``$'...'`` string on one line."""
    out = []
    for char in text:
        if char == "\\":
            out.append("\\\\")
        elif char == "'":
            out.append("\\'")
        elif char == "\n":
            out.append("\\n")
        elif ord(char) < 32 or ord(char) == 127:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "$'" + "".join(out) + "'"


def quote(text: str) -> str:
    """Quote *text* as one single-quoted shell word."""
    return "'" + text.replace("'", "'\\''") + "'"


# -- steps as observations ----------------------------------------------------------------


def finished(output: Output, status: Status, error: str | None) -> Observation:
    """A command whose status record arrived: its output, exit code and cwd (*error*: a
    limit it hit or a harness finding, such as :data:`TAMPERED`)."""
    return Observation(
        text=output.text(),
        exit_code=status.exit_code,
        cwd=status.cwd,
        truncated=output.truncated,
        error=error,
    )


def exited(output: Output, code: int | None, cwd: str, error: str | None) -> Observation:
    """A command whose shell ended before its status came (``exit``, a kill): the shell's
    exit code *code*, the last known *cwd*."""
    return Observation(
        text=output.text(),
        exit_code=code,
        cwd=cwd,
        truncated=output.truncated,
        error=error,
    )


def cut_short(output: Output, cwd: str, why: str) -> Observation:
    """A command ended by the harness: at its deadline (*why* ``timeout``) or at a limit
    (*why* its message, reported as ``SandboxLimit``)."""
    return Observation(
        text=output.text(),
        exit_code=None,
        cwd=cwd,
        timed_out=why == "timeout",
        truncated=output.truncated,
        error=None if why == "timeout" else f"SandboxLimit: {why}",
    )


def typed(output: Output) -> Observation:
    """What keystrokes printed while the shell read on."""
    return Observation(text=output.text(), truncated=output.truncated)


def typed_until_exit(output: Output, code: int | None) -> Observation:
    """What keystrokes printed before the shell ended, and its exit code *code*."""
    return Observation(text=output.text(), exit_code=code, truncated=output.truncated)


def run_setup(
    run: Callable[[str, float], Observation], index: int, command: str, timeout: float
) -> None:
    """Run the environment's setup command number *index* through *run* (the backend's
    command runner): an ``@file`` command runs the script copied under :data:`CONTROL`.
    :class:`~fidelity.errors.SetupFailedError` unless it exits 0."""
    line = f"bash {CONTROL}/setup-{index}.sh" if command.startswith("@") else command
    observation = run(line, timeout)
    if observation.exit_code != 0:  # no output in the error: it may echo a file's contents
        raise SetupFailedError(index, command, observation.exit_code)
