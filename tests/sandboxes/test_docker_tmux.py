"""tmux keystrokes in Docker: 160x40 pane, tmux key names, settle by unchanged captures."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fidelity.sandboxes.docker import DockerConfig, DockerSandbox
from fidelity.sandboxes.images import ensure_image
from fidelity.trajectory import CommandAction, EnvSpec, KeystrokesAction

pytestmark = pytest.mark.docker


@pytest.fixture
def tmux_box(docker: None, tmp_path: Path) -> Iterator[DockerSandbox]:
    (tmp_path / "hello.txt").write_text("hello world\n")
    box = DockerSandbox(DockerConfig(image=ensure_image("terminal"), terminal="tmux"))
    try:
        box.reset(EnvSpec(workdir=str(tmp_path)))
        yield box
    finally:
        box.close()


def keys(box: DockerSandbox, text: str, duration: float = 0.0) -> str:
    return box.step(KeystrokesAction(keys=text, duration=duration)).text


def test_typed_line_and_enter_key(tmux_box: DockerSandbox) -> None:
    assert keys(tmux_box, "cat hello.txt").endswith("$ cat hello.txt\n")  # typed, not run
    screen = keys(tmux_box, "Enter")
    assert "$ cat hello.txt\nhello world\nagent@sandbox:/workspace$\n" in screen


def test_screen_is_160_by_40(tmux_box: DockerSandbox) -> None:
    keys(tmux_box, "stty size; tput cols")
    assert "\n40 160\n160\n" in keys(tmux_box, "Enter")


def test_ctrl_c_interrupts_a_running_program(tmux_box: DockerSandbox) -> None:
    keys(tmux_box, "sleep 300")
    assert not keys(tmux_box, "Enter").rstrip().endswith("$")  # still running
    screen = keys(tmux_box, "C-c")
    assert screen.rstrip().endswith("^C\nagent@sandbox:/workspace$")


def test_settles_on_unchanged_output_not_a_fixed_sleep(
    tmux_box: DockerSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step reads the pane until it stops changing: the program finishes only once the
    step's first capture is taken (it waits for a file that capture creates), so a step
    that returned its first screen, or one after a fixed sleep, would miss its end."""
    captures: list[str] = []
    capture = tmux_box._capture

    def recorded() -> str:
        screen = capture()
        if not captures:  # the first capture: now let the program finish
            tmux_box._run_command("touch /tmp/go", 10.0, internal=True)
        captures.append(screen)
        return screen

    # (the outputs are not in the command line: the pane shows it too)
    keys(
        tmux_box,
        "echo start-$((1+1)); until [ -e /tmp/go ]; do sleep 0.01; done; echo end-$((2+2))",
    )
    monkeypatch.setattr(tmux_box, "_capture", recorded)
    settled = tmux_box.step(KeystrokesAction(keys="Enter"))
    assert "\nstart-2\nend-4\n" in settled.text and not settled.timed_out
    assert "end-4" not in captures[0]  # taken while the program ran: it waited for more
    reads = tmux_box.config.settle_reads
    assert captures[-reads:] == [settled.text] * reads  # ended on unchanged captures


def test_commands_still_run_beside_the_pane(tmux_box: DockerSandbox) -> None:
    keys(tmux_box, "cd /tmp")
    keys(tmux_box, "Enter")
    ran = tmux_box.step(
        CommandAction(command="pwd; tmux -L fidelity display -p '#{pane_current_path}'")
    )
    assert ran.text == "/workspace\n/tmp\n" and ran.exit_code == 0
