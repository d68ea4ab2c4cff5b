"""The dataset gate's replays: the sample replayed for real, compared, stored as a run."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from fidelity import pipeline
from fidelity import store_queries as queries
from fidelity.analysis.cells import trajectory_horizons
from fidelity.audit import code_version
from fidelity.executors import ShardSink, get_executor
from fidelity.formats.rl_export import (
    StepVerdict,
    step_verdicts,
)
from fidelity.gate.options import GateOptions, RealCheck, Scan, Verified
from fidelity.sandboxes import SandboxChooser, backend_for
from fidelity.sandboxes.base import close_all
from fidelity.store import RecordBuffer, Store
from fidelity.task import TrajectoryTask
from fidelity.trajectory import Trajectory


def verified_facts(store: Store, run_id: str, with_steps: bool) -> Verified:
    """Horizons and outcomes of the sample (and per-step verdicts when exporting)."""
    checks = {
        str(tid): RealCheck(claimed=claimed, real=status, exit_code=code, reason=reason)
        for _, tid, claimed, status, reason, code, _ in queries.rows(store, "outcomes", [run_id])
    }
    steps: dict[str, list[StepVerdict]] = {}
    if with_steps:
        rows = queries.rows(store, "rl_step_scores", [run_id])
        for tid, group in itertools.groupby(rows, key=lambda r: str(r[0])):
            steps[tid] = step_verdicts((d, s, dr, f) for _, d, s, dr, f in group)
    return Verified(horizons=trajectory_horizons(store, run_id), checks=checks, steps=steps)


def verify(
    store: Store,
    run_id: str,
    trajectories: list[Trajectory],
    options: GateOptions,
    domain: str,
    progress: pipeline.ProgressCallback,
) -> None:
    """Replay *trajectories* for real, compare with their recorded observations, store (those
    the run already holds are skipped: a gate goes on from a stopped one). *progress* hears
    ``("real", 1)`` per replay; its total is the caller's to announce."""
    folder = options.executor_config.shard_folder(options.db, run_id)
    # what an interrupted attempt's workers finished is kept
    options.executor_config.merge_left_over(store, options.db, run_id)
    done = store.done_trajectories(run_id)
    chooser = SandboxChooser(options.sandbox, options.sandbox_options, run_id)
    tasks = [
        TrajectoryTask.model_validate(
            {
                "trajectory": t,
                "sandbox": chooser.config_for(domain, t.env),
                "compare": options.compare,
                "step_timeout": options.step_timeout,
                "observation_cap": options.observation_cap,
            }
        )
        for t in trajectories
        if t.id not in done
    ]
    if not tasks:
        return

    def replayed(phase: str, n: int) -> None:  # the executor's phases: only its replays count
        if phase == "real":
            progress("real", n)

    executor = get_executor(options.executor_config, replayed)
    buffer = RecordBuffer(store, run_id)
    shards = None if folder is None else ShardSink(folder, buffer.merge)
    try:
        asyncio.run(executor.run(tasks, None, buffer.add, shards=shards))
    except BaseException:
        close_all()
        raise
    finally:
        buffer.flush()
        executor.close()
        # shards whose receipt never came (interrupted, or retried)
        options.executor_config.merge_left_over(store, options.db, run_id)


def run_info(options: GateOptions, scan: Scan) -> dict[str, Any]:
    models = scan.world_models
    return {
        "domain": scan.domain,
        "sandbox": backend_for(scan.domain, options.sandbox),
        "world_model": models[0] if len(models) == 1 else {"recorded": models},
        "mode": scan.modes[0] if len(scan.modes) == 1 else "mixed",
        "suite": str(options.dataset),
        "suite_digest": scan.sha256,
        "code_version": code_version(),
        "config": {"gate": options.model_dump(mode="json")},
    }
