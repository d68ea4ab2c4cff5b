"""The dataset gate's sample: which trajectories are replayed, and pass 2 that reads them.

The draws come from the sampling design (:class:`~fidelity.gate.design.MixtureDesign`):
i.i.d. with replacement, each trajectory with probability half its share of the dataset's
steps plus half one over the number of trajectories, so that every rate the gate decides
on (of steps, of trajectories) is a mean of bounded weighted draws. Draw *k* depends only
on the seed and *k*: a gate that goes on from a stopped one, or that draws in rounds,
draws the same trajectories.

Pass 2 reads the dataset once for every trajectory the gate may replay (the first draws
up to ``max_replays`` distinct trajectories) and spools their lines to a file, so the
rounds of ``--sample auto`` read them from there and not the dataset again.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fidelity import pipeline
from fidelity.executors.ray import map_on_cluster
from fidelity.formats.dataset import Line, shard_lines
from fidelity.formats.jsonl import confine_paths
from fidelity.gate.options import GateOptions, Scan, ShardInfo
from fidelity.trajectory import Trajectory

if TYPE_CHECKING:
    import numpy as np

    from fidelity.gate.design import MixtureDesign

_PLAN_CHUNK = 1024
"""Draws computed at a time while planning which trajectories may be replayed."""

MAX_DRAWS_PER_REPLAY = 50
"""A plan stops after this many draws per replay allowed (a tiny dataset is all drawn)."""


def per_shard(scan: Scan) -> Iterator[tuple[int, ShardInfo, int]]:
    """``(shard index, shard, position of its first trajectory in the dataset)``."""
    offset = 0
    for index, shard in enumerate(scan.shards):
        yield index, shard, offset
        offset += shard.trajectories


def design_of(scan: Scan) -> MixtureDesign:
    """The sampling design of a scanned dataset."""
    import numpy as np

    from fidelity.gate.design import MixtureDesign

    return MixtureDesign(np.frombuffer(scan.lengths, dtype=np.uint32).astype(np.int64))


def plan(design: MixtureDesign, seed: int, draws: int | None, max_replays: int) -> np.ndarray:
    """The draws a gate may use, in order: *draws* of them (a fixed sample), or (None: the
    sequential gate) as many as it takes to reach *max_replays* distinct trajectories (or
    every trajectory, or :data:`MAX_DRAWS_PER_REPLAY` draws per replay allowed)."""
    import numpy as np

    if draws is not None:
        return design.draws(seed, 0, draws)
    parts: list[np.ndarray] = []
    seen: set[int] = set()
    total = 0
    limit = max_replays * MAX_DRAWS_PER_REPLAY
    while len(seen) < min(max_replays, len(design)) and total < limit:
        chunk = design.draws(seed, total, _PLAN_CHUNK)
        for index, position in enumerate(chunk.tolist()):
            seen.add(position)
            if len(seen) >= min(max_replays, len(design)):
                chunk = chunk[: index + 1]
                break
        parts.append(chunk)
        total += len(chunk)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


class Spool:
    """The lines of the trajectories a gate may replay, read once from the dataset (pass 2)
    and kept in a file beside the database, by position."""

    def __init__(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        handle = tempfile.NamedTemporaryFile(  # noqa: SIM115 (closed by close())
            "w+", encoding="utf-8", dir=folder, prefix=".fidelity-gate-spool-", suffix=".jsonl"
        )
        self._file = handle
        self._offsets: dict[int, int] = {}
        self._where: dict[int, tuple[int, Path, int]] = {}

    def add(self, position: int, shard: int, path: Path, number: int, text: str) -> None:
        """Keep line *number* of shard *shard* (*path*), the trajectory at *position*."""
        self._file.seek(0, 2)
        self._offsets[position] = self._file.tell()
        self._where[position] = (shard, path, number)
        self._file.write(text.rstrip("\n") + "\n")

    def ids(self) -> dict[int, str]:
        """The trajectory id at every spooled position."""
        return {p: str(json.loads(self._text(p)).get("id")) for p in self._offsets}

    def trajectories(self, positions: Sequence[int], options: GateOptions) -> dict[int, Trajectory]:
        """The trajectories at *positions*, parsed, their paths confined to their shard's
        folder (or ``--allow-root``), ``--image`` given to the Docker ones without one."""
        picked: dict[int, Trajectory] = {}
        for position in sorted(set(positions)):
            shard, path, number = self._where[position]
            line = Line(shard, path, number, self._text(position))
            [trajectory] = confine_paths([(number, line.parse())], path, options.allowed_roots)
            picked[position] = trajectory
        given = pipeline.with_default_image(list(picked.values()), options.image, options.sandbox)
        return dict(zip(picked, given, strict=True))

    def _text(self, position: int) -> str:
        self._file.seek(self._offsets[position])
        return self._file.readline()

    def close(self) -> None:
        """Remove the spool file."""
        self._file.close()


def spool_sample(scan: Scan, positions: Sequence[int], options: GateOptions, folder: Path) -> Spool:
    """Pass 2: the lines at *positions* (dataset order) read into a :class:`Spool` (on Ray,
    each shard read by a task)."""
    wanted = set(positions)
    calls = []
    for index, shard, offset in per_shard(scan):
        mine = sorted(p - offset for p in wanted if offset <= p < offset + shard.trajectories)
        if mine:
            calls.append((index, shard.path, mine, offset))
    parts = (
        [lines_in_shard(*call) for call in calls]
        if options.executor != "ray"
        else map_on_cluster(lines_in_shard, calls, options.ray_address)
    )
    spool = Spool(folder)
    for part in parts:
        for position, index, path, number, text in part:
            spool.add(position, index, path, number, text)
    return spool


def lines_in_shard(
    index: int, path: Path, positions: Sequence[int], offset: int
) -> list[tuple[int, int, Path, int, str]]:
    """``(dataset position, shard index, shard, line number, text)`` of the lines at
    *positions* (0-based within the shard, sorted) of one shard."""
    wanted = set(positions)
    return [
        (offset + position, index, line.path, line.number, line.text)
        for position, line in enumerate(shard_lines(index, path))
        if position in wanted
    ]
