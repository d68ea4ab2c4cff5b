"""SWE-agent trajectories (``*.traj``): ``trajectory[].action`` / ``observation`` as real steps.

Each entry's ``action`` (the command the agent ran, possibly several lines)
becomes a :class:`~fidelity.model.CommandAction` and its ``observation`` the
real observation text (SWE-agent records no exit code). Entries with an empty
action are left out. Files without a ``trajectory`` list (history-only files,
as older SWE-agent versions and some demonstrations write them) are read from
``history``: each assistant message's ``action`` (else its last fenced block)
and the user message after it as the observation. The trajectory is of domain ``swe``; ``info`` fields
that are plain values (exit status, submission…) are kept in ``meta``, and the
outcome the run claims (:func:`claimed_outcome`) in ``outcome``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from fidelity.errors import InputFormatError, NotFoundError
from fidelity.formats.jsonl import nested_json
from fidelity.model import CommandAction, Domain, Observation, Outcome, Step, Trajectory

_MAX_META = 2000


def read_swe_agent(path: str | os.PathLike[str]) -> Trajectory:
    """The real trajectory recorded in a SWE-agent ``.traj`` file."""
    path = Path(path)
    try:
        data = nested_json(path.read_text(encoding="utf-8"), str(path), None)
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: no such file") from exc
    except json.JSONDecodeError as exc:
        raise InputFormatError(str(path), exc.lineno, None, f"invalid JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise InputFormatError(str(path), None, "trajectory", "missing or not a list")
    entries, history = data.get("trajectory"), data.get("history")
    if isinstance(entries, list) and entries:
        steps = [_step(path, index, entry) for index, entry in enumerate(entries)]
        field = "trajectory"
    elif isinstance(history, list):
        steps = _history_steps(path, history)
        field = "history"
    else:
        raise InputFormatError(str(path), None, "trajectory", "missing or not a list")
    kept = [s for s in steps if s is not None]
    if not kept:
        raise InputFormatError(str(path), None, field, "no entry with an action")
    raw_info = data.get("info")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    return Trajectory(
        id=path.name.removesuffix(".traj")[:200] or "swe-agent",
        domain=Domain.swe,
        steps=kept,
        source="real",
        meta={"imported_from": str(path), "swe_agent": plain_fields(info)},
        outcome=claimed_outcome(info),
    )


def _step(path: Path, index: int, entry: Any) -> Step | None:
    where = f"trajectory.{index}"
    if not isinstance(entry, dict):
        raise InputFormatError(str(path), None, where, "expected an object")
    action, observation = entry.get("action"), entry.get("observation")
    if not isinstance(action, str) or not isinstance(observation, str | None):
        raise InputFormatError(str(path), None, f"{where}.action", "must be a string")
    if not action.strip():
        return None
    return Step(
        action=CommandAction(command=action.strip("\n")),
        observation=Observation(text=observation or ""),
    )


_FENCE_RE = re.compile(r"```[\w-]*[ \t]*\n(.*?)\n?```", re.DOTALL)


def _history_steps(path: Path, history: list[Any]) -> list[Step | None]:
    """Steps of a history-only file: an assistant action, then the user message answering it."""
    steps: list[Step | None] = []
    for index, message in enumerate(history):
        if not isinstance(message, dict):
            raise InputFormatError(str(path), None, f"history.{index}", "expected an object")
        if message.get("role") != "assistant" or index + 1 >= len(history):
            continue
        action = message.get("action")
        if not isinstance(action, str):
            content = message.get("content")
            blocks = _FENCE_RE.findall(content) if isinstance(content, str) else []
            action = blocks[-1] if blocks else ""
        answer = history[index + 1]
        text = answer.get("content") if isinstance(answer, dict) else None
        if not action.strip() or not isinstance(text, str) or answer.get("role") != "user":
            continue
        steps.append(
            Step(
                action=CommandAction(command=action.strip("\n")), observation=Observation(text=text)
            )
        )
    return steps


def claimed_outcome(info: dict[str, Any]) -> Outcome | None:
    """What a SWE-agent or mini-swe-agent run claims from its ``info``: success when it
    ended ``submitted`` with a non-empty ``submission`` (a patch), failure when it ended
    any other way (cost or context limit, format errors) or submitted nothing; None when
    the file records no exit status. The claim is the recording's, never a grading."""
    status = info.get("exit_status")
    if not isinstance(status, str) or not status.strip():
        return None
    submission = info.get("submission")
    submitted = isinstance(submission, str) and bool(submission.strip())
    success = status.strip().lower() == "submitted" and submitted
    return Outcome(success=success, claimed_by="dataset")


def plain_fields(info: dict[str, Any]) -> dict[str, Any]:
    """The scalar entries of *info*, long strings cut (submissions can be whole patches)."""
    kept: dict[str, Any] = {}
    for key, value in info.items():
        if isinstance(value, bool | int | float) or value is None:
            kept[key] = value
        elif isinstance(value, str):
            kept[key] = value[:_MAX_META]
    return kept
