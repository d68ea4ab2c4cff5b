"""What a gate's sample says about each limit: the per-trajectory counts of its draws turned
into the observations the confidence bounds read (:mod:`fidelity.gate.bounds`).

No I/O: the counts come from the store (:func:`fidelity.analysis.tallies.read_tallies`),
the draws and their weights from the sampling design (:mod:`fidelity.gate.design`).

Every limit is a ratio θ = E[w·A] / E[w·B] over draws of trajectories, with A ≤ B in
[0, 1] and w the draw's weight (:class:`~fidelity.gate.bounds.Observations`):

- step rates (drift, hallucination, infrastructure failures): A the share of the
  trajectory's steps that count, B = 1, w its step weight. Steps a trajectory could not
  compare (an infrastructure failure, or every step of an unverifiable trajectory) are
  unknown: the upper bound counts them as drifting, the lower bound as faithful, so
  both bounds hold whatever they would have shown;
- trajectory shares (unverifiable, claims whose check could not run, false successes):
  A and B indicators, w the trajectory weight;
- drift at depth j (the trust horizon): A = step j drifted, B = the trajectory reached j.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import numpy as np

    from fidelity.gate.bounds import Observations
    from fidelity.gate.design import Design


@dataclass(frozen=True)
class TrajectoryTally:
    """One stored trajectory's counts: its steps (comparison rows), those that drifted, that
    hallucinated and that failed for infrastructure reasons, at which depths, and its
    claimed and real outcome."""

    trajectory_id: str
    steps: int
    drift: int
    hallucinated: int
    infra: int
    unverifiable: bool
    drift_depths: tuple[int, ...]
    infra_depths: tuple[int, ...]
    claimed: bool | None = None
    real: str | None = None

    @property
    def depth(self) -> int:
        """The deepest step (its length)."""
        return self.steps


Side = Literal["lower", "upper", "point"]
"""Which reading of unknown steps: faithful (lower), drifting (upper), left out (point)."""


@dataclass(frozen=True)
class Evidence:
    """A gate's draws in order (a trajectory drawn twice appears twice) with their weights.

    ``exact``: every trajectory of the population was replayed once (``--all``, or a
    dataset no larger than the sample): its rates are known, not estimated.
    """

    tallies: Sequence[TrajectoryTally]
    step_weights: Sequence[float]
    trajectory_weights: Sequence[float]
    max_step_weight: float = 1.0
    max_trajectory_weight: float = 1.0
    exact: bool = False
    distinct: int = field(default=0)

    @property
    def draws(self) -> int:
        """How many draws (replays, counting a trajectory drawn twice twice)."""
        return len(self.tallies)


def run_evidence(tallies: Sequence[TrajectoryTally], run_id: str) -> Evidence:
    """A stored run's trajectories as i.i.d. draws from the population its suite stands for
    (:class:`~fidelity.gate.design.RunDesign`): in an order seeded by the run id, trajectory
    weight 1, step weight L / L_max."""
    ordered = sorted(tallies, key=lambda t: _order(run_id, t.trajectory_id))
    longest = max((t.steps for t in ordered), default=1) or 1
    return Evidence(
        tallies=ordered,
        step_weights=[t.steps / longest for t in ordered],
        trajectory_weights=[1.0] * len(ordered),
        distinct=len(ordered),
    )


def _order(run_id: str, trajectory_id: str) -> bytes:
    return hashlib.blake2b(f"{run_id}:{trajectory_id}".encode(), digest_size=8).digest()


def observations(
    evidence: Evidence,
    weight: Literal["step", "trajectory"],
    numerator: Callable[[TrajectoryTally], float],
    denominator: Callable[[TrajectoryTally], float],
) -> Observations:
    """The bounds' observations of one ratio over *evidence*'s draws."""
    import numpy as np

    from fidelity.gate.bounds import Observations

    tallies = evidence.tallies
    weights, bound = (
        (evidence.step_weights, evidence.max_step_weight)
        if weight == "step"
        else (evidence.trajectory_weights, evidence.max_trajectory_weight)
    )
    return Observations(
        weight=np.asarray(weights, dtype=float),
        numerator=np.asarray([numerator(t) for t in tallies], dtype=float),
        denominator=np.asarray([denominator(t) for t in tallies], dtype=float),
        max_weight=float(bound),
    )


def step_share(
    count: Callable[[TrajectoryTally], int], side: Side, unverifiable: bool = False
) -> Callable[[TrajectoryTally], float]:
    """A step rate's numerator: the share of a trajectory's steps that *count* counts, its
    unknown steps (infrastructure failures; every step of an unverifiable one, where
    *unverifiable* trajectories belong to the population: :func:`step_population`) read per
    *side*: drifting for ``upper``, faithful for ``lower``, left out for ``point``."""

    def share(t: TrajectoryTally) -> float:
        if t.unverifiable:
            return 1.0 if unverifiable and side == "upper" else 0.0
        if t.steps <= 0:
            return 1.0 if side == "upper" else 0.0
        known = count(t)
        if side == "upper":
            return min(1.0, (known + t.infra) / t.steps)
        if side == "lower":
            return known / t.steps
        compared = t.steps - t.infra
        return known / compared if compared > 0 else 0.0

    return share


def step_population(side: Side, unverifiable: bool = False) -> Callable[[TrajectoryTally], float]:
    """A step rate's denominator: the verifiable trajectories (an unverifiable one has its
    own limit), or every trajectory with *unverifiable* (the admitted data's claim, where a
    trajectory never replayed may be one); the point estimate: those with a compared step."""

    def member(t: TrajectoryTally) -> float:
        if side == "point":
            return float(not t.unverifiable and t.steps - t.infra > 0)
        return float(unverifiable or not t.unverifiable)

    return member


def depth_share(
    depth: int, side: Side
) -> tuple[Callable[[TrajectoryTally], float], Callable[[TrajectoryTally], float]]:
    """Numerator and denominator of the drift rate at *depth* (1-based)."""

    def reached(t: TrajectoryTally) -> float:
        return float(t.steps >= depth)

    def drifted(t: TrajectoryTally) -> float:
        if t.steps < depth:
            return 0.0
        unknown = t.unverifiable or depth in t.infra_depths
        if unknown:
            return 1.0 if side == "upper" else 0.0
        return float(depth in t.drift_depths)

    return drifted, reached


def as_array(values: Sequence[float]) -> np.ndarray:
    """*values* as a float array (numpy loaded here, when a gate needs it)."""
    import numpy as np

    return np.asarray(values, dtype=float)


def design_evidence(
    design: Design, draws: np.ndarray, tallies: Sequence[TrajectoryTally]
) -> Evidence:
    """The draws of a dataset gate (positions in draw order) with *tallies* aligned to them,
    weighted by *design*."""
    return Evidence(
        tallies=tallies,
        step_weights=design.step_weight(draws).tolist(),
        trajectory_weights=design.trajectory_weight(draws).tolist(),
        max_step_weight=design.max_step_weight,
        max_trajectory_weight=design.max_trajectory_weight,
        distinct=len(set(draws.tolist())),
    )


def population_evidence(tallies: Sequence[TrajectoryTally]) -> Evidence:
    """Every trajectory of a dataset, each replayed once: its rates are known (``exact``);
    step weight ``L / L̄`` so the weighted ratio of step shares is the dataset's step rate."""
    mean = sum(t.steps for t in tallies) / max(1, len(tallies)) or 1.0
    weights = [t.steps / mean for t in tallies]
    return Evidence(
        tallies=tallies,
        step_weights=weights,
        trajectory_weights=[1.0] * len(tallies),
        max_step_weight=max(weights, default=1.0) or 1.0,
        exact=True,
        distinct=len(tallies),
    )
