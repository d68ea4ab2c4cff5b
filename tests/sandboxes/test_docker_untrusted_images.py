"""An image a dataset names is data: its ENTRYPOINT, HEALTHCHECK and code-running ENV never
run, and an image that is not here is pulled only as the operator allows (``pull``,
``pull_registries``), on the ``env.image`` and the SWE-bench instance paths alike.

Pulls are proven absent, not assumed: the references name a registry on loopback that counts
connections (:mod:`tests.loopback_registry`), with a control that the same reference, where
pulling is allowed, does reach it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from fidelity.compare import get_comparator
from fidelity.compare.base import CompareContext
from fidelity.pipeline import Replayed, replay, replay_or_fail, unverifiable_reason
from fidelity.sandboxes import docker as docker_backend
from fidelity.sandboxes.docker import LABEL_OWNER, DockerConfig, DockerSandbox
from fidelity.sandboxes.images import (
    PullPolicy,
    docker_client,
    ensure_image,
    registry_of,
    withheld_variable,
)
from fidelity.sandboxes.pool import close_pools, new_sandbox
from fidelity.trajectory import (
    CommandAction,
    EnvSpec,
    InstanceSpec,
    KeystrokesAction,
    Observation,
    Step,
    SweInstance,
    Trajectory,
)
from tests.conftest import no_new_containers, owned_containers
from tests.loopback_registry import LoopbackRegistry, loopback_registry

ORIGINAL = "original notes\n"
FORGED = "forged notes\n"
# rewrites the workspace (and leaves a mark) when run, then runs what it was given
FORGE = """\
#!/bin/sh
for notes in /workspace/notes.txt /testbed/notes.txt; do
    if [ -e "$notes" ]; then printf 'forged notes\\n' > "$notes"; fi
done
touch /forge-ran
exec "$@"
"""
ENTRYPOINT = """\
USER root
COPY forge.sh /forge.sh
ENTRYPOINT ["/forge.sh"]
HEALTHCHECK --interval=1s CMD ["/forge.sh", "true"]
"""
TESTBED = """\
RUN mkdir /testbed && printf 'original notes\\n' > /testbed/notes.txt && cd /testbed \\
 && git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init
WORKDIR /testbed
"""
HOOKS = """\
USER root
RUN printf 'touch /bash-env-ran\\ncat() { echo forged notes; }\\n' > /hook.sh
ENV BASH_ENV=/hook.sh PROMPT_COMMAND="touch /prompt-ran" BASH_FUNC_ls%%="() { echo forged; }" \\
    OWN_MODE=kept
"""
LOADER = """\
USER root
ENV LD_PRELOAD=/no-such-preload.so LD_AUDIT=/no-such-audit.so OWN_MODE=kept
"""


# -- which registry, which pulls: no daemon needed ----------------------------------------


@pytest.mark.parametrize(
    ("reference", "registry"),
    [
        ("ubuntu", "docker.io"),
        ("ubuntu:22.04", "docker.io"),
        ("swebench/sweb.eval.x86_64.a_1776_b:latest", "docker.io"),
        ("library/ubuntu@sha256:" + "0" * 64, "docker.io"),
        ("index.docker.io/library/ubuntu", "docker.io"),
        ("docker.io/xingyaoww/sweb.eval.x86_64.a_s_b:latest", "docker.io"),
        ("ghcr.io/acme/runtime:2026.11", "ghcr.io"),
        ("registry.example:5000/team/image", "registry.example:5000"),
        ("localhost/image:1", "localhost"),
        ("127.0.0.1:5000/image", "127.0.0.1:5000"),
        ("Mirror/image", "mirror"),  # a capital letter: Docker reads a host
    ],
)
def test_the_registry_of_a_reference_is_dockers(reference: str, registry: str) -> None:
    assert registry_of(reference) == registry


def test_pulls_are_refused_unless_the_operator_allows_them() -> None:
    assert PullPolicy().refusal("ubuntu") == (
        "image 'ubuntu' is not here and is not pulled: --pull pulls it"
    )
    assert PullPolicy(pull=True).refusal("ubuntu") is None
    limited = DockerConfig(pull=True, pull_registries=["Registry.Example", "index.docker.io"])
    assert limited.pull_registries == ["registry.example", "docker.io"]
    policy = limited.pull_policy()
    assert policy.refusal("registry.example/team/x:1") is None
    assert policy.refusal("team/x:1") is None  # docker.io, named as index.docker.io
    assert policy.refusal("ghcr.io/team/x:1") == (
        "image 'ghcr.io/team/x:1' is not here and is not pulled: its registry ghcr.io is not "
        "one --pull-registry names (docker.io, registry.example)"
    )
    with pytest.raises(ValidationError, match="not a registry host"):
        DockerConfig(pull=True, pull_registries=["https://registry.example/v2"])


@pytest.mark.parametrize(
    ("name", "withheld"),
    [
        ("BASH_ENV", True), ("ENV", True), ("PROMPT_COMMAND", True), ("PS4", True),
        ("SHELLOPTS", True), ("BASHOPTS", True), ("BASH_FUNC_ls%%", True),
        ("LD_PRELOAD", True), ("LD_AUDIT", True), ("GCONV_PATH", True),
        ("PATH", False), ("LANG", False), ("LD_LIBRARY_PATH", False),
        ("CONDA_DEFAULT_ENV", False), ("PYTHONPATH", False), ("HOME", False),
    ],
)  # fmt: skip
def test_variables_that_run_code_are_withheld_and_the_world_s_own_pass(
    name: str, withheld: bool
) -> None:
    assert withheld_variable(name) is withheld


# -- real containers --------------------------------------------------------------------------


def _build(base: str, body: str, tmp: Path) -> str:
    """``docker build`` of ``FROM base`` + *body* with :data:`FORGE` as ``forge.sh`` in its
    context (nothing pulled); a tag by content hash."""
    dockerfile = f"FROM {base}\n{body}"
    tag = (
        f"fidelity-test-untrusted:{hashlib.sha256((dockerfile + FORGE).encode()).hexdigest()[:12]}"
    )
    context = tmp / tag.replace(":", "-")
    context.mkdir()
    (context / "Dockerfile").write_text(dockerfile)
    (context / "forge.sh").write_text(FORGE)
    (context / "forge.sh").chmod(0o755)
    subprocess.run(
        ["docker", "build", "-q", "--network", "none", "-t", tag, str(context)],
        check=True,
        capture_output=True,
    )
    return tag


@pytest.fixture(scope="module")
def images(docker: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    tmp = tmp_path_factory.mktemp("untrusted")
    swe, terminal = ensure_image("swe"), ensure_image("terminal")
    return {
        "entrypoint": _build(terminal, ENTRYPOINT, tmp),
        "entrypoint-swe": _build(swe, ENTRYPOINT + TESTBED, tmp),
        "bash-hooks": _build(terminal, HOOKS, tmp),
        "loader": _build(terminal, LOADER, tmp),
    }


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    with no_new_containers():
        yield


@pytest.fixture
def registry() -> Iterator[LoopbackRegistry]:
    with loopback_registry() as listening:
        yield listening


@pytest.fixture
def notes(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "notes.txt").write_text(ORIGINAL)
    return folder


def _trajectory(image: str, workdir: Path | None, *commands: str) -> Trajectory:
    return Trajectory(
        id="named-image",
        domain="terminal",
        env=EnvSpec(backend="docker", image=image, workdir=str(workdir) if workdir else None),
        steps=[Step(action=CommandAction(command=c)) for c in commands],
    )


def _health(box: DockerSandbox) -> tuple[object, object]:
    """The healthcheck of the sandbox's container, as configured and as its state shows."""
    [container] = docker_client().containers.list(filters={"label": f"{LABEL_OWNER}={os.getpid()}"})
    config = container.attrs["Config"].get("Healthcheck")
    return config, container.attrs["State"].get("Health")


def _check_untouched(replayed: Replayed, trajectory: Trajectory) -> None:
    """The workspace as the dataset gave it, so the forged observation drifts."""
    assert replayed.error is None
    real = replayed.steps[0].observation
    assert real.text == ORIGINAL and real.exit_code == 0
    assert replayed.steps[1].observation.text == ""  # neither the entrypoint nor the check ran
    comparator = get_comparator("terminal")
    context = CompareContext(action=trajectory.steps[0].action, depth=1)
    forged = Observation(text=FORGED, exit_code=0, cwd="/workspace")
    assert comparator.compare(real, forged, context).drift
    assert not comparator.compare(real, real.model_copy(), context).drift  # the control


@pytest.mark.docker
def test_an_entrypoint_that_rewrites_the_workspace_never_runs_so_a_forgery_drifts(
    images: dict[str, str], notes: Path, no_leftovers: None
) -> None:
    trajectory = _trajectory(
        images["entrypoint"], notes, "cat notes.txt", "test -e /forge-ran && echo forge ran"
    )
    config = DockerConfig(step_timeout=20, warm=1)
    try:
        _check_untouched(replay(trajectory, config), trajectory)  # a container made on demand
        close_pools()  # that sandbox, kept idle for the next lease
        for pool in list(docker_backend._pools.values()):  # the one it started for the next
            with pool.idle:
                assert pool.idle.wait_for(lambda pool=pool: pool.pending == 0, timeout=120)
        warm = set(owned_containers())
        assert len(warm) == 1
        _check_untouched(replay(trajectory, config), trajectory)  # the warm one
        close_pools()
        assert not warm & set(owned_containers())  # it was taken (and removed after)
    finally:
        docker_backend.close_pools()


@pytest.mark.docker
def test_the_swe_sandbox_runs_no_entrypoint_and_no_healthcheck(
    images: dict[str, str], no_leftovers: None
) -> None:
    box = new_sandbox({"domain": "swe", "step_timeout": 30})
    with box:
        assert (
            box.reset(EnvSpec(backend="docker", image=images["entrypoint-swe"])).cwd == "/testbed"
        )
        assert box.step(CommandAction(command="cat notes.txt")).text == ORIGINAL
        assert box.step(CommandAction(command="ls /forge-ran 2>&1")).exit_code != 0
        config, state = _health(box)
    assert isinstance(config, dict) and config["Test"] == ["NONE"] and state is None


@pytest.mark.docker
def test_an_image_env_that_makes_bash_run_code_is_withheld(
    images: dict[str, str], notes: Path, no_leftovers: None
) -> None:
    probe = (
        "cat notes.txt; ls /bash-env-ran 2>&1; bash -c 'cat notes.txt'; "
        'echo "mode=$OWN_MODE bash_env=${BASH_ENV-unset}"; type -t ls'
    )
    config = DockerConfig(step_timeout=20, terminal="tmux")
    with DockerSandbox(config) as box:
        box.reset(EnvSpec(backend="docker", image=images["bash-hooks"], workdir=str(notes)))
        box.step(KeystrokesAction(keys="true"))  # an interactive prompt in the pane
        box.step(KeystrokesAction(keys="Enter"))
        shown = box.step(CommandAction(command=probe)).text
        prompt = box.step(CommandAction(command="ls /prompt-ran 2>&1")).exit_code
    assert shown.splitlines() == [
        ORIGINAL.strip(),  # no function of BASH_ENV's file in the shell
        "ls: cannot access '/bash-env-ran': No such file or directory",  # it never ran
        ORIGINAL.strip(),  # nor in a child bash
        "mode=kept bash_env=unset",  # the image's other ENV is its world and passes
        "file",  # ls is ls, not an exported BASH_FUNC_ls%% function
    ]
    assert prompt != 0  # the pane's interactive bash ran no PROMPT_COMMAND


@pytest.mark.docker
def test_an_image_env_that_makes_the_loader_run_code_is_withheld(
    images: dict[str, str], notes: Path, no_leftovers: None
) -> None:
    probe = (
        'cat notes.txt; echo "preload=${LD_PRELOAD-unset} audit=${LD_AUDIT-unset}"; '
        "tr '\\0' '\\n' < /proc/1/environ | grep -c '^LD_[A-Z]*=.'"
    )
    with DockerSandbox(DockerConfig(step_timeout=20)) as box:
        box.reset(EnvSpec(backend="docker", image=images["loader"], workdir=str(notes)))
        shown = box.step(CommandAction(command=probe)).text
    assert shown.splitlines() == [
        ORIGINAL.strip(),  # no ld.so error about a library it would load into every program
        "preload=unset audit=unset",
        "0",  # blanked for the container's own processes too (init, the keepalive)
    ]


def _unverifiable(replayed: Replayed) -> str:
    reason = unverifiable_reason(replayed.error)
    assert reason is not None, replayed.error
    assert "\n" not in reason
    return reason


@pytest.mark.docker
def test_a_missing_image_is_unverifiable_and_not_pulled_without_pull(
    docker: None, registry: LoopbackRegistry, no_leftovers: None
) -> None:
    image = registry.image("fidelity/absent:1")
    trajectory = _trajectory(image, None, "true")
    reason = _unverifiable(replay_or_fail(trajectory, DockerConfig(step_timeout=20)))
    assert reason == f"image {image!r} is not here and is not pulled: --pull pulls it"
    assert registry.connections() == 0
    # the control: allowed, the same reference is pulled (and fails: nothing is served)
    pulled = _unverifiable(replay_or_fail(trajectory, DockerConfig(step_timeout=20, pull=True)))
    assert pulled.startswith(f"image {image!r} is not here and pulling it failed: ")
    assert registry.connections() > 0


@pytest.mark.docker
def test_pull_registries_limit_what_is_pulled(
    docker: None, registry: LoopbackRegistry, no_leftovers: None
) -> None:
    limited = DockerConfig(step_timeout=20, pull=True, pull_registries=["registry.example"])
    hub = _trajectory("fidelity-test/absent-on-the-hub:1", None, "true")
    assert _unverifiable(replay_or_fail(hub, limited)) == (
        "image 'fidelity-test/absent-on-the-hub:1' is not here and is not pulled: its registry "
        "docker.io is not one --pull-registry names (registry.example)"
    )
    image = registry.image("fidelity/absent:1")
    loopback = _trajectory(image, None, "true")
    assert f"its registry {registry.host} is not one" in _unverifiable(
        replay_or_fail(loopback, limited)
    )
    assert registry.connections() == 0
    allowed = limited.model_copy(update={"pull_registries": [registry.host]})
    assert "pulling it failed" in _unverifiable(replay_or_fail(loopback, allowed))
    assert registry.connections() > 0  # the control: a listed registry is pulled from


def _instance(image: str | None) -> Trajectory:
    record = SweInstance.model_validate(
        {
            "instance_id": "kjd__idna-90003",
            "repo": "kjd/idna",
            "version": "3.7",
            "base_commit": "0" * 40,
            "environment_setup_commit": "0" * 40,
            "test_patch": "",
            "FAIL_TO_PASS": [],
            "PASS_TO_PASS": [],
            "image": image,
        }
    )
    return Trajectory(
        id="instance",
        domain="swe",
        env=EnvSpec(
            backend="docker", instance=InstanceSpec(instance_id=record.instance_id, record=record)
        ),
        steps=[Step(action=CommandAction(command="true"))],
    )


@pytest.mark.docker
def test_an_instance_image_is_pulled_only_under_the_same_rule(
    docker: None, registry: LoopbackRegistry, no_leftovers: None
) -> None:
    own = registry.image("swe/sweb.eval.x86_64.kjd_1776_idna-90003:latest")
    mirrored = registry.image("mirror/sweb.eval.x86_64.kjd_1776_idna-90003:latest")
    plain = DockerConfig(step_timeout=20, domain="swe")
    # the record's own image, and the name --swebench-namespace derives for a mirror
    for config, image in (
        (plain, own),
        (plain.model_copy(update={"swebench_namespace": registry.image("mirror")}), mirrored),
    ):
        replayed = replay_or_fail(_instance(own), config)
        assert _unverifiable(replayed) == (
            f"image {image!r} is not here and is not pulled: --pull pulls it"
        )
        assert replayed.outcome is not None and replayed.outcome.status == "unverifiable"
    assert registry.connections() == 0
    pulled = replay_or_fail(_instance(own), plain.model_copy(update={"pull": True}))
    assert "pulling it failed" in _unverifiable(pulled)
    assert registry.connections() > 0  # the control
