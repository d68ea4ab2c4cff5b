"""Aggregates of one stored run: what the report, the gate and ``--json`` show."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from fidelity.worldmodels.metrics import Controllability, SampleSpread

DEFAULT_HORIZON_LIMIT = 0.10
"""The drift rate a run's trust horizon allows at every depth, where no policy sets one."""


class _Row(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunInfo(_Row):
    """Provenance of one run."""

    run_id: str
    started_at: datetime
    finished_at: datetime | None = None
    status: str  # running | done | interrupted | failed
    domain: str
    sandbox: str
    world_model: dict[str, Any] = Field(default_factory=dict)
    mode: str
    suite: str
    code_version: str
    config: dict[str, Any] = Field(default_factory=dict)


class Totals(_Row):
    """Whole-run figures. Rates are over compared steps (infra failures excluded)."""

    trajectories: int
    steps: int
    compared_steps: int
    infra_failures: int
    drift_rate: float | None = Field(description="None: nothing was compared")
    hallucination_rate: float | None = Field(
        description="share of compared steps with at least one hallucinated entity (None: "
        "nothing was compared)"
    )
    mean_score: float | None = Field(description="None: nothing was compared")
    trust_horizon: int | None = Field(
        description="largest depth d with drift rate <= the horizon limit at every depth <= d "
        "(None: nothing was compared)"
    )
    horizon_limit: float
    mode: str | None = None  # the mode these figures are about when the run holds several
    unverifiable: int = Field(
        default=0, description="trajectories whose environment could not be had (counted apart)"
    )
    unverifiable_steps: int = Field(
        default=0, description="their steps (within infra_failures; kept out of its rate)"
    )


class UnverifiableRow(_Row):
    """A trajectory whose environment could not be had, and why."""

    trajectory_id: str
    domain: str
    reason: str


class DepthRow(_Row):
    """Per trajectory depth (1-based step index)."""

    depth: int
    steps: int
    drift_rate: float
    hallucination_rate: float
    mean_score: float


class ActionRow(_Row):
    """Per action type (command name such as ``ls`` or ``git log``)."""

    action_name: str
    steps: int
    drift_rate: float
    hallucination_rate: float
    mean_score: float


class WorstStep(_Row):
    """One of the lowest-scoring steps, with both observations for side-by-side view."""

    trajectory_id: str
    depth: int
    action: str
    action_name: str
    score: float
    drift: bool
    reasons: list[str]
    real_text: str
    sim_text: str
    real_exit_code: int | None
    sim_exit_code: int | None
    hallucinations: list[str]
    omissions: list[str]
    normalizations: dict[str, int]


class Estimate(_Row):
    """A rate or mean with its bootstrap 95% interval (resampling whole trajectories)."""

    value: float
    low: float
    high: float


class Cell(_Row):
    """Figures of one analysis cell: domain × mode × (depth or action type)."""

    domain: str
    mode: str
    depth: int | None = None
    action_name: str | None = None
    steps: int  # compared steps (infra failures excluded)
    trajectories: int
    drift: Estimate
    hallucination: Estimate
    score: Estimate
    too_few: bool  # fewer compared steps than the analysis minimum: do not conclude


class HorizonRow(_Row):
    """Trust horizon of one domain × mode, and how far single trajectories stay faithful."""

    domain: str
    mode: str
    trust_horizon: int  # from the per-depth drift rates (see ``trust_horizon``)
    trajectories: int
    mean_trajectory_horizon: float  # steps before a trajectory's first drift, averaged
    median_trajectory_horizon: float
    never_drifted: int  # trajectories with no drifting step at all


class EntityRow(_Row):
    """Hallucinated and omitted entities of one kind (the prefix before ``:``)."""

    kind: str
    hallucinations: int
    steps_with_hallucination: int
    omissions: int


class NormalizationRow(_Row):
    """How often one normalization rule fired."""

    rule: str
    count: int
    steps: int


class TrendRow(_Row):
    """One run of the same domain, for the trend across runs."""

    run_id: str
    started_at: datetime
    world_model: str
    code_version: str
    mode: str
    steps: int
    drift_rate: float
    hallucination_rate: float
    mean_score: float


class ModeSimulation(_Row):
    """The simulated side of one mode: its samples' spread and its controllability."""

    mode: str
    sampling: SampleSpread | None = None  # None: one sample per step
    controllability: Controllability | None = None  # None: no step carries a control


class JudgeFigures(_Row):
    """The LLM judge's judgments of a run (``fidelity judge``) beside the metrics."""

    steps: int  # judged steps with a comparison (judge failures left out)
    spearman: float | None  # rho(judge overall, deterministic score); None below 3 steps
    dimensions: dict[str, float | None]  # rho per AgentWorldBench dimension
    mean_scores: dict[str, float]  # 0-100 per dimension, and overall


class OutcomeTable(_Row):
    """Claimed (simulated or labelled) outcome × real outcome, over trajectories with both."""

    agree_success: int = 0  # claimed success, real success
    false_success: int = 0  # claimed success, real failure
    false_failure: int = 0  # claimed failure, real success
    agree_failure: int = 0  # claimed failure, real failure


class OutcomeCase(_Row):
    """One trajectory whose claimed outcome the real one contradicts (or could not check)."""

    trajectory_id: str
    first_drift: int | None  # depth of its first drifting step (None: none drifted)
    real_exit_code: int | None = None
    reason: str | None = None  # why the real outcome is unverifiable


class HorizonAgreement(_Row):
    """Outcome agreement among trajectories whose trust horizon covers every step, and the rest."""

    covered: int  # trajectories (with both outcomes) that never drifted
    covered_agreement: float | None
    cut: int  # those that drifted somewhere
    cut_agreement: float | None


class DomainOutcomes(_Row):
    """Claimed against real outcomes of one domain of a run (see :mod:`fidelity.outcomes`)."""

    domain: str
    trajectories: int  # with a claimed or a real outcome
    claimed: int  # with a claimed success or failure
    checked: int  # with a real outcome (verified or not)
    unverifiable: int  # real outcome unverifiable
    claimed_unverifiable: int = Field(
        default=0, description="claimed outcomes whose real check could not run (unverifiable)"
    )
    table: OutcomeTable
    agreement: Estimate | None  # share of the table's trajectories that agree
    kappa: float | None  # Cohen's kappa of the table (None: undefined)
    kappa_interval: Estimate | None = None  # kappa with its bootstrap 95% interval
    false_success_rate: Estimate | None  # false successes / claimed successes in the table
    false_failure_rate: Estimate | None  # false failures / claimed failures in the table
    false_successes: list[OutcomeCase] = Field(default_factory=list)
    unverifiable_cases: list[OutcomeCase] = Field(default_factory=list)
    horizon: HorizonAgreement


class CauseExample(_Row):
    """One drifting step of a cause, and the reason or entity that shows it."""

    trajectory_id: str
    depth: int
    detail: str


class DepthCount(_Row):
    """Drifting steps of a cause at one depth."""

    depth: int
    steps: int


class CauseRow(_Row):
    """The drifting steps of one domain with one cause (:mod:`fidelity.analysis.causes`)."""

    domain: str
    cause: str
    steps: int
    share: float = Field(description="of the domain's drifting steps")
    examples: list[CauseExample] = Field(description="the first three, in trajectory order")
    by_depth: list[DepthCount] = Field(description="its steps per depth")


class RunSummary(_Row):
    """Everything a report or gate needs about one run."""

    run: RunInfo
    totals: Totals
    by_depth: list[DepthRow]
    by_action: list[ActionRow]
    worst: list[WorstStep]
    cells: list[Cell] = Field(default_factory=list)  # domain × mode × depth
    action_cells: list[Cell] = Field(default_factory=list)  # domain × mode × action type
    horizons: list[HorizonRow] = Field(default_factory=list)
    entities: list[EntityRow] = Field(default_factory=list)
    normalizations: list[NormalizationRow] = Field(default_factory=list)
    trend: list[TrendRow] = Field(default_factory=list)
    simulation: list[ModeSimulation] = Field(default_factory=list)
    judge: JudgeFigures | None = None  # None: the run was not judged
    outcomes: list[DomainOutcomes] = Field(default_factory=list)  # per domain; [] without any
    unverifiable: list[UnverifiableRow] = Field(default_factory=list)  # [] without any
    causes: list[CauseRow] = Field(
        default_factory=list,
        description="drifting steps by cause, per domain (the headline mode); their steps add "
        "up to the drifting steps",
    )
    min_cell_steps: int = 30
