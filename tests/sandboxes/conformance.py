"""The conformance suite every Sandbox backend passes.

A backend's test module defines a ``sandbox`` fixture yielding a fresh
(unstarted) sandbox, then star-imports this module (which brings the
``workdir`` and ``env_of`` fixtures): the same actions must give the same
observations on every backend. A backend whose trajectories name their own
environment (``env.image``) overrides ``env_of`` so that every spec the suite
resets to carries it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fidelity.sandboxes.base import Sandbox
from fidelity.trajectory import CommandAction, EnvSpec, KeystrokesAction

EnvOf = Callable[..., EnvSpec]
"""Builds the EnvSpec a conformance test resets to from its fields (``workdir``, ``setup``)."""


@pytest.fixture
def env_of() -> EnvOf:
    """The backend's EnvSpec for the given fields: a plain :class:`EnvSpec` by default."""
    return EnvSpec


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The project every conformance test starts in: one file, ``hello.txt``."""
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "hello.txt").write_text("hello world\n")
    return folder


def run(sandbox: Sandbox, command: str, timeout: float = 60.0):  # type: ignore[no-untyped-def]
    return sandbox.step(CommandAction(command=command), timeout=timeout)


def test_reset_starts_in_workspace(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    first = sandbox.reset(env_of(workdir=str(workdir)))
    assert first.error is None
    assert first.cwd == "/workspace"
    assert run(sandbox, "cat hello.txt").text == "hello world\n"


def test_exit_codes_and_stderr(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    assert run(sandbox, "true").exit_code == 0
    assert run(sandbox, "exit_with() { return $1; }; exit_with 7").exit_code == 7
    failed = run(sandbox, "ls missing-file")
    assert failed.exit_code == 2
    assert "No such file or directory" in failed.text  # stderr is part of what the agent sees
    assert run(sandbox, "no-such-program").exit_code == 127


def test_state_persists_between_steps(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    moved = run(sandbox, "mkdir -p sub/dir && cd sub/dir")
    assert moved.cwd == "/workspace/sub/dir"
    assert run(sandbox, "pwd").text == "/workspace/sub/dir\n"
    run(sandbox, "export GREETING=hi; counter=41")
    assert run(sandbox, 'echo "$GREETING $((counter + 1))"').text == "hi 42\n"


def test_multiline_and_quoting(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    text = run(sandbox, "printf '%s|' \"a b\" 'c'\"'\"'d' $'e\\tf'\necho second line").text
    assert text == "a b|c'd|e\tf|second line\n"
    broken = run(sandbox, "echo 'unterminated")
    assert broken.exit_code != 0  # a syntax error is an observation, not a hang
    assert run(sandbox, "echo still alive").text == "still alive\n"


def test_stdin_reading_command_does_not_hang(
    sandbox: Sandbox, workdir: Path, env_of: EnvOf
) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    started = time.monotonic()
    assert run(sandbox, "cat; read line; echo done").text == "done\n"
    assert time.monotonic() - started < 5


def test_timeout_kills_and_recovers(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    run(sandbox, "cd /workspace && mkdir -p keep && cd keep")
    started = time.monotonic()
    hung = run(sandbox, "echo before; sleep 100000", timeout=1.0)
    assert hung.timed_out and hung.exit_code is None
    assert "before" in hung.text  # output produced before the timeout is kept
    assert time.monotonic() - started < 8
    after = run(sandbox, "pwd; ls /workspace/keep >/dev/null && echo ok")
    assert after.text == "/workspace/keep\nok\n"  # files and cwd survive the kill


def test_fresh_copy_per_reset(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    run(sandbox, "echo scribble > hello.txt && touch new-file")
    sandbox.reset(env_of(workdir=str(workdir)))
    assert run(sandbox, "cat hello.txt; ls new-file").text.startswith("hello world\n")
    assert (workdir / "hello.txt").read_text() == "hello world\n"  # the source is never written
    assert not (workdir / "new-file").exists()


def test_no_network(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    probe = run(
        sandbox,
        "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\"",
    )
    assert probe.exit_code != 0
    assert "unreachable" in probe.text.lower() or "error" in probe.text.lower()


def test_setup_runs_before_first_step(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    sandbox.reset(env_of(workdir=str(workdir), setup=["echo from-setup > setup.txt"]))
    assert run(sandbox, "cat setup.txt").text == "from-setup\n"


def test_keystrokes(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    typed = sandbox.step(KeystrokesAction(keys="echo typed-$((6*7))\n", duration=0.3))
    assert "typed-42" in typed.text
    assert run(sandbox, "echo after").text == "after\n"


def test_close_is_idempotent(sandbox: Sandbox, workdir: Path, env_of: EnvOf) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    sandbox.close()
    sandbox.close()


# -- infrastructure events belong to the step that caused them ---------------------


def test_kill_of_every_process_is_this_steps_event(
    sandbox: Sandbox, workdir: Path, env_of: EnvOf
) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    killed = run(sandbox, "sleep 300 & kill -9 -1; echo survived")
    assert killed.exit_code == 0 and "survived" in killed.text  # kill(-1) spares the caller
    after = run(sandbox, "echo next")
    assert (after.exit_code, after.error) == (0, None)
    assert after.text.endswith("next\n")  # after bash's own notice of the killed `sleep`


def test_an_actions_own_timeout_shortens_the_step_never_lengthens_it(
    sandbox: Sandbox, workdir: Path, env_of: EnvOf
) -> None:
    """A dataset names the action: its ``timeout`` cannot hold a step past the run's."""
    sandbox.reset(env_of(workdir=str(workdir)))
    longer = CommandAction(command="echo before; sleep 100000", timeout=1e308)
    held = sandbox.step(longer, timeout=5.0)  # 5 s: room for the echo on a busy machine
    assert held.timed_out and "before" in held.text
    shorter = CommandAction(command="echo before; sleep 100000", timeout=5.0)
    cut = sandbox.step(shorter, timeout=60.0)
    assert cut.timed_out and "before" in cut.text
    assert run(sandbox, "echo after").text == "after\n"


def test_a_keystrokes_duration_never_holds_the_step_past_the_run_limit(
    sandbox: Sandbox, workdir: Path, env_of: EnvOf
) -> None:
    """A dataset's ``duration`` (up to 600 s) is cut to the run's step timeout: the step
    ends; its output and the shell are as after any keystrokes."""
    sandbox.reset(env_of(workdir=str(workdir)))
    started = time.monotonic()
    keys = KeystrokesAction(keys="echo typed\n", duration=600)
    typed = sandbox.step(keys, timeout=5.0)  # 5 s: room for the echo on a busy machine
    assert time.monotonic() - started < 60  # not the 600 s the line asked for
    assert "typed" in typed.text
    assert run(sandbox, "echo after").text.endswith("after\n")


def test_writing_into_the_status_channel_is_flagged_not_a_timeout(
    sandbox: Sandbox, workdir: Path, env_of: EnvOf
) -> None:
    sandbox.reset(env_of(workdir=str(workdir)))
    writable = "ls -l /proc/$$/fd | awk '/^l-wx/ {print $9}'"  # every write end the shell has
    junk = run(sandbox, f"for f in $({writable}); do echo junk > /proc/$$/fd/$f; done; echo done")
    assert not junk.timed_out and junk.exit_code == 0 and "done" in junk.text
    assert junk.error is None or junk.error.startswith("SandboxTampered"), junk.error
    after = run(sandbox, "echo next")
    assert (after.exit_code, after.error, after.text) == (0, None, "next\n")


def test_a_left_stdin_reader_is_killed_on_its_own_step(
    sandbox: Sandbox, workdir: Path, env_of: EnvOf
) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("finding the shell's stdin holders reads other processes' /proc (root)")
    sandbox.reset(env_of(workdir=str(workdir)))
    # holding it when the step ends: killed then; opening it later: killed when it bites
    thief = run(sandbox, "(sleep 1; cat /proc/$$/fd/0) & (cat <&0 &) ; echo started")
    assert thief.error is None or thief.error.startswith("SandboxTampered"), thief.error
    after = run(sandbox, "sleep 2; echo next")
    assert not after.timed_out and after.text.endswith("next\n"), after
    assert "__fidelity" not in after.text  # the harness's own line never shows
    assert after.error is None or after.error.startswith("SandboxInterrupted"), after.error


def test_a_program_left_reading_by_keystrokes_does_not_eat_the_next_command(
    sandbox: Sandbox, workdir: Path, env_of: EnvOf
) -> None:
    import os

    if os.geteuid() != 0:
        pytest.skip("finding the shell's stdin holders reads other processes' /proc (root)")
    sandbox.reset(env_of(workdir=str(workdir)))
    typed = sandbox.step(KeystrokesAction(keys="cat\n", duration=0.2))
    assert typed.error is None
    after = run(sandbox, "echo after")
    assert not after.timed_out and after.text.endswith("after\n")
    assert after.error is not None and after.error.startswith("SandboxInterrupted")
