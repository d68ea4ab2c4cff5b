"""One judgment: the judge's prompt for a compared step, its request, and its verdict.

The per-step part of the LLM judge (:mod:`fidelity.judge` runs it over a stored
run as trajectory tasks); see that module for the protocol. A task runner
(:mod:`fidelity.task`) imports this module only when a task has a judge.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fidelity.errors import (
    EndpointUnreachableError,
    MalformedPredictionError,
    UnknownDomainError,
    UsageError,
)
from fidelity.judge.config import JudgeConfig
from fidelity.store import JudgmentRecord
from fidelity.worldmodels.cache import ResponseCache, request_key
from fidelity.worldmodels.openai_compat import OpenAICompatWorldModel, RequestFailedError
from fidelity.worldmodels.prompting import OFFICIAL_JUDGE, _template, layout, strip_thinking

DIMENSIONS = ("format", "factuality", "consistency", "realism", "quality")
"""AgentWorldBench's judge dimensions, each scored 1-5."""

JUDGE_PROMPTS = "judge"
SYSTEM_TEMPLATE = "system.md.j2"
STEP_TEMPLATE = "step.md.j2"
_JSON_START = re.compile(r"\{")


@dataclass(frozen=True)
class StepToJudge:
    """One compared step and the texts the judge sees."""

    trajectory_id: str
    depth: int
    mode: str
    sample: int
    variables: dict[str, Any]


class JudgmentParseError(MalformedPredictionError):
    """The judge answered, but not with a JSON verdict holding five scores from 1 to 5."""


def parse_verdict(content: str | None) -> tuple[dict[str, float], float]:
    """The five scores and the total score (1-5) of a judge answer.

    ``<think>`` sections are removed and the last JSON object of the answer
    holding ``scores`` (fenced or not) is read: ``scores`` maps every
    dimension to a number from 1 to 5; ``total_score`` (1-5) is the verdict,
    the mean of the scores when the judge left it out. Raises
    :class:`JudgmentParseError` otherwise.
    """
    data = _last_verdict(strip_thinking(content or ""))
    if data is None:
        raise JudgmentParseError('no JSON verdict with "scores" in the judge\'s answer')
    raw = data["scores"]
    missing = [d for d in DIMENSIONS if d not in raw]
    if missing:
        raise JudgmentParseError(f"the verdict's scores miss {missing}")
    scores = {name: _one_to_five(name, raw[name]) for name in DIMENSIONS}
    total = data.get("total_score")
    if total is None:
        return scores, sum(scores.values()) / len(scores)
    return scores, _one_to_five("total_score", total)


def _one_to_five(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 1 <= value <= 5:
        raise JudgmentParseError(f"score {name}={value!r} is not a number from 1 to 5")
    return float(value)


def _last_verdict(text: str) -> dict[str, Any] | None:
    """The last JSON object in *text* whose ``scores`` is an object."""
    decoder = json.JSONDecoder()
    found: dict[str, Any] | None = None
    for match in _JSON_START.finditer(text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(value, dict) and isinstance(value.get("scores"), dict):
            found = value
    return found


def parse_scores(content: str | None) -> dict[str, float]:
    """The five scores (1-5) of a judge answer (see :func:`parse_verdict`)."""
    return parse_verdict(content)[0]


def normalized(value: float) -> float:
    """AgentWorldBench's rescaling of a 1-5 score: ``(x - 1) / 4 * 100``."""
    return (value - 1.0) / 4.0 * 100.0


def overall_score(scores: dict[str, float]) -> float:
    """The mean of the normalized scores over the dimensions (when no total is given)."""
    return sum(normalized(scores[d]) for d in DIMENSIONS) / len(DIMENSIONS)


def shown(action: str, text: str, exit_code: int | None, limit: int | None) -> dict[str, Any]:
    """An observation as the template shows it: text (cut at *limit* characters), exit code."""
    if limit is None:
        return {"action": action, "text": text, "exit_code": exit_code}
    cut = len(text) > limit
    return {
        "action": action,
        "text": text[:limit] + ("\n[… cut by fidelity]" if cut else ""),
        "exit_code": exit_code,
    }


def judge_system(domain: str, prompts_dir: Path | None = None) -> str:
    """The judge system prompt of *domain*.

    ``<domain>/judge_system_prompt.txt`` of *prompts_dir* (the official layout)
    verbatim when it is there, else ``judge/system.md.j2`` rendered for *domain*.
    """
    if prompts_dir is not None:
        official = Path(prompts_dir) / domain / OFFICIAL_JUDGE
        if official.is_file():
            return official.read_text(encoding="utf-8")
    try:
        template = _template(JUDGE_PROMPTS, SYSTEM_TEMPLATE, _judge_templates(prompts_dir))
    except UnknownDomainError as error:
        raise UsageError(f"judge prompts missing: {error}") from error
    return template.render(dimensions=DIMENSIONS, domain=domain).strip()


def _judge_templates(prompts_dir: Path | None) -> Path | None:
    """An official layout has no judge templates of ours: the step message is the bundled one."""
    return None if prompts_dir is not None and layout(prompts_dir) == "official" else prompts_dir


def judge_messages(step: StepToJudge, prompts_dir: Path | None = None) -> list[dict[str, str]]:
    """System and user message of the judge request for *step*."""
    domain = str(step.variables.get("domain", ""))
    system = judge_system(domain, prompts_dir)
    try:
        user = _template(JUDGE_PROMPTS, STEP_TEMPLATE, _judge_templates(prompts_dir))
    except UnknownDomainError as error:
        raise UsageError(f"judge prompts missing: {error}") from error
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": user.render(**step.variables).strip()},
    ]


def client(config: JudgeConfig) -> OpenAICompatWorldModel:
    """The world-model client, sampling like the reference judge (temperature only)."""
    return OpenAICompatWorldModel(
        config.url,
        config.model,
        api_key=config.api_key,
        timeout=config.timeout,
        max_retries=config.max_retries,
        temperature=config.temperature,
        top_p=None,
        top_k=None,
        max_tokens=config.max_tokens,
        prompts_dir=config.prompts_dir,
        backoff_base=config.backoff_base,
        cache=ResponseCache(config.cache) if config.cache is not None else None,
        deadline=config.deadline,
    )


async def _check(client: OpenAICompatWorldModel, config: JudgeConfig) -> None:
    try:
        await client.check()
    except EndpointUnreachableError as error:
        raise _unreachable(config) from error


def _unreachable(config: JudgeConfig) -> EndpointUnreachableError:
    return EndpointUnreachableError(
        f"judge endpoint {config.url} does not answer: start the server or pass --judge-url "
        "with the URL of a running OpenAI-compatible endpoint (stored judgments are kept)"
    )


async def judge_step(
    client: OpenAICompatWorldModel, step: StepToJudge, config: JudgeConfig
) -> JudgmentRecord:
    """One judgment: scores, or a judge failure naming what went wrong.

    Only answers that parse are cached, so a rerun asks again where the judge
    failed. Raises :class:`EndpointUnreachableError` when the endpoint refuses
    every connection attempt.
    """
    key = (step.trajectory_id, step.depth, step.mode, step.sample)
    messages = judge_messages(step, config.prompts_dir)
    cache_key = request_key(config.model, messages, client.sampling(), 0)
    hit, content = client.cache.get(cache_key) if client.cache else (False, None)
    try:
        if not hit:
            content = await client.complete(messages)
        scores, total = parse_verdict(content)
    except EndpointUnreachableError as error:
        raise _unreachable(config) from error
    except (RequestFailedError, MalformedPredictionError) as error:
        message = str(error) if isinstance(error, RequestFailedError) else _named(error)
        return JudgmentRecord(*key, scores=None, overall=None, error=message, raw=content)
    if client.cache is not None and not hit:
        client.cache.put(cache_key, config.model, 0, client.sampling(), content)
    return JudgmentRecord(*key, scores=scores, overall=normalized(total), raw=content)


def _named(error: Exception) -> str:
    return f"{type(error).__name__}: {error}"
