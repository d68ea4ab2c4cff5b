"""SWE-bench instance records at the edge: the model, the instances file, image names, and
grading that cannot read a result (no Docker needed: failures are injected)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.errors import InputFormatError
from fidelity.formats.jsonl import write_trajectories
from fidelity.harnesses.swebench import grade, image_name, load_instances
from fidelity.pipeline import failed_replay
from fidelity.sandboxes.base import Sandbox
from fidelity.trajectory import (
    Action,
    CommandAction,
    EnvSpec,
    InstanceSpec,
    Observation,
    Step,
    SweInstance,
    Trajectory,
)

ID = "psf__requests-2317"


def _record(**changes: Any) -> dict[str, Any]:
    """A record in the HF dataset's shape (lists JSON-encoded, as the dataset stores them)."""
    record = {
        "repo": "psf/requests",
        "instance_id": ID,
        "base_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
        "patch": "diff --git a/requests/sessions.py b/requests/sessions.py\n",
        "test_patch": "diff --git a/test_requests.py b/test_requests.py\n",
        "problem_statement": "method = builtin_str(method) problem",
        "hints_text": "",
        "created_at": "2014-11-01T02:20:16Z",
        "version": "2.4",
        "FAIL_TO_PASS": '["test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"]',
        "PASS_TO_PASS": '["test_requests.py::RequestsTestCase::test_BASICAUTH_TUPLE_HTTP_200_OK_GET"]',
        "environment_setup_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
    }
    return {**record, **changes}


def test_a_record_in_the_datasets_shape_decodes_its_test_lists() -> None:
    record = SweInstance.model_validate(_record(version=2.4))
    assert record.FAIL_TO_PASS == [
        "test_requests.py::RequestsTestCase::test_HTTP_200_OK_GET_ALTERNATIVE"
    ]
    assert record.version == "2.4"
    assert SweInstance.model_validate(_record(PASS_TO_PASS=[])).PASS_TO_PASS == []
    with pytest.raises(ValidationError, match="FAIL_TO_PASS"):
        SweInstance.model_validate(_record(FAIL_TO_PASS="[not json"))


def test_a_published_records_optional_columns_are_ignored_not_refused() -> None:
    # SWE-bench Verified carries `difficulty`; a dataset's splits add columns others lack
    record = SweInstance.model_validate(_record(difficulty="15 min - 1 hour", extra_column=""))
    assert record.instance_id == ID
    assert "difficulty" not in record.model_dump()


def test_an_instance_is_an_id_or_an_id_with_its_record() -> None:
    assert EnvSpec.model_validate({"instance": ID}).instance == InstanceSpec(instance_id=ID)
    inline = EnvSpec.model_validate({"instance": {"instance_id": ID, "record": _record()}})
    assert inline.instance is not None and inline.instance.record is not None
    with pytest.raises(ValidationError, match="is not 'other__x-1'"):
        InstanceSpec.model_validate({"instance_id": "other__x-1", "record": _record()})


def test_an_env_without_an_instance_keeps_its_digest() -> None:
    # the value fidelity gave this spec before instances existed
    assert EnvSpec(backend="docker", setup=["true"]).digest() == "67c87a8214a94070"
    assert EnvSpec(backend="docker", setup=["true"], instance=ID).digest() != "67c87a8214a94070"


def test_image_names_come_from_swebench() -> None:
    record = SweInstance.model_validate(_record())
    assert image_name(record) == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    assert image_name(record, "none") == "sweb.eval.x86_64.psf__requests-2317:latest"
    assert image_name(record, "registry.example/team") == (
        "registry.example/team/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    )
    own = SweInstance.model_validate(_record(image="mirror/sweb.eval.x86_64.own:v2"))
    assert image_name(own) == "mirror/sweb.eval.x86_64.own:v2"
    assert image_name(own, "swebench").startswith("swebench/sweb.eval.x86_64.psf_1776_")


def test_records_are_read_from_jsonl_json_and_parquet(tmp_path: Path) -> None:
    other = _record(instance_id="psf__requests-1963")
    (tmp_path / "a.jsonl").write_text(json.dumps(_record()) + "\n\n" + json.dumps(other) + "\n")
    (tmp_path / "a.json").write_text(json.dumps([_record(), other]))
    pq.write_table(pa.Table.from_pylist([_record(), other]), tmp_path / "a.parquet")
    for name in ("a.jsonl", "a.json", "a.parquet"):
        assert sorted(load_instances(tmp_path / name)) == ["psf__requests-1963", ID]


@pytest.mark.parametrize(
    ("name", "where"), [("bad.jsonl", "bad.jsonl:3: "), ("bad.json", "bad.json:2: ")]
)
def test_a_record_missing_a_field_names_file_line_and_field(
    tmp_path: Path, name: str, where: str
) -> None:
    broken = {k: v for k, v in _record(instance_id="psf__requests-1").items() if k != "test_patch"}
    path = tmp_path / name
    if name.endswith(".jsonl"):
        path.write_text(json.dumps(_record()) + "\n\n" + json.dumps(broken) + "\n")
    else:
        path.write_text(json.dumps([_record(), broken]))
    with pytest.raises(InputFormatError) as caught:
        load_instances(path)
    assert str(caught.value) == f"{path}:{where.split(':')[1]}: test_patch: missing field"


def test_cli_refuses_a_bad_instances_file_before_any_store_opens(tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    write_trajectories(
        suite,
        [
            Trajectory(
                id="t",
                domain="swe",
                env=EnvSpec(backend="docker", instance=ID),
                steps=[Step(action=CommandAction(command="ls"))],
            )
        ],
    )
    broken = {k: v for k, v in _record().items() if k != "FAIL_TO_PASS"}
    instances = tmp_path / "instances.jsonl"
    instances.write_text(json.dumps(broken) + "\n")
    db = tmp_path / "f.duckdb"
    for command in (
        ["audit", str(suite), "--db", str(db), "--sim-baseline", "copy"],
        ["replay", str(suite), "-o", str(tmp_path / "real.jsonl")],
        ["gate", str(suite), "--policy", str(_policy(tmp_path)), "--db", str(db)],
    ):
        result = CliRunner().invoke(app, [*command, "--instances", str(instances)])
        assert result.exit_code == 2, result.output
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert lines == [f"error: {instances}:1: FAIL_TO_PASS: missing field"], result.output
        assert not db.exists()


def _policy(tmp_path: Path) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text("[default]\nmax_drift_rate = 0.1\n")
    return path


class _Answers(Sandbox):
    """Failure injection: a sandbox whose every step answers *observation*."""

    name = "answers"

    def __init__(self, observation: Observation) -> None:
        self.observation = observation

    def reset(self, env: EnvSpec) -> Observation:
        return Observation()

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        return self.observation

    def close(self) -> None:
        return None


def _graded_record() -> InstanceSpec:
    record = _record(
        image="swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest",
        log_parser="parse_log_pytest",
        eval_type="pass_and_fail",
        eval_script="#!/bin/bash\nset -uxo pipefail\n: '>>>>> Start Test Output'\npytest\n"
        ": '>>>>> End Test Output'\n",
    )
    return InstanceSpec(instance_id=ID, record=SweInstance.model_validate(record))


@pytest.mark.parametrize(
    ("observation", "reason"),
    [
        (Observation(text="\x00\xff garbage", exit_code=0), "found no test results"),
        (Observation(text="", timed_out=True), "timed out after 1800s"),
        (Observation(error="SandboxError: gone"), "failed to run: SandboxError: gone"),
    ],
)
def test_an_eval_that_gives_no_result_is_unverifiable(
    observation: Observation, reason: str
) -> None:
    outcome = grade(_Answers(observation), _graded_record())
    assert outcome.status == "unverifiable" and reason in (outcome.reason or ""), outcome


def test_a_record_without_swebench_5_grading_fields_is_unverifiable() -> None:
    instance = InstanceSpec(instance_id=ID, record=SweInstance.model_validate(_record()))
    outcome = grade(_Answers(Observation(text="", exit_code=0)), instance)
    assert outcome.status == "unverifiable"
    assert "lacks eval_script, log_parser, eval_type" in (outcome.reason or "")
    bad_parser = _graded_record().model_copy(deep=True)
    assert bad_parser.record is not None
    spec = bad_parser.model_copy(
        update={"record": bad_parser.record.model_copy(update={"log_parser": "parse_nothing"})}
    )
    outcome = grade(_Answers(Observation(text="", exit_code=0)), spec)
    assert "not one of swebench's parsers" in (outcome.reason or "")


def test_a_failed_replay_of_an_instance_has_an_unverifiable_outcome() -> None:
    trajectory = Trajectory(
        id="t",
        domain="swe",
        env=EnvSpec(instance=ID),
        steps=[Step(action=CommandAction(command="ls"))],
    )
    replayed = failed_replay(trajectory, "EnvironmentUnavailableError: image 'x' is not here")
    assert replayed.outcome is not None and replayed.outcome.status == "unverifiable"
    assert "could not be had: image 'x' is not here" in (replayed.outcome.reason or "")
