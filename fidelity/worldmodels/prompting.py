"""Prompt construction and answer parsing for language world models.

Messages are built the way AgentWorldBench builds them (teacher-forced): the
domain's system prompt, then for every earlier step a user message (the turn:
``### Turn N``, the task and state on turn 1, ``**Action:**`` and a fenced
JSON block) and an assistant message (``**Environment Observation:**`` and
the observation as the model was trained to write it: a terminal's whole
screen), then the current turn with the benchmark's suffix.

Two prompt layouts: fidelity's templates (``prompts/<domain>/system.md.j2``,
``action.md.j2``; variables in ``prompts/README.md``), and a checkout of the
official repository's ``prompts/`` folder (``<domain>/system_prompt.txt``,
used verbatim with ``{tool_definitions}`` filled; turns rendered with the
bundled templates). Samples imported from AgentWorldBench are sent exactly as
the reference script sends them.

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
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fidelity.errors import MalformedPredictionError, UnknownDomainError
from fidelity.resources import data_dir
from fidelity.trajectory import TASK_META as TASK_META
from fidelity.trajectory import (
    Action,
    AndroidAction,
    BrowserAction,
    CodeAction,
    CommandAction,
    Control,
    KeystrokesAction,
    Observation,
    Step,
    TextAction,
    ToolAction,
    Trajectory,
)
from fidelity.worldmodels import base

if TYPE_CHECKING:
    import jinja2

#: What the sandbox looks like to the agent (shown to the model in the system prompt).
SANDBOX_CWD = "/workspace"
SANDBOX_USER = "agent"

OPEN_TAG = "<predicted_observation>"
CLOSE_TAG = "</predicted_observation>"
SYSTEM_TEMPLATE = "system.md.j2"
ACTION_TEMPLATE = "action.md.j2"

#: The official repository's layout: ``<domain>/system_prompt.txt`` (and the judge's).
OFFICIAL_SYSTEM = "system_prompt.txt"
OFFICIAL_JUDGE = "judge_system_prompt.txt"
#: Placeholders of the official system prompts that fidelity fills (others stay as written).
PLACEHOLDERS = ("tool_definitions",)
#: What every ground-truth observation starts with in AgentWorldBench.
OBS_MARKER = "**Environment Observation:**"

#: Bump when the code-side rendering (assistant turns, variables) changes: it is
#: part of :func:`prompt_hash`, so runs made with other prompts stay apart.
RENDER_VERSION = "3"

_BLOCK = re.compile(re.escape(OPEN_TAG) + r"(.*?)" + re.escape(CLOSE_TAG), re.DOTALL)
_THINK = re.compile(r"<think>.*?</think>", re.DOTALL)
_EXIT_LINE = re.compile(r"(?m)^[ \t]*\[exit_code:[ \t]*(-?\d+)[ \t]*\]\s*\Z")
_MARKER = re.compile(r"\A\s*\*\*Environment Observation:\*\*[ \t]*\n?")

Message = dict[str, str]

#: The ``meta`` key of trajectories imported from AgentWorldBench (the original record).
AWB_META = "agentworldbench"
#: ``TASK_META`` (imported above): the ``meta`` key older files hold the task instruction in;
#: turn 1 shows :attr:`~fidelity.trajectory.Trajectory.task_instruction` (``instruction`` first).
#: The ``meta`` key of a simulated recording that predicted only this 1-based turn
#: (defined next to :class:`~fidelity.worldmodels.base.Mode`: ``fidelity diff`` reads it
#: without loading the prompt templates).
EVALUATED_TURN = base.EVALUATED_TURN
#: A shell prompt at the start of a screen line: ``user@host:/path$ `` or ``…# ``.
_SHELL_PROMPT = re.compile(r"\A[\w.-]+@[\w.-]+:[^\n$#]*[$#] ?")


class PromptSet(BaseModel):
    """Which prompts a run used: recorded with it so results never mix prompt sets."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str
    kind: Literal["bundled", "templates", "official"] = Field(
        description="bundled: fidelity's own; templates: a folder in fidelity's layout; "
        "official: a checkout of the official repository's prompts/ folder"
    )
    hash: str


def prompts_root(prompts_dir: Path | str | None = None) -> Path:
    """The prompts folder: *prompts_dir* when given, else the bundled ``prompts/``."""
    return Path(prompts_dir) if prompts_dir is not None else data_dir("prompts")


@lru_cache(maxsize=16)
def _environment(root: str) -> jinja2.Environment:
    import jinja2  # when a prompt is rendered: `fidelity replay` imports this module, not it

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


def layout(prompts_dir: Path | str | None = None) -> Literal["bundled", "templates", "official"]:
    """The kind of prompt folder: bundled, our template layout, or the official layout."""
    if prompts_dir is None:
        return "bundled"
    root = Path(prompts_dir)
    if not root.is_dir():
        return "templates"
    official = any((d / OFFICIAL_SYSTEM).is_file() for d in root.iterdir() if d.is_dir())
    return "official" if official else "templates"


def prompt_set(prompts_dir: Path | str | None = None) -> PromptSet:
    """Path, kind and hash of the prompts a run uses."""
    root = prompts_root(prompts_dir)
    return PromptSet(path=str(root), kind=layout(prompts_dir), hash=prompt_hash(prompts_dir))


def available_domains(prompts_dir: Path | str | None = None) -> list[str]:
    """Domains whose folder in *prompts_dir* has a system prompt (and, for templates, both)."""
    root = prompts_root(prompts_dir)
    if not root.is_dir():
        return []
    return sorted(
        d.name
        for d in root.iterdir()
        if (d / OFFICIAL_SYSTEM).is_file()
        or ((d / SYSTEM_TEMPLATE).is_file() and (d / ACTION_TEMPLATE).is_file())
    )


def action_payload(action: Action) -> dict[str, Any]:
    """The action as fidelity's JSON object (unset fields left out)."""
    return action.model_dump(mode="json", exclude_none=True)


def benchmark_action(action: Action) -> Any:
    """The action as AgentWorldBench shows it in its fenced JSON block.

    terminal: a list of ``{"keystrokes", "duration"}`` with tmux key names
    (a command is the keystrokes that type it, Enter included); tool calls:
    ``{"name", "arguments"}``; os code and browser calls: the string as
    written; android: AndroidWorld's ``JSONAction``; text: the text itself.
    """
    if isinstance(action, CommandAction):
        duration = action.timeout if action.timeout is not None else 10.0
        return [{"keystrokes": action.command + "\n", "duration": duration}]
    if isinstance(action, KeystrokesAction):
        return _tmux_entries(action.keys, action.duration)
    if isinstance(action, ToolAction):
        return {"name": action.tool, "arguments": action.args}
    if isinstance(action, CodeAction):
        return action.code
    if isinstance(action, BrowserAction):
        return action.action
    if isinstance(action, AndroidAction):
        return action.model_dump(mode="json", exclude_none=True, exclude={"type"})
    assert isinstance(action, TextAction)
    return action.text


def benchmark_action_json(action: Action) -> str:
    """:func:`benchmark_action` as the text of the fenced block (a text action as written)."""
    if isinstance(action, TextAction):
        return action.text
    return json.dumps(benchmark_action(action), ensure_ascii=False)


_TMUX_NAMES = {"\x1b": "Escape", "\t": "Tab", "\x7f": "BSpace"}


def _tmux_entries(keys: str, duration: float) -> list[dict[str, Any]]:
    """Keys as tmux ``send-keys`` entries: text runs (``\n`` kept), control keys by name."""
    entries: list[dict[str, Any]] = []
    text = ""
    for char in keys:
        if char == "\n" or (char >= " " and char != "\x7f"):
            text += char
            continue
        if text:
            entries.append({"keystrokes": text, "duration": 0.1})
            text = ""
        name = _TMUX_NAMES.get(char) or f"C-{chr(ord(char) + 96)}"
        entries.append({"keystrokes": name, "duration": 0.1})
    if text or not entries:
        entries.append({"keystrokes": text, "duration": duration})
    entries[-1]["duration"] = duration
    return entries


def render_system(trajectory: Trajectory, prompts_dir: Path | str | None = None) -> str:
    """The system prompt of *trajectory*'s domain.

    From ``<domain>/system_prompt.txt`` of an official layout (its
    ``{tool_definitions}`` filled from ``env.tools``, the rest verbatim), else
    from the ``system.md.j2`` template.
    """
    env = trajectory.env
    domain = str(trajectory.domain)
    official = prompts_root(prompts_dir) / domain / OFFICIAL_SYSTEM
    if prompts_dir is not None and official.is_file():
        return fill_placeholders(official.read_text(encoding="utf-8"), trajectory)
    if prompts_dir is not None and layout(prompts_dir) == "official":
        raise UnknownDomainError(
            f"no world-model prompt for domain {domain!r}: {official} is missing "
            f"(domains with prompts: {', '.join(available_domains(prompts_dir)) or 'none'})"
        )
    return (
        _template(domain, SYSTEM_TEMPLATE, prompts_dir)
        .render(
            domain=domain,
            description=(env.description or "").strip(),
            env_vars=dict(sorted(env.env.items())),
            cwd=SANDBOX_CWD,
            user=SANDBOX_USER,
            initial_observation=(env.initial_observation or "").strip("\n"),
            tool_definitions=tool_definitions(trajectory),
        )
        .strip()
    )


def tool_definitions(trajectory: Trajectory) -> str:
    """``env.tools`` as indented JSON (``""`` when the environment lists no tools)."""
    tools = trajectory.env.tools
    return json.dumps(tools, ensure_ascii=False, indent=2) if tools else ""


def fill_placeholders(text: str, trajectory: Trajectory) -> str:
    """*text* with each known ``{placeholder}`` replaced (never ``str.format``: prompts hold JSON)."""
    values = {"tool_definitions": tool_definitions(trajectory)}
    for name in PLACEHOLDERS:
        text = text.replace("{" + name + "}", values[name])
    return text


def _action_templates(prompts_dir: Path | str | None) -> Path | str | None:
    """Where turn templates come from: an official layout has none, so the bundled ones."""
    return None if prompts_dir is not None and layout(prompts_dir) == "official" else prompts_dir


def render_action(
    action: Action,
    turn: int,
    domain: str = "terminal",
    prompts_dir: Path | str | None = None,
    control: Control | None = None,
    *,
    task: str = "",
    state: str = "",
    predicted: bool = False,
) -> str:
    """The user message for *action* at 1-based *turn*, in the benchmark's turn structure.

    ``### Turn N``; on turn 1 the task instruction and current state when
    known; ``**Action:**`` and a fenced JSON block (:func:`benchmark_action`);
    a *control* instruction; on the turn to predict (*predicted*) the suffix
    asking for the ``<predicted_observation>`` block.
    """
    payload = action_payload(action)
    return (
        _template(domain, ACTION_TEMPLATE, _action_templates(prompts_dir))
        .render(
            turn=turn,
            action=payload,
            action_type=action.type,
            action_json=benchmark_action_json(action),
            rendered=action.render(),
            control=control.instruction if control is not None else "",
            task=task.strip(),
            state=state.strip("\n"),
            predicted=predicted,
        )
        .strip()
    )


def render_observation(
    observation: Observation, action: Action, cwd: str | None = None, domain: str = ""
) -> str:
    """The assistant message for *observation*, as AgentWorldBench writes its responses.

    ``**Environment Observation:**`` and the text. A terminal command's
    observation is shown as the screen the model was trained on: the prompt
    and the echoed command, the output, the next prompt (*cwd* is the
    directory the command started in; the next prompt shows ``observation.cwd``).
    """
    text = observation.text
    if domain == "terminal" and isinstance(action, CommandAction):
        text = terminal_screen(action.command, text, cwd, observation.cwd)
    return f"{OBS_MARKER}\n{text}"


def render_answer(
    observation: Observation,
    action: Action,
    cwd: str | None = None,
    domain: str = "",
    *,
    trim_block: bool = False,
) -> str:
    """*observation* written as the model is asked to answer: one ``<predicted_observation>``
    block holding what :func:`render_observation` shows of it (a terminal command's whole
    screen, from *cwd*), no reasoning.

    :func:`parse_prediction` reads the answer back to the observation's text (a terminal
    screen to the command's output), with *trim_block* as it is parsed (AgentWorldBench
    samples: the block's layout newlines are not the text's); without it, a text that does
    not end in a newline gets one before the closing tag."""
    body = render_observation(observation, action, cwd, domain)[len(OBS_MARKER) + 1 :]
    end = "\n" if trim_block or not body.endswith("\n") else ""
    return f"{OPEN_TAG}\n{body}{end}{CLOSE_TAG}"


def shell_prompt(cwd: str | None) -> str:
    """The prompt the sandbox's shell shows in *cwd* (``agent@sandbox:/workspace$ ``)."""
    return f"{SANDBOX_USER}@sandbox:{cwd or SANDBOX_CWD}$ "


def terminal_screen(command: str, output: str, before: str | None, after: str | None) -> str:
    """What a terminal shows for *command*: prompt + echo, output, then the next prompt."""
    if output and not output.endswith("\n"):
        output += "\n"
    return f"{shell_prompt(before)}{command}\n{output}{shell_prompt(after or before)}"


def reduce_screen(text: str, command: str) -> str:
    """The output part of a screen-shaped terminal observation of *command*.

    A first line that is a shell prompt followed by the echoed command, and a
    last line that is a bare prompt, are removed; any other text comes back
    unchanged (a recording of output only stays as it was).
    """
    lines = text.split("\n")
    first = _SHELL_PROMPT.match(lines[0])
    echoed = command.split("\n", 1)[0].strip()
    if first is None or lines[0][first.end() :].strip() != echoed:
        return text
    rest = lines[1:]
    while rest and not rest[-1].strip():
        rest.pop()
    last = _SHELL_PROMPT.match(rest[-1]) if rest else None
    if last is not None and not rest[-1][last.end() :].strip():
        rest.pop()
    return "".join(line + "\n" for line in rest)


def build_messages(
    trajectory: Trajectory,
    history: list[Step],
    action: Action,
    depth: int,
    prompts_dir: Path | str | None = None,
) -> list[Message]:
    """Chat messages asking for the observation after *action* at 1-based *depth*.

    System prompt; for each step of *history* a user message (its turn) and
    an assistant message (its observation, see :func:`render_observation`);
    then the current turn with the benchmark's suffix. Trajectories imported
    from AgentWorldBench get the reference script's own messages
    (:func:`build_awb_messages`). Raises :class:`ValueError` when a history
    step has no usable observation,
    :class:`~fidelity.errors.UnknownDomainError` when the domain has no prompts.
    """
    if AWB_META in trajectory.meta:
        return build_awb_messages(trajectory, history, action, depth)
    domain = str(trajectory.domain)
    messages: list[Message] = [
        {"role": "system", "content": render_system(trajectory, prompts_dir)}
    ]
    cwd: str | None = None
    for turn, step in enumerate(history, start=1):
        if step.observation is None or step.observation.failed:
            raise ValueError(f"history step {turn} of {trajectory.id!r} has no usable observation")
        messages.append(
            {
                "role": "user",
                "content": _turn(trajectory, step.action, turn, prompts_dir, step.control),
            }
        )
        messages.append(
            {
                "role": "assistant",
                "content": render_observation(step.observation, step.action, cwd, domain),
            }
        )
        cwd = step.observation.cwd or cwd
    control = _control_at(trajectory, depth)
    messages.append(
        {"role": "user", "content": _turn(trajectory, action, depth, prompts_dir, control, True)}
    )
    return messages


def _turn(
    trajectory: Trajectory,
    action: Action,
    turn: int,
    prompts_dir: Path | str | None,
    control: Control | None,
    predicted: bool = False,
) -> str:
    first = turn == 1
    return render_action(
        action,
        turn,
        str(trajectory.domain),
        prompts_dir,
        control,
        task=(trajectory.task_instruction or "") if first else "",
        state=(trajectory.env.initial_observation or "") if first else "",
        predicted=predicted,
    )


def _control_at(trajectory: Trajectory, depth: int) -> Control | None:
    return trajectory.steps[depth - 1].control if 1 <= depth <= len(trajectory.steps) else None


def build_awb_messages(
    trajectory: Trajectory, history: list[Step], action: Action, depth: int
) -> list[Message]:
    """Messages exactly as AgentWorldBench's inference (``eval.py infer``) builds them.

    For trajectories imported from AgentWorldBench (``meta["agentworldbench"]``):
    system = the sample's ``system_str``; each earlier turn's prompt and
    response as recorded (a history observation that differs from the
    recorded one, as in open-loop mode, is sent with the response's marker);
    the current turn's prompt, with the benchmark's suffix when it is not the
    evaluated turn (whose prompt already ends with it). A control instruction
    is appended to the current prompt.
    """
    meta = trajectory.meta[AWB_META]
    prompts = [str(p) for p in meta.get("prompt", [])]
    responses = [str(r) for r in meta.get("response", [])]
    messages: list[Message] = [{"role": "system", "content": str(meta.get("system_str", ""))}]
    for turn, step in enumerate(history, start=1):
        if step.observation is None or step.observation.failed:
            raise ValueError(f"history step {turn} of {trajectory.id!r} has no usable observation")
        messages.append({"role": "user", "content": _awb_prompt(prompts, turn, step.action)})
        messages.append({"role": "assistant", "content": _awb_response(responses, turn, step)})
    current = _awb_prompt(prompts, depth, action)
    if depth != int(meta.get("turn_idx", depth)):
        current += str(meta.get("suffix", ""))
    control = _control_at(trajectory, depth)
    if control is not None:
        current += f"\n\n[Simulation control] {control.instruction}"
    messages.append({"role": "user", "content": current})
    return messages


def _awb_prompt(prompts: list[str], turn: int, action: Action) -> str:
    return prompts[turn - 1] if turn <= len(prompts) else action.render()


def _awb_response(responses: list[str], turn: int, step: Step) -> str:
    assert step.observation is not None
    recorded = responses[turn - 1] if turn <= len(responses) else ""
    found = _MARKER.match(recorded)
    marker = found.group(0) if found else ""
    if recorded[len(marker) :] == step.observation.text:
        return recorded
    return marker + step.observation.text


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


def parse_prediction(
    content: str | None, action: Action, *, trim_block: bool = False
) -> Observation:
    """The observation in a model answer.

    ``<think>`` sections are removed (:func:`strip_thinking`); the last
    ``<predicted_observation>`` block is taken, or the whole text when there is
    none; one newline right after the opening tag and a leading
    ``**Environment Observation:**`` marker are dropped. For command actions a
    screen-shaped answer (prompt and echoed command first, a bare prompt last)
    is reduced to the command's output (:func:`reduce_screen`; the whole
    screen is kept in ``state["screen"]``) and a last line ``[exit_code: N]``
    becomes ``exit_code``. With *trim_block* (AgentWorldBench samples, whose
    ground truth is the block's content without the layout's newlines) one
    newline before the closing tag is dropped as well. Raises
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
    if trim_block and CLOSE_TAG in answer:
        body = body.removesuffix("\n")
    if not isinstance(action, CommandAction):
        return Observation(text=body)
    output = reduce_screen(body, action.command)
    state = {"screen": body} if output != body else None
    match = _EXIT_LINE.search(output)
    if match is None:
        return Observation(text=output, state=state)
    return Observation(text=output[: match.start()], exit_code=int(match.group(1)), state=state)


def prompt_hash(prompts_dir: Path | str | None = None) -> str:
    """Stable hash of every prompt file (``*.j2``, ``*.txt``) under *prompts_dir* and the rendering version.

    Stored with each run so results made with different prompts are never
    mixed up (first 16 hex digits of a SHA-256).
    """
    root = prompts_root(prompts_dir)
    digest = hashlib.sha256(f"render-version:{RENDER_VERSION}\n".encode())
    files = [p for p in root.rglob("*") if p.suffix in (".j2", ".txt") and p.is_file()]
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
