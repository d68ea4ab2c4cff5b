"""Figures about simulated observations themselves: sample spread and controllability.

- **Spread vs distance to real.** With several samples per step, the mean
  pairwise text distance among the samples (how unsure the simulator is) is set
  against the mean distance of each sample to the real observation (how wrong
  it is). A simulator whose spread is far below its distance is confidently
  wrong. The text distance is ``1 - normalized Indel similarity`` (rapidfuzz
  ``fuzz.ratio / 100``) on the raw texts: simple, domain-independent, and the
  same for both figures.
- **Controllability.** Steps carrying a :class:`~fidelity.trajectory.Control` with
  a check (``expect`` or ``exit_code``) count as obeyed or not; this is kept
  apart from fidelity, since an obeyed control is by design unlike reality.
"""

from __future__ import annotations

from itertools import combinations
from statistics import fmean

from pydantic import BaseModel, ConfigDict, Field
from rapidfuzz import fuzz

from fidelity.trajectory import Observation, Trajectory


class SampleSpread(BaseModel):
    """Spread among a simulator's samples against its distance to real (0 = same text)."""

    model_config = ConfigDict(extra="forbid")

    samples: int = Field(description="samples drawn per step")
    steps: int = Field(description="steps with at least two usable samples")
    spread: float | None = Field(description="mean pairwise distance among samples")
    distance_to_real: float | None = Field(description="mean distance of a sample to real")
    ratio: float | None = Field(description="spread / distance_to_real (low: confidently wrong)")


class Controllability(BaseModel):
    """How often simulated observations obeyed their step's control instruction."""

    model_config = ConfigDict(extra="forbid")

    controlled_steps: int = Field(description="predictions of steps that carry a control")
    judged: int = Field(description="of those, with a check and a usable prediction")
    obeyed: int
    rate: float | None = Field(description="obeyed / judged")


def text_distance(a: str, b: str) -> float:
    """``1 - fuzz.ratio / 100``: 0 for equal texts, 1 for nothing in common."""
    return 1.0 - fuzz.ratio(a, b) / 100.0


def sample_spread(
    samples: list[list[Observation]], real: list[Observation | None] | None = None
) -> tuple[list[float], list[float]]:
    """Per-step spread among *samples* (``samples[k][i]``: sample k of step i) and distance to real.

    Failed samples are left out; a step with fewer than two usable samples has
    no spread; a step without a usable real observation has no distance.
    """
    spreads: list[float] = []
    distances: list[float] = []
    for index in range(len(samples[0]) if samples else 0):
        texts = [s[index].text for s in samples if not s[index].failed]
        if len(texts) >= 2:
            spreads.append(fmean(text_distance(a, b) for a, b in combinations(texts, 2)))
        truth = real[index] if real is not None else None
        if texts and truth is not None and not truth.failed:
            distances.append(fmean(text_distance(t, truth.text) for t in texts))
    return spreads, distances


def summarize_spread(n_samples: int, spreads: list[float], distances: list[float]) -> SampleSpread:
    """The mean figures of :func:`sample_spread` over many steps."""
    spread = fmean(spreads) if spreads else None
    distance = fmean(distances) if distances else None
    ratio = spread / distance if spread is not None and distance else None
    return SampleSpread(
        samples=n_samples, steps=len(spreads), spread=spread, distance_to_real=distance, ratio=ratio
    )


def control_outcomes(trajectory: Trajectory, sim: list[Observation]) -> list[bool | None]:
    """For each controlled step of *trajectory*: obeyed, not obeyed, or None (not judged)."""
    return [
        step.control.obeyed(observation)
        for step, observation in zip(trajectory.steps, sim, strict=True)
        if step.control is not None
    ]


def summarize_controls(outcomes: list[bool | None]) -> Controllability:
    """Counts and rate of :func:`control_outcomes` over many steps."""
    judged = [o for o in outcomes if o is not None]
    obeyed = sum(judged)
    return Controllability(
        controlled_steps=len(outcomes),
        judged=len(judged),
        obeyed=obeyed,
        rate=obeyed / len(judged) if judged else None,
    )
