"""Secrets and host files: a hostile agent finds nothing of the auditor's in any sandbox.

Each test plants a secret in the auditor's environment (the names real
deployments use: the world-model key, cloud credentials) and in a root-only
host file next to (and above) the workdir, then tries every escape an agent
has: ``/proc/1/environ`` (bwrap is PID 1 inside), every process's environ and
command line, ``env``, ``/proc/self/..``, inherited file descriptors, the host
file by absolute path and by walking up from the workdir. The browser cannot
run commands: it tries ``file://`` and the host's loopback services instead.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import pytest

from fidelity.sandboxes.base import Sandbox
from fidelity.trajectory import BrowserAction, CommandAction, EnvSpec

SECRET_NAMES = ("FIDELITY_SIM_API_KEY", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY")


class Planted:
    """Where the secrets are: the value, the host file, the workdir below it."""

    def __init__(self, value: str, host_file: Path, workdir: Path) -> None:
        self.value = value
        self.host_file = host_file
        self.workdir = workdir


@pytest.fixture
def planted(monkeypatch: pytest.MonkeyPatch) -> Iterator[Planted]:
    value = f"s3cr3t-{secrets.token_hex(12)}"
    for name in SECRET_NAMES:
        monkeypatch.setenv(name, value)
    # /tmp/<private>/secret.txt (root-only) with the workdir at /tmp/<private>/a/project
    folder = Path(tempfile.mkdtemp(prefix="fidelity-secret-", dir="/tmp"))
    folder.chmod(0o711)  # the sandbox uid may traverse it to its bind mounts, not list it
    host_file = folder / "secret.txt"
    host_file.write_text(value + "\n")
    host_file.chmod(0o600)
    workdir = folder / "a" / "project"
    workdir.mkdir(parents=True)
    (workdir / "hello.txt").write_text("hello\n")
    try:
        yield Planted(value, host_file, workdir)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def escapes(planted: Planted) -> list[str]:
    """Every way a shell command could reach the auditor's secrets."""
    host = str(planted.host_file)
    return [
        "cat /proc/1/environ",
        "cat /proc/[0-9]*/environ",
        "cat /proc/[0-9]*/cmdline",
        "env; set",
        "cat /proc/self/environ /proc/self/../1/environ /proc/$PPID/environ",
        "ls -la /proc/self/fd/ /proc/1/fd/; for f in /proc/self/fd/*; do timeout 1 cat $f; done",
        f"cat {host}",
        "cat ../secret.txt ../../secret.txt ../../../secret.txt",
        f"ls -la {planted.workdir.parent.parent} /workspace/.. /workspace/../..",
        "grep -rs s3cr3t /etc /run /home /root /tmp /var /workspace /dev/shm",
        f"find / -xdev -name secret.txt 2>/dev/null | head; cat {host}",
    ]


def hunt(box: Sandbox, planted: Planted, env: EnvSpec | None = None) -> str:
    """Run every escape in *box*; everything the agent saw, concatenated."""
    box.reset(env or EnvSpec(workdir=str(planted.workdir)))
    seen = []
    for command in escapes(planted):
        observation = box.step(CommandAction(command=command + " 2>&1; true"), timeout=30)
        seen.append(f"$ {command}\n{observation.text}{observation.error or ''}")
    return "\n".join(seen)


@pytest.mark.bwrap
def test_bubblewrap_shows_nothing_of_the_auditor(bwrap: None, planted: Planted) -> None:
    from fidelity.sandboxes.local import LocalConfig, LocalSandbox

    box = LocalSandbox(LocalConfig(step_timeout=30))
    try:
        seen = hunt(box, planted)
    finally:
        box.close()
    assert "FIDELITY_SIM_API_KEY" not in seen and planted.value not in seen, seen
    assert "PATH=" in run_text(seen, "cat /proc/1/environ")  # the escape did run


def run_text(seen: str, command: str) -> str:
    """What one escape printed."""
    start = seen.index(f"$ {command}\n")
    end = seen.find("\n$ ", start + 1)
    return seen[start : end if end >= 0 else None]


@pytest.mark.bwrap
def test_bubblewrap_pid_one_has_only_a_path(bwrap: None, planted: Planted) -> None:
    from fidelity.sandboxes.local import LocalSandbox
    from fidelity.sandboxes.shell import SANDBOX_ENVIRONMENT

    box = LocalSandbox()
    try:
        box.reset(EnvSpec(workdir=str(planted.workdir)))
        environ = box.step(CommandAction(command="tr '\\0' '\\n' < /proc/1/environ")).text
    finally:
        box.close()
    # /bin/sh (joining the memory cgroup) exports PWD; it starts in / on purpose
    assert set(environ.split()) <= {f"PATH={SANDBOX_ENVIRONMENT['PATH']}", "PWD=/"}, environ


@pytest.mark.docker
@pytest.mark.slow
def test_docker_terminal_shows_nothing_of_the_auditor(docker: None, planted: Planted) -> None:
    from fidelity.sandboxes.docker import DockerConfig, DockerSandbox
    from fidelity.sandboxes.images import ensure_image

    box = DockerSandbox(DockerConfig(image=ensure_image("terminal"), step_timeout=30))
    try:
        seen = hunt(box, planted)
    finally:
        box.close()
    assert "FIDELITY_SIM_API_KEY" not in seen and planted.value not in seen, seen
    escapes_ran(seen)


@pytest.mark.docker
@pytest.mark.slow
def test_docker_swe_shows_nothing_of_the_auditor(docker: None, planted: Planted) -> None:
    from fidelity.sandboxes.images import ensure_image
    from fidelity.sandboxes.pool import new_sandbox

    box = new_sandbox({"image": ensure_image("swe"), "domain": "swe", "step_timeout": 30})
    try:
        seen = hunt(box, planted, EnvSpec(project="webcolors"))
    finally:
        box.close()
    assert "FIDELITY_SIM_API_KEY" not in seen and planted.value not in seen, seen
    escapes_ran(seen)


def escapes_ran(seen: str) -> None:
    """The control, as the bubblewrap test's ``PATH=``: the escapes ran in the container's
    shell and read what was there to read (a sandbox failing every step finds no secret
    either). Its environment is the container's: no auditor's variable, a PATH."""
    for command in (
        "env; set",
        "cat /proc/self/environ /proc/self/../1/environ /proc/$PPID/environ",
    ):
        shown = run_text(seen, command)
        assert "PATH=" in shown and "HOME=" in shown, shown


# -- the browser -----------------------------------------------------------------


@pytest.fixture
def loopback_service(planted: Planted) -> Iterator[str]:
    """Another HTTP service on the host's loopback (like the world-model endpoint)."""
    value = planted.value

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = f'{{"api_key": "{value}"}}'.encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/models"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.browser
def test_browser_reaches_only_its_own_site(
    chromium: None, planted: Planted, loopback_service: str
) -> None:
    from fidelity.sandboxes.browser import BrowserSandbox

    box = BrowserSandbox()
    try:
        box.reset(EnvSpec(backend="browser", project="library"))
        port = loopback_service.split(":")[2].split("/")[0]
        tries = [
            loopback_service,
            f"http://localhost:{port}/",
            f"file://{planted.host_file}",
            "file:///proc/self/environ",
            "http://[::1]:9/",
        ]
        observations = [box.step(BrowserAction(action=f"goto({url!r})")) for url in tries]
        own = box.step(BrowserAction(action="goto('/books?page=2')"))
    finally:
        box.close()
    for url, observation in zip(tries, observations, strict=True):
        assert planted.value not in observation.text, url
        assert (observation.state or {}).get("last_action_error"), url  # an error, not a crash
    assert "ERR_BLOCKED_BY_CLIENT" in observations[0].text
    assert (own.state or {}).get("last_action_error") is None  # its own site still works
    assert "/books?page=2" in (own.state or {})["url"]
