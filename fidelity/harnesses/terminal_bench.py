"""Terminal-Bench tasks: a task folder as a trajectory's environment, its tests as the outcome.

A trajectory names a Terminal-Bench task folder in ``env.task``: ``task.yaml`` (instruction,
timeouts), a ``Dockerfile`` and/or ``docker-compose.yaml``, ``run-tests.sh`` and ``tests/``.

- **Environment**, as Terminal-Bench builds it: the compose file's ``client`` service (its
  build context, Dockerfile and ``environment``), with the ``T_BENCH_*`` variables
  Terminal-Bench sets substituted; a folder without a compose file gets Terminal-Bench's
  default one (``TEST_DIR=/tests``). ``docker compose`` itself is not run (it is not installed
  on every machine): the compose file is read here for the build and run parameters. The
  image is built once per folder content (tag ``fidelity-tb-<name>:<content hash>``) and run
  as the trajectory's docker sandbox (``env.image``: its WORKDIR, USER and ENV honoured). A
  Dockerfile declaring ``ARG BASE`` gets fidelity's local terminal image as ``BASE`` (no
  registry is reachable from the sandboxes). A ``wheels.toml`` (fidelity's addition: pinned
  pure-Python wheels, fetched on the host and checked by sha256) puts wheels under
  ``wheels/`` in the build context, so a task can install its test runner offline.
- **Untrusted**: the folder comes with a dataset. Of the compose file only the build and
  the environment are used (a context outside the folder, a Dockerfile outside the context,
  or an environment variable that makes bash or the loader run code is refused; mounts,
  command and the rest never reach the container, other keys are refused). Before a build,
  the images it builds on must be here or pulled under the operator's pull policy, and no
  ``ADD`` may download a URL (:mod:`fidelity.harnesses.dockerfile`); the image then runs as
  any ``env.image`` does, its ENTRYPOINT overridden.
- **Outcome**, as Terminal-Bench grades it: after the last step ``run-tests.sh`` and
  ``tests/`` are copied to ``/tests`` and ``bash /tests/run-tests.sh`` runs with
  ``max_test_timeout_sec``; its output is read by Terminal-Bench's pytest parser (the lines
  after ``short test summary info``): success iff every test passed. Tests that time out,
  cannot run or print no summary give an unverifiable outcome with the reason.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fidelity.errors import InputFormatError, SandboxError, UsageError
from fidelity.harnesses import dockerfile
from fidelity.sandboxes.images import (
    EnvironmentUnavailableError,
    PullPolicy,
    _build_lock,
    cache_dir,
    docker_client,
    ensure_image,
    local_or_pulled,
    recipe_hash,
    withheld_variable,
)
from fidelity.trajectory import CommandAction, EnvSpec, Observation

if TYPE_CHECKING:
    from fidelity.outcomes import RealOutcome
    from fidelity.sandboxes.base import Sandbox

TEST_DIR = "/tests"
T_BENCH_VARIABLES = {
    "T_BENCH_TEST_DIR": TEST_DIR,
    "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
    "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/agent-logs",
}
"""The container-side variables Terminal-Bench's compose files are written against."""
DEFAULT_ENVIRONMENT = {"TEST_DIR": TEST_DIR}
"""The client's environment in Terminal-Bench's default compose file."""
OUTPUT_KEPT = 2000


class TaskYaml(BaseModel):
    """``task.yaml``: the fields Terminal-Bench defines (others are errors)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instruction: str = Field(min_length=1)
    max_agent_timeout_sec: float = Field(default=360.0, gt=0)
    max_test_timeout_sec: float = Field(default=60.0, gt=0)
    run_tests_in_same_shell: bool = False
    parser_name: Literal["pytest"] = "pytest"
    author_name: str | None = None
    author_email: str | None = None
    difficulty: str | None = None
    category: str | None = None
    tags: list[str] = Field(default_factory=list)
    disable_asciinema: bool = False
    estimated_duration_sec: float | None = None
    expert_time_estimate_min: float | None = None
    junior_time_estimate_min: float | None = None


class ComposeBuild(BaseModel):
    """A compose service's ``build``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context: str = "."
    dockerfile: str = "Dockerfile"
    args: dict[str, str] | list[str] = Field(default_factory=dict)


class ComposeService(BaseModel):
    """The ``client`` service: what is read (build, environment) and what is named but run
    by fidelity's own sandbox instead (command, volumes, names, limits)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    build: ComposeBuild | str | None = None
    image: str | None = None
    container_name: str | None = None
    command: list[str] | str | None = None
    environment: dict[str, str | int | float | bool | None] | list[str] = Field(
        default_factory=dict
    )
    volumes: list[str] = Field(default_factory=list)
    working_dir: str | None = None
    user: str | None = None
    init: bool | None = None
    tty: bool | None = None
    stdin_open: bool | None = None


class WheelPin(BaseModel):
    """One pure-Python wheel of ``wheels.toml``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    version: str = Field(pattern=r"^[A-Za-z0-9._+!-]+$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class Task(BaseModel):
    """A validated task folder: its ``task.yaml`` and how its client image is built."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    folder: Path
    config: TaskYaml
    context: Path
    dockerfile: str
    build_args: dict[str, str]
    environment: dict[str, str]
    wheels: list[WheelPin]


def _yaml(path: Path) -> Any:
    import yaml  # type: ignore[import-untyped]  # PyYAML ships no stubs

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = " ".join(str(getattr(exc, "problem", None) or exc).split())
        raise InputFormatError(str(path), line, None, f"not valid YAML ({reason})") from None


def _validated(model: type[BaseModel], data: Any, path: Path, prefix: str = "") -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = prefix + ".".join(str(part) for part in first["loc"]) or None
        raise InputFormatError(str(path), None, field, first["msg"]) from None


def _substitute(value: str, variables: dict[str, str]) -> str:
    """Compose's ``${NAME}``, ``${NAME:-default}`` and ``$NAME`` with *variables*."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        return variables.get(name, match.group(2) or "")

    return re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}|\$(\w+)", one, value)


def _pairs(items: dict[str, Any] | list[str], variables: dict[str, str]) -> dict[str, str]:
    pairs = (
        ((k, "" if v is None else str(v)) for k, v in items.items())
        if isinstance(items, dict)
        else (item.partition("=")[::2] for item in items)
    )
    return {key: _substitute(value, variables) for key, value in pairs}


def load_task(folder: Path) -> Task:
    """The task in *folder*; InputFormatError (one line: the file and field) when it is not a
    Terminal-Bench task fidelity can run. Read once while its files stay as they are."""
    return _load_task(folder, _read_files_state(folder))


_READ_FILES = ("task.yaml", "docker-compose.yaml", "docker-compose.yml", "wheels.toml")
"""The files :func:`load_task` reads: a change to any of them is a new task."""


def _read_files_state(folder: Path) -> tuple[tuple[int, int, int] | None, ...]:
    """Each read file's inode, size and modification time (``None``: not there)."""
    state: list[tuple[int, int, int] | None] = []
    for name in _READ_FILES:
        try:
            stat = (folder / name).stat()
        except OSError:
            state.append(None)
            continue
        state.append((stat.st_ino, stat.st_size, stat.st_mtime_ns))
    return tuple(state)


@lru_cache(maxsize=256)
def _load_task(folder: Path, state: tuple[tuple[int, int, int] | None, ...]) -> Task:
    del state  # the cache's key only
    task_yaml = folder / "task.yaml"
    if not task_yaml.is_file():
        raise InputFormatError(str(task_yaml), None, None, "missing: a task folder has task.yaml")
    config = _validated(TaskYaml, _yaml(task_yaml), task_yaml)
    for needed, what in (("run-tests.sh", "file"), ("tests", "folder")):
        path = folder / needed
        if not (path.is_file() if what == "file" else path.is_dir()):
            raise InputFormatError(
                str(path), None, None, f"missing: Terminal-Bench runs a task's tests with "
                f"run-tests.sh and its tests/ folder (this {what} is not there)"
            )  # fmt: skip
    compose = folder / "docker-compose.yaml"
    if not compose.is_file() and (folder / "docker-compose.yml").is_file():
        compose = folder / "docker-compose.yml"
    args: dict[str, str] = {}
    context, dockerfile, environment = folder, "Dockerfile", dict(DEFAULT_ENVIRONMENT)
    if compose.is_file():
        context, dockerfile, args, environment = _client(compose)
    if not (context / dockerfile).resolve().is_relative_to(context.resolve()):
        raise InputFormatError(
            str(context / dockerfile), None, None, "outside the task folder: a dataset's build "
            "reads no other file of this host"
        )  # fmt: skip
    if not (context / dockerfile).is_file():
        raise InputFormatError(
            str(context / dockerfile), None, None, "missing: the client image's Dockerfile"
        )
    pins = folder / "wheels.toml"
    wheels: list[WheelPin] = []
    if pins.is_file():
        try:
            entries = tomllib.loads(pins.read_text(encoding="utf-8")).get("wheel", [])
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
            raise InputFormatError(str(pins), None, None, f"not valid TOML ({exc})") from None
        wheels = [
            _validated(WheelPin, entry, pins, f"wheel[{index}].")
            for index, entry in enumerate(entries)
        ]
    return Task(
        folder=folder,
        config=config,
        context=context,
        dockerfile=dockerfile,
        build_args=args,
        environment=environment,
        wheels=wheels,
    )


def _client(compose: Path) -> tuple[Path, str, dict[str, str], dict[str, str]]:
    data = _yaml(compose)
    services = data.get("services") if isinstance(data, dict) else None
    if not isinstance(services, dict) or "client" not in services:
        raise InputFormatError(str(compose), None, "services.client", "missing")
    others = sorted(set(services) - {"client"})
    if others:
        raise InputFormatError(
            str(compose), None, "services", f"{', '.join(others)}: only the client service "
            "runs here (fidelity runs one container per trajectory)"
        )  # fmt: skip
    client: ComposeService = _validated(
        ComposeService, services["client"], compose, "services.client."
    )
    build = ComposeBuild(context=client.build) if isinstance(client.build, str) else client.build
    if build is None:
        raise InputFormatError(
            str(compose), None, "services.client.build", "missing: the client image is built"
        )
    variables = dict(T_BENCH_VARIABLES)
    folder = compose.parent.resolve()
    context = (compose.parent / _substitute(build.context, variables)).resolve()
    if not context.is_relative_to(folder):
        raise InputFormatError(
            str(compose), None, "services.client.build.context", f"{context} is outside the "
            "task folder: a dataset's build reads no other folder of this host"
        )  # fmt: skip
    name = _substitute(build.dockerfile, variables)
    if not (context / name).resolve().is_relative_to(context):
        raise InputFormatError(
            str(compose), None, "services.client.build.dockerfile", f"{name} is outside the "
            "build context: a dataset's build reads no other file of this host"
        )  # fmt: skip
    environment = _pairs(client.environment, variables)
    for key in environment:
        if withheld_variable(key):
            raise InputFormatError(
                str(compose), None, f"services.client.environment.{key}", "makes bash or the "
                "loader run code on its own; a dataset's task does not set it"
            )  # fmt: skip
    return context, name, _pairs(build.args, variables), environment


def prepare(env: EnvSpec, backend: str, pull: PullPolicy | None = None) -> tuple[EnvSpec, Task]:
    """*env* as the docker sandbox runs it (the task's image and environment) and its task.

    Raises EnvironmentUnavailableError (the trajectory is unverifiable) when the image
    cannot be built (an image its Dockerfile builds on is not here and *pull*, default none,
    does not allow pulling it), UsageError when *backend* is not docker.
    """
    if env.task is None:
        raise ValueError("prepare() needs an env.task")
    if backend != "docker":
        raise UsageError(f"env.task (a Terminal-Bench task) runs in the docker sandbox, not "
                         f"{backend!r}: pass --sandbox docker")  # fmt: skip
    task = load_task(Path(env.task))
    image = ensure_task_image(task, pull or PullPolicy())
    prepared = env.model_copy(
        update={"image": image, "env": {**task.environment, **env.env}, "task": None}
    )
    return prepared, task


_built: dict[str, str] = {}


def ensure_task_image(task: Task, pull: PullPolicy | None = None) -> str:
    """The tag of *task*'s client image, built (offline) when this folder content has none.

    Before a build, every image the Dockerfile builds on (``FROM``, ``COPY --from``, and
    the ``ONBUILD`` triggers of those) must be here or pulled under *pull* (default: none),
    and no ``ADD`` may name a URL: the daemon would pull or fetch them itself, whatever the
    build's network. Otherwise :class:`EnvironmentUnavailableError` (one line).
    """
    base = ensure_image("terminal") if _wants_base(task) else ""
    digest = recipe_hash(task.folder, f"{base}\0{task.context}\0{task.dockerfile}")
    if task.context != task.folder and task.context.is_dir():
        digest = recipe_hash(task.context, digest)
    slug = re.sub(r"[^a-z0-9_.-]+", "-", task.folder.name.lower()).strip("-.") or "task"
    tag = f"fidelity-tb-{slug}:{digest}"
    if _built.get(tag):
        return tag
    client = docker_client()
    with _build_lock():
        if not _has(client, tag):
            _check_reach(client, task, base, pull or PullPolicy())
            with _context(task) as context:
                _build(client, task, context, tag, base)
    _built[tag] = tag
    return tag


def _build_args(task: Task, base: str) -> dict[str, str]:
    return {**({"BASE": base} if base else {}), **task.build_args}


def _check_reach(client: Any, task: Task, base: str, pull: PullPolicy) -> None:
    """Refuse (EnvironmentUnavailableError) a build that would pull an image *pull* does not
    allow or download a URL; pull the allowed images first, so the build pulls nothing."""
    name = task.folder.name
    text = (task.context / task.dockerfile).read_text(encoding="utf-8", errors="replace")
    found = dockerfile.reach(text, _build_args(task, base))
    checked: set[str] = set()
    while found.images or found.urls or found.unresolved:
        if found.urls:
            raise EnvironmentUnavailableError(
                f"the Terminal-Bench task {name!r} downloads {found.urls[0]} in its build "
                "(ADD of a URL): a dataset's build reaches no host"
            )
        if found.unresolved:
            raise EnvironmentUnavailableError(
                f"the Terminal-Bench task {name!r} builds with {found.unresolved[0]!r}, whose "
                "variable fidelity cannot resolve: it cannot tell which image that pulls"
            )
        triggers: list[str] = []
        for reference in found.images:
            if reference in checked:
                continue
            checked.add(reference)
            try:
                image = local_or_pulled(client, reference, pull)
            except EnvironmentUnavailableError as exc:
                raise EnvironmentUnavailableError(
                    f"the Terminal-Bench task {name!r} builds on an image it cannot have: {exc}"
                ) from exc
            triggers += (image.attrs.get("Config") or {}).get("OnBuild") or []
        # ONBUILD triggers of those images run in this build: they may pull or fetch too
        found = dockerfile.reach("FROM scratch\n" + "\n".join(triggers), {})


def _wants_base(task: Task) -> bool:
    text = (task.context / task.dockerfile).read_text(encoding="utf-8", errors="replace")
    return re.search(r"^\s*ARG\s+BASE\b", text, re.MULTILINE) is not None


def _has(client: Any, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def _build(client: Any, task: Task, context: Path, tag: str, base: str) -> None:
    import docker

    args = _build_args(task, base)
    try:
        client.images.build(
            path=str(context),
            dockerfile=task.dockerfile,
            tag=tag,
            buildargs=args,
            network_mode="none",
            rm=True,
            forcerm=True,
            labels={"fidelity.recipe": f"terminal-bench:{task.folder.name}"},
        )
    except docker.errors.BuildError as exc:
        lines = [str(item.get("stream") or item.get("error") or "") for item in exc.build_log]
        tail = " | ".join("".join(lines).strip().splitlines()[-3:])
        raise EnvironmentUnavailableError(
            f"building the Terminal-Bench task {task.folder.name!r} failed: {exc}: {tail}"
        ) from exc
    except docker.errors.APIError as exc:
        reason = " ".join(str(getattr(exc, "explanation", None) or exc).split())[:300]
        raise EnvironmentUnavailableError(
            f"building the Terminal-Bench task {task.folder.name!r} failed: {reason}"
        ) from exc


@contextlib.contextmanager
def _context(task: Task) -> Iterator[Path]:
    """The build context, or a temporary copy of it with the pinned wheels under ``wheels/``."""
    if not task.wheels:
        yield task.context
        return
    with tempfile.TemporaryDirectory(prefix="fidelity-tb-") as tmp:
        context = Path(tmp) / "context"
        shutil.copytree(task.context, context, symlinks=True)  # links stay links
        (context / "wheels").mkdir(exist_ok=True)
        for pin in task.wheels:
            wheel = fetch_wheel(pin)
            shutil.copy(wheel, context / "wheels" / wheel.name)
        yield context


def fetch_wheel(pin: WheelPin) -> Path:
    """*pin*'s wheel from the package index (``pip download``, cached), checked by sha256."""
    folder = cache_dir() / "wheels"
    folder.mkdir(parents=True, exist_ok=True)
    for cached in folder.glob(f"{pin.name.replace('-', '_')}-{pin.version}-*.whl"):
        if _sha256(cached) == pin.sha256:
            return cached
    with tempfile.TemporaryDirectory(prefix="fidelity-wheel-", dir=folder) as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                "--only-binary", ":all:", "--dest", tmp, f"{pin.name}=={pin.version}"]  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        found = sorted(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or len(found) != 1:
            tail = " | ".join(result.stderr.strip().splitlines()[-2:])
            raise EnvironmentUnavailableError(f"pip download {pin.name}=={pin.version}: {tail}")
        if _sha256(found[0]) != pin.sha256:
            raise EnvironmentUnavailableError(
                f"{found[0].name}: sha256 does not match the pinned {pin.sha256}"
            )
        return Path(shutil.move(found[0], folder / found[0].name))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- the outcome ---------------------------------------------------------------


def tests_archive(task: Task) -> bytes:
    """``run-tests.sh`` and the contents of ``tests/`` as Terminal-Bench lays them out in
    ``/tests`` (a tar, relative names)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(str(task.folder / "run-tests.sh"), arcname="run-tests.sh")
        for path in sorted((task.folder / "tests").rglob("*")):
            tar.add(
                str(path), arcname=str(path.relative_to(task.folder / "tests")), recursive=False
            )
    return buffer.getvalue()


def run_tests(sandbox: Sandbox, task: Task, start_dir: str | None) -> RealOutcome:
    """Copy the tests in, run ``run-tests.sh`` (``max_test_timeout_sec``) and grade its output
    with Terminal-Bench's pytest parser; never raises for the tests' own failures."""
    from fidelity.outcomes import unverifiable

    encoded = base64.b64encode(tests_archive(task)).decode()
    copy = f"mkdir -p {TEST_DIR} && printf %s {encoded} | base64 -d | tar -x -C {TEST_DIR}"
    run = f"bash {TEST_DIR}/run-tests.sh"
    if not task.config.run_tests_in_same_shell:  # a fresh session: the image's directory
        run = f"(cd {_quote(start_dir or '/')} && {run})"
    timeout = task.config.max_test_timeout_sec
    started = time.perf_counter()
    try:
        copied = sandbox.step(CommandAction(command=f"{copy} 2>&1"), timeout=60.0)
        if copied.exit_code != 0 or copied.failed:
            return unverifiable(
                f"copying the tests to {TEST_DIR} failed: {copied.error or copied.text[-200:]}"
            )
        observation = sandbox.step(CommandAction(command=f"{run} 2>&1"), timeout=timeout)
    except SandboxError as exc:
        return unverifiable(f"the sandbox could not run the tests: {type(exc).__name__}: {exc}")
    return grade(observation, timeout, time.perf_counter() - started)


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def grade(observation: Observation, timeout: float, seconds: float) -> RealOutcome:
    """The outcome *observation* (run-tests.sh's) stands for under Terminal-Bench's rule."""
    from fidelity.outcomes import RealOutcome

    text, code = observation.text, observation.exit_code
    reason: str | None = None
    results: dict[str, bool] | None = None
    if observation.timed_out:
        reason = f"the tests timed out after {timeout:g}s (max_test_timeout_sec)"
    elif observation.error is not None:
        reason = f"the tests failed to run: {' '.join(observation.error.split())}"
    else:
        results = parse_pytest(text)
        if results is None:
            reason = f"run-tests.sh (exit {code}) printed no pytest short test summary"
        elif not results:
            reason = f"run-tests.sh (exit {code}) reported no test in its short test summary"
    if reason is not None or results is None:
        return RealOutcome(
            status="unverifiable",
            reason=reason,
            exit_code=code,
            seconds=seconds,
            output=text[-OUTPUT_KEPT:],
        )
    return RealOutcome(
        status="success" if all(results.values()) else "failure",
        exit_code=code,
        seconds=seconds,
        output=text[-OUTPUT_KEPT:],
    )


_SUMMARY = re.compile(r"=+\s*short test summary info\s*=+", re.IGNORECASE | re.MULTILINE)
_PASSING = {"PASSED", "XFAIL", "SKIPPED"}
_STATUSES = _PASSING | {"FAILED", "XPASS", "ERROR"}


def parse_pytest(output: str) -> dict[str, bool] | None:
    """Terminal-Bench's pytest parser: ``{test name: passed}`` from the lines after the
    ``short test summary info`` banner (PASSED, XFAIL and SKIPPED pass; FAILED, XPASS and
    ERROR fail); None when there is no such banner."""
    parts = _SUMMARY.split(output, maxsplit=1)
    if len(parts) < 2:
        return None
    results: dict[str, bool] = {}
    for line in parts[1].splitlines():
        if line.startswith("FAILED") and " - " in line:
            line = " - ".join(line.split(" - ")[:-1])
        words = line.split(maxsplit=1)
        if len(words) < 2 or words[0].strip(":") not in _STATUSES:
            continue
        name = words[1].strip().split("::", maxsplit=1)[-1]
        if name:
            results[name] = words[0].strip(":") in _PASSING
    return results
