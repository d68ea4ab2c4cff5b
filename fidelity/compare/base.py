"""The comparator interface: ``(real, sim, context) -> StepComparison``."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field

from fidelity.trajectory import Action, Observation, Step


class CompareContext(BaseModel):
    """What the world model was shown before predicting this step.

    Entities found here are not hallucinations even when real lacks them (the
    model may be repeating stale state: that is reported as ``stale``).
    """

    # built on first use, like the interchange models: the store imports this module and
    # `fidelity runs` validates no comparison
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    action: Action
    history: list[Step] = Field(default_factory=list)
    env_description: str = ""
    depth: int = Field(default=1, ge=1)


class StepComparison(BaseModel):
    """The verdict on one (real, sim) pair of observations."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    score: float = Field(ge=0.0, le=1.0, description="1 = same observation after normalization")
    drift: bool
    infra_failure: bool = Field(
        default=False, description="one side failed (sandbox/model error): not a real mismatch"
    )
    exit_match: bool | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    hallucinations: list[str] = Field(
        default_factory=list, description="ranked, most telling first; what the verdict weighs"
    )
    omissions: list[str] = Field(default_factory=list, description="ranked like hallucinations")
    more_hallucinations: list[str] = Field(
        default_factory=list,
        description="those ranked after the ones a step names (a comparator that caps its "
        "list at the rubric's 10): machine outputs list every one (every_hallucination)",
    )
    more_omissions: list[str] = Field(
        default_factory=list, description="the omissions ranked after the named ones"
    )
    stale: list[str] = Field(
        default_factory=list, description="sim-only entities the model had been shown earlier"
    )
    normalizations: dict[str, int] = Field(
        default_factory=dict, description="rule name -> substitutions made (both sides)"
    )
    reasons: list[str] = Field(default_factory=list, description="why drift was flagged")

    @property
    def every_hallucination(self) -> list[str]:
        """Every hallucination in rank order: the named ones, then the rest."""
        return _joined(self.hallucinations, self.more_hallucinations)

    @property
    def every_omission(self) -> list[str]:
        """Every omission in rank order: the named ones, then the rest."""
        return _joined(self.omissions, self.more_omissions)


def _joined(first: list[str], more: list[str]) -> list[str]:
    if not more:
        return first
    return list(dict.fromkeys([*first, *more]))


class Comparator(Protocol):
    """Compares a real and a simulated observation of one domain."""

    domain: str
    threshold: float

    def compare(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> StepComparison:
        """Score *sim* against *real* for the step described by *context*."""
        ...
