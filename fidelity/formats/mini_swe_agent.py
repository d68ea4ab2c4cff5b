"""mini-swe-agent trajectories (``*.traj.json``): shell commands and their outputs as real steps.

A mini-swe-agent run records a chat (``messages``): each assistant message
holds one fenced ``bash`` block (the command) and the user message after it
the environment's answer, ``<returncode>N</returncode>`` followed by
``<output>…</output>`` (long outputs as ``<warning>``, ``<output_head>``,
``<elided_chars>``, ``<output_tail>``; kept as printed). Answers that are not
an execution are left out with their command: format errors ("Please always
provide EXACTLY ONE action…"). A timed-out command ("The last command … timed
out") becomes an observation with ``timed_out`` set; the final submission
(``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff``) keeps its text
without an exit code. The trajectory id is ``instance_id`` (else the file
name); it is of domain ``swe`` and plain ``info`` fields go to ``meta``, its claimed
outcome (exit status and submission) to ``outcome``. The system message becomes
``system_prompt``; the task (``{{task}}`` of the run's ``instance_template``, as recorded in
``info.config.agent``, else the text between ``<pr_description>`` markers, else the whole first
user message) becomes ``instruction``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from fidelity.errors import InputFormatError, NotFoundError
from fidelity.formats.jsonl import nested_json
from fidelity.formats.swe_agent import (
    claimed_outcome,
    message_text,
    plain_fields,
    problem_statement,
)
from fidelity.trajectory import CommandAction, Domain, Observation, Step, Trajectory

FORMAT_PREFIX = "mini-swe-agent"
"""What ``trajectory_format`` starts with in a mini-swe-agent file (``mini-swe-agent-1``)."""

_BASH_RE = re.compile(r"```(?:bash|sh)?[ \t]*\n(.*?)\n?```", re.DOTALL)
_RESULT_RE = re.compile(r"\A<returncode>(-?\d+)</returncode>\n?(.*)\Z", re.DOTALL)
_OUTPUT_RE = re.compile(r"\A<output>\n?(.*?)</output>\s*\Z", re.DOTALL)
_TIMEOUT_RE = re.compile(r"\AThe last command <command>.*?</command> timed out", re.DOTALL)
_TIMEOUT_OUTPUT_RE = re.compile(r"<output>\n?(.*?)</output>", re.DOTALL)


def read_mini_swe_agent(path: str | os.PathLike[str]) -> Trajectory:
    """The real trajectory recorded in a mini-swe-agent ``.traj.json`` file."""
    path = Path(path)
    try:
        data = nested_json(path.read_text(encoding="utf-8-sig"), str(path), None)
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: no such file") from exc
    except json.JSONDecodeError as exc:
        raise InputFormatError(str(path), exc.lineno, None, f"invalid JSON ({exc.msg})") from exc
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list):
        raise InputFormatError(str(path), None, "messages", "missing or not a list")
    steps = _steps(path, messages)
    if not steps:
        raise InputFormatError(str(path), None, "messages", "no command with an answer")
    raw_info = data.get("info")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    instance = data.get("instance_id")
    name = instance if isinstance(instance, str) and instance else _stem(path)
    system, user = _opening(messages)
    return Trajectory(
        id=name[:200],
        domain=Domain.swe,
        instruction=_task(user, info) if user else None,
        system_prompt=system,
        steps=steps,
        source="real",
        meta={"imported_from": str(path), "mini_swe_agent": plain_fields(info)},
        outcome=claimed_outcome(info),
    )


_TEMPLATE_TAG = re.compile(r"\{\{|\{%")


def _opening(messages: list[Any]) -> tuple[str | None, str | None]:
    """The system message and the first user message (the task), as text."""
    system = user = None
    for message in messages:
        if not isinstance(message, dict):
            continue
        text = message_text(message.get("content"))
        if message.get("role") == "system" and system is None and user is None:
            system = text.strip() or None if text else None
        elif message.get("role") == "user":
            user = text
            break
    return system, user


def _task(message: str, info: dict[str, Any]) -> str | None:
    """The ``{{task}}`` the run's instance template put into *message*, when the recorded
    template shows where (literal text before it, and after it up to the template's next
    tag); else :func:`~fidelity.formats.swe_agent.problem_statement` of the message."""
    config = info.get("config")
    agent = config.get("agent") if isinstance(config, dict) else None
    template = agent.get("instance_template") if isinstance(agent, dict) else None
    if isinstance(template, str) and "{{task}}" in template:
        head, _, tail = template.partition("{{task}}")
        literal = _TEMPLATE_TAG.split(tail, maxsplit=1)[0]
        if not _TEMPLATE_TAG.search(head) and message.startswith(head) and literal:
            end = message.find(literal, len(head))
            if end >= 0 and message[len(head) : end].strip():
                return message[len(head) : end].strip()
    return problem_statement(message)


def _stem(path: Path) -> str:
    return path.name.removesuffix(".json").removesuffix(".traj") or "mini-swe-agent"


def _steps(path: Path, messages: list[Any]) -> list[Step]:
    steps: list[Step] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InputFormatError(str(path), None, f"messages.{index}", "expected an object")
        content = message.get("content")
        if message.get("role") != "assistant" or index + 1 >= len(messages):
            continue
        if not isinstance(content, str):
            raise InputFormatError(str(path), None, f"messages.{index}.content", "not a string")
        blocks = _BASH_RE.findall(content)
        answer = messages[index + 1]
        text = answer.get("content") if isinstance(answer, dict) else None
        if len(blocks) != 1 or not isinstance(text, str) or answer.get("role") != "user":
            continue
        command, observation = blocks[0].strip(), observation_of(text)
        if command and observation is not None:
            steps.append(Step(action=CommandAction(command=command), observation=observation))
    return steps


def observation_of(text: str) -> Observation | None:
    """The observation an environment answer records, or None when nothing was executed."""
    result = _RESULT_RE.match(text)
    if result:
        body = result[2]
        output = _OUTPUT_RE.match(body)
        return Observation(text=output[1] if output else body, exit_code=int(result[1]))
    if _TIMEOUT_RE.match(text):
        output = _TIMEOUT_OUTPUT_RE.search(text)
        return Observation(text=output[1] if output else "", timed_out=True)
    if text.startswith("Please always provide EXACTLY ONE action"):
        return None
    if text.startswith("diff --git") or not text.strip():
        return Observation(text=text)
    return None
