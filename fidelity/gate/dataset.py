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
   - a verified trajectory whose claimed outcome (``outcome.success``) the real
     check (``env.check``) contradicts is quarantined, ``quarantine_reason:
     "outcome"``, whatever its steps' drift;
   - a sampled trajectory whose environment could not be had (its image missing and not
     pullable, its site down, its build failed) is ``unverifiable``: never admitted,
     written to ``quarantined.jsonl`` with ``quarantine_reason: "unverifiable"`` and the
     reason; the policy's ``max_unverifiable_rate`` bounds how many there may be;
   - an unverified trajectory (not in the sample) follows the verdict: admitted
     on pass or warn (cut at the domain's trust horizon with ``cut_at_horizon``),
     quarantined on fail.

   - a verified trajectory whose claimed outcome the real check could not establish (the
     check could not run: a test script that needs the network, a record without its eval
     script) is quarantined, ``quarantine_reason: "outcome-unverifiable"``.

   A quarantined line's ``meta.quarantine_reason`` says why (``drift``, ``outcome``,
   ``outcome-unverifiable``, ``gate``, ``unverifiable``) and ``meta.quarantine_detail`` in
   a sentence.
6. With ``to`` (``--to verl`` …), the admitted trajectories are also written in those
   RL stacks' formats (:mod:`fidelity.formats.rl_export`: ``admitted.verl.parquet`` …,
   each row carrying its per-step verdicts, trust horizon and outcome agreement),
   staged and installed with the other outputs and listed in the manifest.

Every trajectory of the dataset ends up in exactly one of the two files. With
``layout="sharded"`` the three outputs are folders (``admitted/`` ...) of one
``part-NNNNNN.jsonl`` per input shard, written by the shard's own task and never
copied by the driver; concatenated in name order they are the joined files.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import itertools
import json
import os
import shutil
from array import array
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fidelity import gate_outputs, pipeline
from fidelity import store_queries as queries
from fidelity.analysis.cells import trajectory_horizons
from fidelity.analysis.models import DEFAULT_HORIZON_LIMIT
from fidelity.analysis.summary import summarize
from fidelity.audit import code_version, new_run_id
from fidelity.compare import CompareConfig
from fidelity.compare.normalize import TRUNCATE_AT
from fidelity.errors import InputFormatError, UsageError, writing
from fidelity.executors import ExecutorConfig, ShardSink, get_executor
from fidelity.executors.ray import map_on_cluster
from fidelity.formats.dataset import Line, shard_lines
from fidelity.formats.dataset import shards as dataset_shards
from fidelity.formats.jsonl import PathConfiner, confine_paths
from fidelity.formats.rl_export import (
    FORMATS,
    ExportOptions,
    RLFormat,
    RLWriter,
    StepVerdict,
    TrajectoryFidelity,
    join_parts,
    step_verdicts,
    suffix,
)
from fidelity.gate import Policy, Verdict, evaluate, horizon_limit
from fidelity.model import Trajectory
from fidelity.sandboxes import SandboxChooser, backend_for, trajectory_backend
from fidelity.sandboxes.base import close_all
from fidelity.store import RecordBuffer, Store
from fidelity.task import TrajectoryTask, recorded_mode
from fidelity.trust import DatasetTrust, refuse_untrusted

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
    observation_cap: int = Field(
        default=TRUNCATE_AT,
        ge=1,
        description="characters stored per observation text, the dataset's and the replay's "
        "alike (audit's cap): a longer one is cut by the comparator's truncation rule and "
        "flagged truncated",
    )
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None
    layout: Literal["joined", "sharded"] = Field(
        default="joined",
        description="joined: admitted.jsonl etc.; sharded: folders admitted/ etc., "
        "one part-NNNNNN.jsonl per input shard",
    )
    ray_results: Literal["driver", "parquet"] = "driver"
    ray_results_dir: Path | None = None
    to: list[RLFormat] = Field(
        default_factory=list,
        description="RL stacks the admitted trajectories are also written for (verl, skyrl, "
        "openrlhf, slime): admitted.<format>.parquet / .jsonl",
    )
    image: str | None = Field(
        default=None,
        description="the container image of trajectories whose env.image is unset "
        "(docker/swe backends; a trajectory's own env.image wins)",
    )
    sandbox_options: dict[str, Any] = Field(
        default_factory=dict, description="the backend's settings (web: the user's sites)"
    )
    trust: DatasetTrust = Field(
        default_factory=DatasetTrust,
        description="what the operator allowed the dataset (host commands, sites)",
    )

    @property
    def executor_config(self) -> ExecutorConfig:
        """The executor the sample's replays run on."""
        return ExecutorConfig(
            type=self.executor,
            threads=self.concurrency,
            ray_address=self.ray_address,
            results=self.ray_results,
            results_dir=self.ray_results_dir,
        )


class Decision(BaseModel):
    """What happened to one trajectory."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    outcome: Literal["admitted", "quarantined", "unverifiable"] = Field(
        description="unverifiable: sampled, but its environment could not be had (the line "
        "goes to the quarantined file)"
    )
    verified: bool
    steps: int
    steps_kept: int
    horizon: int | None  # steps before the first drift (verified trajectories only)
    reason: str
    cause: Literal["drift", "outcome", "outcome-unverifiable", "gate", "unverifiable"] | None = (
        Field(default=None, description="why it was quarantined, in one word (None: admitted)")
    )
    outcome_agreement: bool | None = Field(
        default=None, description="whether the real check agreed with the claimed outcome"
    )


class RealCheck(BaseModel):
    """A verified trajectory's claimed and real outcome, as the run stored them."""

    model_config = ConfigDict(extra="forbid")

    claimed: bool | None
    real: Literal["success", "failure", "unverifiable"] | None
    exit_code: int | None = None
    reason: str | None = None

    @property
    def agrees(self) -> bool | None:
        """True/False when both sides are known, else None."""
        if self.claimed is None or self.real in (None, "unverifiable"):
            return None
        return self.claimed == (self.real == "success")


class Verified(BaseModel):
    """What the run learned about the sample, handed to every shard's writer."""

    model_config = ConfigDict(extra="forbid")

    horizons: dict[str, int] = Field(description="steps before the first drift, per trajectory")
    unverifiable: dict[str, str] = Field(
        default_factory=dict, description="why each unverifiable trajectory is (its reason)"
    )
    checks: dict[str, RealCheck] = Field(default_factory=dict)
    steps: dict[str, list[StepVerdict]] = Field(
        default_factory=dict, description="per-step verdicts (only when exporting for RL)"
    )


class Counts(BaseModel):
    """Totals of the manifest; ``admitted + quarantined == trajectories``.

    ``unverifiable`` counts the sampled trajectories whose environment could not be had;
    they are among ``quarantined`` (the lines of the quarantined file), never admitted.
    """

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
    unverifiable: int = 0


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
    layout: Literal["joined", "sharded"] = Field(
        description="joined: the three paths are files; sharded: folders of one file per shard"
    )
    admitted_path: str
    quarantined_path: str
    decisions_path: str = Field(description="every decision, one JSON line per trajectory")
    rl_paths: dict[str, str] = Field(
        default_factory=dict, description="the admitted trajectories per RL format (``to``)"
    )
    decisions: list[Decision] = Field(description="the decisions of the verified (sampled) ones")


def gate_dataset(
    options: GateOptions, policy: Policy, progress: pipeline.ProgressCallback | None = None
) -> Manifest:
    """Gate *options.dataset* under *policy*; writes the output files, returns the manifest.

    Streams the dataset: pass 1 validates every line and draws the sample
    (nothing is written before it ends, so a malformed line fails with
    ``shard:line: field: reason`` first); pass 2 picks the sampled lines and
    replays them; pass 3 writes every trajectory to ``admitted.jsonl`` or
    ``quarantined.jsonl`` as it is decided. Memory stays flat in the size of
    the dataset (the sample and a few counters are held, never the dataset).

    Each pass works shard by shard; with ``executor="ray"`` the shards of each
    pass are read at once by Ray tasks across the cluster (every node must see
    the dataset and the output folder at the same paths), and the driver
    merges what they learned and concatenates the files they wrote, in shard
    order: the outputs are byte for byte those of a local gate. With
    ``layout="sharded"`` it keeps them as one file per shard instead (no copy).
    Files in the output folder that a gate writes, and hidden entries such as
    its staging folder, are never read as shards of a folder or glob dataset.

    *progress* hears ``("total:scan", 0)`` (a total not known yet) and then
    ``("scan", n)`` as trajectories are read, ``("total:real", n)`` and
    ``("real", 1)`` per replayed trajectory of the sample, and ``("total:write",
    n)`` and ``("write", n)`` as trajectories are decided.

    What a stopped (killed) gate left in the output folder is settled first, and
    said on stderr (:func:`fidelity.gate_outputs.recover`).
    """
    report = progress or _quiet
    gate_outputs.recover_unlocked(options.output_dir)
    gate_outputs.pause("recovered")
    scan = scan_dataset(
        options.dataset,
        options.sample,
        options.seed,
        options.allowed_roots,
        LineRules(trust=options.trust, sandbox=options.sandbox),
        executor=options.executor,
        ray_address=options.ray_address,
        progress=report,
        exclude=output_paths(options.output_dir),
    )
    domain = scan.domain
    run_id = options.run_id or new_run_id()
    limit = horizon_limit(policy, domain, DEFAULT_HORIZON_LIMIT)
    with Store(options.db) as store:
        store.start_run(run_id, _run_info(options, scan))
        _verify(store, run_id, _sampled(scan, options), options, domain, report)
        store.finish_run(run_id, "done")
        summary = summarize(store, run_id, limit, worst=0, detail=False)
        verified = _verified_facts(store, run_id, bool(options.to))
        verified.unverifiable = {row.trajectory_id: row.reason for row in summary.unverifiable}
    verdict = evaluate(summary, policy)
    return _write(
        options, policy, scan, verified, verdict, summary.totals.trust_horizon or 0, run_id, report
    )


def _verified_facts(store: Store, run_id: str, with_steps: bool) -> Verified:
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


class ShardInfo(BaseModel):
    """One shard of a scanned dataset."""

    path: Path
    trajectories: int


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
    shards: list[ShardInfo] = Field(description="every shard, in order, and its trajectories")


class LineRules(BaseModel):
    """What every line of a dataset is checked against in pass 1, besides its format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trust: DatasetTrust = Field(default_factory=DatasetTrust)
    sandbox: str | None = Field(default=None, description="--sandbox: the run's default backend")

    def check(self, trajectory: Trajectory, path: str, line: int) -> None:
        """InputFormatError naming the line and field for a host command or site the
        operator did not allow, or a world no backend here replays as it names it."""
        refuse_untrusted(trajectory, self.trust, path, line)
        try:
            trajectory_backend(trajectory.domain.value, trajectory.env, self.sandbox)
        except UsageError as exc:
            raise InputFormatError(path, line, f"{trajectory.id}.env", str(exc)) from None


def scan_dataset(
    source: Path,
    size: int | None,
    seed: int,
    allowed_roots: Sequence[Path] = (),
    rules: LineRules | None = None,
    *,
    executor: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    progress: pipeline.ProgressCallback | None = None,
    exclude: Sequence[Path] = (),
) -> Scan:
    """Pass 1: validate every trajectory, check one domain and observations, draw the sample.

    Paths are checked here too (untrusted input: ``env.workdir`` and ``@setup`` must stay
    inside the shard's folder or *allowed_roots*), so a bad one fails before any write.
    Shards are scanned one after the other here (the first error stops the scan), or with
    *executor* ``"ray"`` all at once on the cluster at *ray_address* (None: start a local
    one); either way
    the first error in dataset order is the one raised. *progress* hears
    ``("scan", n)`` as trajectories are read (on Ray, as each shard's scan returns).
    Files and folders in *exclude* (and hidden entries) are not shards.
    """
    report = progress or _quiet
    report("total:scan", 0)
    paths = dataset_shards(source, exclude)
    checks = rules or LineRules()
    calls = [
        (index, path, size, seed, tuple(allowed_roots), checks) for index, path in enumerate(paths)
    ]
    scans = (
        (scan_shard(*call, progress=report) for call in calls)
        if executor == "local"
        else map_on_cluster(
            scan_shard, calls, ray_address, lambda shard: report("scan", shard.sampler.total)
        )
    )
    merged = _ScanMerge(size, seed)
    for shard in scans:
        merged.add(shard)
    return merged.scan(source, paths)


class ShardScan:
    """What pass 1 learned about one shard (or how far it got before its first error)."""

    def __init__(self, path: Path, size: int | None, seed: int) -> None:
        self.path = path
        self.sampler = StratifiedSampler(size, seed)
        self.ids = IdIndex()
        self.first_of_domain: dict[str, int] = {}  # domain -> the line it first appears on
        self.models: dict[str, dict[str, Any]] = {}
        self.prompts: set[str] = set()
        self.modes: set[str] = set()
        self.bytes_read = 0
        self.sha256 = ""
        self.failure: UsageError | None = None


def scan_shard(
    index: int,
    path: Path,
    size: int | None,
    seed: int,
    allowed_roots: Sequence[Path],
    rules: LineRules | None = None,
    progress: pipeline.ProgressCallback | None = None,
) -> ShardScan:
    """Pass 1 over one shard (on this machine or a Ray worker); stops at its first bad line.

    *progress* (here, not on a worker) hears ``("scan", n)`` every few thousand lines."""
    shard = ShardScan(path, size, seed)
    checks = rules or LineRules()
    confiner = PathConfiner(path, allowed_roots)  # the folder and roots resolved once
    counted = _Counted(progress, "scan")
    try:
        for position, line in enumerate(shard_lines(index, path)):
            counted.one()
            trajectory = line.parse()
            _require_observations(trajectory, str(line.path), line.number)
            confiner.confine(trajectory, line.number)
            checks.check(trajectory, str(line.path), line.number)
            shard.ids.add(trajectory.id)
            domain = trajectory.domain.value
            shard.first_of_domain.setdefault(domain, line.number)
            shard.sampler.add(position, domain, len(trajectory.steps), trajectory.id)
            described = _world_model(trajectory)
            shard.models.setdefault(json.dumps(described, sort_keys=True, default=str), described)
            if (found := _prompts_hash(trajectory)) is not None:
                shard.prompts.add(found)
            shard.modes.add(recorded_mode(trajectory))
            shard.bytes_read += len(line.text)
    except UsageError as exc:  # handed to the driver, which raises the first in dataset order
        shard.failure = exc
        return shard
    finally:
        counted.flush()
    shard.sha256 = _file_sha256(path)
    return shard


class _Counted:
    """Reports ``(phase, n)`` to a progress callback every :data:`_REPORT_EVERY` items."""

    def __init__(self, progress: pipeline.ProgressCallback | None, phase: str) -> None:
        self.progress = progress
        self.phase = phase
        self.pending = 0

    def one(self) -> None:
        self.pending += 1
        if self.pending >= _REPORT_EVERY:
            self.flush()

    def flush(self) -> None:
        if self.progress is not None and self.pending:
            self.progress(self.phase, self.pending)
        self.pending = 0


_REPORT_EVERY = 1000


def _quiet(phase: str, n: int) -> None:
    """A progress callback that reports nothing."""


class _ScanMerge:
    """Shard scans added in shard order, merged into one :class:`Scan`; raises the first error."""

    def __init__(self, size: int | None, seed: int) -> None:
        self.sampler = StratifiedSampler(size, seed)
        self.ids = IdIndex()
        self.domains: set[str] = set()
        self.models: dict[str, dict[str, Any]] = {}
        self.prompts: set[str] = set()
        self.modes: set[str] = set()
        self.bytes_read = 0
        self.shards: list[ShardInfo] = []
        self.digests: list[str] = []

    def add(self, shard: ShardScan) -> None:
        """Merge *shard*; raise its error, or a second domain, at the first line it occurs."""
        for domain, number in shard.first_of_domain.items():  # lines before any failure
            self.domains.add(domain)
            if len(self.domains) > 1:
                raise UsageError(
                    f"{shard.path}:{number}: mixed domains ({', '.join(sorted(self.domains))}); "
                    "use one domain per dataset"
                )
        if shard.failure is not None:
            raise shard.failure
        self.sampler.absorb(shard.sampler, offset=self.sampler.total)
        self.ids.absorb(shard.ids)
        for key, described in shard.models.items():
            self.models.setdefault(key, described)
        self.prompts |= shard.prompts
        self.modes |= shard.modes
        self.bytes_read += shard.bytes_read
        self.shards.append(ShardInfo(path=shard.path, trajectories=shard.sampler.total))
        self.digests.append(shard.sha256)

    def scan(self, source: Path, paths: Sequence[Path]) -> Scan:
        """The merged scan of every shard; raises for an empty dataset or a duplicate id."""
        if self.sampler.total == 0:
            raise InputFormatError(str(source), None, None, "no trajectories in dataset")
        if (hashed := self.ids.duplicate()) is not None:
            raise _duplicate_error(source, paths, hashed)
        return Scan(
            domain=pipeline.check_domain(next(iter(self.domains))).value,
            trajectories=self.sampler.total,
            chosen=self.sampler.chosen(),
            world_models=[self.models[k] for k in sorted(self.models)],
            prompts_hashes=sorted(self.prompts),
            modes=sorted(self.modes),
            sha256=_dataset_sha256(paths, self.digests),
            bytes_read=self.bytes_read,
            shards=self.shards,
        )


def _per_shard(scan: Scan) -> Iterator[tuple[int, ShardInfo, int]]:
    """``(shard index, shard, position of its first trajectory in the dataset)``."""
    offset = 0
    for index, shard in enumerate(scan.shards):
        yield index, shard, offset
        offset += shard.trajectories


def _sampled(scan: Scan, options: GateOptions) -> list[Trajectory]:
    """Pass 2: the sampled trajectories, in dataset order (only their lines are parsed)."""
    calls = []
    for index, shard, offset in _per_shard(scan):
        wanted = [p - offset for p in scan.chosen if offset <= p < offset + shard.trajectories]
        if wanted:
            calls.append((index, shard.path, wanted, tuple(options.allowed_roots)))
    if options.executor != "ray":
        picked = [t for call in calls for t in sampled_in_shard(*call)]
    else:
        parts = map_on_cluster(sampled_in_shard, calls, options.ray_address)
        picked = [t for part in parts for t in part]
    return pipeline.with_default_image(picked, options.image, options.sandbox)


def sampled_in_shard(
    index: int, path: Path, positions: Sequence[int], allowed_roots: Sequence[Path]
) -> list[Trajectory]:
    """The trajectories at *positions* (0-based, in order) of one shard, paths resolved."""
    wanted = set(positions)
    picked = [
        (line.number, line.parse())
        for position, line in enumerate(shard_lines(index, path))
        if position in wanted
    ]
    return list(confine_paths(picked, path, allowed_roots))


class StratifiedSampler:
    """A proportional stratified sample (by domain and length), drawn in one streaming pass.

    Each trajectory gets a seeded pseudo-random rank from its id (so the sample
    depends neither on the dataset's order nor on how it is sharded, and shards
    can be sampled apart and merged); every stratum keeps only its *size* lowest
    ranks, so memory is bounded by strata × size, not the dataset.
    """

    def __init__(self, size: int | None, seed: int) -> None:
        self.size = size
        self.seed = seed
        self.total = 0
        self.counts: dict[tuple[str, int], int] = defaultdict(int)
        self.lowest: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)

    def add(self, position: int, domain: str, steps: int, trajectory_id: str) -> None:
        """Count one trajectory at *position* and keep it if it ranks low enough."""
        key = (domain, max(b for b in _LENGTH_BUCKETS if b <= max(1, steps)))
        self.total += 1
        self.counts[key] += 1
        if self.size is not None:
            self._keep(key, _rank(self.seed, trajectory_id), position)

    def absorb(self, other: StratifiedSampler, offset: int) -> None:
        """Add the sampler of the next shard, whose positions start at *offset* here."""
        self.total += other.total
        for key, count in other.counts.items():
            self.counts[key] += count
        if self.size is not None:
            for key, heap in other.lowest.items():
                for negative, position in heap:
                    self._keep(key, -negative, position + offset)

    def _keep(self, key: tuple[str, int], rank: int, position: int) -> None:
        heap = self.lowest[key]  # a max-heap of (-rank, position)
        if len(heap) < (self.size or 0):
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
        sampler.add(index, trajectory.domain.value, len(trajectory.steps), trajectory.id)
    return sampler.chosen()


def _rank(seed: int, trajectory_id: str) -> int:
    digest = hashlib.blake2b(f"{seed}:{trajectory_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class IdIndex:
    """Duplicate ids across a stream, in 8 bytes per trajectory (id hashes, checked at the end)."""

    def __init__(self) -> None:
        self._hashes = array("Q")

    def add(self, trajectory_id: str) -> None:
        """Remember *trajectory_id*."""
        self._hashes.append(id_hash(trajectory_id))

    def absorb(self, other: IdIndex) -> None:
        """Remember the ids of *other* too."""
        self._hashes.extend(other._hashes)

    def duplicate(self) -> int | None:
        """The hash of an id seen twice (None: every id is unique)."""
        ordered = sorted(self._hashes)
        return next((a for a, b in itertools.pairwise(ordered) if a == b), None)


def id_hash(trajectory_id: str) -> int:
    """A 64-bit hash of a trajectory id."""
    return int.from_bytes(hashlib.blake2b(trajectory_id.encode(), digest_size=8).digest(), "big")


def _duplicate_error(source: Path, paths: Sequence[Path], hashed: int) -> InputFormatError:
    """Find the two lines whose ids hash to *hashed* (a rare second read) and name them."""
    first: str | None = None
    lines = (line for index, path in enumerate(paths) for line in shard_lines(index, path))
    for line in lines:
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
    store: Store,
    run_id: str,
    trajectories: list[Trajectory],
    options: GateOptions,
    domain: str,
    progress: pipeline.ProgressCallback,
) -> None:
    """Replay *trajectories* for real, compare with their recorded observations, store."""
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
    progress("total:real", len(tasks))

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


def _decide(
    trajectory_id: str,
    total: int,
    verified: Verified,
    verdict: Verdict,
    domain_horizon: int,
    minimum: int,
    options: GateOptions,
) -> Decision:
    """What happens to one trajectory of *total* steps (verified when it has a horizon)."""
    reason = verified.unverifiable.get(trajectory_id)
    if reason is not None:
        return Decision(
            trajectory_id=trajectory_id,
            outcome="unverifiable",
            verified=False,
            steps=total,
            steps_kept=0,
            horizon=None,
            reason=f"unverifiable: {reason}",
            cause="unverifiable",
        )
    horizon = verified.horizons.get(trajectory_id)
    if horizon is not None:
        check = verified.checks.get(trajectory_id)
        decision = _verified(trajectory_id, total, horizon, minimum, options)
        return _with_outcome(decision, check) if check is not None else decision
    if verdict.status == "fail":
        return Decision(
            trajectory_id=trajectory_id,
            outcome="quarantined",
            verified=False,
            steps=total,
            steps_kept=0,
            horizon=None,
            reason="not verified, and the dataset fails the gate",
            cause="gate",
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
        cause=None if kept else "gate",
    )


def _with_outcome(decision: Decision, check: RealCheck) -> Decision:
    """*decision* quarantined when the real check contradicts the claim (cause ``outcome``)
    or could not run on a claim (cause ``outcome-unverifiable``: a claim nothing checked is
    never admitted as verified, nor exported as a reward)."""
    agrees = check.agrees
    decision = decision.model_copy(update={"outcome_agreement": agrees})
    if check.claimed is not None and check.real == "unverifiable":
        claimed = "success" if check.claimed else "failure"
        return decision.model_copy(
            update={
                "outcome": "quarantined",
                "steps_kept": 0,
                "cause": "outcome-unverifiable",
                "reason": f"outcome-unverifiable: claimed {claimed}, the real check could not "
                f"run: {check.reason or 'no reason given'}",
            }
        )
    if agrees is not False:
        return decision
    claimed = "success" if check.claimed else "failure"
    code = "" if check.exit_code is None else f" (exit {check.exit_code})"
    return decision.model_copy(
        update={
            "outcome": "quarantined",
            "steps_kept": 0,
            "cause": "outcome",
            "reason": f"outcome: claimed {claimed}, the real check says {check.real}{code}",
        }
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
            cause="drift" if outcome == "quarantined" else None,
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


_OUTPUTS = gate_outputs.OUTPUTS


def output_paths(out: Path) -> list[Path]:
    """What a gate writes into *out*, in either layout (never read back as dataset shards),
    the RL formats' outputs included."""
    own = [out / f"{name}{end}" for name in _OUTPUTS for end in (".jsonl", "")]
    return own + rl_output_paths(out)


def _write(
    options: GateOptions,
    policy: Policy,
    scan: Scan,
    verified: Verified,
    verdict: Verdict,
    domain_horizon: int,
    run_id: str,
    progress: pipeline.ProgressCallback,
) -> Manifest:
    """Pass 3: decide every trajectory and write it to its file as it is decided.

    Each shard is written to its own part files (here, or by a Ray task) in a
    hidden staging folder of the output folder; the joined layout concatenates
    them in shard order, the sharded layout keeps them as they are. The outputs
    and then the manifest are renamed into place only once every shard is
    written (:func:`fidelity.gate_outputs.install`: on an error or an interrupt,
    nothing new appears and the staging folder is removed), all under the output
    folder's lock, which a second gate writing there waits for.
    """
    out = options.output_dir
    out.mkdir(parents=True, exist_ok=True)
    with gate_outputs.output_lock(out):
        gate_outputs.recover(out)  # under the lock, every staging folder here is a dead gate's
        parts = gate_outputs.new_staging(out)
        try:
            gate_outputs.pause("staged")
            manifest, staged = _stage(
                options, policy, scan, verified, verdict, domain_horizon, run_id, progress, parts
            )
            gate_outputs.pause("written")
            previous = [out / gate_outputs.MANIFEST, *output_paths(out)]
            gate_outputs.install(out, parts, staged, previous)
            gate_outputs.pause("installed")
        finally:
            gate_outputs.remove_staging(parts)
    return manifest


def _stage(
    options: GateOptions,
    policy: Policy,
    scan: Scan,
    verified: Verified,
    verdict: Verdict,
    domain_horizon: int,
    run_id: str,
    progress: pipeline.ProgressCallback,
    parts: Path,
) -> tuple[Manifest, list[Path]]:
    """Write every output and the manifest into the staging folder *parts*; returns the
    manifest and the staged outputs."""
    minimum = max(1, policy.for_domain(verdict.domain).min_trust_horizon or 0)
    for name in (*_OUTPUTS, *(rl_name(fmt) for fmt in options.to)):
        (parts / name).mkdir()
    calls = [
        (index, shard.path, parts, verified, verdict, domain_horizon, minimum, options, run_id)
        for index, shard, _ in _per_shard(scan)
    ]
    progress("total:write", scan.trajectories)
    written = (
        [write_shard(*call, progress=progress) for call in calls]
        if options.executor != "ray"
        else map_on_cluster(
            write_shard,
            calls,
            options.ray_address,
            lambda shard: progress("write", shard.counts["trajectories"]),
        )
    )
    counts = _Tally()
    decided: list[Decision] = []
    for shard in written:
        counts.absorb(shard.counts)
        decided += shard.verified
    staged = {name: parts / name for name in _OUTPUTS}
    if options.layout == "joined":
        for name in _OUTPUTS:
            staged[name] = _join([shard.parts[name] for shard in written], parts, name)
    rl_staged = _stage_rl(options, parts, written)
    finals = {name: options.output_dir / path.name for name, path in staged.items()}
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
        layout=options.layout,
        admitted_path=str(finals["admitted"]),
        quarantined_path=str(finals["quarantined"]),
        decisions_path=str(finals["decisions"]),
        rl_paths={fmt: str(options.output_dir / path.name) for fmt, path in rl_staged.items()},
        decisions=decided,
    )
    path = parts / gate_outputs.MANIFEST  # private folder: a plain file, mode as umask says
    with writing(path):
        path.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return manifest, [staged[name] for name in _OUTPUTS] + list(rl_staged.values())


def rl_name(fmt: RLFormat) -> str:
    """The name of the admitted trajectories' output for *fmt* (``admitted.verl``)."""
    return f"admitted.{fmt}"


def rl_output_paths(out: Path) -> list[Path]:
    """The RL outputs a gate may have written into *out*, in either layout."""
    return [out / f"{rl_name(fmt)}{end}" for fmt in FORMATS for end in (suffix(fmt), "")]


def _stage_rl(
    options: GateOptions, parts: Path, written: Sequence[ShardWritten]
) -> dict[str, Path]:
    """The staged RL outputs per format: joined files, or the folders of parts."""
    staged: dict[str, Path] = {}
    for fmt in options.to:
        name = rl_name(fmt)
        if options.layout == "joined":
            target = parts / f"{name}{suffix(fmt)}"
            join_parts(fmt, [shard.parts[name] for shard in written], target)
            shutil.rmtree(parts / name)
            staged[fmt] = target
        else:
            staged[fmt] = parts / name
    return staged


class ShardWritten(BaseModel):
    """What pass 3 wrote for one shard: its part files, counts and verified decisions."""

    parts: dict[str, Path]
    counts: dict[str, int]
    verified: list[Decision]


def write_shard(
    index: int,
    path: Path,
    staging: Path,
    verified: Verified,
    verdict: Verdict,
    domain_horizon: int,
    minimum: int,
    options: GateOptions,
    run_id: str,
    progress: pipeline.ProgressCallback | None = None,
) -> ShardWritten:
    """Pass 3 over one shard: decide each trajectory, write it to this shard's part files.

    The parts are ``staging/{admitted,quarantined,decisions}/part-NNNNNN.jsonl``
    (NNNNNN: the shard's index). *progress* (here, not on a worker) hears
    ``("write", n)`` every few thousand lines. With ``options.to``, each admitted
    trajectory also goes to ``staging/admitted.<format>/part-NNNNNN.<suffix>``."""
    files = {name: staging / name / f"part-{index:06d}.jsonl" for name in _OUTPUTS}
    rl_files = {
        fmt: staging / rl_name(fmt) / f"part-{index:06d}{suffix(fmt)}" for fmt in options.to
    }
    counts = _Tally()
    decided: list[Decision] = []
    counted = _Counted(progress, "write")
    with (
        _PartFile(files["admitted"]) as admitted,
        _PartFile(files["quarantined"]) as quarantined,
        _PartFile(files["decisions"]) as decisions,
        contextlib.ExitStack() as stack,
    ):
        writers = [
            stack.enter_context(RLWriter(file, ExportOptions(format=fmt)))
            for fmt, file in rl_files.items()
        ]
        for line in shard_lines(index, path):
            counted.one()
            data = json.loads(line.text)
            steps = data.get("steps") or []
            decision = _decide(
                str(data["id"]), len(steps), verified, verdict, domain_horizon, minimum, options
            )
            counts.add(decision)
            if decision.verified or decision.outcome == "unverifiable":
                decided.append(decision)
            decisions.write(decision.model_dump_json())
            meta = dict(data.get("meta") or {})
            if decision.outcome == "admitted":
                meta.update(gate_run_id=run_id, gate_verified=decision.verified)
                for writer in writers:
                    _write_rl(writer, data, decision, verified, domain_horizon, run_id, line)
                if decision.steps_kept < decision.steps:
                    meta.update(cut_at=decision.steps_kept, original_steps=decision.steps)
                    data["steps"] = steps[: decision.steps_kept]
                admitted.write(_dump({**data, "meta": meta}))
            else:
                meta.update(quarantine_reason=decision.cause, quarantine_detail=decision.reason)
                quarantined.write(_dump({**data, "meta": meta}))
    counted.flush()
    parts = files | {rl_name(fmt): file for fmt, file in rl_files.items()}
    return ShardWritten(parts=parts, counts=counts.values, verified=decided)


def _write_rl(
    writer: RLWriter,
    data: dict[str, Any],
    decision: Decision,
    verified: Verified,
    domain_horizon: int,
    run_id: str,
    line: Line,
) -> None:
    """One admitted trajectory (its kept steps) as one row of *writer*'s RL format."""
    trajectory = line.parse()
    fidelity = TrajectoryFidelity(
        trust_horizon=decision.horizon if decision.horizon is not None else domain_horizon,
        verified=decision.verified,
        steps=verified.steps.get(decision.trajectory_id, []),
        gate_run_id=run_id,
        outcome_agreement=decision.outcome_agreement,
    )
    writer.write(
        trajectory, fidelity, trajectory.outcome, keep=decision.steps_kept, index=line.number
    )


class _PartFile:
    """A part file written a line at a time; an error that names no file (a full disk's)
    names this one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with writing(path):
            self.handle = path.open("w", encoding="utf-8")

    def write(self, line: str) -> None:
        """Append *line* and a newline."""
        with writing(self.path):
            self.handle.write(line + "\n")

    def __enter__(self) -> _PartFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with writing(self.path):
            self.handle.close()


def _join(parts: Sequence[Path], staging: Path, name: str) -> Path:
    """``staging/NAME.jsonl`` made of *parts* in order (the one part renamed, when one)."""
    joined = staging / f"{name}.jsonl"
    if len(parts) == 1:
        os.replace(parts[0], joined)
        return joined
    with writing(joined), joined.open("wb") as handle:
        for part in parts:
            with part.open("rb") as source:
                shutil.copyfileobj(source, handle, 1 << 20)
    return joined


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class _Tally:
    """The manifest's counts, added up one decision at a time."""

    def __init__(self) -> None:
        self.values = dict.fromkeys(Counts.model_fields, 0)

    def add(self, d: Decision) -> None:
        v = self.values
        v["trajectories"] += 1
        v["sampled"] += d.verified or d.outcome == "unverifiable"
        v["steps"] += d.steps
        if d.outcome != "admitted":
            v["quarantined"] += 1
            v["unverifiable"] += d.outcome == "unverifiable"
            return
        v["admitted"] += 1
        v["admitted_whole"] += d.verified and d.steps_kept == d.steps
        v["admitted_cut"] += d.steps_kept < d.steps
        v["admitted_unverified"] += not d.verified
        v["steps_admitted"] += d.steps_kept

    def absorb(self, values: dict[str, int]) -> None:
        for key, value in values.items():
            self.values[key] += value

    def counts(self) -> Counts:
        return Counts(**self.values)


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


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _dataset_sha256(paths: Sequence[Path], digests: Sequence[str]) -> str:
    """The SHA-256 of the dataset's one file, or of its shards' names and digests."""
    if len(paths) == 1:
        return digests[0]
    joined = "\n".join(f"{d}  {p.name}" for p, d in zip(paths, digests, strict=True))
    return hashlib.sha256(joined.encode()).hexdigest()
