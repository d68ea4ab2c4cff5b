"""Trajectories on their own images (``env.image``): honoured, checked, or unverifiable."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fidelity.compare import get_comparator
from fidelity.compare.base import CompareContext
from fidelity.pipeline import replay, replay_or_fail, unverifiable_reason
from fidelity.sandboxes.docker import DockerConfig, DockerSandbox, ImageUnsuitableError
from fidelity.sandboxes.images import ensure_image
from fidelity.sandboxes.pool import new_sandbox
from fidelity.trajectory import CommandAction, EnvSpec, Step, ToolAction, Trajectory
from tests.conftest import no_new_containers

pytestmark = pytest.mark.docker

MISSING = "fidelity-no-such-image:never"
TESTBED = """\
USER root
RUN useradd -m -u 1001 testbed && mkdir -p /testbed /opt/own/bin \\
 && printf '#!/bin/sh\\necho own-tool\\n' > /opt/own/bin/own-tool && chmod 755 /opt/own/bin/own-tool \\
 && printf 'def add(a, b):\\n    return a - b\\n' > /testbed/calc.py \\
 && cd /testbed && git init -q && git add -A \\
 && git -c user.name=t -c user.email=t@t commit -qm init && chown -R testbed /testbed
ENV OWN_MODE=testbed PATH=/opt/own/bin:/usr/local/bin:/usr/bin:/bin
USER testbed
WORKDIR /testbed
"""
PLAIN = """\
USER root
RUN mkdir -p /srv/app && printf 'hello\\n' > /srv/app/readme
ENV OWN_MODE=plain
WORKDIR /srv/app
"""
NO_PYTHON = "USER root\nRUN rm -f /usr/bin/python3*\n"
NO_BASH = "USER root\nRUN rm -f /bin/bash /usr/bin/bash\n"


def _build(base: str, body: str, tmp: Path) -> str:
    """``docker build`` of ``FROM base`` + *body* (nothing pulled); a tag by content hash."""
    dockerfile = f"FROM {base}\n{body}"
    tag = f"fidelity-test-own:{hashlib.sha256(dockerfile.encode()).hexdigest()[:12]}"
    context = tmp / tag.replace(":", "-")
    context.mkdir()
    (context / "Dockerfile").write_text(dockerfile)
    subprocess.run(
        ["docker", "build", "-q", "--network", "none", "-t", tag, str(context)],
        check=True,
        capture_output=True,
    )
    return tag


@pytest.fixture(scope="module")
def images(docker: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("images")
    swe, terminal = ensure_image("swe"), ensure_image("terminal")
    return {
        "testbed": _build(swe, TESTBED, tmp),
        "plain": _build(terminal, PLAIN, tmp),
        "no-python": _build(swe, NO_PYTHON, tmp),
        "no-bash": _build(terminal, NO_BASH, tmp),
    }


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    with no_new_containers(every_owner=True):
        yield


def _run(box: DockerSandbox, command: str) -> str:
    return box.step(CommandAction(command=command)).text


def test_the_image_workdir_user_and_env_are_honoured(
    images: dict[str, str], no_leftovers: None
) -> None:
    with DockerSandbox(DockerConfig(step_timeout=20)) as box:
        start = box.reset(EnvSpec(backend="docker", image=images["testbed"]))
        assert start.cwd == "/testbed"
        assert _run(box, "pwd; id -un; echo $OWN_MODE; own-tool").split() == [
            "/testbed",
            "testbed",
            "testbed",
            "own-tool",
        ]
        box.reset(EnvSpec(backend="docker", image=images["plain"], env={"OWN_MODE": "mine"}))
        assert _run(box, "pwd; id -un; echo $OWN_MODE; cat readme").split() == [
            "/srv/app",
            "root",
            "mine",
            "hello",
        ]


def test_a_trajectory_workdir_wins_over_the_image_workdir(
    images: dict[str, str], tmp_path: Path, no_leftovers: None
) -> None:
    (tmp_path / "mine.txt").write_text("mine\n")
    env = EnvSpec(backend="docker", image=images["plain"], workdir=str(tmp_path))
    with DockerSandbox(DockerConfig(step_timeout=20)) as box:
        assert box.reset(env).cwd == "/workspace"
        assert _run(box, "cat mine.txt") == "mine\n"


def _suite(images: dict[str, str]) -> list[Trajectory]:
    commands = {
        "testbed": ["pwd", "cat calc.py", "echo $OWN_MODE > mode.txt && cat mode.txt", "ls"],
        "plain": ["ls -la readme | cut -c1-10", "wc -c readme", "echo $OWN_MODE", "id -u"],
    }
    return [
        Trajectory(
            id=f"own-{name}",
            domain="terminal",
            env=EnvSpec(backend="docker", image=images[name]),
            steps=[Step(action=CommandAction(command=c)) for c in lines],
        )
        for name, lines in commands.items()
    ]


ONLY_THERE = {
    "own-testbed": [
        ["/testbed"],
        ["def", "add(a,", "b):", "return", "a", "-", "b"],
        ["testbed"],
        ["calc.py", "mode.txt"],
    ],
    "own-plain": [["-rw-r--r--"], ["6", "readme"], ["plain"], ["0"]],
}
"""What each step of :func:`_suite` shows in its own image only (its workdir, files, ENV, user):
two replays in any other world would agree as well."""


def test_two_real_replays_on_two_images_agree(images: dict[str, str], no_leftovers: None) -> None:
    config = DockerConfig(step_timeout=20)
    comparator = get_comparator("terminal")
    steps = drifted = 0
    for trajectory in _suite(images):
        first, second = replay(trajectory, config), replay(trajectory, config)
        assert first.error is None and second.error is None
        for replayed in (first, second):  # each in the image the trajectory names
            seen = [step.observation.text.split() for step in replayed.steps]
            assert seen == ONLY_THERE[trajectory.id], seen
        for depth, (a, b) in enumerate(zip(first.steps, second.steps, strict=True), 1):
            assert a.observation.error is None, a.observation
            context = CompareContext(action=trajectory.steps[depth - 1].action, depth=depth)
            steps += 1
            drifted += comparator.compare(a.observation, b.observation, context).drift
    assert steps == 8
    assert drifted / steps < 0.01


def test_the_swe_tools_work_inside_an_own_image(images: dict[str, str], no_leftovers: None) -> None:
    box = new_sandbox({"domain": "swe", "step_timeout": 30})
    with box:
        start = box.reset(EnvSpec(backend="docker", image=images["testbed"]))
        assert start.cwd == "/testbed"
        edit = ToolAction(
            tool="str_replace_editor",
            args={
                "command": "str_replace",
                "path": "/testbed/calc.py",
                "old_str": "a - b",
                "new_str": "a + b",
            },
        )
        edited = box.step(edit)
        assert "has been edited" in edited.text, edited.text
        submitted = box.step(ToolAction(tool="submit", args={}))
        assert "+    return a + b" in submitted.text
        assert edited.state is not None and edited.state["changed_files"] == ["calc.py"]


@pytest.mark.parametrize(
    ("image", "domain", "missing"),
    [("no-python", "swe", "python3"), ("no-bash", "terminal", "bash (/bin/bash)")],
)
def test_an_image_lacking_what_the_harness_needs_is_one_line(
    images: dict[str, str], image: str, domain: str, missing: str, no_leftovers: None
) -> None:
    box = new_sandbox({"domain": domain, "step_timeout": 20})
    with box, pytest.raises(ImageUnsuitableError) as caught:
        box.reset(EnvSpec(backend="docker", image=images[image]))
    message = str(caught.value)
    assert "\n" not in message
    assert f"lacks {missing}," in message and images[image] in message
    assert caught.value.exit_code == 2


def test_a_missing_image_is_unverifiable_with_the_reason(
    images: dict[str, str], no_leftovers: None
) -> None:
    suite = _suite(images)
    missing = suite[0].model_copy(
        update={"id": "own-missing", "env": EnvSpec(backend="docker", image=MISSING)}
    )
    config = DockerConfig(step_timeout=20)
    lost = replay_or_fail(missing, config)
    reason = unverifiable_reason(lost.error)
    assert (
        reason is not None
        and MISSING in reason
        and "is not here and is not pulled: --pull pulls it" in reason
    )
    assert [s.observation.error for s in lost.steps] == [lost.error] * 4
    kept = replay_or_fail(suite[1], config)  # the others go on
    assert kept.error is None and unverifiable_reason(kept.error) is None
