"""What every training export shares: the task prompt, fidelity's verdicts, Arrow.

:mod:`fidelity.formats.rl_export` (the RL stacks' rows) and
:mod:`fidelity.formats.sft_export` (whole trajectories) build on it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from fidelity.errors import UsageError
from fidelity.formats.jsonl import json_line
from fidelity.trajectory import Outcome, Step, Trajectory

PromptLayout = Literal["instruction", "conversation"]
DATA_SOURCE_META: Final = "data_source"
"""The ``meta`` key of a trajectory's data source (an imported record's ``data_source``)."""

EXTRA_INFO_FIELDS: Final = (
    "index",
    "trajectory_id",
    "domain",
    "source",
    "gate_run_id",
    "verified",
    "trust_horizon",
    "steps",
    "original_steps",
    "outcome_agreement",
    "outcome",
    "trust_mask",
    "turns",
    "env",
    "tools",
)
"""The fields of ``extra_info``, in order; every row has all of them (null where unknown)."""
OUTCOME_FIELDS: Final = ("success", "reward", "claimed_by", "answer")
"""The fields of ``extra_info.outcome`` (fidelity's :class:`~fidelity.trajectory.Outcome`)."""

TURN_FIELDS: Final = (
    "depth",
    "action_type",
    "action",
    "observation",
    "exit_code",
    "state",
    "score",
    "drift",
)
"""The fields of each entry of ``extra_info.turns``."""


class StepVerdict(BaseModel):
    """Fidelity's verdict on one simulated step (both null: the step was not verified)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    score: float | None = Field(default=None, ge=0, le=1)
    drift: bool | None = None


class TrajectoryFidelity(BaseModel):
    """What the gate knows about one trajectory's trustworthiness."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trust_horizon: int = Field(
        ge=0, description="turns trusted: the trajectory's own when verified, else the domain's"
    )
    verified: bool = Field(description="replayed for real and compared step by step")
    steps: list[StepVerdict] = Field(
        default_factory=list,
        description="per step of the trajectory, in order; missing ones are not verified",
    )
    outcome_agreement: bool | None = Field(
        default=None, description="whether the real replay's outcome matched (None: unknown)"
    )
    gate_run_id: str | None = None


class ExportSettings(BaseModel):
    """What every export format shares: the prompt, the system prompt, the data source."""

    model_config = ConfigDict(extra="forbid")

    prompt: PromptLayout = Field(
        default="instruction",
        description="instruction: the system prompt and the task; conversation: the turns too "
        "(RL formats)",
    )
    data_source: str | None = Field(
        default=None,
        min_length=1,
        description="None: the trajectory's meta.data_source, else fidelity/<domain>",
    )
    system_prompt: str | None = Field(
        default=None,
        min_length=1,
        description="the agent's system message where a trajectory has no system_prompt",
    )
    tokenizer: Path | None = Field(
        default=None,
        description="sft: a tokenizer folder (transformers, with a chat template) to add TRL's "
        "pre-tokenized input_ids and assistant_masks, untrusted turns masked out",
    )

    def needs_instruction(self, formats: Iterable[str]) -> bool:
        """Whether writing *formats* needs every trajectory's task: an RL format under the
        instruction prompt, or ``sft`` (whose first user turn is the task)."""
        chosen = set(formats)
        return "sft" in chosen or (self.prompt == "instruction" and bool(chosen - {"sft"}))


def data_source(trajectory: Trajectory, options: ExportSettings) -> str:
    """The row's data source: the options', else the trajectory's own, else ``fidelity/<domain>``."""
    own = trajectory.meta.get(DATA_SOURCE_META)
    if options.data_source is not None:
        return options.data_source
    return own if isinstance(own, str) and own else f"fidelity/{trajectory.domain.value}"


def task_of(trajectory: Trajectory) -> str:
    """The trajectory's task; a :class:`~fidelity.errors.UsageError` naming it when it has none."""
    task = trajectory.task_instruction
    if task is None:
        raise UsageError(
            f"trajectory {trajectory.id!r} has no instruction to prompt with: give it "
            "`instruction` (or meta.task_instruction), or export with --prompt conversation"
        )
    return task


def opening(
    trajectory: Trajectory, settings: ExportSettings, *, required: bool
) -> list[dict[str, str]]:
    """The system message (when known) and the first user message: the task and what the agent
    sees first. With *required*, a trajectory without a task is refused; else its first user
    message holds what is known (none when nothing is)."""
    messages = []
    system = trajectory.system_prompt or settings.system_prompt
    if system is not None:
        messages.append({"role": "system", "content": system})
    task = task_of(trajectory) if required else trajectory.task_instruction
    first = "\n\n".join(part for part in (task, trajectory.env.initial_observation) if part)
    if first:
        messages.append({"role": "user", "content": first})
    return messages


def extra_info(
    trajectory: Trajectory,
    fidelity: TrajectoryFidelity,
    steps: Sequence[Step],
    index: int,
    outcome: Outcome | None,
) -> dict[str, Any]:
    verdicts = fidelity.steps
    turns = [
        _turn(depth, step, verdicts[depth - 1] if depth <= len(verdicts) else StepVerdict())
        for depth, step in enumerate(steps, start=1)
    ]
    return {
        "index": index,
        "trajectory_id": trajectory.id,
        "domain": trajectory.domain.value,
        "source": trajectory.source,
        "gate_run_id": fidelity.gate_run_id,
        "verified": fidelity.verified,
        "trust_horizon": fidelity.trust_horizon,
        "steps": len(steps),
        "original_steps": len(trajectory.steps),
        "outcome_agreement": fidelity.outcome_agreement,
        "outcome": None if outcome is None else {f: getattr(outcome, f) for f in OUTCOME_FIELDS},
        "trust_mask": [int(depth <= fidelity.trust_horizon) for depth in range(1, len(steps) + 1)],
        "turns": turns,
        "env": json_line(trajectory.env.model_dump(mode="json", exclude_none=True)),
        "tools": None if trajectory.env.tools is None else json_line(trajectory.env.tools),
    }


def _turn(depth: int, step: Step, verdict: StepVerdict) -> dict[str, Any]:
    seen = step.observation
    return {
        "depth": depth,
        "action_type": step.action.type,
        "action": step.action.render(),
        "observation": None if seen is None else seen.text,
        "exit_code": None if seen is None else seen.exit_code,
        "state": None if seen is None or seen.state is None else json_line(seen.state),
        "score": verdict.score,
        "drift": verdict.drift,
    }


def arrow(doing: str = "writing") -> tuple[Any, Any]:
    """``(pyarrow, pyarrow.parquet)``, imported on first use (only Parquet needs them).

    Without pyarrow, a :class:`~fidelity.errors.UsageError` saying how to install it;
    *doing* (``writing`` or ``reading``) names what needed it.
    """
    try:
        return importlib.import_module("pyarrow"), importlib.import_module("pyarrow.parquet")
    except ImportError as exc:
        raise UsageError(
            f"{doing} Parquet needs pyarrow, which is not installed ({exc}): "
            "pip install 'fidelity[rl]'"
        ) from exc


def extra_info_type() -> Any:
    """The Arrow type of ``extra_info`` (:data:`EXTRA_INFO_FIELDS`), a ``pyarrow.StructType``."""
    pa, _ = arrow()
    outcome = pa.struct(
        [
            ("success", pa.bool_()),
            ("reward", pa.float64()),
            ("claimed_by", pa.string()),
            ("answer", pa.string()),
        ]
    )
    turn = pa.struct(
        [
            ("depth", pa.int32()),
            ("action_type", pa.string()),
            ("action", pa.string()),
            ("observation", pa.string()),
            ("exit_code", pa.int64()),
            ("state", pa.string()),
            ("score", pa.float64()),
            ("drift", pa.bool_()),
        ]
    )
    return pa.struct(
        [
            ("index", pa.int64()),
            ("trajectory_id", pa.string()),
            ("domain", pa.string()),
            ("source", pa.string()),
            ("gate_run_id", pa.string()),
            ("verified", pa.bool_()),
            ("trust_horizon", pa.int32()),
            ("steps", pa.int32()),
            ("original_steps", pa.int32()),
            ("outcome_agreement", pa.bool_()),
            ("outcome", outcome),
            ("trust_mask", pa.list_(pa.int8())),
            ("turns", pa.list_(turn)),
            ("env", pa.string()),
            ("tools", pa.string()),
        ]
    )
