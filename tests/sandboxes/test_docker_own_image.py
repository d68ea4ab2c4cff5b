"""The per-image Docker backend (``env.image``): the conformance suite on an image fidelity did
not build, containment inside it, and nothing left after a SIGKILL of the auditor.

The user-style image is built here ``FROM`` the local fidelity-base image (no registry) with
its own ``USER``, ``WORKDIR`` and ``ENV``, as a user's image would have them.
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakes.trajectories import command_trajectory
from fidelity.formats.jsonl import write_trajectories
from fidelity.sandboxes.base import Sandbox
from fidelity.sandboxes.docker import LABEL_OWNER, DockerConfig, DockerSandbox
from fidelity.sandboxes.images import base_tag, docker_client, ensure_base
from fidelity.trajectory import Action, CommandAction, EnvSpec
from tests.sandboxes.conformance import *  # noqa: F403 - the shared conformance suite
from tests.sandboxes.conformance import EnvOf, run
from tests.sandboxes.conformance_lifecycle import *  # noqa: F403 - the lifecycle half
from tests.system.test_chaos import kill, leftovers_vanish, processes_with, start_audit, wait_until

pytestmark = pytest.mark.docker

USER_IMAGE = """\
USER root
RUN useradd -m -u 1234 appuser && mkdir -p /srv/app && echo 'their app' > /srv/app/README \\
 && chown -R appuser /srv/app
ENV APP_MODE=theirs
USER appuser
WORKDIR /srv/app
"""


@pytest.fixture(scope="module")
def user_image(docker: None, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A user's image: ``FROM`` the local base, its own user, folder and environment."""
    base = ensure_base(docker_client(), lambda message: None)
    assert base == base_tag()
    dockerfile = f"FROM {base}\n{USER_IMAGE}"
    tag = f"fidelity-test-user:{hashlib.sha256(dockerfile.encode()).hexdigest()[:12]}"
    context = tmp_path_factory.mktemp("user-image")
    (context / "Dockerfile").write_text(dockerfile)
    subprocess.run(
        ["docker", "build", "-q", "--network", "none", "-t", tag, str(context)],
        check=True,
        capture_output=True,
    )
    return tag


@pytest.fixture
def env_of(user_image: str) -> EnvOf:
    """Every spec the conformance suite resets to names the user's image."""
    return functools.partial(EnvSpec, backend="docker", image=user_image)


@pytest.fixture
def sandbox() -> Iterator[DockerSandbox]:
    box = DockerSandbox(DockerConfig(step_timeout=10, max_disk_mb=64))
    try:
        yield box
    finally:
        box.close()


# -- the lifecycle half's fixtures -----------------------------------------------------


@pytest.fixture
def env(user_image: str) -> EnvSpec:
    return EnvSpec(backend="docker", image=user_image)


@pytest.fixture
def ok_action() -> Action:
    return CommandAction(command="cat README")


@pytest.fixture
def bad_action() -> Action:
    return CommandAction(command="echo 'unterminated")


@pytest.fixture
def dirty_actions() -> list[Action]:
    return [CommandAction(command="echo scribble > README; touch new-file")]


@pytest.fixture
def probe_action() -> Action:
    return CommandAction(command="cat README; ls")


def _containers(**labels: str) -> list[str]:
    filters = [arg for k, v in labels.items() for arg in ("--filter", f"label={k}={v}")]
    out = subprocess.run(
        ["docker", "ps", "-aq", *filters], capture_output=True, text=True, check=True
    ).stdout
    return out.split()


@pytest.fixture
def leftovers() -> Leftovers:  # noqa: F405 - from conformance_lifecycle
    """The containers the sandbox was seen running that still exist (after close: none)."""
    seen: set[str] = set()

    def held(sandbox: Sandbox) -> list[str]:
        assert isinstance(sandbox, DockerSandbox)
        if sandbox._container is not None:
            seen.add(sandbox._container.id)
        return [c for c in seen if _containers_with_id(c)]

    return held


def _containers_with_id(container_id: str) -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--no-trunc", "--filter", f"id={container_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


# -- the image's own settings and containment inside it --------------------------------


def test_the_user_image_is_entered_as_it_says(sandbox: DockerSandbox, user_image: str) -> None:
    start = sandbox.reset(EnvSpec(backend="docker", image=user_image))
    assert start.cwd == "/srv/app"
    assert run(sandbox, "id -un; echo $APP_MODE; cat README").text.split() == [
        "appuser",
        "theirs",
        "their",
        "app",
    ]


def test_containment_holds_inside_the_user_image(
    sandbox: DockerSandbox, user_image: str, workdir: Path
) -> None:
    sandbox.reset(EnvSpec(backend="docker", image=user_image, workdir=str(workdir)))
    bomb = run(sandbox, ":(){ :|:& };:", timeout=120)
    assert bomb.error is not None and "process limit" in bomb.error
    assert run(sandbox, "echo survived; cat hello.txt").text == "survived\nhello world\n"
    assert run(sandbox, "touch /usr/owned-by-the-agent").exit_code != 0
    assert run(sandbox, "ls /sys/class/net").text.split() == ["lo"]
    host = docker_client().containers.get(sandbox._container.id).attrs["HostConfig"]
    assert host["NetworkMode"] == "none" and host["CapDrop"] == ["ALL"]
    assert "no-new-privileges" in host["SecurityOpt"]


@pytest.mark.slow
def test_sigkill_of_an_audit_on_a_user_image_leaves_nothing(
    user_image: str, tmp_path: Path
) -> None:
    marker = f"sleep {5000 + secrets.randbelow(999)}"
    suite = tmp_path / "suite.jsonl"
    slow = command_trajectory("slow", "echo start", marker)
    slow = slow.model_copy(update={"env": EnvSpec(backend="docker", image=user_image)})
    write_trajectories(suite, [slow])
    sandbox_tmp = tmp_path / "tmp"
    sandbox_tmp.mkdir()
    proc = start_audit(tmp_path, sandbox_tmp, suite, "--sandbox", "docker")
    wait_until(lambda: processes_with(marker), "the agent's command running", proc)
    assert _containers(**{LABEL_OWNER: str(proc.pid)})
    kill(proc)

    def count() -> dict[str, int]:
        return {
            "containers": len(_containers(**{LABEL_OWNER: str(proc.pid)})),
            "agent processes": len(processes_with(marker)),
        }

    assert leftovers_vanish(count) == {}
