"""Whole suites to JSONL: ``fidelity replay`` (real only) and ``fidelity simulate`` (sim only)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from fidelity import pipeline
from fidelity.defaults import SANDBOX_CONCURRENCY, STEP_TIMEOUT
from fidelity.errors import UsageError
from fidelity.executors import LocalExecutor
from fidelity.formats.jsonl import distinct_output, write_trajectories
from fidelity.pipeline import SimConfig
from fidelity.sandboxes import SandboxChooser
from fidelity.sandboxes.base import close_all
from fidelity.store import TimedObservation, TrajectoryRecord
from fidelity.task import TrajectoryTask
from fidelity.trajectory import Observation, Step, Trajectory
from fidelity.trust import DatasetTrust
from fidelity.worldmodels.base import Mode, WorldModel
from fidelity.worldmodels.metrics import (
    Controllability,
    SampleSpread,
    control_outcomes,
    sample_spread,
    summarize_controls,
    summarize_spread,
)
from fidelity.worldmodels.prompting import AWB_META, EVALUATED_TURN


class BatchResult(BaseModel):
    """What a replay or simulation wrote."""

    output: str
    trajectories: int
    steps: int
    failed_steps: int
    world_model: dict[str, Any] | None = None
    world_model_notice: str | None = None
    modes: list[str] | None = None
    samples: int | None = None
    sampling: SampleSpread | None = None
    controllability: Controllability | None = None
    cache: dict[str, int] | None = Field(default=None, description="response cache hits/misses")
    unverifiable: dict[str, str] | None = Field(
        default=None,
        description="replay: trajectories whose environment could not be had, id → reason",
    )


def replay_suite(
    suite: str | os.PathLike[str],
    output: str | os.PathLike[str],
    sandbox: str | None = None,
    sandbox_options: dict[str, Any] | None = None,
    step_timeout: float = STEP_TIMEOUT,
    concurrency: int = SANDBOX_CONCURRENCY,
    progress: pipeline.ProgressCallback | None = None,
    allowed_roots: Sequence[str | os.PathLike[str]] = (),
    image: str | None = None,
    trust: DatasetTrust | None = None,
) -> BatchResult:
    """Replay every trajectory of *suite* for real and write them with real observations.

    *image* is the container image of trajectories whose ``env.image`` is unset. *trust*
    is what the operator allowed the data (default: nothing: a host command it names, or a
    site that is not the operator's, is a UsageError before anything runs).

    Its ``env.workdir`` and ``@file`` setup paths must lie inside the suite's folder or
    *allowed_roots* (:func:`fidelity.formats.jsonl.confine_paths`).
    """
    distinct_output(output, [suite])
    trajectories = pipeline.with_default_image(
        pipeline.load_suite(suite, allowed_roots=allowed_roots), image, sandbox
    )
    chooser = SandboxChooser(sandbox, sandbox_options)
    pipeline.check_backends(trajectories, chooser, Path(suite))
    pipeline.check_trust(trajectories, trust or DatasetTrust(), Path(suite))
    report = progress or (lambda phase, n: None)
    report("total", len(trajectories))
    configs = {t.id: chooser.config_for(t.domain.value, t.env) for t in trajectories}
    tasks = [
        TrajectoryTask.model_validate(
            {"trajectory": t, "sandbox": configs[t.id], "step_timeout": step_timeout}
        )
        for t in trajectories
    ]
    records: dict[str, TrajectoryRecord] = {}

    def keep(record: TrajectoryRecord) -> None:
        records[record.trajectory.id] = record

    try:
        asyncio.run(LocalExecutor(concurrency, 1, report).run(tasks, None, keep))
    except BaseException:
        close_all()
        raise
    results = [
        records[t.id].trajectory.with_observations(
            [o.observation for o in records[t.id].real],
            "real",
            sandbox=configs[t.id].type,
        )
        for t in trajectories
    ]
    reasons = {t.id: pipeline.unverifiable_reason(records[t.id].error) for t in trajectories}
    unverifiable = {tid: reason for tid, reason in reasons.items() if reason is not None}
    return _written(output, results).model_copy(update={"unverifiable": unverifiable})


def simulate_suite(
    suite: str | os.PathLike[str],
    output: str | os.PathLike[str],
    sim: SimConfig,
    mode: Mode | Sequence[Mode] = Mode.open_loop,
    progress: pipeline.ProgressCallback | None = None,
) -> BatchResult:
    """Predict every step of *suite* with a world model and write the simulated trajectories.

    *mode* may name several modes (``--mode both``) and ``sim.samples`` draws
    several predictions per step; each (mode, sample) is written as its own
    trajectory, with id ``<id>@<mode>#<sample>`` when there is more than one,
    and ``meta.mode`` / ``meta.sample`` / ``meta.source_id``. Teacher-forced
    mode needs the suite's real observations (a replayed file); when they are
    there, the result also reports the samples' spread against their distance
    to real, and the controllability rate of steps that carry a control.
    """
    modes = [mode] if isinstance(mode, Mode) else list(dict.fromkeys(mode))
    if sim.turns == "evaluated":
        modes = [Mode.teacher_forced]  # the reference predicts one turn after the real history
    distinct_output(output, [suite])
    # No sandbox runs here, so its paths are resolved (for the file written) but not
    # confined: a later replay or gate of that file confines them.
    trajectories = pipeline.load_suite(suite, allowed_roots=None)
    corpus = [t for t in trajectories if all(s.observation for s in t.steps)]
    model, notice = sim.world_model.build(corpus), sim.world_model.notice()
    variants = [(m, k) for m in modes for k in range(sim.samples)]
    report = progress or (lambda phase, n: None)
    report("total", len(trajectories) * len(variants))
    if sim.turns == "evaluated":
        results = asyncio.run(
            _simulate_evaluated_all(model, trajectories, sim.samples, sim.concurrency, report)
        )
    else:
        tasks = [
            TrajectoryTask.model_validate(
                {
                    "trajectory": t,
                    "world_model": sim.world_model,
                    "modes": modes,
                    "samples": sim.samples,
                }
            )
            for t in trajectories
        ]
        records = asyncio.run(_simulate_all(model, tasks, sim.concurrency, report))
        several = len(variants) > 1
        results = [
            [
                _simulated(trajectory, v.sim, Mode(v.mode), v.sample, several, model)
                for v in records[trajectory.id].variants()
            ]
            for trajectory in trajectories
        ]
    flat = [t for row in results for t in row]
    written = _written(output, flat)
    return written.model_copy(
        update={
            "world_model": model.describe(),
            "world_model_notice": notice,
            "modes": [m.value for m in modes],
            "samples": sim.samples,
            "sampling": _spread(trajectories, results, modes, sim.samples),
            "controllability": _controllability(trajectories, results),
            "cache": _cache_stats(model),
        }
    )


async def _simulate_all(
    model: WorldModel,
    tasks: list[TrajectoryTask],
    concurrency: int,
    report: pipeline.ProgressCallback,
) -> dict[str, TrajectoryRecord]:
    """Every task at once (predictions bounded by *concurrency*); records by trajectory id."""
    records: dict[str, TrajectoryRecord] = {}

    def keep(record: TrajectoryRecord) -> None:
        records[record.trajectory.id] = record
        report("sim", len(record.variants()) - 1)  # the runner reports one per trajectory

    try:
        await LocalExecutor(1, concurrency, report).run(tasks, model, keep)
    finally:
        await model.aclose()
    return records


async def _simulate_evaluated_all(
    model: WorldModel,
    trajectories: list[Trajectory],
    samples: int,
    concurrency: int,
    report: pipeline.ProgressCallback,
) -> list[list[Trajectory]]:
    """Each trajectory's evaluated turn, *samples* draws each; ``result[t][k]``."""
    limiter = asyncio.Semaphore(concurrency)

    async def one(trajectory: Trajectory, sample: int) -> Trajectory:
        simulated = await _simulate_evaluated(model, trajectory, limiter, sample)
        report("sim", 1)
        return _renamed(simulated, Mode.teacher_forced, sample, samples > 1)

    try:
        rows = [asyncio.gather(*(one(t, k) for k in range(samples))) for t in trajectories]
        return [list(row) for row in await asyncio.gather(*rows)]
    finally:
        await model.aclose()


def evaluated_turn(trajectory: Trajectory) -> int:
    """The 1-based turn a benchmark sample evaluates: AgentWorldBench's ``turn_idx``, else the last."""
    record = trajectory.meta.get(AWB_META)
    turn = record.get("turn_idx") if isinstance(record, dict) else None
    return (
        turn
        if isinstance(turn, int) and 1 <= turn <= len(trajectory.steps)
        else len(trajectory.steps)
    )


async def _simulate_evaluated(
    model: WorldModel, trajectory: Trajectory, limiter: asyncio.Semaphore, sample: int
) -> Trajectory:
    """Predict only the evaluated turn after the real history (one request, like the reference)."""
    depth = evaluated_turn(trajectory)
    history = trajectory.steps[: depth - 1]
    missing = [n for n, s in enumerate(history, start=1) if s.observation is None]
    if missing:
        raise UsageError(
            f"trajectory {trajectory.id!r}: --turns evaluated needs the real observations of "
            f"the earlier turns (step {missing[0]} has none)"
        )
    async with limiter:
        observation = await model.predict(
            trajectory, list(history), trajectory.steps[depth - 1].action, depth, sample
        )
    steps = [
        Step(action=s.action, observation=observation if n == depth else None, control=s.control)
        for n, s in enumerate(trajectory.steps, start=1)
    ]
    meta = {
        **trajectory.meta,
        "mode": Mode.teacher_forced.value,
        "sample": sample,
        "source_id": trajectory.id,
        "world_model": model.describe(),
        EVALUATED_TURN: depth,
    }
    return trajectory.model_copy(update={"steps": steps, "source": "sim", "meta": meta})


def _renamed(trajectory: Trajectory, mode: Mode, sample: int, several: bool) -> Trajectory:
    if not several:
        return trajectory
    return trajectory.model_copy(update={"id": f"{trajectory.id}@{mode.value}#{sample}"})


def _simulated(
    trajectory: Trajectory,
    predicted: list[TimedObservation],
    mode: Mode,
    sample: int,
    several: bool,
    model: WorldModel,
) -> Trajectory:
    result = trajectory.with_observations(
        [t.observation for t in predicted],
        "sim",
        mode=mode.value,
        sample=sample,
        source_id=trajectory.id,
        world_model=model.describe(),
    )
    if several:
        result = result.model_copy(update={"id": f"{trajectory.id}@{mode.value}#{sample}"})
    return result


def _sim_observations(trajectory: Trajectory) -> list[Observation]:
    return [s.observation or Observation(error="missing") for s in trajectory.steps]


def _spread(
    trajectories: list[Trajectory],
    results: list[list[Trajectory]],
    modes: list[Mode],
    samples: int,
) -> SampleSpread | None:
    """Spread among samples against distance to real, per mode pooled (None with 1 sample)."""
    if samples < 2:
        return None
    spreads: list[float] = []
    distances: list[float] = []
    for trajectory, row in zip(trajectories, results, strict=True):
        real = [s.observation for s in trajectory.steps]
        has_real = all(o is not None for o in real)
        for mode in modes:
            drawn = [_sim_observations(t) for t in row if t.meta["mode"] == mode.value]
            s, d = sample_spread(drawn, real if has_real else None)
            spreads += s
            distances += d
    return summarize_spread(samples, spreads, distances)


def _controllability(
    trajectories: list[Trajectory], results: list[list[Trajectory]]
) -> Controllability | None:
    """Controllability over every prediction of a controlled step (None when no step has one)."""
    outcomes: list[bool | None] = []
    for trajectory, row in zip(trajectories, results, strict=True):
        for simulated in row:
            outcomes += control_outcomes(trajectory, _sim_observations(simulated))
    return summarize_controls(outcomes) if outcomes else None


def _cache_stats(model: WorldModel) -> dict[str, int] | None:
    cache = getattr(model, "cache", None)
    if cache is None:
        return None
    return {"hits": cache.hits, "misses": cache.misses}


def _written(output: str | os.PathLike[str], trajectories: list[Trajectory]) -> BatchResult:
    write_trajectories(output, trajectories)
    steps = [s for t in trajectories for s in t.steps]
    failed = sum(1 for s in steps if s.observation is not None and s.observation.failed)
    return BatchResult(
        output=str(Path(output)),
        trajectories=len(trajectories),
        steps=len(steps),
        failed_steps=failed,
    )
