"""SWE-Gym and SWE-smith instances resolved by id: their image names, the records they come
in, and their grading (unverifiable without swebench 5.x's eval script).

Names follow the public sources the harness cites: SWE-Gym's images as OpenHands
(``get_instance_docker_image``) and SkyRL (``get_docker_image_name``) name them, SWE-smith's
from the record's ``image_name`` as mini-swe-agent and SWE-agent read it. The record shapes
are the datasets' (SWE-Gym: SWE-bench's fields; SWE-smith: the fields its dataset card
lists). No registry is reachable here: the Docker test tags the stand-in instance image
(:mod:`tests.harnesses.standin`) under the SWE-Gym name.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.errors import InputFormatError
from fidelity.formats.jsonl import write_trajectories
from fidelity.harnesses.swebench import grade, image_name, load_instances, options, resolve
from fidelity.pipeline import replay_or_fail
from fidelity.sandboxes import sandbox_config
from fidelity.sandboxes.base import Sandbox
from fidelity.sandboxes.images import docker_client
from fidelity.sandboxes.pool import close_pools
from fidelity.trajectory import (
    Action,
    CommandAction,
    EnvSpec,
    InstanceSpec,
    Observation,
    Outcome,
    Step,
    SweInstance,
    Trajectory,
)
from tests.harnesses import standin

GYM_ID = "python__mypy-15413"
"""A SWE-Gym-Lite instance; its published image is xingyaoww/sweb.eval.x86_64.python_s_mypy-15413."""

SMITH_ID = "oauthlib__oauthlib.1fd52536.combine_file__09vlzwgc"
SMITH_IMAGE = "jyangballin/swesmith.x86_64.oauthlib_1776_oauthlib.1fd52536"
"""A SWE-smith instance and the image its record names (as SWE-smith publishes them)."""

NOT_AN_IMAGE = "not a container image reference"


def _gym(**changes: Any) -> dict[str, Any]:
    """A record in SWE-Gym's shape (SWE-bench's fields; commits and patches are placeholders)."""
    record = {
        "instance_id": GYM_ID,
        "repo": "python/mypy",
        "version": "1.4",
        "base_commit": "0" * 40,
        "environment_setup_commit": "1" * 40,
        "patch": "diff --git a/mypy/checker.py b/mypy/checker.py\n",
        "test_patch": "diff --git a/test-data/unit/check-python38.test b/x\n",
        "problem_statement": "placeholder",
        "hints_text": "",
        "created_at": "2023-06-11T00:00:00Z",
        "FAIL_TO_PASS": '["mypy/test/testcheck.py::TypeCheckSuite::check-python38.test"]',
        "PASS_TO_PASS": "[]",
    }
    return {**record, **changes}


def _smith(**changes: Any) -> dict[str, Any]:
    """A record with exactly the fields SWE-smith's dataset card lists (no version, no
    base_commit, no environment_setup_commit, no test_patch)."""
    record = {
        "instance_id": SMITH_ID,
        "patch": "diff --git a/oauthlib/common.py b/oauthlib/common.py\n",
        "FAIL_TO_PASS": ["tests/test_common.py::ParameterTest::test_urldecode"],
        "PASS_TO_PASS": ["tests/test_common.py::ParameterTest::test_extract_params"],
        "image_name": SMITH_IMAGE,
        "repo": "swesmith/oauthlib__oauthlib.1fd52536",
        "problem_statement": "placeholder",
    }
    return {**record, **changes}


def test_swe_gym_names_are_openhands_and_skyrls() -> None:
    record = SweInstance.model_validate(_gym())
    assert image_name(record, convention="swe-gym") == (
        "xingyaoww/sweb.eval.x86_64.python_s_mypy-15413:latest"
    )
    monai = SweInstance.model_validate(_gym(instance_id="Project-MONAI__MONAI-6975"))
    assert image_name(monai, convention="swe-gym") == (
        "xingyaoww/sweb.eval.x86_64.project-monai_s_monai-6975:latest"
    )  # lower-cased, as both sources do
    assert image_name(record, "none", "swe-gym") == "sweb.eval.x86_64.python_s_mypy-15413:latest"
    assert image_name(record, "registry.example/gym/", "swe-gym") == (
        "registry.example/gym/sweb.eval.x86_64.python_s_mypy-15413:latest"
    )
    # the default convention is unchanged: swebench's own name
    assert image_name(record) == "swebench/sweb.eval.x86_64.python_1776_mypy-15413:latest"


def test_a_swe_smith_record_loads_and_names_its_own_image(tmp_path: Path) -> None:
    path = tmp_path / "smith.jsonl"
    path.write_text(json.dumps(_smith()) + "\n")
    record = load_instances(path)[SMITH_ID]
    assert (record.image_name, record.version, record.test_patch) == (SMITH_IMAGE, None, None)
    assert image_name(record, None, "swebench") == image_name(record, None, "swe-gym")
    assert image_name(record) == SMITH_IMAGE
    # an explicit namespace re-derives the name, as it does over swebench 5.x's `image`
    assert image_name(record, "none") == f"sweb.eval.x86_64.{SMITH_ID}:latest"
    # a record without image_name still needs SWE-bench's fields
    lacking = {k: v for k, v in _smith(instance_id="a__b-1").items() if k != "image_name"}
    path.write_text(json.dumps(_smith()) + "\n" + json.dumps(lacking) + "\n")
    with pytest.raises(InputFormatError, match=r"smith.jsonl:2: version: missing field"):
        load_instances(path)


@pytest.mark.parametrize("bad", ["Jyangballin/swesmith", "swesmith x86_64", "a" * 256, ""])
def test_an_image_name_that_is_not_an_image_reference_names_file_line_and_field(
    tmp_path: Path, bad: str
) -> None:
    path = tmp_path / "smith.jsonl"
    path.write_text(json.dumps(_smith(image_name=bad)) + "\n")
    with pytest.raises(InputFormatError) as caught:
        load_instances(path)
    assert str(caught.value) == (
        f"{path}:1: image_name: {NOT_AN_IMAGE} (name, name:tag, registry/name:tag or "
        "name@sha256:digest)"
    )


def test_resolve_takes_the_convention_and_the_config_carries_it(tmp_path: Path) -> None:
    path = tmp_path / "instances.jsonl"
    path.write_text(json.dumps(_gym()) + "\n" + json.dumps(_smith()) + "\n")
    config = sandbox_config("swe", "docker", {"instances": path, "instance_images": "swe-gym"})
    assert options(config) == (path, None, "swe-gym")
    assert options(sandbox_config("swe", "docker", {}))[2] == "swebench"
    gym = resolve(EnvSpec(backend="docker", instance=GYM_ID), *options(config))
    assert gym.image == "xingyaoww/sweb.eval.x86_64.python_s_mypy-15413:latest"
    assert gym.instance is not None and gym.instance.record is not None
    smith = resolve(EnvSpec(backend="docker", instance=SMITH_ID), *options(config))
    assert smith.image == SMITH_IMAGE
    own = EnvSpec(backend="docker", instance=GYM_ID, image="mine:1")
    assert resolve(own, *options(config)).image == "mine:1"  # an explicit env.image wins


class _Unused(Sandbox):
    """A sandbox grading must not touch: a record it cannot grade never runs a command."""

    name = "unused"

    def reset(self, env: EnvSpec) -> Observation:
        raise AssertionError("reset")

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        raise AssertionError(f"ran {action}")

    def close(self) -> None:
        return None


@pytest.mark.parametrize(
    ("record", "missing"),
    [(_gym(), "eval_script, log_parser, eval_type"), (_smith(), "version, eval_script")],
)
def test_swe_gym_and_swe_smith_outcomes_are_unverifiable_saying_what_is_missing(
    record: dict[str, Any], missing: str
) -> None:
    instance = InstanceSpec(
        instance_id=record["instance_id"], record=SweInstance.model_validate(record)
    )
    outcome = grade(_Unused(), instance)
    assert outcome.status == "unverifiable"
    assert f"lacks {missing}" in (outcome.reason or "")
    assert "SWE-Gym's and SWE-smith's do not" in (outcome.reason or "")


def _suite(tmp_path: Path, instance: str, commands: list[str]) -> Path:
    path = tmp_path / "suite.jsonl"
    trajectory = Trajectory(
        id="t",
        domain="swe",
        env=EnvSpec(backend="docker", instance=InstanceSpec(instance_id=instance, timeout=300)),
        steps=[Step(action=CommandAction(command=c)) for c in commands],
        source="sim",
        meta={"model": "toy-wm", "mode": "teacher-forced"},
        outcome=Outcome(success=True, claimed_by="simulation"),
    )
    write_trajectories(path, [trajectory])
    return path


def test_an_unknown_convention_is_a_one_line_usage_error(tmp_path: Path) -> None:
    suite = _suite(tmp_path, GYM_ID, ["ls"])
    db = tmp_path / "f.duckdb"
    policy = tmp_path / "gate.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.1\n")
    for command in (
        ["audit", str(suite), "--db", str(db), "--sim-baseline", "copy"],
        ["replay", str(suite), "-o", str(tmp_path / "real.jsonl")],
        ["gate", str(suite), "--policy", str(policy), "--db", str(db)],
    ):
        result = CliRunner().invoke(app, [*command, "--instance-images", "swe-smith"])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert lines == ["error: --instance-images 'swe-smith': choose swebench or swe-gym"]
        assert not db.exists()
    stored = CliRunner().invoke(
        app, ["gate", "--policy", str(policy), "--db", str(db), "--instance-images", "swe-gym"]
    )
    assert stored.exit_code == 2 and "need a DATASET argument" in stored.output


# -- Docker: the stand-in image under SWE-Gym's name -------------------------------------

STANDIN_GYM_ID = "kjd__idna-90003"
"""A stand-in instance whose image exists here only under its SWE-Gym name."""
GYM_TAG = "xingyaoww/sweb.eval.x86_64.kjd_s_idna-90003:latest"


@pytest.fixture(scope="module")
def gym_instances(standin_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The stand-in image tagged as SWE-Gym names :data:`STANDIN_GYM_ID` (the tag removed
    after), and that instance's record without an ``image`` of its own, as SWE-Gym's."""
    client = docker_client()
    repository, tag = GYM_TAG.rsplit(":", 1)
    client.images.get(standin_image).tag(repository, tag)
    path = tmp_path_factory.mktemp("gym") / "instances.jsonl"
    path.write_text(json.dumps(standin.record(standin_image, STANDIN_GYM_ID, image=None)) + "\n")
    try:
        yield path
    finally:
        close_pools()
        client.images.remove(GYM_TAG)  # only the tag: the stand-in keeps its own name


@pytest.mark.docker
def test_a_swe_gym_instance_replays_in_its_swe_gym_image(
    gym_instances: Path, tmp_path: Path
) -> None:
    suite = _suite(tmp_path, STANDIN_GYM_ID, ["pwd", "git log --oneline | wc -l"])
    runner = CliRunner()
    base = ["replay", str(suite), "--sandbox", "docker", "--instances", str(gym_instances)]
    replayed = runner.invoke(
        app, [*base, "-o", str(tmp_path / "gym.jsonl"), "--instance-images", "swe-gym", "--json"]
    )
    close_pools()
    assert replayed.exit_code == 0, replayed.output
    result = json.loads(replayed.stdout)
    assert (result["failed_steps"], result["unverifiable"]) == (0, {}), result
    real = json.loads((tmp_path / "gym.jsonl").read_text())
    assert [s["observation"]["text"] for s in real["steps"]] == ["/testbed\n", "2\n"]
    # swebench's convention names an image that is neither here nor pullable
    default = runner.invoke(app, [*base, "-o", str(tmp_path / "sb.jsonl"), "--json"])
    close_pools()
    reason = json.loads(default.stdout)["unverifiable"]["t"]
    assert "swebench/sweb.eval.x86_64.kjd_1776_idna-90003:latest" in reason, reason


@pytest.mark.docker
def test_a_swe_gym_instance_with_swebench_5_fields_is_graded(gym_instances: Path) -> None:
    fix = "sed -i 's/if len(label) > 64:/if len(label) > 63:/' idna/core.py"
    trajectory = Trajectory(
        id="fix",
        domain="swe",
        env=EnvSpec(backend="docker", instance=STANDIN_GYM_ID),
        steps=[Step(action=CommandAction(command=fix))],
    )
    config = sandbox_config(
        "swe", "docker", {"instances": gym_instances, "instance_images": "swe-gym"}
    )
    try:
        replayed = replay_or_fail(trajectory, config)
    finally:
        close_pools()
    assert replayed.outcome is not None and replayed.outcome.status == "success", replayed
