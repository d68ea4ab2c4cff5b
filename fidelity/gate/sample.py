"""The dataset gate's sample: which trajectories are replayed, and pass 2 that reads them."""

from __future__ import annotations

import hashlib
import heapq
from collections import defaultdict
from collections.abc import Iterator, Sequence
from pathlib import Path

from fidelity import pipeline
from fidelity.executors.ray import map_on_cluster
from fidelity.formats.dataset import shard_lines
from fidelity.formats.jsonl import confine_paths
from fidelity.gate.options import GateOptions, Scan, ShardInfo
from fidelity.model import Trajectory

_LENGTH_BUCKETS = (1, 3, 6, 11, 21, 51)  # lower bounds of trajectory-length strata


def per_shard(scan: Scan) -> Iterator[tuple[int, ShardInfo, int]]:
    """``(shard index, shard, position of its first trajectory in the dataset)``."""
    offset = 0
    for index, shard in enumerate(scan.shards):
        yield index, shard, offset
        offset += shard.trajectories


def sampled(scan: Scan, options: GateOptions) -> list[Trajectory]:
    """Pass 2: the sampled trajectories, in dataset order (only their lines are parsed)."""
    calls = []
    for index, shard, offset in per_shard(scan):
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
