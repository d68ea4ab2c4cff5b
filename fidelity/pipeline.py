"""The stages every command shares: load a suite, replay for real, simulate, compare."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fidelity.compare import CompareConfig, Factory, comparator_factory
from fidelity.compare.base import Comparator, CompareContext, StepComparison
from fidelity.compare.consistency import check_consistency, entity_source
from fidelity.defaults import SIM_CONCURRENCY
from fidelity.errors import SandboxError, SandboxUnavailableError, UnknownDomainError, UsageError
from fidelity.formats import dataset
from fidelity.trajectory import Domain, EnvSpec, Observation, Step, Trajectory
from fidelity.worldmodels.base import Mode, WorldModel
from fidelity.worldmodels.config import (
    BaselineConfig,
    EndpointConfig,
    RecordedConfig,
    WorldModelConfig,
)

if TYPE_CHECKING:  # the sandboxes and the store (DuckDB) load when a replay needs them,
    import asyncio  # so that ``fidelity diff`` (compare only) starts quickly

    from fidelity.outcomes import RealOutcome
    from fidelity.sandboxes.base import Sandbox
    from fidelity.sandboxes.config import SandboxConfigBase
    from fidelity.store import TimedObservation


class SimConfig(BaseModel):
    """Which world model simulates (a typed config), and how many calls and draws."""

    model_config = ConfigDict(extra="forbid")

    world_model: WorldModelConfig = Field(default_factory=BaselineConfig)
    concurrency: int = Field(
        default=SIM_CONCURRENCY, ge=1, description="predictions in flight at once"
    )
    turns: Literal["all", "evaluated"] = Field(
        default="all",
        description="all: predict every step; evaluated: only each sample's evaluated turn "
        "(AgentWorldBench's turn_idx, else the last step), one request per trajectory",
    )
    samples: int = Field(default=1, ge=1, le=64, description="predictions drawn per step")

    @model_validator(mode="before")
    @classmethod
    def _flags(cls, data: Any) -> Any:
        """Accept the CLI's flat options (``url``, ``model``, ``data``, ``baseline``...)."""
        if isinstance(data, dict) and "world_model" not in data:
            own = {k: v for k, v in data.items() if k in ("concurrency", "samples", "turns")}
            rest = {k: v for k, v in data.items() if k not in own}
            return {**own, "world_model": world_model_from_flags(**rest)}
        return data

    @property
    def kind(self) -> Literal["endpoint", "recorded", "baseline"]:
        """Which of the three world-model families this config selects."""
        return self.world_model.type


logger = logging.getLogger(__name__)

_ENDPOINT_ONLY = (
    "api_key",
    "timeout",
    "max_retries",
    "prompts_dir",
    "cache",
    "max_tokens",
    "top_k",
    "deadline",
    "sampling",
)


def world_model_from_flags(
    url: str | None = None,
    model: str | None = None,
    data: Path | None = None,
    baseline: str = "retrieval",
    **endpoint: Any,
) -> EndpointConfig | RecordedConfig | BaselineConfig:
    """The typed world-model config the CLI's options name; UsageError when they contradict.

    ``--sim-url`` (with ``--sim-model``) selects an endpoint, ``--sim-data`` a
    recorded dataset, neither the ``--sim-baseline``. Endpoint-only options
    given to another world model are ignored when they are None.
    """
    if url and data:
        raise UsageError("--sim-url and --sim-data are exclusive: pick one world model")
    if url and not model:
        raise UsageError("--sim-url needs --sim-model (the served model's name)")
    if model and not url:
        raise UsageError("--sim-model needs --sim-url (the endpoint serving it)")
    unknown = sorted(set(endpoint) - set(_ENDPOINT_ONLY))
    if unknown:
        raise UsageError(f"unknown world-model option(s): {', '.join(unknown)}")
    if url and model:
        return EndpointConfig(url=url, model=model, **endpoint)
    if data:
        return RecordedConfig(data=data)
    if baseline not in ("copy", "retrieval"):
        raise UsageError(f"--sim-baseline {baseline!r}: choose copy or retrieval")
    return BaselineConfig(name="copy" if baseline == "copy" else "retrieval")


ProgressCallback = Callable[[str, int], None]
"""``callback(phase, advance)``: called as work completes (phases: real, sim, compare)."""


def load_suite(
    path: str | os.PathLike[str],
    domain: Domain | str | None = None,
    allowed_roots: Sequence[str | os.PathLike[str]] | None = (),
) -> list[Trajectory]:
    """Read a suite or dataset, check its domain and resolve its paths.

    Any dataset form the gate reads: a JSONL file (plain, ``.gz``, ``.zst``),
    Parquet, or a folder or glob of shards (:mod:`fidelity.formats.dataset`).
    Relative ``env.workdir`` and ``@file`` setup entries are resolved against
    the folder of the file (shard) they are in, so a suite can be run from anywhere;
    every such path must stay inside that folder or *allowed_roots* (see
    :func:`~fidelity.formats.jsonl.confine_paths`).
    """
    path = Path(path)
    numbered = dataset.read_all(path)
    if domain is not None:
        domain = check_domain(domain)
        for _, _, trajectory in numbered:
            if trajectory.domain != domain:
                raise UsageError(
                    f"{path}: trajectory {trajectory.id!r} is domain {trajectory.domain.value!r}, "
                    f"not {domain.value!r} (pass --domain {trajectory.domain.value})"
                )
    return dataset.confined(numbered, allowed_roots)


def single_domain(trajectories: list[Trajectory], path: str | os.PathLike[str]) -> Domain:
    """The one domain of *trajectories* read from *path*; UsageError when empty or mixed."""
    if not trajectories:
        raise UsageError(f"{path}: the file holds no trajectories")
    domains = sorted({t.domain.value for t in trajectories})
    if len(domains) > 1:
        raise UsageError(f"{path}: mixed domains ({', '.join(domains)}); use one domain per file")
    return trajectories[0].domain


def check_domain(domain: Domain | str, backend: str | None = None) -> Domain:
    """*domain* as a :class:`Domain` that *backend* (default: the domain's own) can replay.

    UnknownDomainError for a name that is not a domain or that no backend
    replays yet; UsageError when the named backend cannot replay it.
    """
    try:
        value = Domain(domain)
    except ValueError as exc:
        known = ", ".join(d.value for d in Domain)
        raise UnknownDomainError(f"unknown domain {domain!r}; the domains are: {known}") from exc
    from fidelity.sandboxes import backend_for

    if backend is None:
        try:
            backend_for(value.value, None)
        except UsageError as exc:
            raise UnknownDomainError(str(exc)) from exc
    else:
        backend_for(value.value, backend)
    return value


def check_comparable(domain: Domain | str) -> Domain:
    """*domain* as a :class:`Domain` with a comparator (``fidelity diff``); else UnknownDomainError."""
    try:
        value = Domain(domain)
    except ValueError as exc:
        known = ", ".join(d.value for d in Domain)
        raise UnknownDomainError(f"unknown domain {domain!r}; the domains are: {known}") from exc
    comparator_factory(value.value)  # raises for a domain without one; builds nothing
    return value


@dataclass
class Replayed:
    """The real side of one trajectory: what reset showed, then one observation per step."""

    initial: Observation | None
    steps: list[TimedObservation]
    error: str | None = None
    """The sandbox failure that ended the trajectory (every step then failed)."""
    outcome: RealOutcome | None = None
    """What the environment's check (``env.check``) said after the last step (None: no check)."""

    def complete(self, trajectory: Trajectory) -> bool:
        """True when there is one real observation per step of *trajectory*."""
        return len(self.steps) == len(trajectory.steps)


def replay(
    trajectory: Trajectory, sandbox: SandboxConfigBase, step_timeout: float | None = None
) -> Replayed:
    """Run every action of *trajectory* in a fresh real sandbox of *sandbox* (always closed).

    A pooled backend (Docker) leases a warm sandbox reset between trajectories.
    Each step may take *step_timeout* seconds (None: ``sandbox.step_timeout``). The
    environment's check (``env.check``), when given, runs in the same sandbox after the
    last step: the real outcome.
    """
    env = trajectory.env
    if env.instance is not None:  # SWE-bench family: its record and image, by swebench
        from fidelity.harnesses import swebench

        env = swebench.resolve(env, *swebench.options(sandbox))
    if env.task is not None:  # Terminal-Bench: the task folder's image, its tests after
        from fidelity.harnesses import terminal_bench
        from fidelity.sandboxes.images import PullPolicy

        env, task = terminal_bench.prepare(env, sandbox.type, PullPolicy.of(sandbox))
        with sandbox.lease(env) as (box, initial):
            steps = _run_steps(box, trajectory, step_timeout or sandbox.step_timeout)
            start = initial.cwd if initial is not None else None
            return Replayed(initial, steps, outcome=terminal_bench.run_tests(box, task, start))
    with sandbox.lease(env) as (box, initial):
        timeout = step_timeout or sandbox.step_timeout
        steps = _run_steps(box, trajectory, timeout)
        if env.instance is not None:  # graded by swebench's eval script and log parser
            return Replayed(initial, steps, outcome=swebench.grade(box, env.instance))
        check = trajectory.env.check
        if check is None:
            return Replayed(initial, steps)
        from fidelity.outcomes import run_check

        return Replayed(initial, steps, outcome=run_check(box, check))


def _run_steps(
    sandbox: Sandbox, trajectory: Trajectory, step_timeout: float
) -> list[TimedObservation]:
    from fidelity.store import TimedObservation

    observations = []
    for step in trajectory.steps:
        started = time.perf_counter()
        observation = sandbox.step(step.action, timeout=step_timeout)
        observations.append(TimedObservation(observation, (time.perf_counter() - started) * 1000))
    return observations


def replay_or_fail(
    trajectory: Trajectory, sandbox: SandboxConfigBase, step_timeout: float | None = None
) -> Replayed:
    """:func:`replay`, with a sandbox failure of this trajectory turned into failed steps.

    A backend that cannot start at all (:class:`SandboxUnavailableError`) still
    raises: every other trajectory would fail the same way.
    """
    try:
        return replay(trajectory, sandbox, step_timeout)
    except SandboxUnavailableError as exc:
        logger.debug(
            "trajectory %s: the %s backend cannot start: %s", trajectory.id, sandbox.type, exc
        )
        raise
    except SandboxError as exc:
        logger.info(
            "trajectory %s: its replay failed (%s backend), stored as failed steps: %s: %s",
            trajectory.id,
            sandbox.type,
            type(exc).__name__,
            exc,
        )
        return failed_replay(trajectory, f"{type(exc).__name__}: {exc}")
    except UsageError as exc:  # its env is bad input (a web site without a URL): say whose
        raise UsageError(f"trajectory {trajectory.id!r}: {exc}") from exc


UNVERIFIABLE = "EnvironmentUnavailableError: "
"""How a stored replay error starts when the trajectory's environment could not be had
(its image missing and not pullable): the trajectory is unverifiable, not drifting."""


def unverifiable_reason(error: str | None) -> str | None:
    """The reason a trajectory is unverifiable, from its stored replay *error*; else None."""
    if error is None or not error.startswith(UNVERIFIABLE):
        return None
    return error[len(UNVERIFIABLE) :]


def failed_replay(trajectory: Trajectory, error: str) -> Replayed:
    """Every step of *trajectory* failed with *error* (its sandbox or its worker died)."""
    from fidelity.store import TimedObservation

    failed = Observation(error=error)
    outcome = None
    env = trajectory.env
    if env.check is not None or env.instance is not None or env.task is not None:
        from fidelity.outcomes import unverifiable

        reason = unverifiable_reason(error)
        outcome = unverifiable(
            f"the environment could not be had: {reason}"
            if reason is not None
            else f"the replay failed before the check: {error}"
        )
    return Replayed(None, [TimedObservation(failed) for _ in trajectory.steps], error, outcome)


def check_backends(trajectories: Sequence[Trajectory], chooser: Any, source: Path) -> None:
    """UsageError naming *source* and the first trajectory whose world *chooser* (a
    :class:`~fidelity.sandboxes.SandboxChooser`) cannot replay as it names it."""
    for trajectory in trajectories:
        try:
            chooser.backend_of(trajectory.domain.value, trajectory.env)
        except UsageError as exc:
            raise UsageError(f"{source}: trajectory {trajectory.id!r}: {exc}") from exc


def check_trust(trajectories: Sequence[Trajectory], trust: Any, source: Path) -> None:
    """UsageError naming *source* and the first trajectory naming a host command or a site
    that *trust* (a :class:`~fidelity.trust.DatasetTrust`) does not allow."""
    from fidelity.trust import refuse_untrusted

    for trajectory in trajectories:
        refuse_untrusted(trajectory, trust, str(source), None)


def with_default_image(
    trajectories: list[Trajectory], image: str | None, chosen: str | None = None
) -> list[Trajectory]:
    """*trajectories*, those that replay in Docker (:func:`~fidelity.sandboxes.registry.
    trajectory_backend` under *chosen*, the ``--sandbox``) without an ``env.image`` given
    *image* (``--image``); a trajectory's own image wins. The reference is validated as
    ``env.image`` is. UsageError naming the trajectory whose world cannot be had."""
    if image is None:
        return trajectories
    from pydantic import ValidationError

    from fidelity.sandboxes.registry import trajectory_backend

    try:
        EnvSpec(image=image)
    except ValidationError as exc:
        raise UsageError(
            f"--image {image!r} is not an image reference (name, name:tag or name@digest)"
        ) from exc
    given = []
    for t in trajectories:
        try:
            docker = trajectory_backend(t.domain.value, t.env, chosen) == "docker"
        except UsageError as exc:
            raise UsageError(f"trajectory {t.id!r}: {exc}") from exc
        if not docker or t.env.image is not None or t.env.instance is not None:
            given.append(t)  # an instance names its own image
            continue
        env = t.env.model_copy(update={"image": image, "backend": "docker"})
        given.append(t.model_copy(update={"env": env}))
    return given


def with_initial(trajectory: Trajectory, initial: Observation | None) -> Trajectory:
    """*trajectory* whose env carries the real start observation (the web start page).

    The world model is shown it before the first action, as the agent was.
    An env that already carries one keeps it; an empty start (a fresh shell)
    adds nothing. Tool definitions the sandbox listed at reset (an MCP server's
    ``tools/list``, the search tools) fill ``env.tools`` the same way.
    """
    update: dict[str, Any] = {}
    if trajectory.env.initial_observation is None and initial is not None and initial.text:
        update["initial_observation"] = initial.text
    tools = (initial.state or {}).get("tools") if initial is not None else None
    if trajectory.env.tools is None and isinstance(tools, list) and tools:
        update["tools"] = tools
    if not update:
        return trajectory
    return trajectory.model_copy(update={"env": trajectory.env.model_copy(update=update)})


async def simulate(
    model: WorldModel,
    trajectory: Trajectory,
    mode: Mode,
    real: list[Observation] | None,
    limiter: asyncio.Semaphore,
    sample: int = 0,
) -> list[TimedObservation]:
    """Predict every step of *trajectory* (draw *sample*, 0-based).

    Teacher-forced: the history is real, so every step is predicted at once.
    Open-loop: the history is the model's own, so steps go one after another.
    """
    if mode is Mode.teacher_forced:
        if real is None:
            raise UsageError(
                f"trajectory {trajectory.id!r}: teacher-forced simulation needs real observations "
                "(replay it first, or use --mode open-loop)"
            )
        history = [
            Step(action=s.action, observation=o, control=s.control)
            for s, o in zip(trajectory.steps, real, strict=True)
        ]
        tasks = [
            _timed_predict(model, trajectory, history[: depth - 1], depth, limiter, sample)
            for depth in range(1, len(trajectory.steps) + 1)
        ]
        import asyncio

        return list(await asyncio.gather(*tasks))
    own: list[Step] = []
    results: list[TimedObservation] = []
    for depth, step in enumerate(trajectory.steps, start=1):
        timed = await _timed_predict(model, trajectory, own, depth, limiter, sample)
        results.append(timed)
        own = [*own, Step(action=step.action, observation=timed.observation, control=step.control)]
    return results


async def _timed_predict(
    model: WorldModel,
    trajectory: Trajectory,
    history: list[Step],
    depth: int,
    limiter: asyncio.Semaphore,
    sample: int = 0,
) -> TimedObservation:
    from fidelity.store import TimedObservation

    async with limiter:
        started = time.perf_counter()
        action = trajectory.steps[depth - 1].action
        observation = await model.predict(trajectory, history, action, depth, sample)
        return TimedObservation(observation, (time.perf_counter() - started) * 1000)


def compare(
    trajectory: Trajectory,
    real: list[Observation],
    sim: list[Observation],
    shown: list[list[Step]],
    config: CompareConfig | None = None,
) -> list[StepComparison]:
    """Compare each (real, sim) pair; ``shown[i]`` is the history the model saw at step i+1."""
    comparator = shared_comparator(trajectory.domain.value, config)
    description = trajectory.env.description or ""
    contexts = [
        CompareContext(
            action=step.action, history=history, env_description=description, depth=depth
        )
        for depth, (step, history) in enumerate(zip(trajectory.steps, shown, strict=True), start=1)
    ]
    comparisons = [comparator.compare(r, s, c) for r, s, c in zip(real, sim, contexts, strict=True)]
    source = entity_source(comparator)
    if source is not None:
        return check_consistency(source, real, sim, contexts, comparisons)
    return comparisons


_SHARED: dict[tuple[Factory, str], Comparator] = {}
"""Comparators built by :func:`shared_comparator`, by factory and config (JSON)."""

_SHARED_MAX = 32


def shared_comparator(domain: str, config: CompareConfig | None = None) -> Comparator:
    """:func:`~fidelity.compare.get_comparator`, built once per factory and config.

    Comparators keep nothing between calls but their settings, so one serves
    every trajectory (building one loads its calibration and normalizer, as
    long as comparing a short trajectory). Keyed by the factory registered now
    and the config's content, so a re-registered domain or another config
    builds afresh.
    """
    factory = comparator_factory(domain)
    key = (factory, "" if config is None else config.model_dump_json())
    comparator = _SHARED.get(key)
    if comparator is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        comparator = _SHARED[key] = factory(config or CompareConfig())
    return comparator


def shown_history(
    trajectory: Trajectory, real: list[Observation], sim: list[Observation], mode: Mode | None
) -> list[list[Step]]:
    """What the model was shown before each step: real history, its own, or both when unknown."""
    actions = [step.action for step in trajectory.steps]
    real_steps = [
        step if step.observation is o and step.control is None else Step(action=a, observation=o)
        for step, a, o in zip(trajectory.steps, actions, real, strict=True)
    ]
    sim_steps = [Step(action=a, observation=o) for a, o in zip(actions, sim, strict=True)]
    histories = []
    for index in range(len(actions)):
        if mode is Mode.teacher_forced:
            histories.append(real_steps[:index])
        elif mode is Mode.open_loop:
            histories.append(sim_steps[:index])
        else:
            histories.append(real_steps[:index] + sim_steps[:index])
    return histories
