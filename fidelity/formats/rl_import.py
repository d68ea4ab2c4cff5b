"""RL-stack records back into trajectories: ``fidelity import verl|skyrl|openrlhf|slime``.

The reverse of :mod:`fidelity.formats.rl_export`. verl and SkyRL rows are read from
Parquet with pyarrow one row group at a time; OpenRLHF and slime rows from JSON lines
(plain, ``.gz`` or ``.zst``) under the export's default keys: ``prompt``, ``label``,
``metadata`` and (slime) ``tools``. A source may be a file, a folder or a glob of them.

A row becomes one trajectory when it carries one:

- a row ``fidelity gate --to`` wrote: its ``extra_info`` (the JSONL formats'
  ``metadata``) holds the turns, each rebuilt from its ``action_type`` and rendered
  ``action``, with its (simulated) ``observation``, ``exit_code`` and ``state``; the
  environment (a JSON string), the id, the domain, the source and the outcome. The
  instruction comes back from the prompt's first user turn (less the initial observation
  the export put after it), the system prompt from its system message.
- a row from another producer whose ``prompt`` is a whole conversation (the export's
  ``prompt="conversation"`` layout): after the system and first user message (the task), each
  assistant message is an action and the user or tool message after it its observation.
  The domain is ``ability`` (verl) or ``env_class`` (SkyRL) when it names a fidelity
  domain, else a ``data_source`` of ``fidelity/<domain>``; a row naming neither is
  refused. The action's type follows the domain (terminal: a command, web: a browser
  action, os: code, android: AndroidWorld JSON, mcp/search/swe: a tool call written
  ``name(key=value, ...)``); a message that does not parse as one is a text action. The
  id is ``<file stem>-<row>``; the first user message is the instruction, a system message
  the system prompt.

A row with no turns (a bare task prompt) is refused: there is nothing to replay.

The data source (verl/SkyRL ``data_source``, OpenRLHF ``datasource``, the JSONL metadata's
``data_source`` or slime's ``source_name``) is kept in ``meta.data_source``, which a later
export writes back. The outcome is the one fidelity wrote (``extra_info.outcome``), else the
record's ground truth (verl ``reward_model.ground_truth``, SkyRL ``reward_spec.ground_truth``,
OpenRLHF/slime ``label``): a bool is ``success``, a number ``reward``, a string the
``answer`` (a text ground truth, kept as the claimed answer: whether the run succeeded stays
unknown until ``env.check`` decides), fidelity's own ``{success, reward, claimed_by}``
object is taken as it is; ``claimed_by`` is ``dataset`` where the record does not say. Bad
input is one :class:`~fidelity.errors.InputFormatError` naming the file, the row and the
field.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Final

from pydantic import ValidationError

from fidelity.errors import InputFormatError, UsageError
from fidelity.formats.dataset import shard_lines, shards
from fidelity.formats.jsonl import field_path, json_object, nested_json
from fidelity.formats.rl_export import (
    DATA_SOURCE_META,
    PARQUET_FORMATS,
    RL_FORMATS,
    RLFormat,
    arrow,
)
from fidelity.trajectory import (
    Action,
    AndroidAction,
    BrowserAction,
    CodeAction,
    CommandAction,
    Domain,
    EnvSpec,
    KeystrokesAction,
    Observation,
    Outcome,
    Step,
    TextAction,
    ToolAction,
    Trajectory,
)

RL_META: Final = "rl_record"
"""The ``meta`` key of the gate's verdicts on an imported fidelity row."""

_VERDICTS: Final = (
    "gate_run_id",
    "verified",
    "trust_horizon",
    "trust_mask",
    "outcome_agreement",
    "original_steps",
)
_ACTION_OF_DOMAIN: Final = {
    Domain.terminal: "command",
    Domain.web: "browser",
    Domain.os: "code",
    Domain.android: "android",
    Domain.mcp: "tool",
    Domain.search: "tool",
    Domain.swe: "tool",
}
_CALL_ERRORS = (SyntaxError, ValueError, TypeError, RecursionError, MemoryError)


class _Row:
    """One record, with where it came from and its fields under each stack's names."""

    def __init__(self, fmt: RLFormat, record: dict[str, Any], path: str, number: int) -> None:
        self.path, self.number = path, number
        self.record = record
        info_field = "extra_info" if fmt in PARQUET_FORMATS else "metadata"
        self.info_field = info_field
        self.info = record.get(info_field)
        self.domain_field: str | None
        if fmt in PARQUET_FORMATS:
            reward = "reward_model" if fmt == "verl" else "reward_spec"
            self.truth_field = f"{reward}.ground_truth"
            self.truth = self._object(reward).get("ground_truth")
            self.domain_field = "ability" if fmt == "verl" else "env_class"
            self.data_source = record.get("data_source")
        else:
            self.truth_field = "label"
            self.truth = record.get("label")
            self.domain_field = None
            info = self.info if isinstance(self.info, dict) else {}
            named = record.get("datasource") if fmt == "openrlhf" else info.get("source_name")
            self.data_source = info.get("data_source") or named
        self.tools = record.get("tools") if fmt == "slime" else None

    def error(self, field: str | None, reason: str) -> InputFormatError:
        """The one-line error naming this row and *field*."""
        return InputFormatError(self.path, self.number, field, reason)

    def _object(self, field: str) -> dict[str, Any]:
        value = self.record.get(field)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(field, f"expected an object, got {type(value).__name__}")
        return value


def read_rl(fmt: str, sources: Sequence[Path]) -> list[Trajectory]:
    """The trajectories of the RL-stack records in *sources* (files, folders or globs)."""
    if fmt not in RL_FORMATS:
        raise UsageError(f"unknown RL format {fmt!r}; formats: {', '.join(RL_FORMATS)}")
    rl_format: RLFormat = fmt
    trajectories = []
    for source in sources:
        for path in shards(source):
            for number, record in _records(rl_format, path):
                trajectories.append(to_trajectory(_Row(rl_format, record, str(path), number)))
    return trajectories


def _records(fmt: RLFormat, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(row number from 1, record)`` of one file."""
    if fmt in PARQUET_FORMATS:
        yield from _parquet_records(path)
        return
    for line in shard_lines(0, path):
        yield line.number, json_object(line.text, str(path), line.number)


def _parquet_records(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The rows of a Parquet file, one row group in memory at a time."""
    pa, pq = arrow("reading")
    try:
        source = pq.ParquetFile(str(path))
    except (pa.ArrowException, OSError) as exc:
        raise InputFormatError(
            str(path), None, None, f"not a readable Parquet file ({exc})"
        ) from exc
    if "prompt" not in source.schema_arrow.names:
        raise InputFormatError(str(path), None, "prompt", "missing column")
    number = 0
    for group in range(source.num_row_groups):
        try:
            rows = source.read_row_group(group).to_pylist()
        except (pa.ArrowException, OSError) as exc:
            raise InputFormatError(
                str(path), None, None, f"cannot read Parquet after row {number} ({exc})"
            ) from exc
        for record in rows:
            number += 1
            yield number, record


def to_trajectory(row: _Row) -> Trajectory:
    """The trajectory *row* carries; refuses a row with no turns."""
    if "prompt" not in row.record:
        raise row.error("prompt", "missing")
    messages = _messages(row, row.record["prompt"])
    outcome = _outcome(row)
    info = row.info
    if isinstance(info, dict) and "turns" in info and "trajectory_id" in info:
        trajectory = _from_turns(row, info, messages)
    else:
        trajectory = _from_messages(row, messages)
    return trajectory.model_copy(update={"outcome": outcome})


def _messages(row: _Row, prompt: Any) -> list[tuple[str, str]]:
    """The prompt's ``(role, content)`` pairs (a plain text prompt, OpenRLHF's: one user turn)."""
    if isinstance(prompt, str):
        return [("user", prompt)]
    if not isinstance(prompt, list):
        kind = type(prompt).__name__
        raise row.error("prompt", f"expected a list of {{role, content}} messages, got {kind}")
    messages = []
    for index, message in enumerate(prompt):
        if not isinstance(message, dict):
            raise row.error(f"prompt[{index}]", "expected a {role, content} message")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str):
            raise row.error(f"prompt[{index}].role", "expected a string")
        if not isinstance(content, str):
            raise row.error(f"prompt[{index}].content", "expected a string")
        messages.append((role, content))
    return messages


def _outcome(row: _Row) -> Outcome | None:
    """The outcome fidelity wrote (``extra_info.outcome``), else the record's ground truth as
    one (None: the record carries none)."""
    info = row.info
    if isinstance(info, dict) and "outcome" in info and "trajectory_id" in info:
        return _outcome_object(row, f"{row.info_field}.outcome", info["outcome"])
    truth = row.truth
    if truth is None:
        return None
    if isinstance(truth, bool):
        return Outcome(success=truth, claimed_by="dataset")
    if isinstance(truth, int | float):
        return Outcome(reward=float(truth), claimed_by="dataset")
    if isinstance(truth, str):
        return Outcome(answer=truth, claimed_by="dataset") if truth else None
    if not isinstance(truth, dict):
        raise row.error(
            row.truth_field,
            "expected a bool (success), a number (reward), a string (an answer) or "
            f"{{success, reward, claimed_by}}, got {type(truth).__name__}",
        )
    return _outcome_object(row, row.truth_field, truth)


def _outcome_object(row: _Row, field: str, value: Any) -> Outcome | None:
    """Fidelity's outcome object at *field* (None when it claims nothing)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise row.error(field, f"expected an object, got {type(value).__name__}")
    try:
        outcome = Outcome.model_validate({k: v for k, v in value.items() if v is not None})
    except ValidationError as exc:
        raise _invalid(row, field, exc) from exc
    if outcome.success is None and outcome.reward is None and outcome.answer is None:
        return None
    return outcome if outcome.claimed_by else outcome.model_copy(update={"claimed_by": "dataset"})


def _from_turns(row: _Row, info: dict[str, Any], messages: list[tuple[str, str]]) -> Trajectory:
    """A row the gate wrote: its turns, environment, id and domain from *info*."""
    where = row.info_field
    turns = info["turns"]
    if not isinstance(turns, list):
        raise row.error(f"{where}.turns", "expected a list of turns")
    if not turns:
        raise row.error(f"{where}.turns", "no turns (a bare task prompt): nothing to replay")
    env = _env(row, info.get("env"))
    steps = [_turn_step(row, f"{where}.turns[{i}]", turn) for i, turn in enumerate(turns)]
    meta: dict[str, Any] = {"imported_from": f"{row.path}:{row.number}"}
    if isinstance(row.data_source, str) and row.data_source:
        meta[DATA_SOURCE_META] = row.data_source
    meta[RL_META] = {k: info.get(k) for k in _VERDICTS}
    data = {
        "id": info["trajectory_id"],
        "domain": info.get("domain"),
        "source": info.get("source") or "suite",
        "instruction": _task(messages, env),
        "system_prompt": _system(messages),
        "meta": meta,
    }
    try:
        return Trajectory.model_validate({**data, "env": env, "steps": steps})
    except ValidationError as exc:
        loc = exc.errors()[0]["loc"]
        field = "trajectory_id" if loc[:1] == ("id",) else field_path(loc)
        raise row.error(f"{where}.{field}", exc.errors()[0]["msg"]) from exc


def _env(row: _Row, text: Any) -> EnvSpec:
    field = f"{row.info_field}.env"
    if text is None:
        return EnvSpec()
    if not isinstance(text, str):
        raise row.error(field, f"expected a JSON string, got {type(text).__name__}")
    try:
        return EnvSpec.model_validate(nested_json(text, row.path, row.number, field))
    except json.JSONDecodeError as exc:
        raise row.error(field, f"invalid JSON ({exc.msg} at column {exc.colno})") from exc
    except ValidationError as exc:
        raise _invalid(row, field, exc) from exc


def _turn_step(row: _Row, field: str, turn: Any) -> Step:
    """One exported turn as a step: its action rebuilt from ``action_type`` and ``action``."""
    if not isinstance(turn, dict):
        raise row.error(field, "expected an object")
    kind, text = turn.get("action_type"), turn.get("action")
    if not isinstance(kind, str) or not isinstance(text, str):
        raise row.error(field, "action_type and action must be strings")
    try:
        action = rebuild_action(kind, text)
    except (ValidationError, *_CALL_ERRORS) as exc:
        raise row.error(f"{field}.action", f"not a {kind} action ({_first(exc)})") from exc
    seen = turn.get("observation")
    if seen is None:
        return Step(action=action)
    state = turn.get("state")
    try:
        if state is not None:
            state = nested_json(state, row.path, row.number, f"{field}.state")
        observation = Observation(text=seen, exit_code=turn.get("exit_code"), state=state)
    except json.JSONDecodeError as exc:
        raise row.error(f"{field}.state", f"invalid JSON ({exc.msg})") from exc
    except ValidationError as exc:
        raise _invalid(row, field, exc) from exc
    except TypeError as exc:
        raise row.error(f"{field}.state", f"expected a JSON string ({_first(exc)})") from exc
    return Step(action=action, observation=observation)


def _task(messages: list[tuple[str, str]], env: EnvSpec) -> str | None:
    """The task the export put before the initial observation: the first user message, when
    it comes before any action, less the initial observation at its end."""
    first = next((content for role, content in messages if role != "system"), None)
    opening = next((role for role, _ in messages if role != "system"), None)
    if first is None or opening != "user":
        return None
    initial = env.initial_observation or ""
    task = first
    if initial and first.endswith(initial):
        task = first[: -len(initial)].removesuffix("\n\n")
    return task or None


def _system(messages: list[tuple[str, str]]) -> str | None:
    """The system prompt: the leading system messages (several joined by a blank line)."""
    system = []
    for role, content in messages:
        if role != "system":
            break
        system.append(content)
    return "\n\n".join(system) or None


def _from_messages(row: _Row, messages: list[tuple[str, str]]) -> Trajectory:
    """A row from another producer: actions and observations from a whole conversation."""
    start = 0
    while start < len(messages) and messages[start][0] == "system":
        start += 1
    opens = start < len(messages) and messages[start][0] == "user"
    turns = start + 1 if opens else start
    if turns >= len(messages):
        raise row.error("prompt", "no turns (a bare task prompt): nothing to replay")
    domain = _domain(row)
    steps = []
    index = turns
    while index < len(messages):
        role, content = messages[index]
        if role != "assistant":
            raise row.error(f"prompt[{index}].role", f"expected assistant (an action), got {role}")
        if not content.strip():
            raise row.error(f"prompt[{index}].content", "an empty action")
        after = messages[index + 1] if index + 1 < len(messages) else None
        seen = Observation(text=after[1]) if after and after[0] in ("user", "tool") else None
        steps.append(Step(action=_action_for(domain, content), observation=seen))
        index += 2 if seen is not None else 1
    meta: dict[str, Any] = {"imported_from": f"{row.path}:{row.number}"}
    if isinstance(row.data_source, str) and row.data_source:
        meta[DATA_SOURCE_META] = row.data_source
    env = EnvSpec(tools=row.tools) if isinstance(row.tools, list) and row.tools else EnvSpec()
    return Trajectory(
        id=f"{Path(row.path).stem}-{row.number}",
        domain=domain,
        instruction=(messages[start][1] or None) if opens else None,
        system_prompt=_system(messages),
        env=env,
        steps=steps,
        meta=meta,
    )


def _domain(row: _Row) -> Domain:
    """The domain a foreign row names: ``ability``/``env_class``, else ``fidelity/<domain>``."""
    known = {d.value for d in Domain}
    named = row.record.get(row.domain_field) if row.domain_field else None
    if isinstance(named, str) and named in known:
        return Domain(named)
    source = row.data_source
    if isinstance(source, str) and source.startswith("fidelity/") and source[9:] in known:
        return Domain(source[9:])
    fields = f"{row.domain_field} or data_source" if row.domain_field else "data_source"
    raise row.error(
        row.domain_field or "data_source",
        f"no fidelity domain: {fields} must name one of {', '.join(sorted(known))} "
        f"(got {named!r}, data_source {source!r}; data_source may be fidelity/<domain>)",
    )


def _action_for(domain: Domain, content: str) -> Action:
    """The action an assistant message holds in *domain*; a text action when it does not parse."""
    try:
        return rebuild_action(_ACTION_OF_DOMAIN[domain], content)
    except (ValidationError, *_CALL_ERRORS):
        return TextAction(text=content)


def rebuild_action(kind: str, text: str) -> Action:
    """The action of type *kind* whose ``render()`` is *text*.

    Lost on the way out (not rendered): a command's timeout and keystrokes' duration,
    which come back as their defaults.
    """
    if kind == "command":
        return CommandAction(command=text)
    if kind == "keystrokes":
        return KeystrokesAction(keys=text)
    if kind == "text":
        return TextAction(text=text)
    if kind == "browser":
        return BrowserAction(action=text)
    if kind == "code":
        return CodeAction(code=text)
    if kind == "android":
        fields = json.loads(text)
        if not isinstance(fields, dict):
            raise ValueError("expected a JSON object")
        return AndroidAction.model_validate({**fields, "type": "android"})
    if kind == "tool":
        return _tool_call(text)
    raise ValueError(f"unknown action type {kind!r}")


def _tool_call(text: str) -> ToolAction:
    """``name(key=value, ...)`` (values as Python literals, as ToolAction renders them)."""
    name, paren, rest = text.strip().partition("(")
    if not paren or not name.strip() or not rest.endswith(")"):
        raise ValueError("expected name(key=value, ...)")
    call = ast.parse(f"f({rest}", mode="eval").body
    if not isinstance(call, ast.Call) or call.args:
        raise ValueError("expected keyword arguments only")
    args = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            raise ValueError("expected keyword arguments only")
        args[keyword.arg] = ast.literal_eval(keyword.value)
    return ToolAction(tool=name.strip(), args=args)


def _invalid(row: _Row, prefix: str, exc: ValidationError) -> InputFormatError:
    first = exc.errors()[0]
    inner = field_path(first["loc"])
    return row.error(f"{prefix}.{inner}" if inner else prefix, first["msg"])


def _first(exc: Exception) -> str:
    """A one-line reason: a validation error's first message, else the error's first line."""
    if isinstance(exc, ValidationError):
        return str(exc.errors()[0]["msg"])
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
