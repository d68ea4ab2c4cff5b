"""Whole trajectories for fine-tuning an agent, with their trust: ``--to sft``.

One Parquet row per admitted trajectory (its kept steps), in the forms the trainers read
(``../shared/FORMATS.md``): the agent's view, as a chat. The system prompt (the
trajectory's ``system_prompt``, else the options'), the task as the first user turn (the
instruction, then what the agent saw first), then per step the action as an assistant turn
and the observation after it: a ``tool`` message answering a tool call (``tool_calls``,
OpenAI's form, in the domains whose actions are tool calls), else a ``user`` message. The
observation after the last action is left out (nothing follows it to learn from).

The turn of depth *d* is trusted when *d* is within the trajectory's trust horizon (as
``extra_info.trust_mask`` counts it in the RL rows). The row's columns serve the trainers
each in the way it can honour that:

- ``messages``: the chat **cut** after the last trusted action, every message in it
  trainable: verl's multi-turn SFT dataset (``data.multiturn.messages_key``, default
  ``messages``: it trains every assistant message), TRL's ``SFTTrainer`` (conversational
  ``messages``), OpenRLHF's multi-turn SFT (``--data.input_key messages --data.multiturn``),
  SkyRL's SFT (``messages_key``).
- ``trajectory``: the **whole** chat, each message with ``step_loss_mask`` (0 on an untrusted
  action, 1 elsewhere) and ``loss_weight`` (1.0 on a trusted action, 0.0 elsewhere): slime's
  SFT rollout (``--input-key trajectory``: a message whose ``step_loss_mask`` is not 1 is
  masked).
- ``conversations`` (ShareGPT ``from``/``value``: ``human``, ``gpt``, ``function_call`` with
  ``{"name", "arguments"}`` JSON, ``observation``), ``system`` and ``tools`` (a JSON string):
  LLaMA-Factory's sharegpt reader, cut like ``messages`` (its default path trains every
  ``gpt`` and ``function_call`` turn).
- ``input_ids`` and ``assistant_masks`` (only with a tokenizer, ``tokenizer``): the whole
  chat rendered by the tokenizer's chat template and tokenized, 1 on the tokens of trusted
  actions only: TRL's pre-tokenized rows (tokenization is skipped and the mask becomes the
  labels), so TRL trains on the trusted turns of the whole trajectory.
- ``extra_info``: fidelity's verdicts (the RL rows' :data:`~fidelity.formats.export_base.EXTRA_INFO_FIELDS`)
  and ``data_source``.

A trajectory with no trusted action (its trust horizon 0, or no step kept) gives no row:
no trainer has anything to learn from it. One without a task is refused
(:func:`~fidelity.formats.export_base.task_of`).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from fidelity.errors import UsageError
from fidelity.formats import export_base
from fidelity.trajectory import Step, ToolAction, Trajectory

SFT_COLUMNS: Final = (
    "messages",
    "trajectory",
    "conversations",
    "system",
    "tools",
    "extra_info",
)
"""The columns of every row (``input_ids`` and ``assistant_masks`` follow with a tokenizer)."""

MESSAGE_FIELDS: Final = (
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "step_loss_mask",
    "loss_weight",
)
"""The fields of each message of ``messages`` and ``trajectory`` (null where none)."""


def sft_schema(tokenized: bool = False) -> Any:
    """The Arrow schema of the rows (with *tokenized*: ``input_ids`` and ``assistant_masks``)."""
    pa, _ = export_base.arrow()
    function = pa.struct([("name", pa.string()), ("arguments", pa.string())])
    call = pa.struct([("id", pa.string()), ("type", pa.string()), ("function", function)])
    message = pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("tool_calls", pa.list_(call)),
            ("tool_call_id", pa.string()),
            ("step_loss_mask", pa.int8()),
            ("loss_weight", pa.float64()),
        ]
    )
    turn = pa.struct([("from", pa.string()), ("value", pa.string())])
    fields = [
        ("messages", pa.list_(message)),
        ("trajectory", pa.list_(message)),
        ("conversations", pa.list_(turn)),
        ("system", pa.string()),
        ("tools", pa.string()),
        ("extra_info", _extra_type(pa)),
    ]
    if tokenized:
        fields += [("input_ids", pa.list_(pa.int64())), ("assistant_masks", pa.list_(pa.int8()))]
    return pa.schema(fields)


def _extra_type(pa: Any) -> Any:
    base = export_base.extra_info_type()
    return pa.struct(
        [*(base.field(i) for i in range(base.num_fields)), ("data_source", pa.string())]
    )


class SftRows:
    """Builds the rows of one export (the tokenizer, when one is given, loaded once)."""

    def __init__(self, options: export_base.ExportSettings) -> None:
        self.options = options
        self.tokenizer = None if options.tokenizer is None else load_tokenizer(options.tokenizer)

    def row(
        self,
        trajectory: Trajectory,
        fidelity: export_base.TrajectoryFidelity,
        steps: Sequence[Step],
        extra: dict[str, Any],
    ) -> dict[str, Any] | None:
        """The row of *trajectory*'s kept *steps*; None when no action of them is trusted."""
        trusted = min(fidelity.trust_horizon, len(steps))
        whole = chat(trajectory, steps, trusted, self.options)
        if trusted == 0:
            return None
        cut = _cut(whole)
        system = whole[0]["content"] if whole[0]["role"] == "system" else None
        tools = trajectory.env.tools
        data: dict[str, Any] = {
            "messages": cut,
            "trajectory": whole,
            "conversations": sharegpt(cut),
            "system": system,
            "tools": None if not tools else json.dumps(tools, ensure_ascii=False),
            "extra_info": {
                **extra,
                "data_source": export_base.data_source(trajectory, self.options),
            },
        }
        if self.tokenizer is not None:
            data["input_ids"], data["assistant_masks"] = assistant_masks(
                self.tokenizer, whole, tools
            )
        return data


def chat(
    trajectory: Trajectory,
    steps: Sequence[Step],
    trusted: int,
    options: export_base.ExportSettings,
) -> list[dict[str, Any]]:
    """The whole chat of *steps* (the last observation left out), the first *trusted* actions
    with ``step_loss_mask`` 1 and ``loss_weight`` 1.0, every later action with 0."""
    messages = [
        _message(m["role"], m["content"])
        for m in export_base.opening(trajectory, options, required=True)
    ]
    for depth, step in enumerate(steps, start=1):
        keep = depth <= trusted
        action = step.action
        call_id = f"call_{depth}"
        if isinstance(action, ToolAction):
            arguments = json.dumps(action.args, ensure_ascii=False)
            function = {"name": action.tool, "arguments": arguments}
            calls = [{"id": call_id, "type": "function", "function": function}]
            messages.append(_message("assistant", "", tool_calls=calls, trained=keep))
        else:
            messages.append(_message("assistant", action.render(), trained=keep))
        if depth == len(steps):
            break
        seen = step.observation.text if step.observation is not None else ""
        if isinstance(action, ToolAction):
            messages.append(_message("tool", seen, tool_call_id=call_id))
        else:
            messages.append(_message("user", seen))
    return messages


def _message(
    role: str,
    content: str,
    *,
    tool_calls: list[dict[str, Any]] | None = None,
    tool_call_id: str | None = None,
    trained: bool | None = None,
) -> dict[str, Any]:
    """One chat message; *trained*: an action, in the loss (True) or out of it (False)."""
    return {
        "role": role,
        "content": content,
        "tool_calls": tool_calls,
        "tool_call_id": tool_call_id,
        "step_loss_mask": 0 if trained is False else 1,
        "loss_weight": 1.0 if trained else 0.0,
    }


def _cut(whole: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """*whole* up to its last trusted action (the untrusted actions and what follows go)."""
    last = max(i for i, m in enumerate(whole) if m["role"] == "assistant" and m["loss_weight"])
    return whole[: last + 1]


def sharegpt(messages: Sequence[dict[str, Any]]) -> list[dict[str, str]]:
    """*messages* (the system message left out: it is the ``system`` column) as LLaMA-Factory's
    ShareGPT turns: ``human``, ``gpt``, ``function_call`` (``{"name", "arguments"}`` JSON),
    ``observation`` (a tool's answer)."""
    turns = []
    for message in messages:
        role = message["role"]
        if role == "system":
            continue
        if role == "assistant" and message["tool_calls"]:
            function = message["tool_calls"][0]["function"]
            call = {"name": function["name"], "arguments": json.loads(function["arguments"])}
            turns.append({"from": "function_call", "value": json.dumps(call, ensure_ascii=False)})
        elif role == "assistant":
            turns.append({"from": "gpt", "value": message["content"]})
        elif role == "tool":
            turns.append({"from": "observation", "value": message["content"]})
        else:
            turns.append({"from": "human", "value": message["content"]})
    return turns


def load_tokenizer(folder: Path) -> Any:
    """A tokenizer with a chat template from a local folder (``transformers``; never a download)."""
    try:
        transformers = importlib.import_module("transformers")
    except ImportError as exc:
        raise UsageError(
            f"--sft-tokenizer needs transformers, which is not installed ({exc}): "
            "pip install transformers"
        ) from exc
    if not Path(folder).is_dir():
        raise UsageError(f"--sft-tokenizer {folder}: not a folder (a tokenizer saved locally)")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--sft-tokenizer {folder}: not a tokenizer ({exc})") from exc
    if not getattr(tokenizer, "chat_template", None):
        raise UsageError(f"--sft-tokenizer {folder}: the tokenizer has no chat template")
    if not getattr(tokenizer, "is_fast", False):
        raise UsageError(f"--sft-tokenizer {folder}: a fast tokenizer is needed (offsets)")
    return tokenizer


def assistant_masks(
    tokenizer: Any, messages: Sequence[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[list[int], list[int]]:
    """``(input_ids, assistant_masks)`` of the whole chat, as TRL's pre-tokenized rows hold them.

    The chat is rendered once by the tokenizer's own template. An action's text is what the
    rendering of the chat through that action adds to the rendering of the chat before it
    with the generation prompt (OpenRLHF's rule); its tokens are 1 in the mask when the
    action is trusted (``loss_weight``), every other token 0."""
    chat_messages = [_template_message(m) for m in messages]
    kwargs: dict[str, Any] = {"tokenize": False}
    if tools:
        kwargs["tools"] = tools
    full = tokenizer.apply_chat_template(chat_messages, **kwargs)
    spans = []
    for index, message in enumerate(messages):
        if message["role"] != "assistant" or not message["loss_weight"]:
            continue
        before = tokenizer.apply_chat_template(
            chat_messages[:index], add_generation_prompt=True, **kwargs
        )
        through = tokenizer.apply_chat_template(chat_messages[: index + 1], **kwargs)
        if not (full.startswith(through) and through.startswith(before)):
            raise UsageError(
                "--sft-tokenizer: its chat template does not render a conversation as the sum "
                "of its turns (a template that rewrites earlier turns), so the trusted turns' "
                "tokens cannot be told apart"
            )
        spans.append((len(before), len(through)))
    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    ids = list(encoded["input_ids"])
    mask = [
        int(any(start <= begin and end <= stop for start, stop in spans))
        for begin, end in encoded["offset_mapping"]
    ]
    return ids, mask


def _template_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message as a chat template takes it: tool calls' arguments as objects."""
    shown: dict[str, Any] = {"role": message["role"], "content": message["content"]}
    if message["tool_calls"]:
        shown["tool_calls"] = [
            {
                "id": call["id"],
                "type": call["type"],
                "function": {
                    "name": call["function"]["name"],
                    "arguments": json.loads(call["function"]["arguments"]),
                },
            }
            for call in message["tool_calls"]
        ]
    if message["tool_call_id"] is not None:
        shown["tool_call_id"] = message["tool_call_id"]
    return shown
