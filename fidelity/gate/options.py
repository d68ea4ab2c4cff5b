"""The dataset gate's options, decisions and manifest: the data every pass hands on."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fidelity.compare import CompareConfig
from fidelity.compare.normalize import TRUNCATE_AT
from fidelity.defaults import DEFAULT_DB, SANDBOX_CONCURRENCY, STEP_TIMEOUT
from fidelity.errors import InputFormatError, UsageError
from fidelity.executors import ExecutorConfig
from fidelity.formats.rl_export import (
    ExportSettings,
    RLFormat,
    StepVerdict,
)
from fidelity.policy import Verdict
from fidelity.sandboxes import trajectory_backend
from fidelity.trajectory import Trajectory
from fidelity.trust import DatasetTrust, refuse_untrusted

DEFAULT_SAMPLE: Literal["auto"] = "auto"
"""Replay until every limit is decided (or ``max_replays`` are spent)."""
DEFAULT_MAX_REPLAYS = 1000


class GateOptions(BaseModel):
    """How a dataset is gated."""

    model_config = ConfigDict(extra="forbid")

    dataset: Path
    policy_path: Path
    output_dir: Path
    db: Path = Path(DEFAULT_DB)
    run_id: str | None = None
    sample: Annotated[int, Field(ge=1)] | Literal["auto"] | None = Field(
        default=DEFAULT_SAMPLE,
        description="draws of a fixed sample; auto: rounds until every limit is decided; "
        "None: every trajectory once",
    )
    max_replays: int = Field(
        default=DEFAULT_MAX_REPLAYS,
        ge=1,
        description="sample auto: the most distinct trajectories it replays",
    )
    max_risk: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="quarantine every trajectory never replayed whose drift risk (fitted on "
        "the replays, cross-fitted) is over this (None: the risk is only written)",
    )
    seed: int = 0
    cut_at_horizon: bool = False
    sandbox: str | None = None
    step_timeout: float = Field(default=STEP_TIMEOUT, gt=0)
    concurrency: int = Field(default=SANDBOX_CONCURRENCY, ge=1)
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
        "openrlhf, slime; sft: whole trajectories): admitted.<format>.parquet / .jsonl",
    )
    export: ExportSettings = Field(
        default_factory=ExportSettings,
        description="how the --to formats are written (prompt, data source, SFT tokenizer)",
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
    risk: float | None = Field(
        default=None, description="the trajectory's drift risk, from its simulated data alone"
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
    risk: Any = Field(
        default=None,
        description="the drift-risk model every line is scored with (a fidelity.risk "
        "CrossFit fitted on the replays, or the prior RiskModel)",
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
    steps_admitted_unverified: int = Field(
        default=0, description="admitted steps of trajectories the gate never replayed"
    )


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
    sample: int | Literal["auto"] | None
    max_replays: int
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
    confidence: float = Field(description="of every bound below (the policy's)")
    replayed_trajectories: int = Field(description="distinct trajectories replayed for real")
    draws: int = Field(description="draws of the sample (with replacement: a repeat counts)")
    limits: list[LimitClaim] = Field(description="per limit: the estimate, bounds and decision")
    admitted_claim: AdmittedClaim


class LimitClaim(BaseModel):
    """One limit of the policy on the dataset: its estimate, bounds and decision."""

    model_config = ConfigDict(extra="forbid")

    domain: str
    limit: str = Field(description="the check, e.g. 'drift_rate <= 0.1'")
    severity: Literal["critical", "warning"]
    estimate: float | None
    lower: float | None = Field(description="one-sided lower confidence bound")
    upper: float | None = Field(description="one-sided upper confidence bound")
    decision: Literal["pass", "fail", "undecided"] | None = Field(
        description="None: a count (compared steps), not a bound"
    )
    passed: bool
    more: int | None = Field(
        default=None, description="undecided: about how many more trajectories would decide it"
    )


class AdmittedClaim(BaseModel):
    """What the gate states about everything it admitted, replayed or not (cuts included):
    upper bounds, at ``confidence``, on the share of admitted steps that drift and that
    hallucinate (None: nothing admitted)."""

    model_config = ConfigDict(extra="forbid")

    trajectories: int
    steps: int
    drift_bound: float | None
    hallucination_bound: float | None
    statement: str = Field(description="the claim in one sentence")


class LineRules(BaseModel):
    """What every line of a dataset is checked against in pass 1, besides its format."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trust: DatasetTrust = Field(default_factory=DatasetTrust)
    sandbox: str | None = Field(default=None, description="--sandbox: the run's default backend")
    needs_instruction: bool = Field(
        default=False, description="the --to exports prompt with every trajectory's task"
    )

    def check(self, trajectory: Trajectory, path: str, line: int) -> None:
        """InputFormatError naming the line and field for a host command or site the
        operator did not allow, a world no backend here replays as it names it, or (when the
        exports need it) a trajectory without a task (a Terminal-Bench folder brings its
        own: ``task.yaml``'s instruction, required there)."""
        if (
            self.needs_instruction
            and trajectory.task_instruction is None
            and trajectory.env.task is None
        ):
            raise InputFormatError(
                path,
                line,
                "instruction",
                "missing: the --to exports prompt with the task (give the trajectory "
                "`instruction`, or export with --prompt conversation; sft needs it always)",
            )
        refuse_untrusted(trajectory, self.trust, path, line)
        try:
            trajectory_backend(trajectory.domain.value, trajectory.env, self.sandbox)
        except UsageError as exc:
            raise InputFormatError(path, line, f"{trajectory.id}.env", str(exc)) from exc


class ShardInfo(BaseModel):
    """One shard of a scanned dataset."""

    path: Path
    trajectories: int


class Scan(BaseModel):
    """What pass 1 learned about a dataset (no trajectory is kept: each one's length, 4 bytes,
    for the sampling design)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    domain: str
    trajectories: int
    lengths: array = Field(  # type: ignore[type-arg]
        exclude=True, description="steps of every trajectory, in dataset order ('I' array)"
    )
    world_models: list[dict[str, Any]]
    prompts_hashes: list[str]
    modes: list[str]
    sha256: str
    bytes_read: int
    shards: list[ShardInfo] = Field(description="every shard, in order, and its trajectories")
