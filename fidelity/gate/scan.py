"""Pass 1 of the dataset gate: validate every line, check what it may do, count its steps."""

from __future__ import annotations

import hashlib
import itertools
import json
from array import array
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from fidelity import pipeline
from fidelity.errors import InputFormatError, UsageError
from fidelity.executors.ray import map_on_cluster
from fidelity.formats.dataset import shard_lines
from fidelity.formats.dataset import shards as dataset_shards
from fidelity.formats.jsonl import PathConfiner
from fidelity.gate.options import LineRules, Scan, ShardInfo
from fidelity.task import recorded_mode
from fidelity.trajectory import Trajectory


def scan_dataset(
    source: Path,
    allowed_roots: Sequence[Path] = (),
    rules: LineRules | None = None,
    *,
    executor: Literal["local", "ray"] = "local",
    ray_address: str | None = None,
    progress: pipeline.ProgressCallback | None = None,
    exclude: Sequence[Path] = (),
) -> Scan:
    """Pass 1: validate every trajectory, check one domain and observations, and keep each
    trajectory's length (the sampling design weighs draws by it: 4 bytes a trajectory).

    Paths are checked here too (untrusted input: ``env.workdir`` and ``@setup`` must stay
    inside the shard's folder or *allowed_roots*), so a bad one fails before any write.
    Shards are scanned one after the other here (the first error stops the scan), or with
    *executor* ``"ray"`` all at once on the cluster at *ray_address* (None: start a local
    one); either way
    the first error in dataset order is the one raised. *progress* hears
    ``("scan", n)`` as trajectories are read (on Ray, as each shard's scan returns).
    Files and folders in *exclude* (and hidden entries) are not shards.
    """
    report = progress or quiet
    report("total:scan", 0)
    paths = dataset_shards(source, exclude)
    checks = rules or LineRules()
    calls = [(index, path, tuple(allowed_roots), checks) for index, path in enumerate(paths)]
    scans = (
        (scan_shard(*call, progress=report) for call in calls)
        if executor == "local"
        else map_on_cluster(
            scan_shard, calls, ray_address, lambda shard: report("scan", len(shard.lengths))
        )
    )
    merged = _ScanMerge()
    for shard in scans:
        merged.add(shard)
    return merged.scan(source, paths)


class ShardScan:
    """What pass 1 learned about one shard (or how far it got before its first error)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lengths = array("I")  # steps of each trajectory, in order
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
    allowed_roots: Sequence[Path],
    rules: LineRules | None = None,
    progress: pipeline.ProgressCallback | None = None,
) -> ShardScan:
    """Pass 1 over one shard (on this machine or a Ray worker); stops at its first bad line.

    *progress* (here, not on a worker) hears ``("scan", n)`` every few thousand lines."""
    shard = ShardScan(path)
    checks = rules or LineRules()
    confiner = PathConfiner(path, allowed_roots)  # the folder and roots resolved once
    counted = Counted(progress, "scan")
    try:
        for line in shard_lines(index, path):
            counted.one()
            trajectory = line.parse()
            _require_observations(trajectory, str(line.path), line.number)
            confiner.confine(trajectory, line.number)
            checks.check(trajectory, str(line.path), line.number)
            shard.ids.add(trajectory.id)
            domain = trajectory.domain.value
            shard.first_of_domain.setdefault(domain, line.number)
            shard.lengths.append(len(trajectory.steps))
            described = world_model(trajectory)
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


class Counted:
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


def quiet(phase: str, n: int) -> None:
    """A progress callback that reports nothing."""


class _ScanMerge:
    """Shard scans added in shard order, merged into one :class:`Scan`; raises the first error."""

    def __init__(self) -> None:
        self.lengths = array("I")
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
        self.shards.append(ShardInfo(path=shard.path, trajectories=len(shard.lengths)))
        self.lengths.extend(shard.lengths)
        self.ids.absorb(shard.ids)
        for key, described in shard.models.items():
            self.models.setdefault(key, described)
        self.prompts |= shard.prompts
        self.modes |= shard.modes
        self.bytes_read += shard.bytes_read
        self.digests.append(shard.sha256)

    def scan(self, source: Path, paths: Sequence[Path]) -> Scan:
        """The merged scan of every shard; raises for an empty dataset or a duplicate id."""
        if not self.lengths:
            raise InputFormatError(str(source), None, None, "no trajectories in dataset")
        if (hashed := self.ids.duplicate()) is not None:
            raise _duplicate_error(source, paths, hashed)
        return Scan(
            domain=pipeline.check_domain(next(iter(self.domains))).value,
            trajectories=len(self.lengths),
            lengths=self.lengths,
            world_models=[self.models[k] for k in sorted(self.models)],
            prompts_hashes=sorted(self.prompts),
            modes=sorted(self.modes),
            sha256=_dataset_sha256(paths, self.digests),
            bytes_read=self.bytes_read,
            shards=self.shards,
        )


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


def world_model(trajectory: Trajectory) -> dict[str, Any]:
    meta = trajectory.meta
    described = meta.get("world_model")
    if isinstance(described, dict):
        return described
    return {k: meta[k] for k in ("model", "mode") if k in meta}


def _prompts_hash(trajectory: Trajectory) -> str | None:
    for source in (trajectory.meta, world_model(trajectory)):
        for key in ("prompts_hash", "prompt_hash"):
            if isinstance(source.get(key), str):
                return str(source[key])
    return None


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
