"""The bubblewrap backend: conformance plus containment of hostile actions."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fidelity.errors import SandboxError
from fidelity.sandboxes.local import LocalConfig, LocalSandbox, sweep_stale
from fidelity.trajectory import CommandAction, EnvSpec
from tests.sandboxes.conformance import *  # noqa: F403 - the shared conformance suite
from tests.sandboxes.conformance import run
from tests.sandboxes.conformance_lifecycle import *  # noqa: F403 - backend-agnostic lifecycle

pytestmark = pytest.mark.bwrap


@pytest.fixture
def sandbox(bwrap: None) -> Iterator[LocalSandbox]:
    box = LocalSandbox(LocalConfig(step_timeout=10, max_disk_mb=64))
    try:
        yield box
    finally:
        box.close()


@pytest.fixture
def env(workdir: Path) -> EnvSpec:
    return EnvSpec(workdir=str(workdir))


@pytest.fixture
def ok_action() -> CommandAction:
    return CommandAction(command="echo ok")


@pytest.fixture
def bad_action() -> CommandAction:
    return CommandAction(command="echo 'unterminated")


@pytest.fixture
def dirty_actions() -> list[CommandAction]:
    return [CommandAction(command="touch made-here && rm hello.txt")]


@pytest.fixture
def probe_action() -> CommandAction:
    return CommandAction(command="ls")


@pytest.fixture
def leftovers() -> Callable[[LocalSandbox], list[str]]:
    def find(box: LocalSandbox) -> list[str]:
        found = [str(box._root)] if box._root is not None and box._root.exists() else []
        if box._uid is not None and _sandbox_processes(box):
            found.append(f"{_sandbox_processes(box)} process(es) of uid {box._uid}")
        return found

    return find


def _sandbox_processes(box: LocalSandbox) -> int:
    from fidelity.sandboxes.local import _count_processes

    assert box._uid is not None
    return _count_processes(box._uid)


def test_fork_bomb_is_contained_and_recorded(sandbox: LocalSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    bomb = run(sandbox, ":(){ :|:& };:", timeout=120)  # returns at once; the watch decides
    assert bomb.error is not None and "process limit" in bomb.error
    assert run(sandbox, "echo survived").text == "survived\n"


def test_memory_bomb_fails_inside(sandbox: LocalSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    bomb = run(sandbox, 'python3 -c "x = bytearray(8 * 1024**3)"')
    assert bomb.exit_code == 1 and "MemoryError" in bomb.text


def test_disk_fill_is_stopped(sandbox: LocalSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    fill = run(sandbox, "while :; do head -c 8M /dev/zero > f$RANDOM; done", timeout=20)
    assert fill.error is not None and "disk quota" in fill.error
    assert run(sandbox, "rm -f f*; echo cleaned").text == "cleaned\n"


def test_rm_rf_root_cannot_touch_the_host(sandbox: LocalSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    run(sandbox, "rm -rf --no-preserve-root / 2>/dev/null; true")
    assert os.path.exists("/usr/bin/env") and (workdir / "hello.txt").exists()
    assert run(sandbox, "ls /usr/bin/env").exit_code == 0


def test_system_is_read_only(sandbox: LocalSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    attempt = run(sandbox, "touch /usr/fidelity-was-here")
    assert attempt.exit_code != 0
    assert not os.path.exists("/usr/fidelity-was-here")


def test_namespaces_are_private(sandbox: LocalSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    info = run(sandbox, "hostname; echo $$; id -un; ls /proc | grep -c '^[0-9]'").text.split()
    assert info[0] == "sandbox"
    assert int(info[1]) < 10  # own PID namespace: the shell is one of the first processes
    assert info[2] == "agent"
    assert int(info[3]) < 10


def test_nothing_outlives_close(sandbox: LocalSandbox, workdir: Path) -> None:
    sandbox.reset(EnvSpec(workdir=str(workdir)))
    run(sandbox, "(sleep 300 &); nohup sleep 301 >/dev/null 2>&1 &")
    root = sandbox._root
    assert root is not None and root.exists()
    if os.geteuid() == 0:
        assert _sandbox_processes(sandbox) >= 4
    sandbox.close()
    time.sleep(0.2)
    if os.geteuid() == 0:
        assert _sandbox_processes(sandbox) == 0
    assert not root.exists()


def test_failing_setup_names_the_command(sandbox: LocalSandbox, workdir: Path) -> None:
    with pytest.raises(SandboxError, match=r"setup command 1 \('false'\) failed with exit code 1"):
        sandbox.reset(EnvSpec(workdir=str(workdir), setup=["false"]))


def test_step_before_reset_is_an_error(sandbox: LocalSandbox) -> None:
    with pytest.raises(SandboxError, match="before reset"):
        sandbox.step(CommandAction(command="true"))


def test_output_cap(bwrap: None, workdir: Path) -> None:
    with LocalSandbox(LocalConfig(max_output_bytes=1000)) as box:
        box.reset(EnvSpec(workdir=str(workdir)))
        big = run(box, "yes | head -c 100000")
        assert big.truncated and len(big.text) == 1000 and big.exit_code == 0


def test_sweep_removes_folders_of_dead_processes(tmp_path: Path) -> None:
    dead = tmp_path / "fidelity-local-dead"
    dead.mkdir()
    (dead / "owner.pid").write_text("999999999")
    alive = tmp_path / "fidelity-local-alive"
    alive.mkdir()
    (alive / "owner.pid").write_text(str(os.getpid()))
    assert sweep_stale(str(tmp_path)) == 1
    assert not dead.exists() and alive.exists()


# -- containment: total memory, /dev, inodes (root: cgroup + bounded tmpfs mounts) -----


def _needs_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the memory cgroup and the tmpfs mounts need root (see README's table)")


def test_processes_under_the_per_process_limit_cannot_exceed_the_total(
    bwrap: None, workdir: Path
) -> None:
    _needs_root()
    box = LocalSandbox(LocalConfig(step_timeout=60, max_memory_mb=2048, max_total_memory_mb=256))
    try:
        box.reset(EnvSpec(workdir=str(workdir)))
        assert box._cgroup is not None, "no memory cgroup: cgroup v1/v2 memory not writable"
        hold = "import time; x = bytearray(b'1') * (150 * 1024**2); time.sleep(2)"
        alone = run(box, f'python3 -c "{hold}" && echo alone-ok', timeout=60)
        assert alone.text == "alone-ok\n" and alone.error is None  # each is under the limit
        together = run(box, f'for i in 1 2 3; do python3 -c "{hold}" & done; wait', timeout=60)
        assert together.error is not None and "memory limit of 256 MB" in together.error
        assert run(box, "echo survived").text == "survived\n"
    finally:
        box.close()


def test_dev_is_private_and_dev_shm_is_bounded(bwrap: None, workdir: Path) -> None:
    box = LocalSandbox(LocalConfig(step_timeout=60, shm_size_mb=16))
    try:
        box.reset(EnvSpec(workdir=str(workdir)))
        listing = run(box, "ls /dev").text.split()
        assert "sda" not in listing and "vda" not in listing and "null" in listing
        assert run(box, "touch /dev/evil").exit_code != 0  # /dev itself is not writable
        fill = run(box, "head -c 200M /dev/zero > /dev/shm/fill; du -m /dev/shm/fill", timeout=60)
        assert int(fill.text.split()[-2]) <= 16
        if box._mounted:  # root: the bound tmpfs is the host's, so the harness sees it fill
            assert fill.error is not None and "/dev/shm" in fill.error
        assert run(box, "rm /dev/shm/fill && echo freed").text == "freed\n"
    finally:
        box.close()


def test_millions_of_empty_files_hit_the_inode_bound(bwrap: None, workdir: Path) -> None:
    box = LocalSandbox(LocalConfig(step_timeout=120, max_inodes=2000))
    try:
        box.reset(EnvSpec(workdir=str(workdir)))
        flood = run(box, "mkdir flood && cd flood && seq 1 1000000 | xargs touch", timeout=120)
        assert flood.error is not None and "inode limit of 2000" in flood.error
        if box._mounted:  # root: a bounded tmpfs, so the bound is exact (else polled)
            assert int(run(box, "ls /workspace/flood | wc -l", timeout=60).text) <= 2000
        run(box, "rm -rf /workspace/flood", timeout=60)
        assert run(box, "touch again && echo room").text == "room\n"
    finally:
        box.close()


def test_as_root_every_writable_area_is_a_bounded_tmpfs(bwrap: None, workdir: Path) -> None:
    _needs_root()
    box = LocalSandbox(LocalConfig(step_timeout=10))
    try:
        box.reset(EnvSpec(workdir=str(workdir)))
        assert [path.name for path in box._mounted] == ["work", "tmp", "shm"]
    finally:
        box.close()


def _failing_mount(errors: list[int]) -> Callable[..., None]:
    """``mount_tmpfs`` that raises each of *errors* in turn, then mounts for real."""
    from fidelity.sandboxes import containment

    real = containment.mount_tmpfs

    def mount(path: Path, size_mb: int, inodes: int, mode: int = 0o711) -> None:
        if errors:
            code = errors.pop(0)
            raise OSError(code, f"mount tmpfs on {path}: {os.strerror(code)}")
        real(path, size_mb, inodes, mode)

    return mount


def test_a_refused_tmpfs_mount_is_said_once_and_the_sandbox_still_runs(
    bwrap: None, workdir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import errno

    from fidelity.sandboxes import containment, local

    _needs_root()
    monkeypatch.setattr(local, "_warned_errnos", set())
    monkeypatch.setattr(containment, "mount_tmpfs", _failing_mount([errno.EPERM] * 2))
    for _ in range(2):
        box = LocalSandbox(LocalConfig(step_timeout=10))
        try:
            box.reset(EnvSpec(workdir=str(workdir)))
            assert box._mounted == [] and run(box, "echo ok").text == "ok\n"
        finally:
            box.close()
    (record,) = [r for r in caplog.records if r.name == local.__name__]  # once, not per sandbox
    said = record.getMessage()
    assert record.levelname == "WARNING"
    assert said.startswith("fidelity: sandbox areas are not tmpfs-bounded ([Errno 1] mount tmpfs")
    assert said.endswith("/work: Operation not permitted); disk use is polled instead")


def test_the_auditors_umask_neither_stops_a_sandbox_nor_reaches_inside(
    bwrap: None, workdir: Path
) -> None:
    """Under umask 077 the sandbox's cgroups, identity files and setup scripts stay
    reachable by its user, and what it makes has the modes it makes under any umask."""
    _needs_root()
    script = workdir.parent / "setup.sh"
    script.write_text("touch made-by-setup\n")
    old = os.umask(0o077)
    try:
        box = LocalSandbox(LocalConfig(step_timeout=10))
        try:
            box.reset(EnvSpec(workdir=str(workdir), setup=[f"@{script}"]))
            shown = run(box, "umask; touch made-here; mkdir dir; stat -c '%a %n' made-* dir")
            assert box._cgroup is not None  # made under this umask, and joined
        finally:
            box.close()
    finally:
        os.umask(old)
    assert shown.text == "0022\n644 made-by-setup\n644 made-here\n755 dir\n"


def test_a_busy_tmpfs_mount_is_tried_again(
    bwrap: None, workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import errno

    from fidelity.sandboxes import containment

    _needs_root()
    monkeypatch.setattr(containment, "mount_tmpfs", _failing_mount([errno.EBUSY]))
    box = LocalSandbox(LocalConfig(step_timeout=10))
    try:
        box.reset(EnvSpec(workdir=str(workdir)))
        assert len(box._mounted) == 3
    finally:
        box.close()
    assert capsys.readouterr().err == ""


def test_after_a_step_that_left_only_the_shell_the_next_one_scans_no_process(
    sandbox: LocalSandbox, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing runs between such steps: no /proc scan, no fd scan; a process left brings both back."""
    _needs_root()
    from fidelity.sandboxes import containment, local

    sandbox.reset(EnvSpec(workdir=str(workdir)))
    assert sandbox._pids_cgroup is not None, "no pids cgroup: cgroup v1/v2 pids not writable"
    scanned: list[str] = []
    count, holders = local._count_processes, containment.fd_holders

    def counting(uid: int, zombies: bool = False) -> int:
        scanned.append("/proc")
        return count(uid, zombies)

    def holding(pids: list[int], link: str) -> list[int]:
        scanned.extend(f"fds of {pid}" for pid in pids)
        return holders(pids, link)

    monkeypatch.setattr(local, "_count_processes", counting)
    monkeypatch.setattr(containment, "fd_holders", holding)
    run(sandbox, "true")  # the first step after a start reads everything
    scanned.clear()
    for _ in range(3):
        assert run(sandbox, "ls >/dev/null; echo ok").text == "ok\n"
    assert scanned == []
    left = run(
        sandbox, "(sleep 30 &); echo left"
    )  # not a job of the shell: only the cgroup sees it
    assert left.text == "left\n" and left.error is None
    assert "/proc" in scanned
    scanned.clear()
    assert run(sandbox, "echo next").text == "next\n"
    assert any(entry.startswith("fds of") for entry in scanned)
