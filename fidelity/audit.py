"""One audit run: replay for real and simulate concurrently, compare, store, report, gate."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import subprocess
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import duckdb
from pydantic import BaseModel, ConfigDict, Field

from fidelity import pipeline
from fidelity.analysis.models import DEFAULT_HORIZON_LIMIT, RunSummary
from fidelity.analysis.tallies import stored_run_evidence
from fidelity.compare import CompareConfig
from fidelity.compare.normalize import TRUNCATE_AT
from fidelity.defaults import DEFAULT_DB, STEP_TIMEOUT
from fidelity.errors import Interrupted, StoreError, UsageError
from fidelity.executors import ExecutorConfig, LocalExecutor, ShardSink, get_executor
from fidelity.gate.limits import evaluate
from fidelity.pipeline import SimConfig
from fidelity.policy import Verdict, horizon_limit, load_policy
from fidelity.resources import default_suite
from fidelity.sandboxes import SandboxChooser, backend_for, sweep_all
from fidelity.sandboxes.base import close_all
from fidelity.sandboxes.config import SandboxConfigBase
from fidelity.store import RecordBuffer, ReplayedRecord, Store, TrajectoryRecord
from fidelity.store_shards import ShardReceipt
from fidelity.task import TrajectoryTask
from fidelity.trajectory import Domain, Observation, Trajectory, stable_hash
from fidelity.trust import DatasetTrust
from fidelity.version import __version__
from fidelity.worldmodels.base import Mode, WorldModel
from fidelity.worldmodels.config import needs_real_corpus

if TYPE_CHECKING:
    from fidelity.gate.evidence import Evidence

_T = TypeVar("_T")


class AuditConfig(BaseModel):
    """Everything one audit needs; the CLI fills it from options."""

    model_config = ConfigDict(extra="forbid")

    domain: Domain | None = Field(
        default=None, description="default: the suite's own domain; terminal without a suite"
    )
    suite: Path | None = Field(default=None, description="default: the bundled suite of the domain")
    sandbox: str | None = Field(default=None, description="default: the domain's own backend")
    sandbox_options: dict[str, Any] = Field(default_factory=dict)
    allowed_roots: list[Path] = Field(
        default_factory=list,
        description="folders env.workdir/@setup may come from besides the suite's own",
    )
    step_timeout: float = Field(default=STEP_TIMEOUT, gt=0)
    sim: SimConfig = Field(default_factory=SimConfig)
    mode: Mode | Literal["both"] = Field(
        default=Mode.teacher_forced, description="both: teacher-forced and open-loop, stored apart"
    )
    db: Path = Path(DEFAULT_DB)
    run_id: str | None = None
    concurrency: int = Field(default_factory=lambda: max(2, os.cpu_count() or 2), ge=1)
    limit: int | None = Field(default=None, ge=1, description="audit only the first N trajectories")
    report: Path | None = None
    policy: Path | None = None
    compare: CompareConfig = Field(
        default_factory=CompareConfig, description="normalization rules and thresholds"
    )
    observation_cap: int = Field(
        default=TRUNCATE_AT,
        ge=1,
        description="characters stored (and printed) per observation text, real and sim alike; "
        "a longer one is cut by the comparator's truncation rule and flagged truncated",
    )
    executor: Literal["local", "ray"] = Field(
        default="local", description="where trajectory tasks run: local threads or Ray"
    )
    ray_address: str | None = Field(default=None, description="ray: the cluster to join")
    ray_results: Literal["driver", "parquet"] = Field(
        default="driver",
        description="ray: records come back to the driver, or workers write Parquet shards",
    )
    ray_results_dir: Path | None = Field(
        default=None, description="ray parquet: shards' folder (default: <db>.parts)"
    )
    image: str | None = Field(
        default=None,
        description="the container image of trajectories whose env.image is unset "
        "(docker/swe backends; a trajectory's own env.image wins)",
    )
    trust: DatasetTrust = Field(
        default_factory=DatasetTrust,
        description="what the operator allowed the suite (host commands, sites); the bundled "
        "suites are the project's own and not checked",
    )

    @property
    def executor_config(self) -> ExecutorConfig:
        """The executor this audit runs its tasks on."""
        return ExecutorConfig(
            type=self.executor,
            threads=self.concurrency,
            sim_concurrency=self.sim.concurrency,
            ray_address=self.ray_address,
            results=self.ray_results,
            results_dir=self.ray_results_dir,
        )

    @property
    def modes(self) -> list[Mode]:
        """The simulation modes this audit runs (``both``: teacher-forced, then open-loop)."""
        return [Mode.teacher_forced, Mode.open_loop] if self.mode == "both" else [Mode(self.mode)]

    @property
    def mode_label(self) -> str:
        """How the run records its modes: ``teacher-forced``, ``teacher-forced+open-loop``."""
        return "+".join(mode.value for mode in self.modes)

    @property
    def audited_domain(self) -> Domain:
        """``domain``, which :func:`run_audit` takes from the suite when it is not given."""
        if self.domain is None:
            raise UsageError(
                "the audit's domain is not known yet (run_audit reads it from the suite)"
            )
        return self.domain

    @property
    def backend(self) -> str:
        """The sandbox backend this audit replays in (``sandbox``, or the domain's own)."""
        return backend_for(self.audited_domain.value, self.sandbox)


class AuditResult(BaseModel):
    """What an audit did and found."""

    run_id: str
    db: str
    resumed: bool
    skipped: int = Field(description="trajectories already stored whole by an earlier attempt")
    audited: int
    failed_trajectories: list[str]
    world_model: dict[str, Any]
    world_model_notice: str | None
    elapsed_s: float
    summary: RunSummary
    verdict: Verdict | None = None
    report: str | None = None


def _check_report_path(config: AuditConfig) -> None:
    """Refuse a report that would replace the store (this run's, or any DuckDB file)
    before anything runs, not after the audit."""
    if config.report is None:
        return
    from fidelity.duckdb_files import refuse_replacing_database

    if config.report.resolve() == config.db.resolve():
        raise UsageError(
            f"--report {config.report} is the database --db: write the report to another file"
        )
    refuse_replacing_database(config.report)


def run_audit(
    config: AuditConfig, progress: pipeline.ProgressCallback | None = None
) -> AuditResult:
    """Run (or resume) one audit and return its figures.

    Everything is validated before anything is written: a bad suite, policy or
    option fails without touching the database. Each trajectory is stored whole,
    so Ctrl-C loses at most the trajectories in flight; re-running with the
    same ``run_id`` finishes the rest.
    """
    started = time.perf_counter()
    if config.domain is not None:
        pipeline.check_domain(config.domain, config.sandbox)
    suite_path = config.suite or default_suite((config.domain or Domain.terminal).value)
    trajectories = pipeline.load_suite(suite_path, config.domain, config.allowed_roots)
    if config.domain is None:
        domain = pipeline.single_domain(trajectories, suite_path)
        config = config.model_copy(update={"domain": pipeline.check_domain(domain, config.sandbox)})
    trajectories = pipeline.with_default_image(
        trajectories[: config.limit], config.image, config.sandbox
    )
    chooser = SandboxChooser(config.sandbox, config.sandbox_options)
    pipeline.check_backends(trajectories, chooser, suite_path)
    if config.suite is not None:
        pipeline.check_trust(trajectories, config.trust, suite_path)
    policy = load_policy(config.policy) if config.policy else None
    _check_report_path(config)
    # The retrieval baseline indexes this run's real replays, so it is built after them.
    model = None if needs_real_corpus(config.sim.world_model) else build_world_model(config.sim)[0]
    description = (
        model.describe()
        if model
        else {
            "backend": "baseline:retrieval",
            "corpus": "this run's real replays, leave-one-trajectory-out",
        }
    )
    notice = baseline_notice(config.sim)
    run_id = config.run_id or new_run_id()
    tail = _Tail(report=config.report is not None)
    progress = progress or (lambda phase, n: None)
    limit = (
        horizon_limit(policy, config.audited_domain.value, DEFAULT_HORIZON_LIMIT)
        if policy
        else DEFAULT_HORIZON_LIMIT
    )
    told = _Told(len(trajectories))
    try:
        resumed, skipped, failed, summary, evidence = asyncio.run(
            _checked_and_swept(
                model,
                tail.start,
                lambda begin: _audit_run(
                    config, run_id, suite_path, trajectories, model, description, progress, limit,
                    told, begin,
                ),
            )
        )  # fmt: skip
    except KeyboardInterrupt as exc:
        raise Interrupted(told.text) from exc
    verdict = evaluate(summary, policy, evidence) if policy else None
    report = None
    write = tail.report_writer()
    if write is not None and config.report is not None:
        report = str(write(summary, config.report, verdict.model_dump() if verdict else None))
    return AuditResult(
        run_id=run_id,
        db=str(config.db),
        resumed=resumed,
        skipped=skipped,
        audited=len(trajectories) - skipped,
        failed_trajectories=failed,
        world_model=description,
        world_model_notice=notice,
        elapsed_s=time.perf_counter() - started,
        summary=summary,
        verdict=verdict,
        report=report,
    )


def baseline_notice(sim: SimConfig) -> str | None:
    """What to tell the user when no world model was given."""
    return sim.world_model.notice()


def build_world_model(
    sim: SimConfig, corpus: list[Trajectory] | None = None
) -> tuple[WorldModel, str | None]:
    """The world model *sim* selects, and a notice when it is only a baseline."""
    return sim.world_model.build(corpus), sim.world_model.notice()


async def _checked_and_swept(
    model: WorldModel | None,
    beside: Callable[[], object],
    work: Callable[[Callable[[], object]], Awaitable[_T]],
) -> _T:
    """Check the endpoint, then await *work*; the leftover sweep (and *beside*) start on
    threads when *work* calls the callback it is given, or once it is done if it never did.

    Every backend's leftovers of killed audits (SIGKILL skips every finally) are swept on
    a thread (importing the Docker client and asking its daemon take a tenth of a second or
    more); a sweep touches only dead owners' sandboxes, never this run's. *work* calls back
    once its first sandbox has replayed: what the threads load then costs the sandboxes
    little (they wait on their shells), while before the first sandbox it delays them all.
    An audit that fails before it called back sweeps nothing (the next one does).
    """
    if model is not None:
        await model.check()  # an unreachable endpoint fails before anything is written
    sweeping: asyncio.Future[int] | None = None

    def begin() -> asyncio.Future[int]:
        nonlocal sweeping
        if sweeping is None:
            sweeping = asyncio.ensure_future(asyncio.to_thread(sweep_all))
            beside()
        return sweeping

    try:
        result = await work(begin)
    except BaseException:
        if sweeping is not None:
            with contextlib.suppress(Exception):  # the audit's own error is the one to show
                await sweeping
        raise
    await begin()  # a sweep's error (a daemon failing mid-sweep) comes out after all
    return result


async def _audit_run(
    config: AuditConfig,
    run_id: str,
    suite_path: Path,
    trajectories: list[Trajectory],
    model: WorldModel | None,
    description: dict[str, Any],
    progress: pipeline.ProgressCallback,
    limit: float,
    told: _Told,
    begin: Callable[[], object],
) -> tuple[bool, int, list[str], RunSummary, Evidence]:
    """Open the run, audit what is pending, summarize.

    Returns (resumed, skipped trajectories, failed trajectory ids, summary, the evidence a
    policy is decided on). On an
    interrupt (or any failure) the run is marked ``interrupted`` and *told* says what
    the database holds.
    """
    chooser = SandboxChooser(config.sandbox, config.sandbox_options, run_id)
    with Store(config.db) as store:
        resumed = store.start_run(run_id, _run_info(config, suite_path, trajectories, description))
        # what an interrupted attempt's workers finished is kept
        config.executor_config.merge_left_over(store, config.db, run_id)
        done = store.done_trajectories(run_id)
        pending = [t for t in trajectories if t.id not in done]
        progress("total", len(pending))
        tasks = [_task(config, chooser.config_for(t.domain.value, t.env), t) for t in pending]

        def progress_and_begin(phase: str, count: int) -> None:
            if phase == "real":  # a sandbox has replayed: the others are running
                begin()
            progress(phase, count)

        try:
            failed = await _audit(
                config, store, run_id, tasks, trajectories, model, progress_and_begin
            )
        except BaseException:
            close_all()
            told.count(store, run_id)
            # The error on its way out is the one to show; when the store itself failed
            # (disk full) the run cannot be marked, and shows as dead once this process ends.
            with contextlib.suppress(StoreError):
                store.finish_run(run_id, "interrupted")
            raise
        store.finish_run(run_id, "done")
        from fidelity.analysis.summary import summarize  # numpy: loaded beside the sandboxes

        summary = summarize(store, run_id, horizon_limit=limit)
        evidence = stored_run_evidence(store, run_id, summary.totals.mode)
    return resumed, len(trajectories) - len(pending), failed, summary, evidence


class _Told:
    """What an interrupted audit left in the database, in words for the user."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.text = "sandboxes stopped; nothing was stored yet"

    def count(self, store: Store, run_id: str) -> None:
        """Count the stored trajectories of *run_id* (when the store can still be read)."""
        try:
            done = len(store.done_trajectories(run_id))
            replayed = len(store.replayed(run_id))
        except duckdb.Error:
            return  # the store failed (that is the error being raised): nothing to count
        text = f"sandboxes stopped; {done} of {self.total} trajectories stored whole"
        if replayed:
            text += f", {replayed} more replayed for real (kept: a resume does not replay them)"
        self.text = text


def _task(
    config: AuditConfig, sandbox: SandboxConfigBase, trajectory: Trajectory
) -> TrajectoryTask:
    return TrajectoryTask.model_validate(
        {
            "trajectory": trajectory,
            "sandbox": sandbox,
            "world_model": config.sim.world_model,
            "compare": config.compare,
            "modes": config.modes,
            "samples": config.sim.samples,
            "step_timeout": config.step_timeout,
            "observation_cap": config.observation_cap,
        }
    )


async def _audit(
    config: AuditConfig,
    store: Store,
    run_id: str,
    tasks: list[TrajectoryTask],
    everything: list[Trajectory],
    model: WorldModel | None,
    progress: pipeline.ProgressCallback,
) -> list[str]:
    """Run *tasks* on the configured executor, storing each record as it comes back.

    Returns the ids of the trajectories whose sandbox failed.
    """
    failed: list[str] = []
    buffer = RecordBuffer(store, run_id)

    def store_record(record: TrajectoryRecord) -> None:
        buffer.add(record)
        if record.error:
            failed.append(record.trajectory.id)

    def merge(receipt: ShardReceipt) -> None:
        buffer.merge(receipt)
        failed.extend(receipt.failed)

    folder = config.executor_config.shard_folder(config.db, run_id)
    shards = None if folder is None else ShardSink(folder, merge)
    executor = get_executor(config.executor_config, progress)
    try:
        if model is None and tasks:
            # The retrieval baseline looks up other trajectories' real observations, so
            # every real replay (this attempt's and those stored earlier) comes first;
            # each is stored as it completes, so an interrupt keeps it for the resume.
            reals, seen = _stored_reals(store, run_id, [t.trajectory for t in tasks])
            progress("real", len(reals))
            replay_only = [
                t.model_copy(update={"world_model": None, "compare": None})
                for t in tasks
                if t.trajectory.id not in reals
            ]

            def keep(record: TrajectoryRecord) -> None:
                # the real check's outcome too: the second pass only simulates and compares
                reals[record.trajectory.id] = pipeline.Replayed(
                    None, record.real, record.error, record.outcome
                )
                seen[record.trajectory.id] = record.trajectory
                store.write_replayed(
                    run_id,
                    ReplayedRecord(
                        record.trajectory,
                        record.real,
                        record.real_seconds,
                        record.error,
                        record.outcome,
                    ),
                )

            await executor.run(replay_only, None, keep)
            model, _ = build_world_model(config.sim, _corpus(store, run_id, everything, reals))
            with_start = [t.model_copy(update={"trajectory": seen[t.trajectory.id]}) for t in tasks]
            await LocalExecutor(1, config.sim.concurrency, progress).run(
                with_start, model, store_record, reals
            )
        elif model is not None:
            await executor.run(tasks, model, store_record, shards=shards)
    finally:
        buffer.flush()  # every finished record is kept, interrupted or not
        # shards whose receipt never came (interrupted, or retried)
        config.executor_config.merge_left_over(store, config.db, run_id)
        executor.close()
        if model is not None:
            await model.aclose()
    return failed


def _stored_reals(
    store: Store, run_id: str, pending: list[Trajectory]
) -> tuple[dict[str, pipeline.Replayed], dict[str, Trajectory]]:
    """The real replays an interrupted attempt stored for *pending* trajectories, and those
    trajectories with the start observation their replay showed."""
    stored = store.replayed(run_id)
    reals: dict[str, pipeline.Replayed] = {}
    seen: dict[str, Trajectory] = {}
    for trajectory in pending:
        replay = stored.get(trajectory.id)
        if replay is None or len(replay.real) != len(trajectory.steps):
            continue
        initial = (
            None
            if replay.initial_observation is None
            else Observation(text=replay.initial_observation)
        )
        reals[trajectory.id] = pipeline.Replayed(None, replay.real, replay.error, replay.outcome)
        seen[trajectory.id] = pipeline.with_initial(trajectory, initial)
    return reals, seen


def _corpus(
    store: Store,
    run_id: str,
    everything: list[Trajectory],
    reals: dict[str, pipeline.Replayed],
) -> list[Trajectory]:
    stored = store.real_observations(run_id)
    corpus = []
    for trajectory in everything:
        if trajectory.id in reals:
            replayed = reals[trajectory.id]
            if replayed.error is not None:  # its sandbox failed: nothing real to retrieve
                continue
            observations = [t.observation for t in replayed.steps]
        elif trajectory.id in stored:
            observations = stored[trajectory.id]
        else:
            continue
        if len(observations) == len(trajectory.steps):
            corpus.append(trajectory.with_observations(observations, "real"))
    return corpus


def _run_info(
    config: AuditConfig, suite: Path, trajectories: list[Trajectory], world_model: dict[str, Any]
) -> dict[str, Any]:
    return {
        "domain": config.audited_domain.value,
        "sandbox": config.backend,
        "world_model": world_model,
        "mode": config.mode_label,
        "suite": str(suite),
        "suite_digest": stable_hash([t.model_dump(mode="json") for t in trajectories]),
        "code_version": code_version(),
        "config": config.model_dump(mode="json", exclude={"sim": {"world_model": {"api_key"}}}),
    }


class _Tail:
    """What the audit's end needs, loaded on a thread of its own while the sandboxes run:
    the summary's libraries (numpy) and, for a report, its template (jinja2) compiled. They
    cost a few tenths of a second of CPU that the sandboxes' waits leave free, and would
    otherwise come before the first sandbox or after the last. A load's error (a broken
    install) comes out of :meth:`report_writer`.
    """

    def __init__(self, report: bool) -> None:
        self.report = report
        self._loaded: Future[Callable[..., Path] | None] | None = None

    def start(self) -> Future[Callable[..., Path] | None]:
        """Start loading (once); the load's future."""
        if self._loaded is None:
            pool = ThreadPoolExecutor(1, thread_name_prefix="fidelity-tail")
            try:
                self._loaded = pool.submit(self._load)
            finally:
                pool.shutdown(wait=False)
        return self._loaded

    def report_writer(self) -> Callable[..., Path] | None:
        """The report writer, ready (None without a report); waits for the load."""
        return self.start().result()

    def _load(self) -> Callable[..., Path] | None:
        import fidelity.analysis.summary  # noqa: F401 - numpy and the analysis

        if not self.report:
            return None
        from fidelity.report.html import prepare, write_report

        prepare()
        return write_report


def new_run_id() -> str:
    """A sortable, unique run id: ``20261120T235557-1a2b``."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S") + "-" + secrets.token_hex(2)


def code_version() -> str:
    """The package version, plus the git commit when run from a checkout."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / ".git").exists():
        result = subprocess.run(
            ["git", "-C", str(checkout), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        if result.returncode == 0:
            return f"{__version__}+g{result.stdout.strip()}"
    return __version__
