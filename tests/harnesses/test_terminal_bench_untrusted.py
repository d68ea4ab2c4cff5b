"""A Terminal-Bench task folder comes with a dataset: its compose file and Dockerfile are data.

Nothing of the compose file but the build's context, Dockerfile, arguments and environment
reaches the container (no mount, privilege, network, capability, device or entrypoint), the
build reads no file outside the task folder, its environment sets nothing that makes bash or
the loader run code, and building it pulls no image and fetches no URL the operator did not
allow: the daemon would pull a ``FROM`` image and download an ``ADD`` URL itself, whatever
the build's network. Pulls and fetches are proven absent by a registry address on loopback
that counts connections, with a control that an allowed pull reaches it.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fidelity.errors import InputFormatError
from fidelity.harnesses import dockerfile
from fidelity.harnesses.terminal_bench import load_task
from fidelity.pipeline import Replayed, load_suite, replay_or_fail, unverifiable_reason
from fidelity.resources import data_dir
from fidelity.sandboxes.docker import DockerConfig
from fidelity.trajectory import CommandAction, EnvSpec, Step, Trajectory
from tests.conftest import no_new_containers
from tests.loopback_registry import LoopbackRegistry, loopback_registry

TASK = data_dir("suites") / "terminal" / "tasks" / "count-server-errors"
DOCKERFILE = """\
ARG BASE=fidelity-terminal
FROM ${BASE}
USER root
WORKDIR /app
COPY access.log /app/access.log
"""
COMPOSE = """\
services:
  client:
    build:
      dockerfile: Dockerfile
    environment:
      - TEST_DIR=${T_BENCH_TEST_DIR}
"""


def _task(tmp_path: Path, name: str, dockerfile_text: str = DOCKERFILE) -> Path:
    """A copy of the bundled task without its wheels (nothing fetched), with *dockerfile_text*."""
    folder = tmp_path / name
    shutil.copytree(TASK, folder)
    (folder / "wheels.toml").unlink()
    (folder / "Dockerfile").write_text(dockerfile_text)
    (folder / "docker-compose.yaml").write_text(COMPOSE)
    return folder


def _compose(folder: Path, client: str) -> None:
    (folder / "docker-compose.yaml").write_text(
        "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n" + client
    )


def _trajectory(folder: Path, *commands: str) -> Trajectory:
    return Trajectory(
        id="tb-untrusted",
        domain="terminal",
        env=EnvSpec(backend="docker", task=str(folder)),
        steps=[Step(action=CommandAction(command=c)) for c in commands],
    )


# -- the compose file and the Dockerfile, read: no daemon needed -------------------------


@pytest.mark.parametrize(
    "client",
    [
        "    privileged: true\n",
        "    cap_add: [SYS_ADMIN]\n",
        "    network_mode: host\n",
        "    devices: ['/dev/kmsg:/dev/kmsg']\n",
        "    entrypoint: ['/bin/sh', '-c', 'echo forged > /app/access.log; sleep infinity']\n",
        "    security_opt: ['seccomp=unconfined']\n",
        "    pid: host\n",
        "    build:\n      network: host\n",
    ],
    ids=lambda client: client.split(":")[0].strip(),
)
def test_a_compose_key_that_would_reach_the_container_is_refused(
    tmp_path: Path, client: str
) -> None:
    folder = _task(tmp_path, "keys")
    if client.lstrip().startswith("build:"):
        (folder / "docker-compose.yaml").write_text(
            "services:\n  client:\n" + client + "      dockerfile: Dockerfile\n"
        )
    else:
        _compose(folder, client)
    with pytest.raises(InputFormatError) as caught:
        load_task(folder)
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 2
    assert message.startswith(f"{folder / 'docker-compose.yaml'}: services.client.")


@pytest.mark.parametrize(
    ("build", "field", "why"),
    [
        ("      context: ..\n      dockerfile: secret.txt\n", "build.context", "outside the task"),
        ("      context: /\n      dockerfile: etc/passwd\n", "build.context", "outside the task"),
        ("      dockerfile: ../secret.txt\n", "build.dockerfile", "outside the build"),
    ],
)
def test_a_build_reads_nothing_outside_the_task_folder(
    tmp_path: Path, build: str, field: str, why: str
) -> None:
    (tmp_path / "secret.txt").write_text("FROM scratch\nthe auditor's secret\n")
    folder = _task(tmp_path, "escapes")
    (folder / "docker-compose.yaml").write_text("services:\n  client:\n    build:\n" + build)
    with pytest.raises(InputFormatError) as caught:
        load_task(folder)
    message = str(caught.value)
    assert "\n" not in message and f"services.client.{field}: " in message and why in message


def test_a_dockerfile_linked_outside_the_task_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("the auditor's secret\n")
    folder = _task(tmp_path, "linked")
    (folder / "docker-compose.yaml").unlink()
    (folder / "Dockerfile").unlink()
    (folder / "Dockerfile").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(InputFormatError, match="outside the task folder"):
        load_task(folder)


@pytest.mark.parametrize("name", ["BASH_ENV", "LD_PRELOAD", "PROMPT_COMMAND", "BASH_FUNC_ls%%"])
def test_a_compose_environment_that_makes_bash_run_code_is_refused(
    tmp_path: Path, name: str
) -> None:
    folder = _task(tmp_path, "hooks")
    _compose(folder, f"    environment:\n      - {name}=/app/forge.sh\n")
    suite = tmp_path / "suite.jsonl"
    row = _trajectory(folder, "cat /app/access.log").model_dump(mode="json", exclude_none=True)
    suite.write_text(json.dumps(row) + "\n")
    with pytest.raises(InputFormatError) as caught:
        load_suite(suite)
    message = str(caught.value)
    assert "\n" not in message and caught.value.exit_code == 2
    assert f"services.client.environment.{name}: makes bash or the loader run code" in message


def test_what_a_dockerfile_build_would_fetch_is_read_as_the_builder_reads_it() -> None:
    text = """\
# escape=`
ARG REGISTRY=ghcr.io
ARG TAG
FROM --platform=linux/amd64 ${REGISTRY}/acme/base:${TAG:-1} AS builder
RUN echo build `
    && true
FROM scratch
# a comment inside nothing
COPY --from=builder /out /out
COPY --from=0 /out /again
COPY --from=mirror.example/tools:2 /bin/tool /bin/tool
ENV SITE=https://files.example
ADD ${SITE}/data.tar /data/
ADD ["local.txt", "https://other.example/x", "/dst/"]
ADD --chown=1:1 git@github.com:acme/repo.git /repo
ONBUILD ADD https://not-this-build.example/ /x
FROM ${UNKNOWN}
"""
    found = dockerfile.reach(text, {"TAG": "7"})
    assert found.images == ["ghcr.io/acme/base:7", "mirror.example/tools:2"]
    assert found.urls == [
        "https://files.example/data.tar",
        "https://other.example/x",
        "git@github.com:acme/repo.git",
    ]
    assert found.unresolved == ["FROM ${UNKNOWN}"]
    assert dockerfile.reach(DOCKERFILE, {"BASE": "fidelity-terminal:abc"}).images == [
        "fidelity-terminal:abc"
    ]


# -- real builds and containers -------------------------------------------------------------


@pytest.fixture
def no_leftovers(docker: None) -> Iterator[None]:
    with no_new_containers():
        yield


@pytest.fixture
def registry() -> Iterator[LoopbackRegistry]:
    with loopback_registry() as listening:
        yield listening


def _unverifiable(replayed: Replayed) -> str:
    reason = unverifiable_reason(replayed.error)
    assert reason is not None, replayed.error
    assert "\n" not in reason
    return reason


@pytest.mark.docker
def test_a_task_built_on_a_missing_image_pulls_it_only_with_pull(
    tmp_path: Path, registry: LoopbackRegistry, no_leftovers: None
) -> None:
    base = registry.image("t-bench/ubuntu:1")
    folder = _task(tmp_path, "pulls", f"FROM {base}\nWORKDIR /app\n")
    trajectory = _trajectory(folder, "true")
    reason = _unverifiable(replay_or_fail(trajectory, DockerConfig(step_timeout=30)))
    assert reason == (
        "the Terminal-Bench task 'pulls' builds on an image it cannot have: "
        f"image {base!r} is not here and is not pulled: --pull pulls it"
    )
    limited = DockerConfig(step_timeout=30, pull=True, pull_registries=["registry.example"])
    assert "is not one --pull-registry names (registry.example)" in _unverifiable(
        replay_or_fail(trajectory, limited)
    )
    copies = f"ARG BASE\nFROM ${{BASE}}\nCOPY --from={base} / /x\n"  # on the local image
    copied = _task(tmp_path, "copies", copies)
    assert "--pull pulls it" in _unverifiable(
        replay_or_fail(_trajectory(copied, "true"), DockerConfig(step_timeout=30))
    )
    assert registry.connections() == 0
    allowed = DockerConfig(step_timeout=30, pull=True)
    assert "pulling it failed" in _unverifiable(replay_or_fail(trajectory, allowed))
    assert registry.connections() > 0  # the control: allowed, the same build pulls


@pytest.mark.docker
def test_a_task_whose_build_downloads_a_url_is_not_built(
    tmp_path: Path, registry: LoopbackRegistry, no_leftovers: None
) -> None:
    url = f"http://{registry.host}/payload.sh"
    folder = _task(tmp_path, "fetches", DOCKERFILE + f"ADD {url} /app/payload.sh\n")
    reason = _unverifiable(replay_or_fail(_trajectory(folder, "true"), DockerConfig()))
    assert reason == (
        f"the Terminal-Bench task 'fetches' downloads {url} in its build (ADD of a URL): "
        "a dataset's build reaches no host"
    )
    assert registry.connections() == 0


@pytest.mark.docker
def test_compose_volumes_command_and_entrypoint_do_not_reach_the_container(
    tmp_path: Path, no_leftovers: None
) -> None:
    host = tmp_path / "host-only"
    host.mkdir()
    (host / "marker").write_text("the auditor's file\n")
    folder = _task(
        tmp_path,
        "mounts",
        DOCKERFILE
        + 'ENTRYPOINT ["/bin/sh", "-c", "echo forged > /app/access.log; exec \\"$@\\"", "--"]\n',
    )
    _compose(
        folder,
        "    command: ['sh', '-c', 'echo forged > /app/access.log; sleep infinity']\n"
        f"    volumes:\n      - {host}:/app/host\n      - {host}:/mnt\n"
        "    environment:\n      - TEST_DIR=/tests\n",
    )
    replayed = replay_or_fail(
        _trajectory(folder, "ls /app/host /mnt 2>&1 | grep -c marker", "head -c 12 access.log"),
        DockerConfig(step_timeout=30),
    )
    assert replayed.error is None
    assert [s.observation.text for s in replayed.steps] == [
        "0\n",
        (TASK / "access.log").read_text()[:12],
    ]
