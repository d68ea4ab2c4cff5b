"""Development sets and calibrations of the tool domains (``mcp``, ``search``).

Pairs come from two real replays of ``suites/mcp/suite.jsonl`` (real MCP
servers) or ``suites/search/suite.jsonl`` (the real engine) through
:func:`~devsets.calibration.devset.build_pairs`: faithful pairs are
the replays as they ran, volatile pairs the second replay with its temp
roots and datetimes varied (mcp), drifted pairs one seeded corruption each.
MCP corruptions act on the text inside the MCPMark-serialized result (an
invented entry, a changed number, dropped lines, a swapped error message, a
flipped ``isError``, a stale earlier answer); search corruptions on the
result list (an invented result, dropped results, two results swapped, a
changed title) or on the page and memory text; search volatile pairs write the
result dates another way (the same days).

:func:`fit_monotone` fits the logistic regression with every coefficient
non-negative (features are gaps and counts, so a larger difference never
lowers the drift probability): a feature whose fitted weight comes out
negative is dropped (weight 0) and the rest refitted.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from typing import Any

from devsets.calibration.devset import (
    Corruption,
    changed_number,
    dropped_lines,
    invented_entry,
    invented_url,
    stale_state,
    wrong_error_message,
)
from devsets.calibration.fit import Scored, choose_cutoff
from fidelity.compare.calibration import Calibration, comparison_vector, feature_names
from fidelity.trajectory import Observation, Step

TextCorruption = Callable[
    [Observation, list[Step], random.Random], tuple[Observation, str | None] | None
]
INVENTED_RESULTS = (
    ("https://docs.python.org/3.11/library/fastjson.html", "fastjson — Faster JSON encoding"),
    ("https://foldoc.org/hyperlambda", "hyperlambda"),
    ("https://docs.python.org/3.11/howto/async-io-patterns.html", "Async IO patterns HOWTO"),
)
_RESULT_RE = re.compile(r"^\[(\d+)\] ", re.MULTILINE)
_TEMP_RE = re.compile(r"/tmp/tmp[a-z0-9_]{8}")
_ISO_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")


# -- mcp ------------------------------------------------------------------------------------


def _inner(corrupt: TextCorruption) -> Corruption:
    """*corrupt* applied to the first text content of an MCPMark-serialized result."""

    def apply(
        obs: Observation, history: list[Step], rng: random.Random
    ) -> tuple[Observation, str | None] | None:
        result = _result(obs.text)
        if result is None:
            return corrupt(obs, history, rng)
        content = result.get("content")
        if not (isinstance(content, list) and content and isinstance(content[0], dict)):
            return None
        text = content[0].get("text")
        if not isinstance(text, str):
            return None
        done = corrupt(Observation(text=text, exit_code=obs.exit_code), history, rng)
        if done is None:
            return None
        content[0] = {**content[0], "text": done[0].text}
        result.pop("structuredContent", None)  # it would repeat the real text
        return obs.model_copy(update={"text": json.dumps(result, ensure_ascii=False)}), done[1]

    return apply


def _result(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def flipped_is_error(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """A tool error shown as success, or a success shown as an error."""
    result = _result(obs.text)
    if result is None or "content" not in result:
        return None
    failed = bool(result.get("isError"))
    result["isError"] = not failed
    if not failed:
        result["content"] = [{"type": "text", "text": "Error: operation failed"}]
        result.pop("structuredContent", None)
    return obs.model_copy(
        update={"text": json.dumps(result, ensure_ascii=False), "exit_code": int(not failed)}
    ), None


MCP_CORRUPTIONS: dict[str, Corruption] = {
    "invented_entry": _inner(invented_entry),
    "changed_number": _inner(changed_number),
    "dropped_lines": _inner(dropped_lines),
    "wrong_error_message": _inner(wrong_error_message),
    "flipped_is_error": flipped_is_error,
    "stale_state": stale_state,
}


def mcp_volatile(obs: Observation, rng: random.Random) -> Observation | None:
    """Another temp root and other clock times, as another run gives."""
    root = "/tmp/tmp" + "".join(
        rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(8)
    )
    text = _TEMP_RE.sub(root, obs.text)
    text = _ISO_RE.sub(
        lambda m: f"{m.group()[:11]}{rng.randrange(24):02d}:{rng.randrange(60):02d}:07", text
    )
    return obs.model_copy(update={"text": text}) if text != obs.text else None


# -- search ---------------------------------------------------------------------------------


def _blocks(text: str) -> tuple[str, list[str]] | None:
    """The text before the first ``[n] URL`` result and the result blocks."""
    starts = [m.start() for m in _RESULT_RE.finditer(text)]
    if not starts:
        return None
    ends = [*starts[1:], len(text)]
    return text[: starts[0]], [text[a:b].rstrip("\n") for a, b in zip(starts, ends, strict=True)]


def _join(head: str, blocks: list[str]) -> str:
    numbered = [_RESULT_RE.sub(f"[{i}] ", block, count=1) for i, block in enumerate(blocks, 1)]
    return head + "\n\n".join(numbered)


def invented_result(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """A result whose URL the engine never returned, at a random rank."""
    parts = _blocks(obs.text)
    if parts is None:
        return None
    head, blocks = parts
    url, title = rng.choice(INVENTED_RESULTS)
    block = (
        f"[0] {url}\nTitle: {title}\nSnippet: {title}. See the examples below.\nDate: 2026-10-07"
    )
    blocks.insert(rng.randrange(len(blocks) + 1), block)
    return obs.model_copy(update={"text": _join(head, blocks[:10])}), url


def dropped_results(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """A third of the results (at least one) missing."""
    parts = _blocks(obs.text)
    if parts is None or len(parts[1]) < 2:
        return None
    head, blocks = parts
    for index in sorted(rng.sample(range(len(blocks)), max(1, len(blocks) // 3)), reverse=True):
        del blocks[index]
    return obs.model_copy(update={"text": _join(head, blocks)}), None


def swapped_results(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """Two results in each other's rank."""
    parts = _blocks(obs.text)
    if parts is None or len(parts[1]) < 2:
        return None
    head, blocks = parts
    a, b = rng.sample(range(len(blocks)), 2)
    blocks[a], blocks[b] = blocks[b], blocks[a]
    return obs.model_copy(update={"text": _join(head, blocks)}), None


def changed_title(
    obs: Observation, history: list[Step], rng: random.Random
) -> tuple[Observation, str | None] | None:
    """One result's title rewritten."""
    titles = list(re.finditer(r"^Title: (.+)$", obs.text, re.MULTILINE))
    if not titles:
        return None
    match = rng.choice(titles)
    new = f"{match.group(1).split(' — ')[0]} — Complete Guide and Reference"
    text = obs.text[: match.start(1)] + new + obs.text[match.end(1) :]
    return obs.model_copy(update={"text": text}), None


_DATE_LINE_RE = re.compile(r"^Date: (\d{4})-(\d{2})-(\d{2})$", re.MULTILINE)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def search_volatile(obs: Observation, rng: random.Random) -> Observation | None:
    """The result dates written another way (``Jan 13, 1999`` or ``13 Jan 1999``): same days."""
    if _blocks(obs.text) is None:
        return None
    english = rng.random() < 0.5

    def respell(match: re.Match[str]) -> str:
        year, month, day = match[1], _MONTHS[int(match[2]) - 1], int(match[3])
        return f"Date: {month} {day}, {year}" if english else f"Date: {day} {month} {year}"

    text = _DATE_LINE_RE.sub(respell, obs.text)
    return obs.model_copy(update={"text": text}) if text != obs.text else None


SEARCH_CORRUPTIONS: dict[str, Corruption] = {
    "invented_result": invented_result,
    "dropped_results": dropped_results,
    "swapped_results": swapped_results,
    "changed_title": changed_title,
    "invented_entry": invented_entry,
    "changed_number": changed_number,
    "dropped_lines": dropped_lines,
    "invented_url": invented_url,
    "stale_state": stale_state,
}


# -- fitting --------------------------------------------------------------------------------


def fit_monotone(
    train: Sequence[Scored], seed: int, domain: str, max_false_alarms: float
) -> Calibration:
    """A logistic regression with non-negative weights (dropped features weigh 0), and its cutoff."""
    from sklearn.linear_model import LogisticRegression

    names = feature_names(domain)
    y = [int(s.pair.drift) for s in train]
    kept = list(range(len(names)))
    while True:
        x = [[s.vector[i] for i in kept] for s in train]
        model = LogisticRegression(
            class_weight="balanced", C=10.0, max_iter=5000, random_state=seed
        )
        model.fit(x, y)
        negative = [kept[i] for i, c in enumerate(model.coef_[0]) if c < 0]
        if not negative:
            break
        kept = [i for i in kept if i not in negative]
    weights = dict(zip(kept, (float(c) for c in model.coef_[0]), strict=True))
    probabilities = [float(p) for p in model.predict_proba(x)[:, 1]]
    return Calibration(
        domain=domain,
        features=list(names),
        coef=[round(weights.get(i, 0.0), 6) for i in range(len(names))],
        intercept=round(float(model.intercept_[0]), 6),
        cutoff=choose_cutoff(probabilities, y, max_false_alarms),
        fit={
            "seed": seed,
            "train_pairs": len(train),
            "train_drifted": sum(y),
            "max_false_alarms": max_false_alarms,
            "monotone": "negative weights dropped",
        },
    )


__all__ = [
    "MCP_CORRUPTIONS",
    "SEARCH_CORRUPTIONS",
    "comparison_vector",
    "fit_monotone",
    "mcp_volatile",
    "search_volatile",
]
