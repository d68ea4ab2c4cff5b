"""``fidelity gate DATASET.jsonl``: verify a simulated dataset against reality before training.

The dataset is streamed (JSONL, ``.jsonl.gz``/``.jsonl.zst``, Parquet, or a folder
or glob of shards: :mod:`fidelity.formats.dataset`); memory stays flat in its size.

1. Read and validate the dataset (every step must carry its simulated
   observation) while drawing a stratified sample of trajectories (by domain
   and trajectory length, proportional, at least one per stratum, seeded) or
   taking them all; nothing is written before this pass ends.
2. Read again, keeping only the sampled lines.
3. Replay the sampled action sequences in real sandboxes, compare each recorded
   (simulated) observation with the real one, and store the comparisons as a
   run in DuckDB (``fidelity report --run ID`` shows it).
4. Apply the policy to the run: critical checks fail the gate, warnings warn.
5. Read a third time, decide per trajectory and write it to ``admitted.jsonl`` or
   ``quarantined.jsonl`` as it is decided, its decision to ``decisions.jsonl``,
   and then ``manifest.json``:

   - a verified trajectory with no drifting step is admitted whole;
   - a verified trajectory that drifts is, with ``cut_at_horizon``, admitted cut
     at its own trust horizon (the steps before its first drift) when that
     prefix is at least ``max(1, min_trust_horizon)`` steps long; otherwise it
     is quarantined;
   - an unverified trajectory (not in the sample) follows the verdict: admitted
     on pass or warn (cut at the domain's trust horizon with ``cut_at_horizon``),
     quarantined on fail.

Every trajectory of the dataset ends up in exactly one of the two files.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
import json
import os
import tempfile
from array import array
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fidelity import pipeline
from fidelity.analysis.cells import trajectory_horizons
from fidelity.analysis.summary import DEFAULT_HORIZON_LIMIT, summarize
from fidelity.audit import code_version, new_run_id
from fidelity.compare import CompareConfig
from fidelity.errors import InputFormatError, UsageError
from fidelity.executors import ExecutorConfig, get_executor
from fidelity.formats.dataset import lines as dataset_lines
from fidelity.formats.dataset import shards as dataset_shards
from fidelity.formats.jsonl import PathConfiner, confine_paths
from fidelity.gate import Policy, Verdict, evaluate, horizon_limit
from fidelity.model import Trajectory
from fidelity.sandboxes import backend_for, sandbox_config
from fidelity.sandboxes.base import close_all
from fidelity.store import RecordBuffer, Store
from fidelity.task import TrajectoryTask, recorded_mode

DEFAULT_SAMPLE = 200
_LENGTH_BUCKETS = (1, 3, 6, 11, 21, 51)  # lower bounds of trajectory-length strata


class GateOptions(BaseModel):
    """How a dataset is gated."""

    model_config = ConfigDict(extra="forbid")

    dataset: Path
    policy_path: Path
    output_dir: Path
    db: Path = Path("fidelity.duckdb")
    run_id: str | None = None
    sample: int | None = Field(default=DEFAULT_SAMPLE, ge=1)  # None: every trajectory
    seed: int = 0
    cut_at_horizon: bool = False
    sandbox: str | None = None
    step_timeout: float = Field(default=30.0, gt=0)
    concurrency: int = Field(default=2, ge=1)
    allowed_roots: list[Path] = Field(
        default_factory=list,
        description="folders env.workdir/@setup may come from besides the dataset's own",
    )
    compare: CompareConfig = Field(
        default_factory=CompareConfig, description="normalization rules and thresholds"
    )
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None


class Decision(BaseModel):
    """What happened to one trajectory."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    outcome: Literal["admitted", "quarantined"]
    verified: bool
    steps: int
    steps_kept: int
    horizon: int | None  # steps before the first drift (verified trajectories only)
    reason: str


class Counts(BaseModel):
    """Totals of the manifest; ``admitted + quarantined == trajectories``."""

    model_config = ConfigDict(extra="forbid")

    trajectories: int
    sampled: int
    admitted: int
    admitted_whole: int
    admitted_cut: int
    admitted_unverified: int
    quarantined: int
    steps: int
    steps_admitted: int


class Manifest(BaseModel):
    """Provenance and outcome of one dataset gate (written as ``manifest.json``)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str
    dataset_sha256: str
    run_id: str
    db: str
    world_models: list[dict[str, Any]]
    prompts_hashes: list[str]
    code_version: str
    policy_path: str
    policy: dict[str, Any]
    thresholds: dict[str, Any]
    warnings: dict[str, Any]
    sample: int | None
    seed: int
    cut_at_horizon: bool
    domain_trust_horizon: int
    verdict: Verdict
    counts: Counts
    admitted_path: str
    quarantined_path: str
    decisions_path: str = Field(description="every decision, one JSON line per trajectory")
    decisions: list[Decision] = Field(description="the decisions of the verified (sampled) ones")


def gate_dataset(options: GateOptions, policy: Policy) -> Manifest:
    """Gate *options.dataset* under *policy*; writes the output files, returns the manifest.

    Streams the dataset: pass 1 validates every line and draws the sample
    (nothing is written before it ends, so a malformed line fails with
    ``shard:line: field: reason`` first); pass 2 picks the sampled lines and
    replays them; pass 3 writes every trajectory to ``admitted.jsonl`` or
    ``quarantined.jsonl`` as it is decided. Memory stays flat in the size of
    the dataset (the sample and a few counters are held, never the dataset).
    """
    scan = scan_dataset(options.dataset, options.sample, options.seed, options.allowed_roots)
    domain = scan.domain
    run_id = options.run_id or new_run_id()
    limit = horizon_limit(policy, domain, DEFAULT_HORIZON_LIMIT)
    with Store(options.db) as store:
        store.start_run(run_id, _run_info(options, scan))
        _verify(
            store,
            run_id,
            list(_sampled(options.dataset, scan, options.allowed_roots)),
            options,
            domain,
        )
        store.finish_run(run_id, "done")
        summary = summarize(store, run_id, limit, worst=0, detail=False)
        horizons = trajectory_horizons(store, run_id)
    verdict = evaluate(summary, policy)
    return _write(options, policy, scan, horizons, verdict, summary.totals.trust_horizon, run_id)


class Scan(BaseModel):
    """What pass 1 learned about a dataset (small: no trajectory is kept)."""

    domain: str
    trajectories: int
    chosen: list[int] = Field(description="positions (0-based, dataset order) of the sample")
    world_models: list[dict[str, Any]]
    prompts_hashes: list[str]
    modes: list[str]
    sha256: str
    bytes_read: int


def scan_dataset(
    source: Path, size: int | None, seed: int, allowed_roots: Sequence[Path] = ()
) -> Scan:
    """Pass 1: validate every trajectory, check one domain and observations, draw the sample.

    Paths are checked here too (untrusted input: ``env.workdir`` and ``@setup`` must stay
    inside the shard's folder or *allowed_roots*), so a bad one fails before any write.
    """
    sampler = StratifiedSampler(size, seed)
    ids = IdIndex()
    domains: set[str] = set()
    models: dict[str, dict[str, Any]] = {}
    prompts: set[str] = set()
    modes: set[str] = set()
    read = 0
    confiner: PathConfiner | None = None  # one per shard: its folder and roots resolved once
    for position, line in enumerate(dataset_lines(source)):
        trajectory = line.parse()
        _require_observations(trajectory, str(line.path), line.number)
        if confiner is None or confiner.path != str(line.path):
            confiner = PathConfiner(line.path, allowed_roots)
        confiner.confine(trajectory, line.number)
        ids.add(trajectory.id)
        domains.add(trajectory.domain.value)
        if len(domains) > 1:
            raise UsageError(
                f"{line.path}:{line.number}: mixed domains ({', '.join(sorted(domains))}); "
                "use one domain per dataset"
            )
        sampler.add(position, trajectory.domain.value, len(trajectory.steps))
        described = _world_model(trajectory)
        models.setdefault(json.dumps(described, sort_keys=True, default=str), described)
        if (found := _prompts_hash(trajectory)) is not None:
            prompts.add(found)
        modes.add(recorded_mode(trajectory))
        read += len(line.text)
    if sampler.total == 0:
        raise InputFormatError(str(source), None, None, "no trajectories in dataset")
    if (hashed := ids.duplicate()) is not None:
        raise _duplicate_error(source, hashed)
    domain = pipeline.check_domain(next(iter(domains))).value
    return Scan(
        domain=domain,
        trajectories=sampler.total,
        chosen=sampler.chosen(),
        world_models=[models[k] for k in sorted(models)],
        prompts_hashes=sorted(prompts),
        modes=sorted(modes),
        sha256=_sha256(source),
        bytes_read=read,
    )


def _sampled(source: Path, scan: Scan, allowed_roots: Sequence[Path]) -> Iterator[Trajectory]:
    """Pass 2: the sampled trajectories (only their lines are parsed), paths resolved."""
    wanted = set(scan.chosen)
    for position, line in enumerate(dataset_lines(source)):
        if position in wanted:
            yield from confine_paths([(line.number, line.parse())], line.path, allowed_roots)


class StratifiedSampler:
    """A proportional stratified sample (by domain and length), drawn in one streaming pass.

    Each position gets a seeded pseudo-random rank; every stratum keeps only its
    *size* lowest ranks, so memory is bounded by strata × size, not the dataset.
    """

    def __init__(self, size: int | None, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.total = 0
        self.counts: dict[tuple[str, int], int] = defaultdict(int)
        self.lowest: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)

    def add(self, position: int, domain: str, steps: int) -> None:
        """Count one trajectory at *position* and keep it if it ranks low enough."""
        key = (domain, max(b for b in _LENGTH_BUCKETS if b <= max(1, steps)))
        self.total += 1
        self.counts[key] += 1
        if self.size is None:
            return
        rank = _rank(self.seed, position)
        heap = self.lowest[key]  # a max-heap of (-rank, position)
        if len(heap) < self.size:
            heapq.heappush(heap, (-rank, position))
        elif -heap[0][0] > rank:
            heapq.heapreplace(heap, (-rank, position))

    def chosen(self) -> list[int]:
        """Positions of the sample in dataset order (everything when size is None or larger)."""
        if self.size is None or self.size >= self.total:
            return list(range(self.total))
        keys = sorted(self.counts)
        quotas = {k: self.counts[k] * self.size / self.total for k in keys}
        alloc = {k: min(self.counts[k], max(1, int(quotas[k]))) for k in keys}
        by_remainder = sorted(keys, key=lambda k: (quotas[k] - int(quotas[k]), k), reverse=True)
        while sum(alloc.values()) < self.size:
            grown = False
            for key in by_remainder:
                if sum(alloc.values()) < self.size and alloc[key] < self.counts[key]:
                    alloc[key] += 1
                    grown = True
            if not grown:
                break
        chosen = []
        for key in keys:
            ranked = sorted((-negative, position) for negative, position in self.lowest[key])
            chosen += [position for _, position in ranked[: alloc[key]]]
        return sorted(chosen)


def stratified_sample(trajectories: Sequence[Trajectory], size: int | None, seed: int) -> list[int]:
    """Indices of a proportional stratified sample (by domain and length), in dataset order.

    Every stratum keeps at least one trajectory when *size* allows; ``None`` or a
    size at least the dataset's takes everything.
    """
    sampler = StratifiedSampler(size, seed)
    for index, trajectory in enumerate(trajectories):
        sampler.add(index, trajectory.domain.value, len(trajectory.steps))
    return sampler.chosen()


def _rank(seed: int, position: int) -> int:
    digest = hashlib.blake2b(f"{seed}:{position}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class IdIndex:
    """Duplicate ids across a stream, in 8 bytes per trajectory (id hashes, checked at the end)."""

    def __init__(self) -> None:
        self._hashes = array("Q")

    def add(self, trajectory_id: str) -> None:
        """Remember *trajectory_id*."""
        self._hashes.append(id_hash(trajectory_id))

    def duplicate(self) -> int | None:
        """The hash of an id seen twice (None: every id is unique)."""
        ordered = sorted(self._hashes)
        return next((a for a, b in itertools.pairwise(ordered) if a == b), None)


def id_hash(trajectory_id: str) -> int:
    """A 64-bit hash of a trajectory id."""
    return int.from_bytes(hashlib.blake2b(trajectory_id.encode(), digest_size=8).digest(), "big")


def _duplicate_error(source: Path, hashed: int) -> InputFormatError:
    """Find the two lines whose ids hash to *hashed* (a rare second read) and name them."""
    first: str | None = None
    for line in dataset_lines(source):
        trajectory_id = str(json.loads(line.text).get("id"))
        if id_hash(trajectory_id) == hashed:
            if first is not None:
                return InputFormatError(
                    str(line.path),
                    line.number,
                    "id",
                    f"duplicate id {trajectory_id!r} (first at {first})",
                )
            first = f"{line.path}:{line.number}"
    return InputFormatError(str(source), None, "id", "two trajectories share an id")


def _require_observations(trajectory: Trajectory, path: str, line: int) -> None:
    for number, step in enumerate(trajectory.steps, start=1):
        if step.observation is None:
            raise InputFormatError(
                path,
                line,
                f"{trajectory.id}.steps.{number}.observation",
                "missing: a dataset to gate needs its simulated observations",
            )


def _verify(
    store: Store, run_id: str, trajectories: list[Trajectory], options: GateOptions, domain: str
) -> None:
    """Replay *trajectories* for real, compare with their recorded observations, store."""
    done = store.done_trajectories(run_id)
    sandbox = sandbox_config(domain, options.sandbox, {}, run_id)
    tasks = [
        TrajectoryTask.model_validate(
            {
                "trajectory": t,
                "sandbox": sandbox,
                "compare": options.compare,
                "step_timeout": options.step_timeout,
            }
        )
        for t in trajectories
        if t.id not in done
    ]
    executor = get_executor(
        ExecutorConfig(
            type=options.executor, threads=options.concurrency, ray_address=options.ray_address
        )
    )
    buffer = RecordBuffer(store, run_id)
    try:
        asyncio.run(executor.run(tasks, None, buffer.add))
    except BaseException:
        close_all()
        raise
    finally:
        buffer.flush()
        executor.close()


def _decide(
    trajectory_id: str,
    total: int,
    horizons: dict[str, int],
    verdict: Verdict,
    domain_horizon: int,
    minimum: int,
    options: GateOptions,
) -> Decision:
    """What happens to one trajectory of *total* steps (verified when it has a horizon)."""
    horizon = horizons.get(trajectory_id)
    if horizon is not None:
        return _verified(trajectory_id, total, horizon, minimum, options)
    if verdict.status == "fail":
        return Decision(
            trajectory_id=trajectory_id,
            outcome="quarantined",
            verified=False,
            steps=total,
            steps_kept=0,
            horizon=None,
            reason="not verified, and the dataset fails the gate",
        )
    kept = min(total, domain_horizon) if options.cut_at_horizon else total
    outcome: Literal["admitted", "quarantined"] = "admitted" if kept else "quarantined"
    return Decision(
        trajectory_id=trajectory_id,
        outcome=outcome,
        verified=False,
        steps=total,
        steps_kept=kept if kept else 0,
        horizon=None,
        reason=f"not verified; dataset {verdict.status}"
        + (f", cut at domain trust horizon {domain_horizon}" if kept < total else ""),
    )


def _verified(
    trajectory_id: str, total: int, horizon: int, minimum: int, options: GateOptions
) -> Decision:
    def decision(outcome: Literal["admitted", "quarantined"], kept: int, reason: str) -> Decision:
        return Decision(
            trajectory_id=trajectory_id,
            outcome=outcome,
            verified=True,
            steps=total,
            steps_kept=kept,
            horizon=horizon,
            reason=reason,
        )

    if horizon >= total:
        return decision("admitted", total, "verified: no step drifts")
    if not options.cut_at_horizon:
        return decision("quarantined", 0, f"drifts at step {horizon + 1}")
    if horizon < minimum:
        return decision(
            "quarantined", 0, f"drifts at step {horizon + 1}: horizon {horizon} < {minimum}"
        )
    return decision(
        "admitted", horizon, f"cut at its trust horizon {horizon} (drifts at step {horizon + 1})"
    )


def _write(
    options: GateOptions,
    policy: Policy,
    scan: Scan,
    horizons: dict[str, int],
    verdict: Verdict,
    domain_horizon: int,
    run_id: str,
) -> Manifest:
    """Pass 3: decide every trajectory and write it to its file as it is decided."""
    out = options.output_dir
    admitted_path, quarantined_path = out / "admitted.jsonl", out / "quarantined.jsonl"
    decisions_path = out / "decisions.jsonl"
    minimum = max(1, policy.for_domain(verdict.domain).min_trust_horizon or 0)
    counts = _Tally()
    verified: list[Decision] = []
    with (
        _AtomicLines(admitted_path) as admitted,
        _AtomicLines(quarantined_path) as quarantined,
        _AtomicLines(decisions_path) as decided,
    ):
        for line in dataset_lines(options.dataset):
            data = json.loads(line.text)
            steps = data.get("steps") or []
            decision = _decide(
                str(data["id"]), len(steps), horizons, verdict, domain_horizon, minimum, options
            )
            counts.add(decision)
            if decision.verified:
                verified.append(decision)
            decided.write(decision.model_dump_json())
            meta = dict(data.get("meta") or {})
            if decision.outcome == "admitted":
                meta.update(gate_run_id=run_id, gate_verified=decision.verified)
                if decision.steps_kept < decision.steps:
                    meta.update(cut_at=decision.steps_kept, original_steps=decision.steps)
                    data["steps"] = steps[: decision.steps_kept]
                admitted.write(_dump({**data, "meta": meta}))
            else:
                meta["quarantine_reason"] = decision.reason
                quarantined.write(_dump({**data, "meta": meta}))
    manifest = Manifest(
        dataset=str(options.dataset),
        dataset_sha256=scan.sha256,
        run_id=run_id,
        db=str(options.db),
        world_models=scan.world_models,
        prompts_hashes=scan.prompts_hashes,
        code_version=code_version(),
        policy_path=str(options.policy_path),
        policy=policy.model_dump(mode="json"),
        thresholds=policy.for_domain(verdict.domain).model_dump(),
        warnings=policy.warnings_for(verdict.domain).model_dump(),
        sample=options.sample,
        seed=options.seed,
        cut_at_horizon=options.cut_at_horizon,
        domain_trust_horizon=domain_horizon,
        verdict=verdict,
        counts=counts.counts(),
        admitted_path=str(admitted_path),
        quarantined_path=str(quarantined_path),
        decisions_path=str(decisions_path),
        decisions=verified,
    )
    _write_json(out / "manifest.json", manifest.model_dump_json(indent=2))
    return manifest


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class _Tally:
    """The manifest's counts, added up one decision at a time."""

    def __init__(self) -> None:
        self.values = dict.fromkeys(Counts.model_fields, 0)

    def add(self, d: Decision) -> None:
        v = self.values
        v["trajectories"] += 1
        v["sampled"] += d.verified
        v["steps"] += d.steps
        if d.outcome == "quarantined":
            v["quarantined"] += 1
            return
        v["admitted"] += 1
        v["admitted_whole"] += d.verified and d.steps_kept == d.steps
        v["admitted_cut"] += d.steps_kept < d.steps
        v["admitted_unverified"] += not d.verified
        v["steps_admitted"] += d.steps_kept

    def counts(self) -> Counts:
        return Counts(**self.values)


class _AtomicLines:
    """A JSONL file written line by line to a temp file, renamed into place on success."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __enter__(self) -> _AtomicLines:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.temp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        self.handle = os.fdopen(fd, "w", encoding="utf-8")
        return self

    def write(self, line: str) -> None:
        self.handle.write(line + "\n")

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        self.handle.close()
        if kind is None:
            os.replace(self.temp, self.path)
        else:
            Path(self.temp).unlink(missing_ok=True)


def _world_model(trajectory: Trajectory) -> dict[str, Any]:
    meta = trajectory.meta
    described = meta.get("world_model")
    if isinstance(described, dict):
        return described
    return {k: meta[k] for k in ("model", "mode") if k in meta}


def _prompts_hash(trajectory: Trajectory) -> str | None:
    for source in (trajectory.meta, _world_model(trajectory)):
        for key in ("prompts_hash", "prompt_hash"):
            if isinstance(source.get(key), str):
                return str(source[key])
    return None


def _run_info(options: GateOptions, scan: Scan) -> dict[str, Any]:
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


def _sha256(source: Path) -> str:
    """The SHA-256 of the dataset's one file, or of its shards' names and digests."""
    paths = dataset_shards(source)
    digests = []
    for path in paths:
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        digests.append(digest.hexdigest())
    if len(paths) == 1:
        return digests[0]
    joined = "\n".join(f"{d}  {p.name}" for p, d in zip(paths, digests, strict=True))
    return hashlib.sha256(joined.encode()).hexdigest()


def _write_json(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
