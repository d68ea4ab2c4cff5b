"""SWE-bench-family instances: their image and their grading, by the ``swebench`` package.

A trajectory names an instance in ``env.instance`` (:class:`~fidelity.trajectory.InstanceSpec`):
its ``instance_id``, with the record inline or found in the instances file of the run
(``--instances``: JSONL, a JSON list or Parquet, as the HF dataset exports them).

- **Image**: the record's own image (SWE-smith records name it in ``image_name``, swebench 5.x
  records in ``image``) when no namespace is chosen, else the name the instance id gets under
  the chosen convention (``--instance-images``) and namespace (``--swebench-namespace``; ``none``
  for images built locally, a registry path for a private mirror):

  - ``swebench`` (default): the name swebench's
    :class:`~swebench.image_builder.image_spec.ImageSpec` computes (namespace ``swebench``,
    Docker Hub's): ``swebench/sweb.eval.x86_64.<id, "__" written "_1776_">:latest``.
  - ``swe-gym``: SWE-Gym's published images (namespace ``xingyaoww``):
    ``xingyaoww/sweb.eval.x86_64.<id, "__" written "_s_">:latest``, lower-cased, as OpenHands
    names them (``get_instance_docker_image`` in evaluation/benchmarks/swe_bench/run_infer.py,
    prefix ``docker.io/xingyaoww/``) and SkyRL does for SWE-Gym data (``get_docker_image_name``
    in skyrl-train/examples/mini_swe_agent/mini_swe_utils.py).

  The docker and swe backends run it on their ``env.image`` path: an image that is not here
  is pulled only as the backend's ``pull`` and ``pull_registries`` allow (``--pull``,
  ``--pull-registry``; a namespace's host is its registry, else ``docker.io``), and one that
  is not here and may not be pulled, or whose pull failed, makes the trajectory
  unverifiable.
- **Grading**: after the last replayed step, swebench's test spec (``make_test_spec``) gives
  the eval script (check out the test files, apply ``test_patch``, run the repo's test
  command); it runs in the replayed container and its log is graded by swebench's
  ``get_eval_report`` (the repository's log parser, ``FAIL_TO_PASS`` and ``PASS_TO_PASS``
  as the harness grades them): resolved is success. An eval script that times out, fails
  to run or prints no test result the parser can read gives an unverifiable outcome, as does
  a record without swebench 5.x's ``eval_script``, ``log_parser`` and ``eval_type`` (SWE-Gym's
  and SWE-smith's records carry none of them).
"""

from __future__ import annotations

import base64
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from pydantic import ValidationError

from fidelity.errors import InputFormatError, SandboxError, SandboxUnavailableError
from fidelity.trajectory import CommandAction, EnvSpec, InstanceSpec, SweInstance

if TYPE_CHECKING:
    from fidelity.outcomes import RealOutcome
    from fidelity.sandboxes.base import Sandbox
    from fidelity.sandboxes.config import SandboxConfigBase

DEFAULT_NAMESPACE = "swebench"
"""Docker Hub's namespace of the SWE-bench instance images."""

ImageConvention = Literal["swebench", "swe-gym"]
"""How an instance id names its image: swebench's ``ImageSpec``, or SWE-Gym's published names."""

IMAGE_CONVENTIONS: Final[tuple[str, ...]] = get_args(ImageConvention)

DEFAULT_NAMESPACES: Final[dict[str, str]] = {"swebench": DEFAULT_NAMESPACE, "swe-gym": "xingyaoww"}
"""Each convention's Docker Hub namespace (SWE-Gym's: OpenHands' ``docker.io/xingyaoww/``)."""

EVAL_SCRIPT = "/tmp/fidelity-swebench-eval.sh"
"""Where the eval script is written in the container (the harness uses ``/eval.sh``)."""

GRADING_FIELDS = ("eval_script", "log_parser", "eval_type")
"""What swebench 5.x's ``make_test_spec`` reads besides the dataset's base fields."""

_loaded: dict[tuple[str, int, int], dict[str, SweInstance]] = {}


def load_instances(path: Path) -> dict[str, SweInstance]:
    """The records of *path* by instance id (cached by the file's identity).

    A record that does not validate (a missing field, a field of the wrong type) or a
    duplicate id is an :class:`~fidelity.errors.InputFormatError` naming the file, the
    line (JSONL), the record (JSON list) or row (Parquet), and the field: exit 2.
    """
    try:
        stat = path.stat()
    except OSError as exc:
        raise InputFormatError(str(path), None, None, f"cannot read it ({exc.strerror})") from None
    key = (str(path.resolve()), stat.st_mtime_ns, stat.st_size)
    if key not in _loaded:
        _loaded[key] = _read(path)
    return _loaded[key]


def _read(path: Path) -> dict[str, SweInstance]:
    records: dict[str, SweInstance] = {}
    for line, row in _rows(path):
        if not isinstance(row, dict):
            raise InputFormatError(str(path), line, None, "an instance record must be an object")
        try:
            record = SweInstance.model_validate(row)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"]) or None
            reason = "missing field" if first["type"] == "missing" else first["msg"]
            raise InputFormatError(str(path), line, field, reason) from None
        if record.instance_id in records:
            reason = f"instance {record.instance_id!r} is given twice"
            raise InputFormatError(str(path), line, "instance_id", reason)
        records[record.instance_id] = record
    return records


def _rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(line or record number, 1-based; the parsed record) of a JSONL, JSON or Parquet file."""
    import json

    if path.suffix == ".parquet":
        import importlib

        try:  # pyarrow has no type information: imported by name
            table = importlib.import_module("pyarrow.parquet").read_table(path)
        except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
            raise InputFormatError(str(path), None, None, f"not Parquet ({exc})") from None
        yield from enumerate(table.to_pylist(), start=1)
        return
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputFormatError(str(path), exc.lineno, None, f"not JSON ({exc.msg})") from None
        if not isinstance(data, list):
            raise InputFormatError(str(path), None, None, "a JSON file must hold a list")
        yield from enumerate(data, start=1)
        return
    for number, raw in enumerate(text.splitlines(), start=1):
        if raw.strip():
            try:
                yield number, json.loads(raw)
            except json.JSONDecodeError as exc:
                raise InputFormatError(str(path), number, None, f"not JSON ({exc.msg})") from None


def image_name(
    record: SweInstance, namespace: str | None = None, convention: ImageConvention = "swebench"
) -> str:
    """The instance's image: the record's own (``image_name``, else ``image``) when *namespace*
    is None and it names one, else the *convention*'s name for the instance id under
    *namespace* (None: the convention's own; ``none``: the local name, without a namespace)."""
    own = record.image_name or record.image
    if namespace is None and own:
        return own
    chosen = DEFAULT_NAMESPACES[convention] if namespace is None else namespace
    bare = chosen.lower() in ("none", "")
    if convention == "swe-gym":
        return swe_gym_image(record.instance_id, None if bare else chosen)
    from swebench.image_builder.image_spec import ImageSpec

    spec = ImageSpec(
        instance_id=record.instance_id,
        dockerfile="(built elsewhere)",
        namespace=None if bare else chosen,
    )
    return str(spec.name)


def swe_gym_image(instance_id: str, namespace: str | None) -> str:
    """SWE-Gym's image of *instance_id*: ``__`` written ``_s_`` (Docker Hub allows no double
    underscore), tag ``latest``, lower-cased, as OpenHands' ``get_instance_docker_image`` and
    SkyRL's ``get_docker_image_name`` name SWE-Gym instances."""
    name = "sweb.eval.x86_64." + instance_id.replace("__", "_s_") + ":latest"
    return (f"{namespace.rstrip('/')}/{name}" if namespace else name).lower()


def resolve(
    env: EnvSpec,
    instances: Path | None,
    namespace: str | None,
    convention: ImageConvention = "swebench",
) -> EnvSpec:
    """*env* with its instance's record and image filled in (an explicit ``env.image`` wins;
    else :func:`image_name` under *namespace* and *convention*).

    An instance without a record (neither inline nor in *instances*) cannot be had:
    :class:`~fidelity.sandboxes.images.EnvironmentUnavailableError` (unverifiable).
    """
    instance = env.instance
    if instance is None:
        return env
    record = instance.record
    if record is None:
        from fidelity.sandboxes.images import EnvironmentUnavailableError

        if instances is None:
            raise EnvironmentUnavailableError(
                f"instance {instance.instance_id!r} has no record: give it inline "
                "(env.instance.record) or pass --instances FILE"
            )
        record = load_instances(instances).get(instance.instance_id)
        if record is None:
            raise EnvironmentUnavailableError(
                f"instance {instance.instance_id!r} is not in {instances}"
            )
    update: dict[str, Any] = {"instance": instance.model_copy(update={"record": record})}
    if env.image is None:
        update["image"] = image_name(record, namespace, convention)
    return env.model_copy(update=update)


def grade(sandbox: Sandbox, instance: InstanceSpec) -> RealOutcome:
    """Run the instance's eval script in *sandbox* (after the last step) and grade its log
    with swebench's own report functions; never raises for the script's own failures."""
    from fidelity.outcomes import unverifiable

    record = instance.record
    if record is None:
        return unverifiable(f"instance {instance.instance_id!r} has no record to grade by")
    missing = [name for name in ("version", *GRADING_FIELDS) if not getattr(record, name)]
    if missing:
        return unverifiable(
            f"the instance record lacks {', '.join(missing)}, which swebench's test spec "
            "needs to grade it (swebench 5.x records carry them; SWE-Gym's and SWE-smith's "
            "do not)"
        )
    if record.image_assets:
        return unverifiable("the record's image_assets (binary test files) are not staged")
    try:
        spec = _test_spec(record)
    except (KeyError, ValueError, TypeError) as exc:
        return unverifiable(f"swebench could not make the test spec: {type(exc).__name__}: {exc}")
    started = time.perf_counter()
    encoded = base64.b64encode(spec.eval_script.encode()).decode()
    command = f"printf %s {encoded} | base64 -d > {EVAL_SCRIPT} && bash {EVAL_SCRIPT} 2>&1"
    try:
        observation = sandbox.step(
            CommandAction(command=command, timeout=instance.timeout), timeout=instance.timeout
        )
    except SandboxUnavailableError:
        raise
    except SandboxError as exc:
        return unverifiable(f"the sandbox could not run the eval script: {exc}")
    seconds = time.perf_counter() - started
    if observation.timed_out:
        return unverifiable(f"the eval script timed out after {instance.timeout:g}s")
    if observation.error is not None:
        return unverifiable(f"the eval script failed to run: {observation.error}")
    return _graded(spec, observation.text, observation.exit_code, seconds)


def _test_spec(record: SweInstance) -> Any:
    from swebench.harness.constants import EvalType
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.utils import make_test_spec

    if record.log_parser not in PARSER_REGISTRY:
        raise ValueError(f"log_parser {record.log_parser!r} is not one of swebench's parsers")
    EvalType(record.eval_type)  # a ValueError for an eval type swebench does not know
    data = record.model_dump(mode="json")
    data["image"] = data["image"] or ""
    return make_test_spec(data)


def _graded(spec: Any, log: str, exit_code: int | None, seconds: float) -> RealOutcome:
    """The outcome swebench's ``get_eval_report`` gives the eval script's *log*."""
    from swebench.harness.grading import get_eval_report

    from fidelity.outcomes import OUTPUT_KEPT, RealOutcome, unverifiable

    prediction = {"instance_id": spec.instance_id, "model_patch": "", "model_name_or_path": ""}
    handle, name = tempfile.mkstemp(prefix="fidelity-swebench-", suffix=".log")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(log)
        report = get_eval_report(spec, prediction, name, include_tests_status=True)
    except (LookupError, ValueError, TypeError, AttributeError, ArithmeticError) as exc:
        # a repository's parser fed garbage fails in whatever way its code does
        return unverifiable(f"swebench's log parser failed: {type(exc).__name__}: {exc}")
    finally:
        os.unlink(name)
    verdict = report[spec.instance_id]
    if not verdict.get("patch_successfully_applied"):
        why = verdict.get("infra_failure_reason") or "no test output it could read"
        return unverifiable(f"swebench's grading found no test results ({why})")
    return RealOutcome(
        status="success" if verdict.get("resolved") else "failure",
        exit_code=exit_code,
        seconds=seconds,
        output=log[-OUTPUT_KEPT:],
    )


def options(sandbox: SandboxConfigBase) -> tuple[Path | None, str | None, ImageConvention]:
    """The instances file, namespace and image convention a backend config carries
    (``--instances``, ``--swebench-namespace``, ``--instance-images``); (None, None,
    ``swebench``) for a backend without them."""
    instances = getattr(sandbox, "instances", None)
    namespace = getattr(sandbox, "swebench_namespace", None)
    convention: ImageConvention = getattr(sandbox, "instance_images", "swebench")
    return instances, namespace, convention
