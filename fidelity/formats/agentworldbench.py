"""AgentWorldBench JSONL: import its samples and predictions, export predictions for its judge.

The benchmark has one file per domain, ``{domain}_test.jsonl`` (a folder import
reads only those: ``predictions.jsonl`` beside them is not a sample file). A
sample has ``task`` (the plain domain name), ``id`` (an integer, unique only
within its domain file), ``prompt`` (one string per turn up to the evaluated
one: a ``### Turn N`` header, on turn 1 ``**Task Instruction:**`` and
``**Current State:**``, then ``**Action:**`` and a fenced JSON block; the last
also carries the benchmark's suffix), ``response`` (the ground-truth
observations, each starting with ``**Environment Observation:**``),
``system_str``, ``turn_idx`` (1-based, the evaluated turn) and ``total_turns``.

One sample becomes one trajectory of ``turn_idx`` steps with id
``{domain}-{id}-t{turn_idx}``; a repeated (domain, id, turn_idx) keeps its
later copies under ``…-dup2``, ``…-dup3`` and is reported. The task
instruction goes to ``instruction``, the initial state to
``env.initial_observation``, and each turn's action to a structured action
where its JSON has a known shape (else a :class:`TextAction` holding the
JSON as written). The whole record stays in ``meta["agentworldbench"]`` so
simulation rebuilds the reference script's messages byte for byte. A record that
carries ``success`` or ``reward`` (the published samples do not) gives the
trajectory's claimed ``outcome``.

A record with a ``gen`` field (the reference script's ``predictions.jsonl`` or
``judged.jsonl``) imports as a *simulated* recording: its evaluated turn holds
the prediction parsed as the benchmark parses it (an empty ``gen`` is a failed
request, an infrastructure failure), the earlier turns hold nothing (only the
evaluated turn was predicted), so ``fidelity diff gt.jsonl preds.jsonl`` scores
the reference script's predictions.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from fidelity.duckdb_files import refuse_replacing_database
from fidelity.errors import InputFormatError, MalformedPredictionError, NotFoundError
from fidelity.formats.jsonl import json_line, nested_json, read_trajectories, split_lines
from fidelity.trajectory import (
    Action,
    AndroidAction,
    BrowserAction,
    CodeAction,
    Domain,
    KeystrokesAction,
    Observation,
    Outcome,
    Step,
    TextAction,
    ToolAction,
    Trajectory,
)
from fidelity.worldmodels.prompting import (
    AWB_META,
    CLOSE_TAG,
    EVALUATED_TURN,
    OPEN_TAG,
    parse_prediction,
)

SAMPLE_GLOB = "*_test.jsonl"
_MARKER = re.compile(r"\A\s*\*\*Environment Observation:\*\*[ \t]*\n?")
_TASK = re.compile(
    r"\*\*Task Instruction:\*\*[ \t]*\n?(.*?)(?=\n[ \t]*\*\*(?:Current State|Action):\*\*|\Z)", re.S
)
_STATE = re.compile(r"\*\*Current State:\*\*[ \t]*\n?(.*?)(?=\n[ \t]*\*\*Action:\*\*|\Z)", re.S)
_ACTION = re.compile(r"\*\*Action:\*\*[ \t]*\n+```[\w-]*[ \t]*\n(.*?)\n[ \t]*```", re.S)
_REQUIRED = ("task", "id", "prompt", "response", "system_str", "turn_idx")
#: tmux key names in terminal keystroke lists, as the bytes a terminal receives.
_TMUX_KEYS = {"Enter": "\n", "C-m": "\n", "Tab": "\t", "Escape": "\x1b", "BSpace": "\x7f"}
_TMUX_CTRL = re.compile(r"\AC-([a-z])\Z")


class ExportResult(BaseModel):
    """What an export wrote."""

    model_config = ConfigDict(extra="forbid")

    output: str
    samples: int
    failed: int
    skipped: int


class AwbImport(BaseModel):
    """The trajectories of an import and the repeated samples it had to rename."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    trajectories: list[Trajectory]
    duplicates: list[str] = Field(
        default_factory=list, description="'file:line: id kept as new-id' for each repeated sample"
    )


class PromptParts(BaseModel):
    """One turn prompt split into its parts (``None``: the part is not there)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    instruction: str | None
    state: str | None
    action: str | None


def read_agentworldbench(source: str | os.PathLike[str]) -> list[Trajectory]:
    """Trajectories of every sample in *source* (see :func:`import_agentworldbench`)."""
    return import_agentworldbench([Path(source)]).trajectories


def import_agentworldbench(sources: list[Path]) -> AwbImport:
    """Samples (or predictions) of *sources*: ``*_test.jsonl`` files or folders of them.

    Raises :class:`InputFormatError` naming the file, line and field of the
    first bad sample, :class:`NotFoundError` for a missing source or a folder
    without sample files.
    """
    files = [path for source in sources for path in _files(Path(source))]
    seen: dict[str, int] = {}
    result = AwbImport(trajectories=[])
    for path in files:
        for number, record in _records(path):
            try:
                trajectory = _trajectory(path, number, record)
            except ValidationError as exc:
                first = exc.errors()[0]
                field = ".".join(str(p) for p in first["loc"]) or None
                raise InputFormatError(str(path), number, field, first["msg"]) from exc
            count = seen.get(trajectory.id, 0) + 1
            seen[trajectory.id] = count
            if count > 1:
                new_id = f"{trajectory.id}-dup{count}"
                result.duplicates.append(f"{path}:{number}: {trajectory.id} kept as {new_id}")
                trajectory = trajectory.model_copy(update={"id": new_id})
            result.trajectories.append(trajectory)
    return result


def _files(source: Path) -> list[Path]:
    if source.is_dir():
        files = sorted(source.glob(SAMPLE_GLOB))
        if not files:
            raise NotFoundError(f"{source}: no {SAMPLE_GLOB} files (AgentWorldBench sample files)")
        return files
    if source.is_file():
        return [source]
    raise NotFoundError(f"{source}: no such file or directory")


def _records(path: Path) -> list[tuple[int, dict[str, Any]]]:
    records = []
    for number, line in enumerate(split_lines(path.read_text(encoding="utf-8-sig")), start=1):
        if not line.strip():
            continue
        try:
            record = nested_json(line, str(path), number)
        except json.JSONDecodeError as exc:
            raise InputFormatError(str(path), number, None, f"invalid JSON ({exc.msg})") from exc
        if not isinstance(record, dict):
            raise InputFormatError(str(path), number, None, "expected a JSON object")
        _check(record, str(path), number)
        records.append((number, record))
    return records


def _check(record: dict[str, Any], path: str, number: int) -> None:
    for field in _REQUIRED:
        if field not in record:
            raise InputFormatError(path, number, field, "missing")
    for field in ("prompt", "response"):
        value = record[field]
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputFormatError(path, number, field, "must be a list of strings")
    if not isinstance(record["system_str"], str):
        raise InputFormatError(path, number, "system_str", "must be a string")
    if isinstance(record["id"], bool) or not isinstance(record["id"], int | str):
        raise InputFormatError(path, number, "id", "must be an integer or a string")
    turn = record["turn_idx"]
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise InputFormatError(path, number, "turn_idx", "must be an integer >= 1")
    for field in ("prompt", "response"):
        if len(record[field]) < turn:
            raise InputFormatError(
                path, number, field, f"has {len(record[field])} turns, turn_idx is {turn}"
            )
    if "gen" in record and not isinstance(record["gen"], str | None):
        raise InputFormatError(path, number, "gen", "must be a string")
    domain = str(record["task"]).rsplit("/", 1)[-1]
    if domain not in {d.value for d in Domain}:
        known = ", ".join(d.value for d in Domain)
        raise InputFormatError(path, number, "task", f"unknown domain {domain!r} (known: {known})")


def split_prompt(prompt: str) -> PromptParts:
    """The task instruction, current state and action JSON text of one turn prompt."""
    task = _TASK.search(prompt)
    state = _STATE.search(prompt)
    action = _ACTION.search(prompt)
    return PromptParts(
        instruction=task.group(1).strip() if task else None,
        state=state.group(1).strip("\n") if state else None,
        action=action.group(1) if action else None,
    )


def benchmark_suffix(record: dict[str, Any]) -> str:
    """The suffix the benchmark appends to the evaluated prompt (``""`` when not found)."""
    last = record["prompt"][int(record["turn_idx"]) - 1]
    current = record.get("current_prompt")
    if isinstance(current, str) and current and last.startswith(current):
        return str(last[len(current) :])
    return ""


def to_action(domain: str, action_text: str | None, prompt: str) -> Action:
    """The structured action a turn's JSON describes, else a :class:`TextAction` of it.

    terminal: a list of ``{"keystrokes", "duration"}`` → one keystrokes action
    (tmux key names as the bytes they send, durations summed); tool domains
    (mcp, search, swe): ``{"name"/"tool", "arguments"/"args"}`` → a tool call;
    os: a code string → code; web: a call string → browser; android: an
    AndroidWorld ``JSONAction`` → android.
    """
    text = action_text if action_text is not None else prompt
    try:
        data = nested_json(text, "", None) if action_text is not None else None
        action = _structured(domain, data)
    except (json.JSONDecodeError, ValidationError, TypeError, ValueError):  # too deep included
        action = None  # not a structured action: the text is the action
    return action if action is not None else TextAction(text=text if text.strip() else " ")


def _structured(domain: str, data: Any) -> Action | None:
    if domain == "terminal" and isinstance(data, list) and data:
        return _keystrokes(data)
    if domain in ("mcp", "search", "swe") and isinstance(data, dict):
        name = data.get("name", data.get("tool"))
        args = data.get("arguments", data.get("args", {}))
        if isinstance(name, str) and name and isinstance(args, dict) and len(data) == 2:
            return ToolAction(tool=name, args=args)
    if domain == "os" and isinstance(data, str) and data.strip():
        return CodeAction(code=data)
    if domain == "web" and isinstance(data, str) and data.strip():
        return BrowserAction(action=data)
    if domain == "android" and isinstance(data, dict) and "action_type" in data:
        return AndroidAction.model_validate(data)
    return None


def _keystrokes(entries: list[Any]) -> KeystrokesAction | None:
    keys, duration = "", 0.0
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("keystrokes"), str):
            return None
        typed = entry["keystrokes"]
        ctrl = _TMUX_CTRL.match(typed)
        keys += _TMUX_KEYS.get(typed, chr(ord(ctrl.group(1)) - 96) if ctrl else typed)
        value = entry.get("duration", 0)
        duration += float(value) if isinstance(value, int | float) else 0.0
    return KeystrokesAction(keys=keys, duration=min(duration, 600.0))


def _trajectory(path: Path, number: int, record: dict[str, Any]) -> Trajectory:
    domain = str(record["task"]).rsplit("/", 1)[-1]
    turn = int(record["turn_idx"])
    prompts = record["prompt"][:turn]
    parts = [split_prompt(p) for p in prompts]
    actions = [to_action(domain, part.action, p) for part, p in zip(parts, prompts, strict=True)]
    truth = [Observation(text=_MARKER.sub("", r, count=1)) for r in record["response"][:turn]]
    predicted = "gen" in record
    observations: list[Observation | None] = (
        [*([None] * (turn - 1)), _parsed_gen(record.get("gen"), actions[-1])]
        if predicted
        else list(truth)
    )
    first = parts[0]
    meta: dict[str, Any] = {
        AWB_META: {**record, "suffix": benchmark_suffix(record)},
        "imported_from": f"{path}:{number}",
    }
    if predicted:
        meta.update(mode="teacher-forced", sample=0, **{EVALUATED_TURN: turn})
    return Trajectory(
        id=f"{domain}-{record['id']}-t{turn}",
        domain=Domain(domain),
        instruction=first.instruction or None,
        env={"initial_observation": first.state} if first.state else {},
        steps=[Step(action=a, observation=o) for a, o in zip(actions, observations, strict=True)],
        source="sim" if predicted else "real",
        meta=meta,
        outcome=_claimed_outcome(record),
    )


def _claimed_outcome(record: dict[str, Any]) -> Outcome | None:
    """The outcome a record carries (``success`` and/or ``reward``, where present; the
    published samples carry none)."""
    success, reward = record.get("success"), record.get("reward")
    success = success if isinstance(success, bool) else None
    if isinstance(reward, bool) or not isinstance(reward, int | float):
        reward = None
    if success is None and reward is None:
        return None
    return Outcome(success=success, reward=reward, claimed_by="dataset")


def _parsed_gen(gen: str | None, action: Action) -> Observation:
    """The reference script's answer parsed as its evaluation does; empty: a failed request."""
    if not gen:
        return Observation(error="RequestFailedError: empty gen (the reference request failed)")
    try:
        return parse_prediction(gen, action, trim_block=True)
    except MalformedPredictionError as error:
        return Observation(error=f"MalformedPredictionError: {error}")


def export_predictions(
    simulated: str | os.PathLike[str], output: str | os.PathLike[str]
) -> ExportResult:
    """Write AgentWorldBench records with a ``gen`` field from a simulated JSONL file.

    Each trajectory imported from AgentWorldBench gives back its original
    record plus ``gen``: the prediction of its evaluated turn (``turn_idx``),
    with the ``**Environment Observation:**`` marker, inside a
    ``<predicted_observation>`` block as the benchmark's evaluation extracts
    it. A failed prediction gets an empty ``gen`` (as the reference script
    writes it) and its error in ``gen_error``. Trajectories from elsewhere are
    skipped and counted.
    """
    trajectories = read_trajectories(simulated)
    lines, failed, skipped = [], 0, 0
    for trajectory in trajectories:
        record = trajectory.meta.get(AWB_META)
        if not isinstance(record, dict):
            skipped += 1
            continue
        observation = trajectory.steps[int(record["turn_idx"]) - 1].observation
        out = {k: v for k, v in record.items() if k not in ("suffix", "marker", "gen_error")}
        if observation is None or observation.failed:
            failed += 1
            out["gen"] = ""
            out["gen_error"] = observation.error if observation else "not simulated"
        else:
            text = observation.text if observation.text.endswith("\n") else observation.text + "\n"
            marker = _marker(record)
            out["gen"] = f"{OPEN_TAG}\n{marker}{text}{CLOSE_TAG}"
        lines.append(json_line(out, separators=(", ", ": ")))
    path = Path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_replacing_database(path)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return ExportResult(output=str(path), samples=len(lines), failed=failed, skipped=skipped)


def _marker(record: dict[str, Any]) -> str:
    responses = record.get("response") or [""]
    found = _MARKER.match(str(responses[0]))
    return found.group(0) if found else ""
