"""SWE-agent trajectories (``*.traj``): ``trajectory[].action`` / ``observation`` as real steps.

Each entry's ``action`` (the command the agent ran, possibly several lines)
becomes a :class:`~fidelity.trajectory.CommandAction` and its ``observation`` the
real observation text (SWE-agent records no exit code). Entries with an empty
action are left out. Files without a ``trajectory`` list (history-only files,
as older SWE-agent versions and some demonstrations write them) are read from
``history``: each assistant message's ``action`` (else its last fenced block)
and the user message after it as the observation. The trajectory is of domain ``swe``; ``info`` fields
that are plain values (exit status, submission…) are kept in ``meta``, and the
outcome the run claims (:func:`claimed_outcome`) in ``outcome``.

The agent's system message (``history``'s first ``system`` message) becomes
``system_prompt``; the problem statement becomes ``instruction``: the text of
``replay_config.problem_statement`` (SWE-agent 1.x records its run configuration there),
else the part of the first user message its instance template put the statement in
(:func:`problem_statement`), else that whole message.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from fidelity.errors import InputFormatError, NotFoundError
from fidelity.formats.jsonl import nested_json
from fidelity.trajectory import CommandAction, Domain, Observation, Outcome, Step, Trajectory

_MAX_META = 2000


def read_swe_agent(path: str | os.PathLike[str]) -> Trajectory:
    """The real trajectory recorded in a SWE-agent ``.traj`` file."""
    path = Path(path)
    try:
        data = nested_json(path.read_text(encoding="utf-8-sig"), str(path), None)
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
    messages = history if isinstance(history, list) else []
    system, first_user = _first_messages(messages)
    return Trajectory(
        id=path.name.removesuffix(".traj")[:200] or "swe-agent",
        domain=Domain.swe,
        instruction=_replayed_statement(data.get("replay_config"))
        or problem_statement(first_user or ""),
        system_prompt=system,
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


_STATEMENT_PATTERNS = (
    # SWE-agent 0.x: "Here's the issue text:\nISSUE:\n{problem_statement}\n\nINSTRUCTIONS:"
    re.compile(r"(?:\A|\n)ISSUE:\n(.*?)\n+INSTRUCTIONS:", re.DOTALL),
    # SWE-agent 1.x and mini-swe-agent: "<pr_description>\n{{problem_statement}}\n</pr_description>"
    re.compile(
        r"<pr_description>\n(?:Consider the following PR description:\n)?(.*?)\n</pr_description>",
        re.DOTALL,
    ),
    # SWE-agent's other templates (its CTF one): the task, then "INSTRUCTIONS:"
    re.compile(r"\A(.*?)\n+INSTRUCTIONS:", re.DOTALL),
)


def problem_statement(message: str) -> str | None:
    """The problem statement in the first user message of a SWE-agent or mini-swe-agent run.

    Their instance templates put it between fixed markers (``ISSUE:`` … ``INSTRUCTIONS:``,
    ``<pr_description>`` … ``</pr_description>``); where none is found, the whole message
    (stripped) is the task. None for an empty message."""
    for pattern in _STATEMENT_PATTERNS:
        found = pattern.search(message)
        if found and found.group(1).strip():
            return found.group(1).strip()
    return message.strip() or None


def message_text(content: Any) -> str | None:
    """A chat message's text: a string, or the text parts of a list of content parts
    (``[{"type": "text", "text": ...}]``, as SWE-agent 1.x writes them)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        texts = [p for p in parts if isinstance(p, str)]
        return "".join(texts) if texts else None
    return None


def _first_messages(messages: list[Any]) -> tuple[str | None, str | None]:
    """``(system message, first user message)`` of a chat, demonstrations left out."""
    system: str | None = None
    for message in messages:
        if not isinstance(message, dict) or message.get("is_demo"):
            continue
        text = message_text(message.get("content"))
        if message.get("role") == "system" and system is None:
            system = text.strip() or None if text else None
        elif message.get("role") == "user":
            return system, text
    return system, None


def _replayed_statement(replay: Any) -> str | None:
    """``problem_statement.text`` of SWE-agent 1.x's ``replay_config`` (a JSON string)."""
    if isinstance(replay, str):
        try:
            replay = json.loads(replay)
        except json.JSONDecodeError:
            return None
    statement = replay.get("problem_statement") if isinstance(replay, dict) else None
    text = statement.get("text") if isinstance(statement, dict) else None
    return text.strip() or None if isinstance(text, str) else None


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
