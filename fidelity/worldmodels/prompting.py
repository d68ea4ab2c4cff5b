"""Prompt construction and answer parsing for language world models.

Messages are built the way AgentWorldBench builds them (teacher-forced): the
domain's system prompt, then for every earlier step a user message (the
rendered action) and an assistant message (the observation as the model
should have written it), then the current action as the last user message.

Templates live in ``prompts/<domain>/`` (``system.md.j2``, ``action.md.j2``);
their variables are documented in ``prompts/README.md``.

Answers are parsed with the evaluation rule of AgentWorldBench: remove
``<think>`` sections, take the last ``<predicted_observation>`` block, or the
whole text when there is none.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from fidelity.errors import MalformedPredictionError, UnknownDomainError
from fidelity.model import Action, CommandAction, Control, Observation, Step, Trajectory
from fidelity.resources import data_dir

#: What the sandbox looks like to the agent (shown to the model in the system prompt).
SANDBOX_CWD = "/workspace"
SANDBOX_USER = "agent"

OPEN_TAG = "<predicted_observation>"
CLOSE_TAG = "</predicted_observation>"
SYSTEM_TEMPLATE = "system.md.j2"
ACTION_TEMPLATE = "action.md.j2"

#: Bump when the code-side rendering (assistant turns, variables) changes: it is
#: part of :func:`prompt_hash`, so runs made with other prompts stay apart.
RENDER_VERSION = "1"

_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_EXIT_LINE = re.compile(r"(?m)^[ \t]*\[exit_code:[ \t]*(-?\d+)[ \t]*\]\s*\Z")
_MARKER = re.compile(r"\A\s*\*\*Environment Observation:\*\*[ \t]*\n?")

Message = dict[str, str]

#: The ``meta`` key of trajectories imported from AgentWorldBench (the original record).
AWB_META = "agentworldbench"


def prompts_root(prompts_dir: Path | str | None = None) -> Path:
    """The prompts folder: *prompts_dir* when given, else the bundled ``prompts/``."""
    return Path(prompts_dir) if prompts_dir is not None else data_dir("prompts")


@lru_cache(maxsize=16)
def _environment(root: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # plain text prompts, never HTML
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=False,
    )


def _template(domain: str, name: str, prompts_dir: Path | str | None) -> jinja2.Template:
    return _cached_template(domain, name, None if prompts_dir is None else str(prompts_dir))


@lru_cache(maxsize=64)
def _cached_template(domain: str, name: str, prompts_dir: str | None) -> jinja2.Template:
    """The template, looked up once per process (resolving the folder costs ~0.1 ms a call)."""
    root = prompts_root(prompts_dir)
    path = root / domain / name
    if not path.is_file():
        raise UnknownDomainError(
            f"no world-model prompt for domain {domain!r}: {path} is missing "
            f"(domains with prompts: {', '.join(available_domains(root)) or 'none'})"
        )
    return _environment(str(root.resolve())).get_template(f"{domain}/{name}")


def available_domains(prompts_dir: Path | str | None = None) -> list[str]:
    """Domains whose folder in *prompts_dir* has both templates."""
    root = prompts_root(prompts_dir)
    if not root.is_dir():
        return []
    return sorted(
        d.name
        for d in root.iterdir()
        if (d / SYSTEM_TEMPLATE).is_file() and (d / ACTION_TEMPLATE).is_file()
    )


def action_payload(action: Action) -> dict[str, Any]:
    """The action as the JSON object shown to the model (unset fields left out)."""
    return action.model_dump(mode="json", exclude_none=True)


def render_system(trajectory: Trajectory, prompts_dir: Path | str | None = None) -> str:
    """The system prompt of *trajectory*'s domain."""
    env = trajectory.env
    return (
        _template(str(trajectory.domain), SYSTEM_TEMPLATE, prompts_dir)
        .render(
            domain=str(trajectory.domain),
            description=(env.description or "").strip(),
            env_vars=dict(sorted(env.env.items())),
            cwd=SANDBOX_CWD,
            user=SANDBOX_USER,
            initial_observation=(env.initial_observation or "").strip("\n"),
        )
        .strip()
    )


def render_action(
    action: Action,
    turn: int,
    domain: str = "terminal",
    prompts_dir: Path | str | None = None,
    control: Control | None = None,
) -> str:
    """The user message for *action* at 1-based *turn* (``### Turn N`` and a JSON block).

    A *control* instruction is passed to the template as ``control`` (its
    instruction text, ``""`` when there is none).
    """
    payload = action_payload(action)
    return (
        _template(domain, ACTION_TEMPLATE, prompts_dir)
        .render(
            turn=turn,
            action=payload,
            action_type=action.type,
            action_json=json.dumps(payload, ensure_ascii=False),
            rendered=action.render(),
            control=control.instruction if control is not None else "",
        )
        .strip()
    )


def render_observation(observation: Observation, action: Action) -> str:
    """The assistant message a perfect model would have written for *observation*.

    The text, then ``[exit_code: N]`` on its own last line for command actions
    with a known exit code, all inside one ``<predicted_observation>`` block.
    :func:`parse_prediction` reads it back (a text that does not end with a
    newline comes back with one).
    """
    text = observation.text
    if text and not text.endswith("\n"):
        text += "\n"
    if isinstance(action, CommandAction) and observation.exit_code is not None:
        text += f"[exit_code: {observation.exit_code}]\n"
    return f"{OPEN_TAG}\n{text}{CLOSE_TAG}"


def build_messages(
    trajectory: Trajectory,
    history: list[Step],
    action: Action,
    depth: int,
    prompts_dir: Path | str | None = None,
) -> list[Message]:
    """Chat messages asking for the observation after *action* at 1-based *depth*.

    System prompt; for each step of *history* a user message (its action) and
    an assistant message (its observation, see :func:`render_observation`);
    then the current action. Raises :class:`ValueError` when a history step has
    no usable observation, :class:`~fidelity.errors.UnknownDomainError` when
    the domain has no prompt templates.
    """
    if AWB_META in trajectory.meta:
        return build_awb_messages(trajectory, history, action, depth)
    domain = str(trajectory.domain)
    messages: list[Message] = [
        {"role": "system", "content": render_system(trajectory, prompts_dir)}
    ]
    for turn, step in enumerate(history, start=1):
        if step.observation is None or step.observation.failed:
            raise ValueError(f"history step {turn} of {trajectory.id!r} has no usable observation")
        messages.append(
            {
                "role": "user",
                "content": render_action(step.action, turn, domain, prompts_dir, step.control),
            }
        )
        messages.append(
            {"role": "assistant", "content": render_observation(step.observation, step.action)}
        )
    control = _control_at(trajectory, depth)
    messages.append(
        {"role": "user", "content": render_action(action, depth, domain, prompts_dir, control)}
    )
    return messages


def _control_at(trajectory: Trajectory, depth: int) -> Control | None:
    return trajectory.steps[depth - 1].control if 1 <= depth <= len(trajectory.steps) else None


def build_awb_messages(
    trajectory: Trajectory, history: list[Step], action: Action, depth: int
) -> list[Message]:
    """Messages exactly as AgentWorldBench's inference builds them.

    For trajectories imported from AgentWorldBench (``meta["agentworldbench"]``):
    system = the sample's ``system_str``; each earlier turn's prompt and
    response (its ``**Environment Observation:**`` marker restored); the
    current prompt. A control instruction is appended to the current prompt.
    """
    meta = trajectory.meta[AWB_META]
    marker = str(meta.get("marker", ""))
    messages: list[Message] = [{"role": "system", "content": str(meta.get("system_str", ""))}]
    for turn, step in enumerate(history, start=1):
        if step.observation is None or step.observation.failed:
            raise ValueError(f"history step {turn} of {trajectory.id!r} has no usable observation")
        messages.append({"role": "user", "content": step.action.render()})
        messages.append({"role": "assistant", "content": marker + step.observation.text})
    current = action.render()
    control = _control_at(trajectory, depth)
    if control is not None:
        current += f"\n\n[Simulation control] {control.instruction}"
    messages.append({"role": "user", "content": current})
    return messages


def strip_thinking(content: str) -> str:
    """*content* without reasoning.

    Removes every closed ``<think>…</think>`` section; the text up to an
    orphan ``</think>`` that comes before any prediction block (the opening tag
    was part of the prompt, as with Qwen3 chat templates); and an unterminated
    leading ``<think>`` block, which runs to the end (the answer was cut off).
    """
    text = _THINK.sub("", content)
    if text.lstrip().startswith("<think>"):
        return ""
    end = text.find("</think>")
    while end >= 0 and (OPEN_TAG not in text or end < text.find(OPEN_TAG)):
        text = text[end + len("</think>") :]
        end = text.find("</think>")
    return text


def _prediction_body(text: str) -> str:
    """The last complete block; else what follows an unclosed open tag; else all of *text*."""
    blocks = _BLOCK.findall(text)
    if blocks:
        return str(blocks[-1])
    if OPEN_TAG in text:
        return text.rsplit(OPEN_TAG, 1)[1]
    return text.strip("\n")


def parse_prediction(content: str | None, action: Action) -> Observation:
    """The observation in a model answer.

    ``<think>`` sections are removed (:func:`strip_thinking`); the last
    ``<predicted_observation>`` block is taken, or the whole text when there is
    none; one newline right after the opening tag and a leading
    ``**Environment Observation:**`` marker are dropped. For command actions a
    last line ``[exit_code: N]`` becomes ``exit_code``. Raises
    :class:`~fidelity.errors.MalformedPredictionError` when nothing but
    whitespace is left of the answer.
    """
    if content is None or not content.strip():
        raise MalformedPredictionError("the model returned empty content")
    answer = strip_thinking(content)
    if not answer.strip():
        raise MalformedPredictionError(
            "the answer holds only <think> reasoning and no prediction (cut off? raise max_tokens)"
        )
    body = _prediction_body(answer)
    body = _MARKER.sub("", body.removeprefix("\n"), count=1)
    if not isinstance(action, CommandAction):
        return Observation(text=body)
    match = _EXIT_LINE.search(body)
    if match is None:
        return Observation(text=body)
    return Observation(text=body[: match.start()], exit_code=int(match.group(1)))


def prompt_hash(prompts_dir: Path | str | None = None) -> str:
    """Stable hash of every template under *prompts_dir* and the rendering version.

    Stored with each run so results made with different prompts are never
    mixed up (first 16 hex digits of a SHA-256).
    """
    root = prompts_root(prompts_dir)
    digest = hashlib.sha256(f"render-version:{RENDER_VERSION}\n".encode())
    for path in sorted(root.rglob("*.j2")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
