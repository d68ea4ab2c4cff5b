"""Trusted trajectories as training data for agent-RL stacks: verl, SkyRL, OpenRLHF, slime.

One row per trajectory, written as it comes (Parquet row groups for ``verl`` and ``skyrl``,
JSON lines for ``openrlhf`` and ``slime``) into a staged file beside the target that is
renamed into place when the writer closes: memory stays flat in the number of rows, and an
export that fails leaves nothing behind (an earlier file of that name stays as it was).

What a row holds:

- ``prompt``: chat messages (``{role, content}``) in the *agent's* view. (The world model's
  view, :func:`fidelity.worldmodels.prompting.build_messages`, is the other way round:
  actions are its user turns.) An agent-RL stack rolls its policy out from a prompt
  against an environment, so by default (``prompt="instruction"``) it is the system prompt
  (the trajectory's ``system_prompt``, else the options') when there is one, then one user
  turn: the task (:attr:`~fidelity.trajectory.Trajectory.task_instruction`) and what the agent
  sees first (``env.initial_observation``). A trajectory without a task is refused there.
  ``prompt="conversation"`` appends the exported turns (the action as an assistant message,
  the observation as a user message), for stacks that train on the recorded history.
- ``data_source``: the options' (a dataset's name), else the trajectory's own
  (``meta.data_source``: an imported record's), else ``fidelity/<domain>``; the domain is
  verl's ``ability`` and SkyRL's ``env_class``. OpenRLHF reads it as ``datasource`` (a
  top-level key), slime as ``metadata.source_name``.
- the ground truth, where each stack's stock reward reads it (verl
  ``reward_model.ground_truth``, SkyRL ``reward_spec.ground_truth``, OpenRLHF's and slime's
  label key): a string (:func:`ground_truth`): the outcome's ``answer`` (a dataset's text
  answer) when it has one, else the claimed reward (``1.0`` for a claimed success, ``0.0``
  for a failure) written as a decimal, null when nothing is claimed. The outcome itself, as
  fidelity holds it, is ``extra_info.outcome``.
- ``extra_info`` (the JSONL formats' metadata): fidelity's verdicts, a struct whose fields
  are the same in every row (:data:`EXTRA_INFO_FIELDS`; Parquet needs a stable schema, so
  free-form values such as the environment spec are JSON strings): ``trust_horizon``,
  ``trust_mask`` (per exported turn, 1 up to the trust horizon, 0 after: multiply a
  turn's loss by it to train only on trusted turns), ``turns`` (each exported step: the
  action, the simulated observation, its ``score`` and ``drift`` verdict, null where the
  step was not verified), ``outcome_agreement`` (null when unknown), ``outcome`` and
  provenance.

The columns: verl ``data_source, prompt, ability, reward_model{style, ground_truth},
extra_info`` (and ``agent_name`` when one is given); SkyRL ``data_source, prompt,
env_class, reward_spec{method, ground_truth}, extra_info``; OpenRLHF one JSON object per
line under the user's ``input_key`` (the prompt), ``label_key`` (the ground truth),
``datasource`` and ``metadata_key`` (``data_source`` and the ``extra_info`` fields); slime
the prompt, the label, ``tool_key`` (the environment's tool definitions, null when it has
none) and the metadata (also ``source_name``). ``format="sft"`` writes whole trajectories
for fine-tuning instead (:mod:`fidelity.formats.sft_export`).

Only the first ``keep`` steps of a trajectory are exported (the gate's cut); with
``keep=0`` the row still carries the task prompt, with no turns.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal, Protocol

from pydantic import Field, model_validator

from fidelity.errors import UsageError
from fidelity.formats.export_base import DATA_SOURCE_META as DATA_SOURCE_META
from fidelity.formats.export_base import EXTRA_INFO_FIELDS as EXTRA_INFO_FIELDS
from fidelity.formats.export_base import OUTCOME_FIELDS as OUTCOME_FIELDS
from fidelity.formats.export_base import TURN_FIELDS as TURN_FIELDS
from fidelity.formats.export_base import ExportSettings as ExportSettings
from fidelity.formats.export_base import PromptLayout as PromptLayout
from fidelity.formats.export_base import StepVerdict as StepVerdict
from fidelity.formats.export_base import TrajectoryFidelity as TrajectoryFidelity
from fidelity.formats.export_base import arrow as arrow
from fidelity.formats.export_base import data_source as data_source
from fidelity.formats.export_base import extra_info as extra_info
from fidelity.formats.export_base import extra_info_type as extra_info_type
from fidelity.formats.export_base import opening as opening
from fidelity.formats.export_base import task_of as task_of
from fidelity.formats.jsonl import json_line, staged_file
from fidelity.trajectory import Outcome as Outcome
from fidelity.trajectory import Step, Trajectory

RLFormat = Literal["verl", "skyrl", "openrlhf", "slime", "sft"]
FORMATS: Final[tuple[RLFormat, ...]] = ("verl", "skyrl", "openrlhf", "slime", "sft")
"""Every format ``--to`` writes: the four RL stacks' rows, and ``sft`` (whole trajectories)."""
RL_FORMATS: Final[tuple[RLFormat, ...]] = ("verl", "skyrl", "openrlhf", "slime")
"""The RL stacks' rows (what ``fidelity import`` reads back)."""
PARQUET_FORMATS: Final = frozenset({"verl", "skyrl", "sft"})


class ExportOptions(ExportSettings):
    """How trajectories become rows of one stack's dataset."""

    format: RLFormat
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
        if self.format == "openrlhf":
            keys.append("datasource")
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
    prompt = prompt_messages(trajectory, steps, options)
    truth = ground_truth(outcome)
    extra = extra_info(trajectory, fidelity, steps, index, outcome)
    source = data_source(trajectory, options)
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
    if options.format == "sft":
        raise UsageError("sft rows are written by fidelity.formats.sft_export")
    line: dict[str, Any] = {options.input_key: prompt, options.label_key: truth}
    if options.format == "openrlhf":
        line["datasource"] = source  # OpenRLHF: data.get("datasource", "default")
        line[options.metadata_key] = {"data_source": source, **extra}
        return line
    line[options.tool_key] = trajectory.env.tools
    line[options.metadata_key] = {"data_source": source, "source_name": source, **extra}
    return line


def ground_truth(outcome: Outcome | None) -> str | None:
    """The ground truth a stack's reward reads, as a string: the outcome's ``answer``, else its
    claimed reward (a success ``1.0``, a failure ``0.0``) as a decimal; None without a claim."""
    if outcome is None:
        return None
    if outcome.answer is not None:
        return outcome.answer
    if outcome.reward is not None:
        return repr(float(outcome.reward))
    if outcome.success is not None:
        return "1.0" if outcome.success else "0.0"
    return None


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


def prompt_messages(
    trajectory: Trajectory, steps: Sequence[Step], options: ExportSettings
) -> list[dict[str, str]]:
    """The row's prompt: the opening (:func:`opening`), and under ``prompt="conversation"``
    each step's action (an assistant message) and observation (a user message)."""
    conversation = options.prompt == "conversation"
    messages = opening(trajectory, options, required=not conversation)
    if conversation:
        for step in steps:
            seen = step.observation.text if step.observation is not None else ""
            messages.append({"role": "assistant", "content": step.action.render()})
            messages.append({"role": "user", "content": seen})
    return messages


def parquet_schema(fmt: RLFormat, agent_name: bool = False) -> Any:
    """The explicit Arrow schema of *fmt*'s rows (``verl`` or ``skyrl``), a ``pyarrow.Schema``.

    With *agent_name* (verl), the ``agent_name`` column is added.
    """
    pa, _ = arrow()
    if fmt == "sft":
        raise UsageError("the sft schema is fidelity.formats.sft_export.sft_schema")
    message = pa.struct([("role", pa.string()), ("content", pa.string())])
    truth = pa.string()
    extra = extra_info_type()
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


def schema_for(options: ExportOptions) -> Any:
    """The Parquet schema of *options*' rows (verl, SkyRL or sft)."""
    if options.format == "sft":
        from fidelity.formats.sft_export import sft_schema

        return sft_schema(tokenized=options.tokenizer is not None)
    return parquet_schema(options.format, options.agent_name is not None)


class _ParquetSink:
    """Rows into a staged Parquet file, one row group per batch of rows or of text bytes."""

    def __init__(self, temp: Path, options: ExportOptions) -> None:
        self.pa, pq = arrow()
        self.schema = schema_for(options)
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
    """About how much text a row holds (characters of its turns, messages and environment)."""
    extra = data.get("extra_info") or {}
    size = sum(len(m["content"]) for m in data.get("prompt") or ())
    size += sum(len(m["content"]) for m in data.get("trajectory") or ())
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
            self.sft = None
            if options.format == "sft":
                from fidelity.formats.sft_export import SftRows

                self.sft = SftRows(options)
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
        number of rows written before it. An ``sft`` export writes no row for a trajectory
        with no trusted action.
        """
        where = self.rows if index is None else index
        if self.sft is None:
            data = row(trajectory, fidelity, self.options, outcome=outcome, keep=keep, index=where)
        else:
            steps = _kept_steps(trajectory, fidelity, keep)
            extra = extra_info(trajectory, fidelity, steps, where, outcome)
            found = self.sft.row(trajectory, fidelity, steps, extra)
            if found is None:
                return
            data = found
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
    schema = pq.read_schema(str(parts[0])) if parts else schema_for(ExportOptions(format=fmt))
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
