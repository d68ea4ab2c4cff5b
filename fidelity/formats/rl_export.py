"""Trusted trajectories as training data for agent-RL stacks: verl, SkyRL, OpenRLHF, slime.

One row per trajectory, written as it comes (Parquet row groups for ``verl`` and ``skyrl``,
JSON lines for ``openrlhf`` and ``slime``) into a staged file beside the target that is
renamed into place when the writer closes: memory stays flat in the number of rows, and an
export that fails leaves nothing behind (an earlier file of that name stays as it was).

What a row holds:

- ``prompt``: chat messages (``{role, content}``) in the *agent's* view. (The world model's
  view, :func:`fidelity.worldmodels.prompting.build_messages`, is the other way round:
  actions are its user turns.) An agent-RL stack rolls its policy out from a prompt
  against an environment, so by default (``prompt="initial"``) it is the system prompt
  when one is given, then one user turn: the task (``meta["task_instruction"]``, else
  ``env.description``) and what the agent sees first (``env.initial_observation``), empty
  when neither is known. ``prompt="full"`` appends the exported turns (the action as an
  assistant message, the observation as a user message), for stacks that train on the
  recorded history.
- ``data_source``: the options' (a dataset's name), else ``fidelity/<domain>``; the
  domain is verl's ``ability`` and SkyRL's ``env_class``.
- the reward fields: ``ground_truth`` is the trajectory's :class:`~fidelity.model.Outcome`
  (``success``, ``reward``, ``claimed_by``) when one is given, else null.
- ``extra_info`` (the JSONL formats' metadata): fidelity's verdicts, a struct whose fields
  are the same in every row (:data:`EXTRA_INFO_FIELDS`; Parquet needs a stable schema, so
  free-form values such as the environment spec are JSON strings): ``trust_horizon``,
  ``trust_mask`` (per exported turn, 1 up to the trust horizon, 0 after: multiply a
  turn's loss by it to train only on trusted turns), ``turns`` (each exported step: the
  action, the simulated observation, its ``score`` and ``drift`` verdict, null where the
  step was not verified), ``outcome_agreement`` (null when unknown) and provenance.

The columns: verl ``data_source, prompt, ability, reward_model{style, ground_truth},
extra_info`` (and ``agent_name`` when one is given); SkyRL ``data_source, prompt,
env_class, reward_spec{method, ground_truth}, extra_info``; OpenRLHF one JSON object per
line under the user's ``input_key`` (the prompt), ``label_key`` (the ground truth) and
``metadata_key`` (``data_source`` and the ``extra_info`` fields); slime the same plus
``tool_key`` (the environment's tool definitions, null when it has none).

Only the first ``keep`` steps of a trajectory are exported (the gate's cut); with
``keep=0`` the row still carries the task prompt, with no turns.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fidelity.errors import UsageError
from fidelity.formats.jsonl import json_line, staged_file
from fidelity.model import Outcome, Step, Trajectory
from fidelity.worldmodels.prompting import TASK_META

RLFormat = Literal["verl", "skyrl", "openrlhf", "slime"]
FORMATS: Final[tuple[RLFormat, ...]] = ("verl", "skyrl", "openrlhf", "slime")
PARQUET_FORMATS: Final = frozenset({"verl", "skyrl"})

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
    "trust_mask",
    "turns",
    "env",
    "tools",
)
"""The fields of ``extra_info``, in order; every row has all of them (null where unknown)."""

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


class ExportOptions(BaseModel):
    """How trajectories become rows of one RL stack's dataset."""

    model_config = ConfigDict(extra="forbid")

    format: RLFormat
    data_source: str | None = Field(default=None, description="None: fidelity/<domain>")
    prompt: Literal["initial", "full"] = Field(
        default="initial", description="initial: system + task; full: the turns too"
    )
    system_prompt: str | None = Field(default=None, description="the agent's system message")
    reward: Literal["rule", "model"] = Field(
        default="rule", description="verl's reward_model.style; SkyRL's reward_spec.method"
    )
    agent_name: str | None = Field(default=None, description="verl's agent loop (a column)")
    input_key: str = Field(default="prompt", min_length=1)
    label_key: str = Field(default="label", min_length=1)
    tool_key: str = Field(default="tools", min_length=1, description="slime only")
    metadata_key: str = Field(default="metadata", min_length=1)
    row_group_rows: int = Field(default=1024, ge=1, description="Parquet: rows per row group")
    row_group_bytes: int = Field(
        default=32 << 20, ge=1, description="Parquet: text bytes that close a row group early"
    )

    @model_validator(mode="after")
    def _distinct_keys(self) -> ExportOptions:
        keys = [self.input_key, self.label_key, self.metadata_key]
        if self.format == "slime":
            keys.append(self.tool_key)
        if len(set(keys)) != len(keys):
            raise ValueError(f"the JSONL keys must differ: {', '.join(keys)}")
        return self


def suffix(fmt: RLFormat) -> str:
    """The file suffix of *fmt*'s rows: ``.parquet`` or ``.jsonl``."""
    return ".parquet" if fmt in PARQUET_FORMATS else ".jsonl"


def step_verdicts(rows: Iterable[tuple[int, float, bool, bool]]) -> list[StepVerdict]:
    """Verdicts per step from stored comparisons ``(depth, score, drift, infra_failure)``.

    A step whose comparison failed for infrastructure reasons has no score and counts as
    drift (as trust horizons count it). Depths with no comparison are not verified.
    """
    by_depth = {depth: (score, drift, failed) for depth, score, drift, failed in rows}
    deepest = max(by_depth, default=0)
    verdicts = []
    for depth in range(1, deepest + 1):
        found = by_depth.get(depth)
        if found is None:
            verdicts.append(StepVerdict())
        else:
            score, drift, failed = found
            verdicts.append(StepVerdict(score=None if failed else score, drift=drift or failed))
    return verdicts


def row(
    trajectory: Trajectory,
    fidelity: TrajectoryFidelity,
    options: ExportOptions,
    *,
    outcome: Outcome | None = None,
    keep: int | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """One trajectory as one row of *options.format* (the first *keep* steps; None: all)."""
    steps = _kept_steps(trajectory, fidelity, keep)
    prompt = _prompt(trajectory, steps, options)
    truth = None if outcome is None else outcome.model_dump()
    extra = _extra_info(trajectory, fidelity, steps, index)
    source = options.data_source or f"fidelity/{trajectory.domain.value}"
    domain = trajectory.domain.value
    if options.format == "verl":
        reward = {"style": options.reward, "ground_truth": truth}
        data: dict[str, Any] = {"data_source": source, "prompt": prompt, "ability": domain}
        data |= {"reward_model": reward, "extra_info": extra}
        return data if options.agent_name is None else {**data, "agent_name": options.agent_name}
    if options.format == "skyrl":
        spec = {"method": "rule" if options.reward == "rule" else "reward_model"}
        data = {"data_source": source, "prompt": prompt, "env_class": domain}
        return data | {"reward_spec": {**spec, "ground_truth": truth}, "extra_info": extra}
    line = {options.input_key: prompt, options.label_key: truth}
    if options.format == "slime":
        line[options.tool_key] = trajectory.env.tools
    line[options.metadata_key] = {"data_source": source, **extra}
    return line


def _kept_steps(
    trajectory: Trajectory, fidelity: TrajectoryFidelity, keep: int | None
) -> list[Step]:
    """The first *keep* steps (None: all); refuses a *keep* or verdicts that do not fit."""
    total = len(trajectory.steps)
    if len(fidelity.steps) > total:
        raise UsageError(
            f"trajectory {trajectory.id!r}: {len(fidelity.steps)} step verdicts for {total} steps"
        )
    kept = total if keep is None else keep
    if not 0 <= kept <= total:
        raise UsageError(f"trajectory {trajectory.id!r}: keep={keep} outside 0..{total}")
    return trajectory.steps[:kept]


def _prompt(
    trajectory: Trajectory, steps: Sequence[Step], options: ExportOptions
) -> list[dict[str, str]]:
    messages = []
    if options.system_prompt is not None:
        messages.append({"role": "system", "content": options.system_prompt})
    task = trajectory.meta.get(TASK_META) or trajectory.env.description or ""
    first = [str(task), trajectory.env.initial_observation or ""]
    messages.append({"role": "user", "content": "\n\n".join(part for part in first if part)})
    if options.prompt == "full":
        for step in steps:
            seen = step.observation.text if step.observation is not None else ""
            messages.append({"role": "assistant", "content": step.action.render()})
            messages.append({"role": "user", "content": seen})
    return messages


def _extra_info(
    trajectory: Trajectory, fidelity: TrajectoryFidelity, steps: Sequence[Step], index: int
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


def parquet_schema(fmt: RLFormat, agent_name: bool = False) -> Any:
    """The explicit Arrow schema of *fmt*'s rows (``verl`` or ``skyrl``), a ``pyarrow.Schema``.

    With *agent_name* (verl), the ``agent_name`` column is added.
    """
    pa, _ = arrow()
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    truth = pa.struct(
        [("success", pa.bool_()), ("reward", pa.float64()), ("claimed_by", pa.string())]
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
    extra = pa.struct(
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
            ("trust_mask", pa.list_(pa.int8())),
            ("turns", pa.list_(turn)),
            ("env", pa.string()),
            ("tools", pa.string()),
        ]
    )
    if fmt == "verl":
        reward = ("reward_model", pa.struct([("style", pa.string()), ("ground_truth", truth)]))
        fields = [("data_source", pa.string()), ("prompt", pa.list_(message))]
        fields += [("ability", pa.string()), reward, ("extra_info", extra)]
        return pa.schema(fields + ([("agent_name", pa.string())] if agent_name else []))
    if fmt == "skyrl":
        spec = ("reward_spec", pa.struct([("method", pa.string()), ("ground_truth", truth)]))
        fields = [("data_source", pa.string()), ("prompt", pa.list_(message))]
        return pa.schema([*fields, ("env_class", pa.string()), spec, ("extra_info", extra)])
    raise UsageError(f"{fmt} is written as JSONL, not Parquet")


class _Sink(Protocol):
    def add(self, data: dict[str, Any]) -> None: ...
    def finish(self) -> None: ...
    def discard(self) -> None: ...


class _JsonlSink:
    """Rows as JSON lines into a staged file."""

    def __init__(self, temp: Path) -> None:
        self.temp = temp
        self.handle = temp.open("w", encoding="utf-8")

    def add(self, data: dict[str, Any]) -> None:
        self.handle.write(json_line(data) + "\n")

    def finish(self) -> None:
        self.handle.close()

    def discard(self) -> None:
        self.handle.close()


class _ParquetSink:
    """Rows into a staged Parquet file, one row group per batch of rows or of text bytes."""

    def __init__(self, temp: Path, options: ExportOptions) -> None:
        self.pa, pq = arrow()
        self.schema = parquet_schema(options.format, options.agent_name is not None)
        self.writer = pq.ParquetWriter(str(temp), self.schema)
        self.rows: list[dict[str, Any]] = []
        self.weight = 0
        self.max_rows = options.row_group_rows
        self.max_bytes = options.row_group_bytes

    def add(self, data: dict[str, Any]) -> None:
        self.rows.append(data)
        self.weight += _text_bytes(data)
        if len(self.rows) >= self.max_rows or self.weight >= self.max_bytes:
            self._flush()

    def _flush(self) -> None:
        if self.rows:
            table = self.pa.Table.from_pylist(self.rows, schema=self.schema)
            self.writer.write_table(table, row_group_size=len(self.rows))
        self.rows = []
        self.weight = 0

    def finish(self) -> None:
        try:
            self._flush()
        finally:
            self.writer.close()

    def discard(self) -> None:
        self.rows = []
        self.writer.close()


def _text_bytes(data: dict[str, Any]) -> int:
    """About how much text a row holds (characters of its turns, prompt and environment)."""
    extra = data.get("extra_info") or {}
    size = sum(len(m["content"]) for m in data.get("prompt") or ())
    size += len(extra.get("env") or "")
    for turn in extra.get("turns") or ():
        size += len(turn["action"]) + len(turn["observation"] or "") + len(turn["state"] or "")
    return size


class RLWriter:
    """Rows for one RL stack, written one trajectory at a time into *path*.

    The file is staged beside *path* (a hidden ``.NAME.*.part``) and renamed into place
    by :meth:`close`; :meth:`abort` (or leaving the ``with`` block by an exception)
    removes it, so *path* is either the whole export or as it was before.
    """

    def __init__(self, path: str | os.PathLike[str], options: ExportOptions) -> None:
        self.path = Path(path)
        self.options = options
        self.rows = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.temp = staged_file(self.path, ".part")  # mode as the umask says
        os.close(fd)
        self._open = True
        try:
            self.sink: _Sink = (
                _ParquetSink(self.temp, options)
                if options.format in PARQUET_FORMATS
                else _JsonlSink(self.temp)
            )
        except BaseException:
            self.temp.unlink(missing_ok=True)
            raise

    def write(
        self,
        trajectory: Trajectory,
        fidelity: TrajectoryFidelity,
        outcome: Outcome | None = None,
        *,
        keep: int | None = None,
        index: int | None = None,
    ) -> None:
        """Add *trajectory* (its first *keep* steps; None: all) as one row.

        *index* is ``extra_info.index`` (its position in the dataset, say); by default the
        number of rows written before it.
        """
        where = self.rows if index is None else index
        data = row(trajectory, fidelity, self.options, outcome=outcome, keep=keep, index=where)
        self.sink.add(data)
        self.rows += 1

    def close(self) -> int:
        """Finish the file and rename it into place; returns the rows written."""
        if self._open:
            self._open = False
            try:
                self.sink.finish()
                os.replace(self.temp, self.path)
            except BaseException:
                self.temp.unlink(missing_ok=True)
                raise
        return self.rows

    def abort(self) -> None:
        """Drop the staged file: *path* stays as it was."""
        if self._open:
            self._open = False
            try:
                self.sink.discard()
            finally:
                self.temp.unlink(missing_ok=True)

    def __enter__(self) -> RLWriter:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def join_parts(fmt: RLFormat, parts: Sequence[Path], target: Path) -> int:
    """Concatenate part files of *fmt* (in order) into *target*; returns the rows joined.

    For a gate that writes one part per shard: JSONL parts are copied byte for byte,
    Parquet parts row group by row group (one in memory at a time). *target* is staged
    and renamed into place like a writer's file.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = staged_file(target, ".part")
    os.close(fd)
    try:
        rows = (
            _join_parquet(fmt, parts, temp) if fmt in PARQUET_FORMATS else _join_jsonl(parts, temp)
        )
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    return rows


def _join_jsonl(parts: Sequence[Path], temp: Path) -> int:
    rows = 0
    with temp.open("wb") as handle:
        for part in parts:
            with part.open("rb") as source:
                for line in source:
                    handle.write(line)
                    rows += 1
    return rows


def _join_parquet(fmt: RLFormat, parts: Sequence[Path], temp: Path) -> int:
    _, pq = arrow()
    schema = pq.read_schema(str(parts[0])) if parts else parquet_schema(fmt)
    rows = 0
    with pq.ParquetWriter(str(temp), schema) as writer:
        for part in parts:
            source = pq.ParquetFile(str(part))
            if not source.schema_arrow.equals(schema):
                raise UsageError(f"{part}: its Parquet schema differs from {parts[0]}'s")
            for group in range(source.num_row_groups):
                table = source.read_row_group(group)
                writer.write_table(table, row_group_size=table.num_rows)
                rows += table.num_rows
    return rows


def export(
    path: str | os.PathLike[str],
    items: Iterable[tuple[Trajectory, TrajectoryFidelity]],
    options: ExportOptions,
) -> int:
    """Write every ``(trajectory, fidelity)`` of *items* to *path* as one row; returns the rows."""
    with RLWriter(path, options) as writer:
        for trajectory, fidelity in items:
            writer.write(trajectory, fidelity)
    return writer.rows
