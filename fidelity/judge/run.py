"""An LLM judge comparable with AgentWorldBench's, beside the deterministic metrics.

Every compared step of a stored run (infrastructure failures left out) is shown
to a judge model through the project's world-model client
(:class:`~fidelity.worldmodels.openai_compat.OpenAICompatWorldModel`: retries
with backoff, DuckDB response cache), as ``eval.py judge`` does: a per-domain
judge system prompt (``<domain>/judge_system_prompt.txt`` of an official
prompts checkout, else fidelity's ``prompts/judge/system.md.j2`` rendered for
the domain), and a user message with the whole real history, the evaluated
action, the ground truth and the parsed prediction, uncut; temperature 0.6 and
max_tokens 32768 like the reference. The answer ends in a JSON verdict with
``scores`` (format, factuality, consistency, realism, quality on 1-5) and
``total_score``. An answer without a valid verdict, or a request that finally
fails, is stored as a judge failure for that step (``error``), never as a score.

The judge runs as trajectory tasks (:mod:`fidelity.task`) like every other
command: one task per stored trajectory (its real history as the trajectory's
observations, its compared steps as ``stored`` variants, the judge config), on
the local executor or Ray (``--executor ray``). Locally each judgment is
stored as it is answered (in batches, and at the end: a Ctrl-C keeps every
answered one); a Ray worker posts each one to a mailbox on the cluster, which
the driver empties as judgments arrive and after a Ctrl-C. A rerun by the same
judge resumes: a step holding a valid judgment of this judge (same
:meth:`JudgeConfig.describe`) is kept and not asked again; judge failures are
asked again.

Judgments go to the ``judgments`` table (keyed like ``comparisons``). Scores
are normalized as ``eval.py score`` does, ``(x - 1) / 4 * 100`` of the
``total_score``, averaged per domain and overall, and reported beside the
Spearman rank correlation between the judge and the deterministic ``score``
(overall and per domain).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from fidelity import store_queries as queries
from fidelity.errors import NotFoundError
from fidelity.judge.config import JudgeConfig
from fidelity.judge.steps import (
    DIMENSIONS,
    JUDGE_PROMPTS,
    STEP_TEMPLATE,
    SYSTEM_TEMPLATE,
    JudgmentParseError,
    StepToJudge,
    _check,
    client,
    judge_messages,
    judge_step,
    judge_system,
    normalized,
    overall_score,
    parse_scores,
    parse_verdict,
)
from fidelity.store import JudgmentRecord, Store, TrajectoryRecord, action_adapter
from fidelity.task import JudgedRecord, StoredStep, StoredVariant, TrajectoryTask, task_steps
from fidelity.trajectory import EnvSpec, Observation, Step, Trajectory

if TYPE_CHECKING:
    from fidelity.executors import ExecutorConfig

__all__ = [
    "DIMENSIONS",
    "JUDGE_PROMPTS",
    "STEP_TEMPLATE",
    "SYSTEM_TEMPLATE",
    "Agreement",
    "JudgeConfig",
    "JudgeResult",
    "JudgmentParseError",
    "StepToJudge",
    "client",
    "domain_means",
    "judge_agreement",
    "judge_messages",
    "judge_run",
    "judge_step",
    "judge_system",
    "judge_tasks",
    "normalized",
    "overall_score",
    "parse_scores",
    "parse_verdict",
    "spearman",
    "task_steps",
]

_FLUSH_EVERY = 50

Progress = Callable[[str, int], None]


class Agreement(BaseModel):
    """Spearman rank correlations between judge scores and the deterministic ``score``."""

    model_config = ConfigDict(extra="forbid")

    n: int = Field(description="steps with both a judge score and a comparison")
    overall: float | None = Field(description="rho(judge overall, score); None below 3 steps")
    dimensions: dict[str, float | None]
    domains: dict[str, float | None] = Field(
        default_factory=dict, description="rho(judge overall, score) within each domain"
    )


class JudgeResult(BaseModel):
    """What one ``judge_run`` did and how the run's judgments agree with the metrics."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    judge: dict[str, str]
    steps: int = Field(description="compared steps selected (at most --limit)")
    judged: int = Field(description="of those, holding five valid scores of this judge")
    resumed: int = Field(
        default=0, description="of those, judged validly by this judge before: kept, not asked"
    )
    failed: int = Field(description="judge failures now (bad answer or failed request)")
    failures: dict[str, int] = Field(description="judge failures by error class")
    mean_scores: dict[str, float] = Field(description="mean 0-100 per dimension, run's judgments")
    domain_scores: dict[str, float] = Field(
        default_factory=dict,
        description="mean normalized total score (0-100) per domain, as AgentWorldBench's table",
    )
    deterministic: dict[str, float] = Field(
        default_factory=dict, description="mean deterministic score (0-100) per domain, same steps"
    )
    agreement: Agreement


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho (average ranks for ties); None with < 3 pairs or a constant side."""
    if len(x) != len(y):
        raise ValueError("spearman needs two sequences of the same length")
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    import pandas as pd  # the judge's agreement only: nothing else of a run needs it

    ranks_x = pd.Series(list(x), dtype=float).rank()
    ranks_y = pd.Series(list(y), dtype=float).rank()
    rho = ranks_x.corr(ranks_y)  # Pearson on average ranks
    return None if math.isnan(rho) else round(float(rho), 6)


def judge_run(
    db: str | Path,
    run_id: str | None,
    config: JudgeConfig,
    progress: Progress | None = None,
    executor: ExecutorConfig | None = None,
) -> JudgeResult:
    """Judge the compared steps of *run_id* (default: the latest run) and store the judgments.

    One trajectory task per stored trajectory runs on *executor* (default: local
    threads, ``config.concurrency`` requests at once); judgments are written as
    they come in (each one as it is answered, here or on a Ray worker; every few
    dozen steps and at the end, Ctrl-C and errors included), so an interrupted
    judge keeps what it got, and a rerun asks only for the steps without a valid
    judgment of this judge.
    Raises :class:`~fidelity.errors.EndpointUnreachableError` when the judge
    endpoint refuses connections, :class:`~fidelity.errors.UsageError` when it
    does not serve ``config.model`` or the judge prompts are missing,
    :class:`~fidelity.errors.NotFoundError` for a missing database or run.
    """
    from fidelity.executors import ExecutorConfig

    if not Path(db).exists():
        raise NotFoundError(f"{db}: no such database (run `fidelity audit` first)")
    executor = executor or ExecutorConfig(threads=1, sim_concurrency=config.concurrency)
    with Store(db) as store:
        run = store.require_run(run_id)
        tasks, selected, resumed = judge_tasks(store, run, config)
        records = asyncio.run(_judge_tasks(store, run, tasks, config, executor, progress))
        return _result(store, run, config, records, selected, resumed)


def judge_tasks(
    store: Store, run_id: str, config: JudgeConfig
) -> tuple[list[TrajectoryTask], int, int]:
    """One judging task per trajectory of *run_id* with steps left to judge.

    Returns (tasks, compared steps selected, of those already judged validly
    by this judge: left out).
    """
    rows = queries.rows(
        store, "judge_load_steps", [run_id, config.limit if config.limit is not None else 2**62]
    )
    kept = _kept(store, run_id, config)
    domains: dict[str, tuple[str, str]] = {}
    variants: dict[str, dict[tuple[str, int], list[StoredStep]]] = {}
    for tid, depth, mode, sample, domain, env, _action, r_text, r_exit, s_text, s_exit in rows:
        if (tid, depth, mode, sample) in kept:
            continue
        domains[tid] = (domain, env)
        variants.setdefault(tid, {}).setdefault((mode, sample), []).append(
            StoredStep(
                depth=depth,
                real=Observation(text=r_text, exit_code=r_exit),
                sim=Observation(text=s_text, exit_code=s_exit),
            )
        )
    history = _real_history(store, run_id)
    tasks = [
        TrajectoryTask(
            trajectory=_trajectory(tid, *domains[tid], history.get(tid, [])),
            stored=[
                StoredVariant(mode=mode, sample=sample, steps=steps)
                for (mode, sample), steps in by_variant.items()
            ],
            judge=config,
        )
        for tid, by_variant in variants.items()
    ]
    return tasks, len(rows), sum(1 for row in rows if tuple(row[:4]) in kept)


def _kept(store: Store, run_id: str, config: JudgeConfig) -> set[tuple[Any, ...]]:
    """Steps of *run_id* holding a valid judgment of this judge (same description)."""
    described = config.describe()
    return {
        tuple(row[:4])
        for row in queries.rows(store, "judge_valid_judgments", [run_id])
        if json.loads(row[4]) == described
    }


def _trajectory(
    tid: str, domain: str, env: str, history: list[tuple[str, str, int | None]]
) -> Trajectory:
    """The stored trajectory: its actions, each with its real observation."""
    steps = [
        Step(
            action=action_adapter().validate_json(action),
            observation=Observation(text=text, exit_code=code),
        )
        for action, text, code in history
    ]
    spec = EnvSpec.model_validate_json(env)
    return Trajectory(id=tid, domain=domain, env=spec, steps=steps, source="real")


def _real_history(store: Store, run_id: str) -> dict[str, list[tuple[str, str, int | None]]]:
    rows = queries.rows(store, "judge_real_history", [run_id])
    history: dict[str, list[tuple[str, str, int | None]]] = {}
    for tid, action, text, exit_code in rows:
        history.setdefault(tid, []).append((action, text, exit_code))
    return history


async def _judge_tasks(
    store: Store,
    run_id: str,
    tasks: list[TrajectoryTask],
    config: JudgeConfig,
    executor_config: ExecutorConfig,
    progress: Progress | None,
) -> list[JudgmentRecord]:
    """Run the judging *tasks* on the executor, writing judgments to *store* as they come in.

    Each judgment comes one by one as it is answered (locally, or posted by a Ray
    worker), or in its trajectory's record (an executor without ``on_judgment``).
    It is written in batches of :data:`_FLUSH_EVERY` and, Ctrl-C and errors
    included, at the end. A Ray task retried after its worker was lost answers
    its steps again: the later judgment of a step replaces the earlier one.
    """
    from fidelity.executors import get_executor

    report = progress or (lambda phase, n: None)
    if tasks:
        steps = task_steps(tasks[0])
        judge_messages(steps[0], config.prompts_dir)  # missing templates: fail before asking
        checker = client(config.model_copy(update={"cache": None}))
        try:
            await _check(checker, config)
        finally:
            await checker.aclose()
    report("total", sum(len(v.steps) for t in tasks for v in t.stored))
    done: dict[tuple[str, int, str, int], JudgmentRecord] = {}
    pending: dict[tuple[str, int, str, int], JudgmentRecord] = {}  # one per step a batch

    def add(judged: Sequence[JudgmentRecord]) -> None:
        for judgment in judged:
            key = (judgment.trajectory_id, judgment.depth, judgment.mode, judgment.sample)
            done[key] = pending[key] = judgment
        if len(pending) >= _FLUSH_EVERY:
            store.write_judgments(run_id, config.describe(), list(pending.values()))
            pending.clear()

    def keep(record: TrajectoryRecord) -> None:
        # a worker lost twice comes back as a plain failed record: its steps stay unjudged
        add(record.judgments if isinstance(record, JudgedRecord) else [])

    executor = get_executor(executor_config, report)
    try:
        await executor.run(tasks, None, keep, on_judgment=lambda judgment: add([judgment]))
    finally:
        executor.close()
        store.write_judgments(run_id, config.describe(), list(pending.values()))
    return list(done.values())


def _result(
    store: Store,
    run_id: str,
    config: JudgeConfig,
    records: list[JudgmentRecord],
    selected: int,
    resumed: int,
) -> JudgeResult:
    failures: dict[str, int] = {}
    for record in records:
        if record.error is not None:
            name = record.error.split(":", 1)[0]
            failures[name] = failures.get(name, 0) + 1
    agreement, means = judge_agreement(store, run_id)
    domain_scores, deterministic = domain_means(store, run_id)
    return JudgeResult(
        run_id=run_id,
        judge=config.describe(),
        steps=selected,
        judged=resumed + sum(1 for r in records if r.error is None),
        resumed=resumed,
        failed=sum(1 for r in records if r.error is not None),
        failures=failures,
        mean_scores=means,
        domain_scores=domain_scores,
        deterministic=deterministic,
        agreement=agreement,
    )


def judge_agreement(store: Store, run_id: str) -> tuple[Agreement, dict[str, float]]:
    """Agreement of *run_id*'s stored judgments with its scores, and the mean 0-100 scores."""
    rows = _judged_rows(store, run_id)
    scores = [json.loads(row[0]) for row in rows]
    metric = [float(row[2]) for row in rows]
    dimensions = {d: spearman([s[d] for s in scores], metric) for d in DIMENSIONS}
    means = {
        d: round(sum((s[d] - 1.0) / 4.0 * 100.0 for s in scores) / len(scores), 2)
        for d in DIMENSIONS
        if scores
    }
    if scores:
        means["overall"] = round(sum(float(row[1]) for row in rows) / len(rows), 2)
    by_domain: dict[str, list[tuple[float, float]]] = {}
    for row in rows:
        by_domain.setdefault(str(row[3]), []).append((float(row[1]), float(row[2])))
    agreement = Agreement(
        n=len(rows),
        overall=spearman([float(row[1]) for row in rows], metric),
        dimensions=dimensions,
        domains={
            d: spearman([p[0] for p in pairs], [p[1] for p in pairs])
            for d, pairs in sorted(by_domain.items())
        },
    )
    return agreement, means


def _judged_rows(store: Store, run_id: str) -> list[tuple[Any, ...]]:
    """(scores JSON, normalized total, deterministic score, domain) of each valid judgment."""
    return queries.rows(store, "judge_judge_agreement", [run_id])


def domain_means(store: Store, run_id: str) -> tuple[dict[str, float], dict[str, float]]:
    """Mean normalized judge total (0-100) per domain and overall, and the deterministic
    score (0-100) of the same steps, as AgentWorldBench's table averages per domain."""
    judged: dict[str, list[float]] = {}
    metric: dict[str, list[float]] = {}
    for _, total, score, domain in _judged_rows(store, run_id):
        judged.setdefault(str(domain), []).append(float(total))
        metric.setdefault(str(domain), []).append(float(score) * 100.0)

    def means(values: dict[str, list[float]]) -> dict[str, float]:
        out = {d: round(sum(v) / len(v), 2) for d, v in sorted(values.items())}
        pooled = [x for v in values.values() for x in v]
        if pooled:
            out["overall"] = round(sum(pooled) / len(pooled), 2)
        return out

    return means(judged), means(metric)
