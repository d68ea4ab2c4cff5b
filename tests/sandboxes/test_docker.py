"""The Docker backend: conformance, hardening, containment of hostile actions, sweeping."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fidelity.errors import SandboxError
from fidelity.sandboxes import get_sandbox, sweep
from fidelity.sandboxes.docker import (
    LABEL_HOST,
    LABEL_OWNER,
    DockerConfig,
    DockerSandbox,
    _none_labelled,
)
from fidelity.sandboxes.images import docker_client, ensure_image
from fidelity.trajectory import CommandAction, EnvSpec
from tests.conftest import owned_containers
from tests.sandboxes.conformance import *  # noqa: F403 - the shared conformance suite
from tests.sandboxes.conformance import run

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session")
def terminal_image(docker: None) -> str:
    """The terminal image, built once (debootstrap + docker build) and cached by recipe hash."""
    return ensure_image("terminal")


@pytest.fixture
def sandbox(terminal_image: str) -> Iterator[DockerSandbox]:
    box = DockerSandbox(DockerConfig(image=terminal_image, step_timeout=10, max_disk_mb=64))
    try:
        yield box
    finally:
        box.close()


def test_fork_bomb_is_contained_and_recorded(sandbox: DockerSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    bomb = run(sandbox, ":(){ :|:& };:", timeout=120)  # returns at once; the watch decides
    assert bomb.error is not None and "process limit" in bomb.error
    assert run(sandbox, "echo survived; cat hello.txt").text == "survived\nhello world\n"


def test_memory_bomb_fails_inside(sandbox: DockerSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    bomb = run(sandbox, 'python3 -c "x = bytearray(8 * 1024**3)"')
    assert bomb.exit_code == 1 and "MemoryError" in bomb.text  # RLIMIT_DATA, as in bubblewrap
    assert run(sandbox, "echo survived").text == "survived\n"


def test_memory_bomb_past_the_rlimit_is_oom_killed_and_recorded(
    terminal_image: str, workdir: Path
) -> None:
    # Many small processes stay under RLIMIT_DATA each; the cgroup limit stops them together.
    config = DockerConfig(image=terminal_image, max_memory_mb=256, step_timeout=30)
    with DockerSandbox(config) as box:
        box.reset(EnvSpec(workdir=str(workdir)))
        hog = "python3 -c 'import time; x = bytearray(200 * 1024**2); time.sleep(3)'"
        bomb = run(box, f"for i in 1 2 3 4; do {hog} & done; wait", timeout=30)
        assert bomb.error is not None and "OOM" in bomb.error
        assert run(box, "echo survived").text == "survived\n"


def test_disk_fill_is_stopped(sandbox: DockerSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    fill = run(sandbox, "while :; do head -c 8M /dev/zero > f$RANDOM; done", timeout=20)
    assert fill.error is not None and "disk quota" in fill.error
    assert run(sandbox, "rm -f f*; echo cleaned").text == "cleaned\n"


@pytest.mark.parametrize("area", ["/tmp", "/dev/shm"])
def test_filling_a_tmpfs_is_a_sandbox_limit(terminal_image: str, workdir: Path, area: str) -> None:
    # A full tmpfs fails the write inside (ENOSPC) and the command goes on: the step says so.
    with DockerSandbox(DockerConfig(image=terminal_image, step_timeout=20, tmp_size_mb=16)) as box:
        box.reset(EnvSpec(workdir=str(workdir)))
        fill = run(box, f"head -c 80M /dev/zero > {area}/fill; echo done", timeout=20)
        assert fill.text.endswith("done\n") and "No space left" in fill.text
        assert fill.error is not None and fill.error.startswith("SandboxLimit: ")
        assert f"({area})" in fill.error
        again = run(box, "echo still full")  # not reported again while it stays full
        assert again.error is None and again.text == "still full\n"
        assert run(box, f"rm -f {area}/fill; echo cleaned").text == "cleaned\n"


def test_hardening(sandbox: DockerSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    info = run(sandbox, "id -u; hostname; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status").text
    assert info.split() == ["1000", "sandbox", "CapEff:", "0000000000000000", "NoNewPrivs:", "1"]
    assert run(sandbox, "touch /usr/fidelity-was-here").exit_code != 0
    assert run(sandbox, "ls /sys/class/net").text.split() == ["lo"]
    attrs = docker_client().containers.get(sandbox._container.id).attrs
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"]
    assert host["PidsLimit"] == 256 and host["Memory"] > 0 and host["NanoCpus"] > 0
    assert "no-new-privileges" in host["SecurityOpt"]
    labels = attrs["Config"]["Labels"]
    assert labels[LABEL_OWNER] == str(os.getpid()) and "fidelity.run" in labels


def test_timeout_kills_background_processes(sandbox: DockerSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    run(sandbox, "nohup sleep 300 >/dev/null 2>&1 &")
    assert run(sandbox, "sleep 100", timeout=1).timed_out
    assert "sleep 300" not in run(sandbox, "ps -eo args").text


def test_exit_restarts_the_shell(sandbox: DockerSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    run(sandbox, "cd /tmp")
    gone = run(sandbox, "exit 3")
    assert gone.exit_code == 3
    assert run(sandbox, "pwd").text == "/tmp\n"


def test_container_removed_from_outside_is_a_sandbox_error(
    sandbox: DockerSandbox, workdir: Path
) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    (container,) = owned_containers()
    subprocess.run(["docker", "rm", "-f", container], capture_output=True, check=True)
    try:
        observation = run(sandbox, "echo hi")
    except SandboxError as exc:  # the trajectory fails as a sandbox failure, not a crash
        assert "container" in str(exc)
    else:
        assert observation.error is not None
    sandbox.close()
    assert owned_containers() == []


def test_nothing_outlives_close(sandbox: DockerSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    assert len(owned_containers()) == 1
    sandbox.close()
    assert owned_containers() == []


def test_failing_setup_names_the_command(sandbox: DockerSandbox, workdir: Path) -> None:
    with pytest.raises(SandboxError, match=r"setup command 1 \('false'\) failed with exit code 1"):
        sandbox.reset(EnvSpec(workdir=str(workdir), setup=["false"]))


def test_setup_file_runs_inside(sandbox: DockerSandbox, workdir: Path, tmp_path: Path) -> None:
    script = tmp_path / "setup.sh"
    script.write_text("git init -q && git add -A && git commit -qm init && id -un > who\n")
    sandbox.reset(EnvSpec(workdir=str(workdir), setup=[f"@{script}"]))
    assert run(sandbox, "cat who; git log --format=%an").text == "agent\nagent\n"


def test_step_before_reset_is_an_error(sandbox: DockerSandbox) -> None:
    with pytest.raises(SandboxError, match="before reset"):
        sandbox.step(CommandAction(command="true"))


def test_registry_selects_docker(terminal_image: str) -> None:
    box = get_sandbox("docker", image=terminal_image)
    assert isinstance(box, DockerSandbox)
    with pytest.raises(ValueError, match="extra"):
        get_sandbox("docker", no_such_option=1)


def dead_pid() -> int:
    """The pid of a process that has ended (its containers are a killed audit's leftovers)."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    return dead.pid


@contextlib.contextmanager
def orphan_container(image: str, owner: int) -> Iterator[Any]:
    """A stopped container labelled as *owner*'s on this host; removed afterwards if the
    test's sweep left it."""
    client = docker_client()
    labels = {LABEL_OWNER: str(owner), LABEL_HOST: os.uname().nodename}
    orphan = client.containers.create(image, ["sleep", "infinity"], labels=labels)
    try:
        yield orphan
    finally:
        if orphan.id in {c.id for c in client.containers.list(all=True)}:
            orphan.remove(force=True)


def test_sweep_removes_containers_of_dead_owners(terminal_image: str) -> None:
    client = docker_client()
    with (
        orphan_container(terminal_image, dead_pid()) as orphan,
        orphan_container(terminal_image, os.getppid()) as mine,
    ):
        assert sweep("docker") >= 1
        ids = {c.id for c in client.containers.list(all=True)}
        assert orphan.id not in ids and mine.id in ids  # a live owner's container stays


def test_a_sweep_with_nothing_to_remove_loads_no_docker_sdk(docker: None) -> None:
    # the local daemon, asked over its socket, lists no container of this dead owner: an
    # audit's sweep then costs no import of the SDK (0.4 s of CPU)
    probe = (
        "import sys\n"
        "from fidelity.sandboxes.docker import sweep_stale\n"
        f"assert sweep_stale(owner={dead_pid()}) == 0\n"
        "print(sorted(m for m in sys.modules if m == 'docker' or m.startswith('docker.')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_socket_question_leaves_other_daemons_to_the_sdk(
    docker: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    label = f"{LABEL_OWNER}=1"
    assert _none_labelled(label)  # the daemon the tests run answers on its default socket
    for host in ("tcp://127.0.0.1:1", "ssh://user@host"):
        monkeypatch.setenv("DOCKER_HOST", host)
        assert not _none_labelled(label), host  # the SDK asks, and says why it cannot


def test_no_daemon_on_the_socket_is_told_without_the_sdk(tmp_path: Path) -> None:
    # a socket file nobody listens on (a daemon that died), and no socket at all (none
    # installed): the sweep's error is the SDK client's, and the SDK is never imported
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as bound:
        bound.bind(str(stale))
    probe = (
        "import sys\n"
        "from fidelity.errors import SandboxUnavailableError\n"
        "from fidelity.sandboxes.docker import sweep_stale\n"
        "from fidelity.sandboxes.registry import sweep_all\n"
        "try:\n"
        "    sweep_stale()\n"
        "except SandboxUnavailableError as exc:\n"
        "    print(str(exc).split('. ')[0])\n"
        "sweep_all()  # the audit's sweep goes on without Docker\n"
        "print(sorted(m for m in sys.modules if m == 'docker' or m.startswith('docker.')))"
    )
    for path, reason in ((stale, "Connection refused"), (tmp_path / "none.sock", "No such file")):
        env = {**os.environ, "DOCKER_HOST": f"unix://{path}"}
        done = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, env=env
        )
        assert done.returncode == 0, done.stderr
        said, imported = done.stdout.splitlines()
        assert said.startswith(f"no Docker daemon answers (nothing listens on {path}: {reason}")
        assert imported == "[]"


def test_the_socket_question_sees_a_labelled_container(terminal_image: str) -> None:
    owner = dead_pid()
    label = f"{LABEL_OWNER}={owner}"
    with orphan_container(terminal_image, owner):
        assert not _none_labelled(label)  # a stopped (created) container counts too
        assert sweep("docker") >= 1
        assert _none_labelled(label)


def test_sweep_survives_a_container_removed_while_it_lists(
    terminal_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # failure injection: every inspect answers 404, as for a container another process is
    # removing between the list and the inspect; the sweep reads the list alone
    import docker
    from docker.models.containers import ContainerCollection

    def gone(self: ContainerCollection, container_id: str) -> None:
        raise docker.errors.NotFound(f"No such container: {container_id}")

    client = docker_client()
    with orphan_container(terminal_image, dead_pid()) as orphan:
        monkeypatch.setattr(ContainerCollection, "get", gone)
        try:
            assert sweep("docker") >= 1
        finally:
            monkeypatch.undo()
        assert orphan.id not in {c.id for c in client.containers.list(all=True)}


def test_close_from_another_thread_stops_a_running_step(
    sandbox: DockerSandbox, workdir: Path
) -> None:
    import threading

    sandbox.reset(EnvSpec(workdir=str(workdir)))
    timer = threading.Timer(0.5, sandbox.close)
    timer.start()
    started = time.monotonic()
    with pytest.raises(SandboxError, match="closed"):
        run(sandbox, "sleep 60", timeout=30)
    timer.join()
    assert time.monotonic() - started < 10
    assert owned_containers() == []


def test_no_daemon_is_unavailable_with_a_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from fidelity.errors import SandboxUnavailableError

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(SandboxUnavailableError, match="dockerd --storage-driver=overlay2"):
        docker_client()


def test_recipe_hash_follows_the_recipe(tmp_path: Path) -> None:
    from fidelity.sandboxes.images import recipe_hash

    (tmp_path / "Dockerfile").write_text("FROM base\n")
    first = recipe_hash(tmp_path, "base:1")
    assert recipe_hash(tmp_path, "base:1") == first
    assert recipe_hash(tmp_path, "base:2") != first  # a new base rebuilds the domain layer
    (tmp_path / "Dockerfile").write_text("FROM base\nRUN true\n")
    assert recipe_hash(tmp_path, "base:1") != first


def test_cli_build_and_sweep(terminal_image: str) -> None:
    import json
    import sys

    built = subprocess.run(
        [sys.executable, "-m", "fidelity", "sandbox", "build", "--domain", "terminal", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(built.stdout) == {"terminal": terminal_image}
    swept = subprocess.run(
        [sys.executable, "-m", "fidelity", "sandbox", "sweep"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert swept.stdout.startswith("removed ")
    unknown = subprocess.run(
        [sys.executable, "-m", "fidelity", "sandbox", "build", "--domain", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert unknown.returncode == 2 and "no Docker image recipe" in unknown.stderr


def test_warm_pool_gives_started_clean_containers(terminal_image: str, workdir: Path) -> None:
    from fidelity.sandboxes.docker import _pools, close_pools

    config = DockerConfig(image=terminal_image, warm=2)
    seen = set()
    try:
        for attempt in range(3):
            started_before = {c[:12] for c in owned_containers()}
            with DockerSandbox(config) as box:
                box.reset(EnvSpec(workdir=str(workdir)))
                seen.add(box._container.id)
                if attempt > 0:
                    assert box._container.id[:12] in started_before  # taken from the pool
                listing = run(
                    box, "ls -A /workspace /tmp ~; echo x > ~/mark; echo y > /tmp/mark"
                ).text
                assert listing == "/home/agent:\n.gitconfig\n\n/tmp:\n\n/workspace:\nhello.txt\n"
            if attempt == 0:  # the first reset filled the pool: wait for it to be started
                deadline = time.monotonic() + 30
                while (
                    sum(len(p.ready) for p in _pools.values()) < 2 and time.monotonic() < deadline
                ):
                    time.sleep(0.1)
        assert len(seen) == 3  # one container per trajectory: used ones are removed
    finally:
        close_pools()
    assert owned_containers() == []


def test_many_empty_files_hit_the_inode_bound(terminal_image: str, workdir: Path) -> None:
    box = DockerSandbox(DockerConfig(image=terminal_image, step_timeout=300, max_inodes=2000))
    try:
        box.reset(EnvSpec(workdir=str(workdir)))
        flood = run(box, "mkdir flood && cd flood && seq 1 1000000 | xargs touch", timeout=300)
        assert flood.error is not None and "inode limit of 2000" in flood.error
        tmp = run(box, "cd /tmp && seq 1 5000 | xargs touch 2>/dev/null; ls /tmp | wc -l")
        assert int(tmp.text.split()[-1]) <= 2000  # the /tmp tmpfs has nr_inodes=2000
        run(box, "rm -rf /workspace/flood", timeout=120)
    finally:
        box.close()
