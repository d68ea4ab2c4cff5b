"""The JSON comparator: MCP tool results and any JSON output (domain ``mcp``).

Both observations are parsed as JSON: the whole text, else the first JSON
object or array starting a line (tool results are often prefixed with a
sentence). When either side is not JSON, both are compared as terminal text
(fixed threshold).

MCP results come raw (the tool's own text) or wrapped as MCP content: a
``{"type": "text", "text": ...}`` item, a list of them, or a
``{"content": [...], "isError": ...}`` result (as MCPMark sends it). For the
``mcp`` domain each side is first unwrapped to the text of its content items,
so a raw result and a wrapped one are compared like for like
(:func:`unwrap_mcp`). No input raises: text too deeply nested for JSON is
compared as text.

Every scalar string value, and every number's text, goes through the
configured normalization rules, so volatile values (UUIDs, timestamps, epoch
seconds, hex ids) compare equal whatever key holds them.

Metrics (in [0, 1]):

- ``key_precision`` / ``key_recall`` / ``key_f1``: over the multisets of key paths
  with array indices generalized (``$.items[].id``);
- ``type_agreement``: share of common key paths whose JSON types agree;
- ``value_agreement``: share of common indexed leaf paths (``$.items[0].id``) with equal values;
- ``length_agreement``: share of common array paths with equal lengths;
- ``score`` = 0.3 × key_f1 + 0.1 × types + 0.4 × values + 0.2 × lengths.

Entities: ``key:$.path`` (generalized key paths) and ``value:<scalar>`` (normalized
strings and numbers, 80 characters at most; booleans and null are left out).
Drift: the fixed threshold 0.9 (no calibration data for this domain), any
type, value or length mismatch, or the shared structured rule.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, NamedTuple

from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.calibration.apply import calibrated, calibration_for
from fidelity.compare.config import CompareConfig
from fidelity.compare.normalize import Normalizer
from fidelity.compare.rules import PLACEHOLDER_RE
from fidelity.compare.structured import (
    infra_failure,
    overlap,
    threshold_of,
    value_normalizer,
    verdict,
)
from fidelity.compare.terminal import TerminalComparator
from fidelity.trajectory import Observation

MAX_VALUE = 80
"""Longest scalar value kept as a ``value:`` entity."""

MAX_MISMATCHES = 5
_START_RE = re.compile(r"^[ \t]*[\[{]", re.MULTILINE)
_INDEX_RE = re.compile(r"\[\d+\]")


class Flat(NamedTuple):
    """A JSON document flattened: leaves by indexed path, types and array lengths."""

    leaves: dict[str, str]
    types: dict[str, str]
    lengths: dict[str, int]
    counts: dict[str, int]


def parse_json(text: str) -> tuple[bool, Any]:
    """``(True, value)`` when *text* is (or starts a line with) a JSON document, else ``(False, None)``."""
    try:
        return True, json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        pass
    decoder = json.JSONDecoder()
    for match in _START_RE.finditer(text):
        try:
            value, _ = decoder.raw_decode(text, match.end() - 1)
        except (json.JSONDecodeError, RecursionError):
            continue
        return True, value
    return False, None


def _text_items(value: Any) -> list[str] | None:
    """The texts of MCP content items (``{"type": "text", "text": …}``), None when not content."""
    if isinstance(value, dict) and isinstance(value.get("content"), list):
        value = value["content"]
    items = value if isinstance(value, list) else [value]
    if not items or not all(
        isinstance(i, dict) and i.get("type") == "text" and isinstance(i.get("text"), str)
        for i in items
    ):
        return None
    return [str(i["text"]) for i in items]


def unwrap_mcp(text: str) -> str:
    """The tool's own text inside an MCP content wrapper; *text* itself when not wrapped."""
    stripped = text.strip()
    if stripped[:1] not in ("[", "{"):
        return text
    try:
        texts = _text_items(json.loads(stripped))
    except (json.JSONDecodeError, RecursionError):
        return text
    return "\n".join(texts) if texts is not None else text


def flatten(value: Any, normalizer: Normalizer) -> Flat:
    """Leaves (normalized scalar text), JSON types and array lengths by key path."""
    flat = Flat({}, {}, {}, {})
    _walk(value, "$", flat, normalizer)
    return flat


def _walk(value: Any, path: str, flat: Flat, normalizer: Normalizer) -> None:
    flat.types[path] = _type(value)
    if isinstance(value, dict):
        for key, item in value.items():
            _walk(item, f"{path}.{key}", flat, normalizer)
    elif isinstance(value, list):
        flat.lengths[path] = len(value)
        for index, item in enumerate(value):
            _walk(item, f"{path}[{index}]", flat, normalizer)
    else:
        flat.leaves[path] = _scalar(value, normalizer, flat.counts)


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "null"


def _scalar(value: Any, normalizer: Normalizer, counts: dict[str, int]) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    if isinstance(value, bool) or value is None:
        return text
    text, fired = normalizer.cached(text)
    for name, n in fired.items():
        counts[name] = counts.get(name, 0) + n
    return text


def generic(path: str) -> str:
    """*path* with array indices generalized: ``$.a[3].b`` → ``$.a[].b``."""
    return _INDEX_RE.sub("[]", path)


def json_entities(flat: Flat) -> set[str]:
    """``key:`` paths (generalized) and ``value:`` scalars of a flattened document."""
    found = {"key:" + generic(p) for p in flat.types if p != "$"}
    for path, text in flat.leaves.items():
        kept = flat.types[path] in {"string", "number"} and 0 < len(text) <= MAX_VALUE
        if kept and not PLACEHOLDER_RE.fullmatch(text):
            found.add("value:" + text)
    return found


class JsonComparator:
    """Compares JSON observations (``mcp``, and JSON output elsewhere); fixed threshold."""

    domain = "mcp"

    def __init__(
        self,
        threshold: float | None = None,
        *,
        config: CompareConfig | None = None,
        domain: str = "mcp",
        calibrated: bool = True,
    ) -> None:
        config = config or CompareConfig()
        self.domain = domain
        self.calibration = calibration_for(domain, threshold, config, calibrated)
        self.threshold = threshold_of(domain, config, threshold)
        self.normalizer = value_normalizer(config)
        self.text = TerminalComparator(self.threshold, config=config, calibrated=False)

    def unwrapped(self, observation: Observation) -> Observation:
        """*observation* with an MCP content wrapper removed (``mcp`` domain only)."""
        if self.domain != "mcp":
            return observation
        text = unwrap_mcp(observation.text)
        return (
            observation
            if text == observation.text
            else observation.model_copy(update={"text": text})
        )

    def flat(self, observation: Observation) -> Flat | None:
        """The flattened JSON document of *observation*, None when it holds none."""
        ok, value = parse_json(self.unwrapped(observation).text)
        if not ok:
            return None
        try:
            return flatten(value, self.normalizer)
        except RecursionError:
            return None

    def entities(self, observation: Observation, context: CompareContext) -> set[str]:
        """The entities of one observation (for cross-turn consistency)."""
        flat = self.flat(observation)
        return json_entities(flat) if flat is not None else set()

    def compare(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> StepComparison:
        """Score *sim* against *real* for the step described by *context*."""
        failed = infra_failure(real, sim)
        if failed is not None:
            return failed
        real_flat, sim_flat = self.flat(real), self.flat(sim)
        if real_flat is None or sim_flat is None:
            result = self.text.compare(self.unwrapped(real), self.unwrapped(sim), context)
            result.metrics["json"] = 0.0
        else:
            result = self.compare_flat(real_flat, sim_flat, context)
        return calibrated(self.calibration, result)

    def compare_flat(self, real: Flat, sim: Flat, context: CompareContext) -> StepComparison:
        """The verdict on two flattened documents."""
        precision, recall, f1 = overlap(
            Counter(generic(p) for p in real.types), Counter(generic(p) for p in sim.types)
        )
        types, type_bad = _agreement("type", real.types, sim.types)
        values, value_bad = _agreement("value", real.leaves, sim.leaves)
        lengths, length_bad = _agreement("length", real.lengths, sim.lengths)
        real_e, sim_e = json_entities(real), json_entities(sim)
        counts = Counter(real.counts) + Counter(sim.counts)
        return verdict(
            score=0.3 * f1 + 0.1 * types + 0.4 * values + 0.2 * lengths,
            threshold=self.threshold,
            metrics={
                "json": 1.0,
                "key_precision": precision,
                "key_recall": recall,
                "key_f1": f1,
                "type_agreement": types,
                "value_agreement": values,
                "length_agreement": lengths,
            },
            sim_only=sim_e - real_e,
            real_only=real_e - sim_e,
            context=context,
            normalizations=dict(counts),
            mismatches=[*type_bad, *length_bad, *value_bad][:MAX_MISMATCHES],
        )


def _agreement(what: str, real: dict[str, Any], sim: dict[str, Any]) -> tuple[float, list[str]]:
    """Share of common paths with equal entries, and one reason per differing path."""
    common = sorted(real.keys() & sim.keys())
    differ = [p for p in common if real[p] != sim[p]]
    reasons = [f"{what} {p}: {real[p]!s:.40} != {sim[p]!s:.40}" for p in differ]
    return (1 - len(differ) / len(common) if common else 1.0), reasons
