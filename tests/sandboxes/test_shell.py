"""The persistent-shell protocol (fidelity.sandboxes.shell) on a real bash and a docker-framed socket.

The backends' own suites (test_local, test_docker, the conformance suite) run
it through bubblewrap and a real Docker daemon; here it runs on a plain local
``bash`` (no sandbox) and on a socket pair framed as dockerd frames an exec's
stream, to pin the framing, the status record and the marker handling.
"""

from __future__ import annotations

import ast
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fidelity.sandboxes import shell as protocol
from fidelity.sandboxes.shell import (
    SHELL_ARGV,
    DockerExecTransport,
    Output,
    ProcessTransport,
    ShellSession,
    marker,
    parse_status,
    status_junk,
    wrap,
)

ROOM = 30.0  # seconds for a command that finishes at once (never reached; no timing assumed)


@pytest.fixture
def session(tmp_path: Path) -> Iterator[ShellSession]:
    proc = subprocess.Popen(
        SHELL_ARGV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        process_group=0,
    )
    shell = ShellSession(ProcessTransport(proc), max_output_bytes=10_000)
    try:
        yield shell
    finally:
        shell.kill()


def test_a_command_reports_exit_code_cwd_and_all_its_output(
    session: ShellSession, tmp_path: Path
) -> None:
    step = session.run("mkdir -p d && cd d && echo out && echo err >&2 && (exit 7)", ROOM)
    assert step.why == "done" and step.done is not None
    assert (step.done.exit_code, step.done.cwd) == (7, str(tmp_path / "d"))
    assert step.output.text() == "out\nerr\n"  # stderr merged, marker cut
    assert not step.tampered
    again = session.run("pwd; printf 'no newline'", ROOM)
    assert again.output.text() == f"{tmp_path / 'd'}\nno newline"


def test_the_command_cannot_read_the_next_line_or_redirect_the_marker(
    session: ShellSession,
) -> None:
    assert session.run("cat; read x; echo read=$?", ROOM).output.text() == "read=1\n"
    gone = session.run("exec >/dev/null; echo hidden", ROOM)  # the marker goes to fd 4
    assert gone.why == "done" and gone.output.text() == ""
    assert session.run("echo still", ROOM).why == "done"


def test_writing_into_the_status_channel_is_flagged(session: ShellSession) -> None:
    # during the command bash keeps fds 3 and 4 saved on high fds: every write end is hit
    writable = "ls -l /proc/$$/fd | awk '/^l-wx/ {print $9}'"
    step = session.run(f"for f in $({writable}); do echo 1 > /proc/$$/fd/$f; done; echo ok", ROOM)
    assert step.why == "done" and step.done is not None and step.done.exit_code == 0
    assert step.tampered and step.output.text().endswith("ok\n")
    assert not session.run("true", ROOM).tampered


def test_background_jobs_are_reported(session: ShellSession) -> None:
    step = session.run("true", ROOM)
    assert step.done is not None and not step.done.jobs
    step = session.run("sleep 30 &", ROOM)  # killed with the shell's process group
    assert step.done is not None and step.done.jobs


def test_deadline_exit_and_watch_end_a_step(session: ShellSession) -> None:
    slow = session.run("sleep 60", 0.5)  # any machine is slower than that: no timing assumed
    assert (slow.why, slow.done) == ("timeout", None)
    session.kill()
    assert session.run("echo after", ROOM).why == "exited"


def test_a_watch_message_ends_the_step(session: ShellSession, tmp_path: Path) -> None:
    def watch(running: protocol.Step) -> str | None:
        return "limit reached" if (tmp_path / "flag").exists() else None

    step = session.run("echo started; touch flag; sleep 60", ROOM, watch)
    assert (step.why, step.done, step.output.text()) == ("limit reached", None, "started\n")


def test_the_shell_exiting_is_end_of_file(session: ShellSession) -> None:
    step = session.run("echo bye; exit 3", ROOM)
    assert (step.why, step.output.text()) == ("exited", "bye\n")


def test_output_is_capped_and_counted(session: ShellSession) -> None:
    step = session.run("head -c 50000 /dev/zero | tr '\\0' x", ROOM)
    assert step.why == "done" and step.output.truncated
    assert len(step.output.data) == 10_000 and step.output.received == 50_000


def test_keystrokes_pump_until_quiet_or_end(session: ShellSession) -> None:
    silent = Output(1000)
    assert session.pump(silent, time.monotonic() + ROOM, quiet=0.2)  # nothing typed: quiet
    assert silent.text() == ""
    session.send(b"echo typed; exit\n")
    output = Output(1000)
    assert not session.pump(output, time.monotonic() + ROOM, quiet=None)  # read to the end
    assert output.text() == "typed\n"


def test_status_records_are_parsed_strictly() -> None:
    record = b"abc 0 12\n13\n\x1f/work dir\0"
    assert parse_status(record, "abc") == protocol.Status(0, "/work dir", True)
    assert parse_status(b"junk" + record, "abc") == protocol.Status(0, "/work dir", True)
    assert parse_status(b"abc 2 \x1f/w\0", "abc") == protocol.Status(2, "/w", False)
    assert parse_status(b"abc 0 \x1f/w", "abc") is None  # not complete yet
    assert parse_status(b"abc x \x1f/w\0", "abc") is None
    assert parse_status(b"abc 0 /w\0", "abc") is None  # no other dialect
    assert not status_junk(b"abc 0 \x1f/w\0", "abc")
    assert status_junk(b"x abc 0 \x1f/w\0", "abc") and status_junk(b"abc 0 \x1f/w\0x", "abc")


def test_wrap_is_one_line_whatever_the_command() -> None:
    line = wrap("printf 'a\\nb'\necho \"$HOME\" \x07", "n0")
    assert line.endswith("\n") and line.count("\n") == 1


# -- docker's framing, on a socket pair -------------------------------------------------


class _Api:
    """The one call DockerExecTransport makes: the exec's hijacked socket."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def exec_start(self, exec_id: str, socket: bool) -> Any:
        return self.sock


def _frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxI", stream, len(payload)) + payload


def test_docker_frames_split_anywhere_and_status_before_stdout() -> None:
    ours, theirs = socket.socketpair()
    session = ShellSession(DockerExecTransport(_Api(ours), "exec"), 1000)

    def shell() -> None:
        line = b""
        while not line.endswith(b"\n"):
            line += theirs.recv(65536)
        nonce = line.split(b"printf '%s %s ' ", 1)[1].split(b" ", 1)[0]
        stream = (  # dockerd may deliver the status before the last stdout bytes
            _frame(1, b"hello ")
            + _frame(2, nonce + b" 0 \x1f/workspace\0")
            + _frame(1, b"world\n" + marker(nonce.decode())[:5])
            + _frame(1, marker(nonce.decode())[5:] + b"late")
        )
        for index in range(len(stream)):  # one byte at a time
            theirs.sendall(stream[index : index + 1])
            time.sleep(0.0005)

    writer = threading.Thread(target=shell)
    writer.start()
    step = session.run("echo hello world", ROOM)
    writer.join()
    assert step.why == "done" and step.done == protocol.Status(0, "/workspace", False)
    text = step.output.text()  # what follows the marker is output too (a background job's)
    assert text.startswith("hello world\n") and "late".startswith(text[len("hello world\n") :])
    theirs.close()
    assert not session.pump(Output(100), time.monotonic() + ROOM, quiet=None)
    session.kill()


def test_no_sandbox_module_imports_another_modules_private_names() -> None:
    package = Path(protocol.__file__).parent
    found = []
    for path in package.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("fidelity"):
                found += [
                    f"{path.name}: {alias.name}" for alias in node.names if alias.name[0] == "_"
                ]
    assert found == []
