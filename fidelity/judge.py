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
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field

from fidelity import store_queries as queries
from fidelity.errors import (
    EndpointUnreachableError,
    MalformedPredictionError,
    NotFoundError,
    UnknownDomainError,
    UsageError,
)
from fidelity.model import EnvSpec, Observation, Step, Trajectory
from fidelity.store import ACTION, JudgmentRecord, Store, TrajectoryRecord
from fidelity.worldmodels.cache import ResponseCache, request_key
from fidelity.worldmodels.openai_compat import OpenAICompatWorldModel, RequestFailedError
from fidelity.worldmodels.prompting import OFFICIAL_JUDGE, _template, layout, strip_thinking

if TYPE_CHECKING:
    from fidelity.executors import ExecutorConfig
    from fidelity.task import TrajectoryTask

DIMENSIONS = ("format", "factuality", "consistency", "realism", "quality")
"""AgentWorldBench's judge dimensions, each scored 1-5."""

JUDGE_PROMPTS = "judge"
SYSTEM_TEMPLATE = "system.md.j2"
STEP_TEMPLATE = "step.md.j2"
_JSON_START = re.compile(r"\{")
_FLUSH_EVERY = 50

Progress = Callable[[str, int], None]


class JudgeConfig(BaseModel):
    """Where the judge runs and what it sees."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str = Field(min_length=1, description="OpenAI-compatible base URL (…/v1)")
    model: str = Field(min_length=1)
    api_key: str = "EMPTY"
    concurrency: int = Field(default=8, ge=1)
    limit: int | None = Field(default=None, ge=1, description="judge at most this many steps")
    timeout: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    deadline: float = Field(default=300.0, gt=0, description="seconds per request in all")
    backoff_base: float = Field(default=0.5, ge=0)
    max_tokens: int = Field(default=32768, ge=1)
    temperature: float = Field(default=0.6, ge=0, description="the reference judge's temperature")
    history_steps: int | None = Field(
        default=None,
        ge=0,
        description="earlier steps shown (latest ones); None: all, as the reference",
    )
    max_chars: int | None = Field(
        default=None, ge=200, description="characters shown per observation; None: uncut"
    )
    prompts_dir: Path | None = Field(default=None, description="prompts folder holding judge/")
    cache: Path | None = Field(default=None, description="response cache (DuckDB); None: off")

    def describe(self) -> dict[str, str]:
        """What is stored with each judgment (no API key)."""
        return {
            "url": self.url,
            "model": self.model,
            "temperature": str(self.temperature),
            "history_steps": str(self.history_steps),
            "max_chars": str(self.max_chars),
            "prompts": str(self.prompts_dir or "bundled"),
        }


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


@dataclass(frozen=True)
class StepToJudge:
    """One compared step and the texts the judge sees."""

    trajectory_id: str
    depth: int
    mode: str
    sample: int
    variables: dict[str, Any]


class JudgmentParseError(MalformedPredictionError):
    """The judge answered, but not with a JSON verdict holding five scores from 1 to 5."""


def parse_verdict(content: str | None) -> tuple[dict[str, float], float]:
    """The five scores and the total score (1-5) of a judge answer.

    ``<think>`` sections are removed and the last JSON object of the answer
    holding ``scores`` (fenced or not) is read: ``scores`` maps every
    dimension to a number from 1 to 5; ``total_score`` (1-5) is the verdict,
    the mean of the scores when the judge left it out. Raises
    :class:`JudgmentParseError` otherwise.
    """
    data = _last_verdict(strip_thinking(content or ""))
    if data is None:
        raise JudgmentParseError('no JSON verdict with "scores" in the judge\'s answer')
    raw = data["scores"]
    missing = [d for d in DIMENSIONS if d not in raw]
    if missing:
        raise JudgmentParseError(f"the verdict's scores miss {missing}")
    scores = {name: _one_to_five(name, raw[name]) for name in DIMENSIONS}
    total = data.get("total_score")
    if total is None:
        return scores, sum(scores.values()) / len(scores)
    return scores, _one_to_five("total_score", total)


def _one_to_five(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 5:
        raise JudgmentParseError(f"score {name}={value!r} is not a number from 1 to 5")
    return float(value)


def _last_verdict(text: str) -> dict[str, Any] | None:
    """The last JSON object in *text* whose ``scores`` is an object."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    for match in _JSON_START.finditer(text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(value, dict) and isinstance(value.get("scores"), dict):
            found = value
    return found


def parse_scores(content: str | None) -> dict[str, float]:
    """The five scores (1-5) of a judge answer (see :func:`parse_verdict`)."""
    return parse_verdict(content)[0]


def normalized(value: float) -> float:
    """AgentWorldBench's rescaling of a 1-5 score: ``(x - 1) / 4 * 100``."""
    return (value - 1.0) / 4.0 * 100.0


def overall_score(scores: dict[str, float]) -> float:
    """The mean of the normalized scores over the dimensions (when no total is given)."""
    return sum(normalized(scores[d]) for d in DIMENSIONS) / len(DIMENSIONS)


def spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's rho (average ranks for ties); None with < 3 pairs or a constant side."""
    if len(x) != len(y):
        raise ValueError("spearman needs two sequences of the same length")
    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
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
    from fidelity.task import StoredStep, StoredVariant, TrajectoryTask

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
            action=ACTION.validate_json(action), observation=Observation(text=text, exit_code=code)
        )
        for action, text, code in history
    ]
    spec = EnvSpec.model_validate_json(env)
    return Trajectory(id=tid, domain=domain, env=spec, steps=steps, source="real")


def task_steps(task: TrajectoryTask) -> list[StepToJudge]:
    """The steps a judging task asks about, with the texts the judge sees, in a stable order."""
    config = task.judge
    if config is None:
        return []
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
                "history": [_shown(a, text, code, cut) for a, text, code in earlier],
                "omitted_steps": max(0, depth - 1 - len(earlier)),
                "action": action,
                "real": _shown(action, stored.real.text, stored.real.exit_code, config.max_chars),
                "sim": _shown(action, stored.sim.text, stored.sim.exit_code, config.max_chars),
            }
            steps.append(
                StepToJudge(task.trajectory.id, depth, variant.mode, variant.sample, variables)
            )
    return steps


def _real_history(store: Store, run_id: str) -> dict[str, list[tuple[str, str, int | None]]]:
    rows = queries.rows(store, "judge_real_history", [run_id])
    history: dict[str, list[tuple[str, str, int | None]]] = {}
    for tid, action, text, exit_code in rows:
        history.setdefault(tid, []).append((action, text, exit_code))
    return history


def _shown(action: str, text: str, exit_code: int | None, limit: int | None) -> dict[str, Any]:
    """An observation as the template shows it: text (cut at *limit* characters), exit code."""
    if limit is None:
        return {"action": action, "text": text, "exit_code": exit_code}
    cut = len(text) > limit
    return {
        "action": action,
        "text": text[:limit] + ("\n[… cut by fidelity]" if cut else ""),
        "exit_code": exit_code,
    }


def judge_system(domain: str, prompts_dir: Path | None = None) -> str:
    """The judge system prompt of *domain*.

    ``<domain>/judge_system_prompt.txt`` of *prompts_dir* (the official layout)
    verbatim when it is there, else ``judge/system.md.j2`` rendered for *domain*.
    """
    if prompts_dir is not None:
        official = Path(prompts_dir) / domain / OFFICIAL_JUDGE
        if official.is_file():
            return official.read_text(encoding="utf-8")
    try:
        template = _template(JUDGE_PROMPTS, SYSTEM_TEMPLATE, _judge_templates(prompts_dir))
    except UnknownDomainError as error:
        raise UsageError(f"judge prompts missing: {error}") from error
    return template.render(dimensions=DIMENSIONS, domain=domain).strip()


def _judge_templates(prompts_dir: Path | None) -> Path | None:
    """An official layout has no judge templates of ours: the step message is the bundled one."""
    return None if prompts_dir is not None and layout(prompts_dir) == "official" else prompts_dir


def judge_messages(step: StepToJudge, prompts_dir: Path | None = None) -> list[dict[str, str]]:
    """System and user message of the judge request for *step*."""
    domain = str(step.variables.get("domain", ""))
    system = judge_system(domain, prompts_dir)
    try:
        user = _template(JUDGE_PROMPTS, STEP_TEMPLATE, _judge_templates(prompts_dir))
    except UnknownDomainError as error:
        raise UsageError(f"judge prompts missing: {error}") from error
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user.render(**step.variables).strip()},
    ]


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
        from fidelity.task import JudgedRecord

        # a worker lost twice comes back as a plain failed record: its steps stay unjudged
        add(record.judgments if isinstance(record, JudgedRecord) else [])

    executor = get_executor(executor_config, report)
    try:
        await executor.run(tasks, None, keep, on_judgment=lambda judgment: add([judgment]))
    finally:
        executor.close()
        store.write_judgments(run_id, config.describe(), list(pending.values()))
    return list(done.values())


def client(config: JudgeConfig) -> OpenAICompatWorldModel:
    """The world-model client, sampling like the reference judge (temperature only)."""
    return OpenAICompatWorldModel(
        config.url,
        config.model,
        api_key=config.api_key,
        timeout=config.timeout,
        max_retries=config.max_retries,
        temperature=config.temperature,
        top_p=None,
        top_k=None,
        max_tokens=config.max_tokens,
        prompts_dir=config.prompts_dir,
        backoff_base=config.backoff_base,
        cache=ResponseCache(config.cache) if config.cache is not None else None,
        deadline=config.deadline,
    )


async def _check(client: OpenAICompatWorldModel, config: JudgeConfig) -> None:
    try:
        await client.check()
    except EndpointUnreachableError as error:
        raise _unreachable(config) from error


def _unreachable(config: JudgeConfig) -> EndpointUnreachableError:
    return EndpointUnreachableError(
        f"judge endpoint {config.url} does not answer: start the server or pass --judge-url "
        "with the URL of a running OpenAI-compatible endpoint (stored judgments are kept)"
    )


async def judge_step(
    client: OpenAICompatWorldModel, step: StepToJudge, config: JudgeConfig
) -> JudgmentRecord:
    """One judgment: scores, or a judge failure naming what went wrong.

    Only answers that parse are cached, so a rerun asks again where the judge
    failed. Raises :class:`EndpointUnreachableError` when the endpoint refuses
    every connection attempt.
    """
    key = (step.trajectory_id, step.depth, step.mode, step.sample)
    messages = judge_messages(step, config.prompts_dir)
    cache_key = request_key(config.model, messages, client.sampling(), 0)
    hit, content = client.cache.get(cache_key) if client.cache else (False, None)
    try:
        if not hit:
            content = await client.complete(messages)
        scores, total = parse_verdict(content)
    except EndpointUnreachableError as error:
        raise _unreachable(config) from error
    except (RequestFailedError, MalformedPredictionError) as error:
        message = str(error) if isinstance(error, RequestFailedError) else _named(error)
        return JudgmentRecord(*key, scores=None, overall=None, error=message, raw=content)
    if client.cache is not None and not hit:
        client.cache.put(cache_key, config.model, 0, client.sampling(), content)
    return JudgmentRecord(*key, scores=scores, overall=normalized(total), raw=content)


def _named(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"


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
