"""What the store's writers take and its readers give back: plain dataclasses, no pydantic
model built at import (``fidelity runs`` loads none), and the stored actions' validator."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from fidelity.compare.base import StepComparison
    from fidelity.outcomes import RealOutcome
    from fidelity.trajectory import Action, Observation, Trajectory


@functools.cache
def action_adapter() -> TypeAdapter[Action]:
    """Validates one stored action; built on first use. Reading commands never parse actions,
    so the store loads no model of :mod:`fidelity.trajectory` until a method needs one (``fidelity
    runs`` builds no pydantic model)."""
    from pydantic import TypeAdapter

    from fidelity.trajectory import Action

    return TypeAdapter(Action)


def stored_observation(
    text: str,
    exit_code: int | None,
    cwd: str | None,
    timed_out: bool,
    truncated: bool,
    error: str | None,
    state: str | None,
) -> Observation:
    """The observation of a stored ``observations`` row: its columns in this order (``state``
    as stored, JSON text)."""
    import json

    from fidelity.trajectory import Observation

    return Observation(
        text=text,
        exit_code=exit_code,
        cwd=cwd,
        timed_out=timed_out,
        truncated=truncated,
        error=error,
        state=None if state is None else json.loads(state),
    )


@dataclass
class TimedObservation:
    """An observation and how long it took to obtain."""

    observation: Observation
    latency_ms: float | None = None


@dataclass
class SimVariant:
    """One more simulation of a trajectory: another mode, or another sample (draw)."""

    mode: str
    sample: int
    sim: list[TimedObservation]
    comparisons: list[StepComparison]


@dataclass
class TrajectoryRecord:
    """Everything one audited trajectory adds to the store.

    ``sim``/``comparisons`` are sample 0 of ``mode``; an audit drawing several
    samples or running both modes adds the other draws as ``extra`` variants.
    """

    trajectory: Trajectory
    real: list[TimedObservation]
    sim: list[TimedObservation]
    comparisons: list[StepComparison]
    mode: str
    real_seconds: float
    sim_seconds: float
    error: str | None = None
    extra: list[SimVariant] = field(default_factory=list)
    outcome: RealOutcome | None = None
    """What the environment's check said after the replay (None: no check ran)."""

    def variants(self) -> list[SimVariant]:
        """Every simulation of the trajectory, the first one included."""
        return [SimVariant(self.mode, 0, self.sim, self.comparisons), *self.extra]


@dataclass(frozen=True)
class ShardReceipt:
    """What a Ray worker hands back instead of its records: which trajectories, where
    (the Parquet shard of :mod:`fidelity.store_shards`, merged by :class:`RecordBuffer`).
    A dataclass, not a pydantic model: it never crosses an edge (the worker builds it), and
    the store then loads no pydantic machinery for the commands that only read."""

    folder: Path
    """the complete shard folder"""
    trajectory_ids: list[str]
    failed: dict[str, str] = field(default_factory=dict)
    """trajectories whose sandbox failed: id -> error"""


@dataclass
class ReplayedRecord:
    """The real side of one trajectory, stored before it is simulated (see :meth:`Store.write_replayed`)."""

    trajectory: Trajectory
    real: list[TimedObservation]
    real_seconds: float
    error: str | None = None
    outcome: RealOutcome | None = None


@dataclass
class StoredReplay:
    """A real side read back from the store: the start page shown, then every step, and
    what the environment's check said after it."""

    initial_observation: str | None
    real: list[TimedObservation]
    real_seconds: float
    error: str | None = None
    outcome: RealOutcome | None = None


@dataclass
class JudgmentRecord:
    """An LLM judge's verdict on one compared step: scores, or the error that replaced them."""

    trajectory_id: str
    depth: int
    mode: str
    sample: int
    scores: dict[str, float] | None
    overall: float | None
    error: str | None = None
    raw: str | None = None
