"""One unit of work: a :class:`TrajectoryTask` in, a :class:`~fidelity.store.TrajectoryRecord` out.

A task is plain data (the trajectory, a typed sandbox config, a typed
world-model config, a compare config and the modes), so it serializes and can
be run in another thread, process or machine. What a task does follows from
what it carries:

============================  ==========================================================
``sandbox``                   replay the actions for real (None: the trajectory's own
                              observations are the real side, as ``simulate`` needs)
``world_model``               predict every (mode, sample) (None: the trajectory's own
                              recorded observations are the simulation; the dataset gate)
``compare``                   compare real and simulated step by step (None: nothing
                              compared; ``replay`` and ``simulate``)
``judge`` (+ ``stored``)      ask an LLM judge about every stored compared step (the
                              record's ``judgments``; None: nothing judged)
============================  ==========================================================

``audit`` = sandbox + world model + compare; the dataset gate = sandbox + compare;
``replay`` = sandbox; ``simulate`` = world model; ``judge`` = a stored run's real
history (the trajectory's observations) + its stored simulations + judge. :class:`TaskRunner` runs tasks
in one process (sandboxes in threads, predictions on the event loop); the
executors in :mod:`fidelity.executors` spread them over threads or a Ray cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from fidelity import pipeline
from fidelity.compare import CompareConfig
from fidelity.compare.normalize import truncate
from fidelity.defaults import SIM_CONCURRENCY
from fidelity.judge.config import JudgeConfig
from fidelity.sandboxes import SandboxConfig
from fidelity.store import JudgmentRecord, SimVariant, TimedObservation, TrajectoryRecord
from fidelity.trajectory import Observation, Trajectory
from fidelity.worldmodels.base import Mode, WorldModel
from fidelity.worldmodels.config import WorldModelConfig

if TYPE_CHECKING:
    from fidelity.judge.steps import StepToJudge
    from fidelity.worldmodels.openai_compat import OpenAICompatWorldModel

JudgmentCallback = Callable[[JudgmentRecord], None]
"""Called on the driver's event loop with each judgment as soon as it is answered."""

T = TypeVar("T")

RECORDED_MODE = "recorded"
"""The mode stored for a dataset's own observations whose ``meta.mode`` says nothing."""


class StoredStep(BaseModel):
    """One compared step of a stored simulation: both sides as the store holds them."""

    model_config = ConfigDict(extra="forbid")

    depth: int = Field(ge=1)
    real: Observation
    sim: Observation


class StoredVariant(BaseModel):
    """A simulation a stored run already holds (what the judge reads; nothing is predicted)."""

    model_config = ConfigDict(extra="forbid")

    mode: str
    sample: int = Field(default=0, ge=0)
    steps: list[StoredStep] = Field(description="its compared steps, no infrastructure failure")


@dataclass
class JudgedRecord(TrajectoryRecord):
    """The record of a judging task: the judge's verdict on each of its stored steps
    (none where the runner handed each one over as it was answered: ``on_judgment``)."""

    judgments: list[JudgmentRecord] = field(default_factory=list)


class TrajectoryTask(BaseModel):
    """Everything needed to audit, gate, replay or simulate one trajectory, as plain data."""

    model_config = ConfigDict(extra="forbid")

    trajectory: Trajectory
    sandbox: SandboxConfig | None = Field(
        default=None, description="None: not replayed (the trajectory's observations are real)"
    )
    world_model: WorldModelConfig | None = Field(
        default=None, description="None: nothing predicted (the trajectory's own observations)"
    )
    compare: CompareConfig | None = Field(default=None, description="None: nothing compared")
    step_timeout: float | None = Field(
        default=None, gt=0, description="seconds per real step (None: the sandbox config's)"
    )
    observation_cap: int | None = Field(
        default=None,
        ge=1,
        description="characters kept per observation text, real and sim alike (the comparator's "
        "truncation rule, flagged truncated); None: no cap",
    )
    modes: list[Mode] = Field(default_factory=lambda: [Mode.teacher_forced], min_length=1)
    samples: int = Field(default=1, ge=1, le=64)
    stored: list[StoredVariant] = Field(
        default_factory=list, description="simulations a stored run holds, judged as they are"
    )
    judge: JudgeConfig | None = Field(
        default=None, description="the LLM judge of the stored steps (None: nothing judged)"
    )

    @property
    def variants(self) -> list[tuple[Mode, int]]:
        """Every (mode, sample) predicted, the one stored first first."""
        return [(mode, sample) for mode in self.modes for sample in range(self.samples)]


Progress = pipeline.ProgressCallback


class TaskRunner:
    """Runs tasks in this process: sandboxes in a thread pool, predictions on the event loop.

    *on_judgment* (optional) gets each judgment on this event loop as soon as it
    is answered; the records of judging tasks then carry none (see :meth:`run`).
    """

    def __init__(
        self,
        threads: int,
        sim_concurrency: int = SIM_CONCURRENCY,
        progress: Progress | None = None,
        on_judgment: JudgmentCallback | None = None,
    ) -> None:
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="sandbox")
        self.limiter = asyncio.Semaphore(sim_concurrency)
        self.progress: Progress = progress or (lambda phase, n: None)
        self.on_judgment = on_judgment
        self.judges: dict[JudgeConfig, OpenAICompatWorldModel] = {}

    def close(self) -> None:
        """Stop the sandbox threads (work not started is cancelled)."""
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def aclose(self) -> None:
        """:meth:`close`, and close the judge clients this runner opened."""
        self.close()
        judges, self.judges = list(self.judges.values()), {}
        for client in judges:
            await client.aclose()

    async def replay(self, task: TrajectoryTask) -> tuple[pipeline.Replayed, float]:
        """The real side of *task* and the seconds it took (its own observations if no sandbox)."""
        if task.sandbox is None:
            return own_observations(task.trajectory), 0.0
        started = time.perf_counter()
        replayed = await asyncio.get_running_loop().run_in_executor(
            self.pool, pipeline.replay_or_fail, task.trajectory, task.sandbox, task.step_timeout
        )
        self.progress("real", 1)
        return replayed, time.perf_counter() - started

    async def run(
        self,
        task: TrajectoryTask,
        model: WorldModel | None = None,
        replayed: pipeline.Replayed | None = None,
    ) -> TrajectoryRecord:
        """Run *task* (predicting with *model*, built from its config by the caller).

        Progress: ``real`` after the replay, ``sim`` after the predictions; the
        executor reports ``compare`` once the record is handed over (stored).

        *replayed*: its real side when already known (the retrieval baseline
        replays everything before it can predict anything).

        A judging task's judgments are handed over once: to ``on_judgment`` as
        each is answered when it is set (the record's list is then empty, so
        nothing is stored twice), else in the record.
        """
        trajectory = task.trajectory
        if replayed is not None:
            real_result = (replayed, 0.0)
            sim_result = None
        elif model is not None and _real_and_sim_at_once(task):
            # Open-loop needs nothing real (the start observation is given): both at once.
            real_task = asyncio.ensure_future(self.replay(task))
            sim_result = await self.simulate(task, model, trajectory, None)
            real_result = await real_task
        else:
            real_result, sim_result = await self.replay(task), None
        real, real_seconds = real_result
        real = replace(real, steps=capped(real.steps, task.observation_cap))
        trajectory = pipeline.with_initial(trajectory, real.initial)
        real_obs = [t.observation for t in real.steps]
        if sim_result is None:
            sim_result = await self.simulate(
                task, model, trajectory, real_obs if real.complete(trajectory) else None
            )
        draws = [
            (mode, sample, capped(sim, task.observation_cap)) for mode, sample, sim in sim_result[0]
        ]
        sim_seconds = sim_result[1]
        variants = [
            compared(task, trajectory, real_obs, mode, sample, sim) for mode, sample, sim in draws
        ]
        record = _record(trajectory, real, real_seconds, sim_seconds, variants)
        if task.judge is None:
            return record
        judgments = await self.judged(task)
        return JudgedRecord(**vars(record), judgments=[] if self.on_judgment else judgments)

    async def judged(self, task: TrajectoryTask) -> list[JudgmentRecord]:
        """The judge's verdict on every stored step of *task* (none without a judge).

        Requests share the runner's limiter (at most ``sim_concurrency`` in flight);
        each step's requests are queued in order, so one at a time asks step by step.
        Each verdict goes to ``on_judgment`` (when set) the moment it is answered, so
        a Ctrl-C or an error in another step loses none of those already answered.
        """
        if task.judge is None:
            return []
        from fidelity.judge import steps as judging  # the judge's client (openai): on first use

        config = task.judge
        client = self.judges.get(config) or self.judges.setdefault(config, judging.client(config))

        async def one(step: judging.StepToJudge) -> JudgmentRecord:
            async with self.limiter:
                record = await judging.judge_step(client, step, config)
            if self.on_judgment is not None:
                self.on_judgment(record)
            self.progress("judge", 1)
            return record

        return await gather_or_cancel(map(one, task_steps(task)))

    async def simulate(
        self,
        task: TrajectoryTask,
        model: WorldModel | None,
        trajectory: Trajectory,
        real: list[Observation] | None,
    ) -> tuple[list[tuple[str, int, list[TimedObservation]]], float]:
        """Every (mode, sample) of *task*: predicted by *model*, or the trajectory's own."""
        if task.world_model is None or model is None:
            if task.compare is None:
                return [], 0.0  # a replay: nothing simulated
            own = [TimedObservation(s.observation or Observation()) for s in trajectory.steps]
            return [(recorded_mode(trajectory), 0, own)], 0.0
        started = time.perf_counter()
        predicted = await asyncio.gather(
            *(
                pipeline.simulate(model, trajectory, mode, real, self.limiter, sample)
                for mode, sample in task.variants
            )
        )
        self.progress("sim", 1)
        draws = [
            (mode.value, sample, sim)
            for (mode, sample), sim in zip(task.variants, predicted, strict=True)
        ]
        return draws, time.perf_counter() - started


async def gather_or_cancel(awaitables: Iterable[Awaitable[T]]) -> list[T]:
    """The results of *awaitables* run concurrently, in order; when one raises, the others
    are cancelled and awaited before the error goes on (``asyncio.gather`` leaves them
    running, and their late results would reach callbacks after the caller's cleanup)."""
    tasks = [asyncio.ensure_future(awaitable) for awaitable in awaitables]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for pending in tasks:
            pending.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def compared(
    task: TrajectoryTask,
    trajectory: Trajectory,
    real: list[Observation],
    mode: str,
    sample: int,
    sim: list[TimedObservation],
) -> SimVariant:
    """One simulation of *trajectory*, compared step by step when the task compares."""
    if task.compare is None or len(real) != len(sim):
        return SimVariant(mode, sample, sim, [])
    sim_obs = [t.observation for t in sim]
    shown = pipeline.shown_history(trajectory, real, sim_obs, _known_mode(mode))
    return SimVariant(
        mode, sample, sim, pipeline.compare(trajectory, real, sim_obs, shown, task.compare)
    )


def capped(observations: list[TimedObservation], limit: int | None) -> list[TimedObservation]:
    """*observations* with each text cut to *limit* characters by the comparator's own
    truncation rule (:func:`~fidelity.compare.normalize.truncate`) and flagged ``truncated``."""
    if limit is None:
        return observations
    result = []
    for timed in observations:
        text, cut = truncate(timed.observation.text, limit)
        if cut:
            observation = timed.observation.model_copy(update={"text": text, "truncated": True})
            timed = TimedObservation(observation, timed.latency_ms)
        result.append(timed)
    return result


def own_observations(trajectory: Trajectory) -> pipeline.Replayed:
    """The trajectory's recorded observations as its real side (missing ones left out)."""
    steps = [TimedObservation(s.observation) for s in trajectory.steps if s.observation is not None]
    return pipeline.Replayed(None, steps)


def recorded_mode(trajectory: Trajectory) -> str:
    """The mode a dataset says its observations were simulated in (``meta.mode``), or recorded."""
    value = trajectory.meta.get("mode")
    return value if _known_mode(value) is not None and isinstance(value, str) else RECORDED_MODE


def _known_mode(value: Any) -> Mode | None:
    try:
        return Mode(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _real_and_sim_at_once(task: TrajectoryTask) -> bool:
    return (
        task.sandbox is not None
        and Mode.teacher_forced not in task.modes
        and bool(task.trajectory.env.initial_observation)
    )


def _record(
    trajectory: Trajectory,
    real: pipeline.Replayed,
    real_seconds: float,
    sim_seconds: float,
    variants: list[SimVariant],
) -> TrajectoryRecord:
    first = variants[0] if variants else SimVariant("", 0, [], [])
    return TrajectoryRecord(
        trajectory,
        real.steps,
        first.sim,
        first.comparisons,
        first.mode,
        real_seconds,
        sim_seconds,
        real.error,
        extra=variants[1:],
        outcome=real.outcome,
    )


def task_steps(task: TrajectoryTask) -> list[StepToJudge]:
    """The steps a judging task asks about, with the texts the judge sees, in a stable order."""
    config = task.judge
    if config is None:
        return []
    from fidelity.judge.steps import StepToJudge, shown

    history = [
        (s.action.model_dump_json(), s.observation.text, s.observation.exit_code)
        for s in task.trajectory.steps
        if s.observation is not None
    ]
    description = (task.trajectory.env.description or "").strip()
    steps = []
    for variant in task.stored:
        for stored in variant.steps:
            depth = stored.depth
            first = 0 if config.history_steps is None else max(0, depth - 1 - config.history_steps)
            earlier = history[first : depth - 1]
            cut = None if config.max_chars is None else config.max_chars // 4
            action = task.trajectory.steps[depth - 1].action.model_dump_json()
            variables = {
                "domain": task.trajectory.domain.value,
                "description": description,
                "depth": depth,
                "history": [shown(a, text, code, cut) for a, text, code in earlier],
                "omitted_steps": max(0, depth - 1 - len(earlier)),
                "action": action,
                "real": shown(action, stored.real.text, stored.real.exit_code, config.max_chars),
                "sim": shown(action, stored.sim.text, stored.sim.exit_code, config.max_chars),
            }
            steps.append(
                StepToJudge(task.trajectory.id, depth, variant.mode, variant.sample, variables)
            )
    return steps
