"""The os comparator: OSWorld accessibility trees, the desktop backend's observations.

Each side becomes a list of nodes: from the XML tree (``state["tree"]`` of a
real observation, or a simulated text that is the XML) when both sides have
it, else from OSWorld's linearised table (the observation's text). A node is
keyed by role + name, plus its ancestor path (application, frame, …) when
both sides are trees; repeated keys are matched in document order.

Matched nodes are compared on text, position and size (equal within
:data:`PIXELS`) and, for trees, on the states that carry meaning
(checked, selected, focused, expanded, sensitive…). Volatile parts are
normalized on both sides: the unsaved-changes marker (``*name``),
clock times and dates (file chooser columns), the temporary home folder,
trailing spaces of menu labels and blank terminal lines.

Drift: a matched node whose meaningful states differ (a checkbox the model
got wrong), a different exit status, or the shipped calibration (``calibration/os.json``, fitted by
``benchmarks/calibrate_os.py`` on two real desktop replays plus labeled
corruptions; every coefficient is non-negative, so a larger difference never
lowers the drift probability), or without it any mismatch.

A side that is neither a tree with its states nor a table goes to
:class:`ElementSetComparator` (AgentWorldBench's os shapes). Its trees, OSWorld's
linearised table (a header line ``tag<TAB>name<TAB>text<TAB>class…`` and one element per
line) or its XML rooted at ``desktop-frame``, are compared as multisets of elements,
positions and sizes left out: ``element_f1`` over (role, name) pairs, ``text_f1`` over
(role, name, text) triples, ``role_f1`` over roles, ``score`` = 0.5 × element_f1 + 0.3 ×
text_f1 + 0.2 × role_f1, entities ``element:<role> '<name>'``. Otherwise both sides
parsed as JSON follow the :class:`~fidelity.compare.jsondata.JsonComparator` rules, and
anything else the terminal comparator's with a fixed threshold (0.9; no calibration data
for this shape). No input raises.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from dataclasses import dataclass
from html import unescape

from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.calibration.apply import calibration_for
from fidelity.compare.config import CompareConfig
from fidelity.compare.entities import extract
from fidelity.compare.jsondata import JsonComparator, json_entities
from fidelity.compare.structured import infra_failure, listed, overlap, verdict
from fidelity.sandboxes.desktop_tree import CP, ST, kept, pair, parse_table, parse_xml, rows
from fidelity.trajectory import Observation

PIXELS = 4
"""Positions and sizes within this many pixels are equal (fonts, window placement)."""

MEANINGFUL_STATES = (
    "checked", "selected", "focused", "expanded", "sensitive", "enabled", "pressed",
    "editable", "active", "modal",
)  # fmt: skip

_MONTH = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\w*"
_TIME = re.compile(
    r"\b\d{1,2}[:\u2236]\d{2}(?:[:\u2236]\d{2})?(?:\s?[AP]M)?\b"  # GTK writes 22∶16
    r"|\b\d{4}-\d{2}-\d{2}\b"
    rf"|\b\d{{1,2}} {_MONTH} \d{{4}}\b"
    rf"|\b{_MONTH} +\d{{1,2}}(?: +\d{{4}}\b)?"  # ls -l
    r"|\b(?:Yesterday|Today|Mon|Tue|Wed|Thu|Fri|Sat|Sun)\b"
)
_HOME = re.compile(r"/tmp/fidelity-desktop-[\w-]+/home")


@dataclass(frozen=True)
class Node:
    """One node as compared: key, text, geometry and meaningful states."""

    key: str
    text: str
    position: tuple[int, int] | None
    size: tuple[int, int] | None
    states: frozenset[str] | None


def normalize(value: str) -> str:
    """*value* with volatile parts replaced (times, dates, home folder, trailing blanks)."""
    value = _HOME.sub("/home/user", value).replace("\u200e", "").replace("\u200f", "")
    value = _TIME.sub("<TIME>", value)
    lines = [line.rstrip() for line in value.split("\n")]
    return "\n".join(lines).strip("\n").strip()


def _name(raw: str) -> str:
    return normalize(raw.lstrip("*"))  # the unsaved-changes marker


def _tree_nodes(root: ET.Element) -> list[Node]:
    nodes: list[Node] = []

    def walk(node: ET.Element, path: tuple[str, ...]) -> None:
        label = f"{node.tag}:{_name(node.get('name', ''))}"
        if node is not root and kept(node):
            states = frozenset(s for s in MEANINGFUL_STATES if node.get(f"{{{ST}}}{s}") == "true")
            nodes.append(
                Node(
                    key="/".join((*path, label)),
                    text=normalize(node.text or ""),
                    position=pair(node.get(f"{{{CP}}}screencoord")),
                    size=pair(node.get(f"{{{CP}}}size")),
                    states=states,
                )
            )
        keep_in_path = node.tag in ("application", "frame", "dialog", "file-chooser", "window")
        child_path = (*path, label) if keep_in_path else path
        for child in node:
            walk(child, child_path)

    walk(root, ())
    return nodes


def _sim_tree(observation: Observation) -> ET.Element | None:
    state = observation.state or {}
    tree = state.get("tree")
    if isinstance(tree, str):
        return parse_xml(tree)
    text = observation.text.strip()
    return parse_xml(text) if text.startswith("<desktop-frame") else None


def _table_nodes(observation: Observation) -> list[Node] | None:
    table = parse_table(observation.text)
    if table is None:
        root = _sim_tree(observation)
        table = rows(root) if root is not None else None
    if table is None:
        return None
    return [
        Node(
            key=f"{r.tag}:{_name(r.name)}",
            text=normalize(r.text),
            position=r.position,
            size=r.size,
            states=None,
        )
        for r in table
    ]


def nodes_of(real: Observation, sim: Observation) -> tuple[list[Node], list[Node]] | None:
    """Both sides' nodes in one shared form (trees when both have one, else tables)."""
    real_tree, sim_tree = _sim_tree(real), _sim_tree(sim)
    if real_tree is not None and sim_tree is not None:
        return _tree_nodes(real_tree), _tree_nodes(sim_tree)
    real_nodes, sim_nodes = _table_nodes(real), _table_nodes(sim)
    if real_nodes is None or sim_nodes is None:
        return None
    return real_nodes, sim_nodes


def _close(a: tuple[int, int] | None, b: tuple[int, int] | None) -> bool:
    if a is None or b is None:
        return a == b
    return abs(a[0] - b[0]) <= PIXELS and abs(a[1] - b[1]) <= PIXELS


@dataclass
class _Match:
    pairs: list[tuple[Node, Node]]
    real_only: list[Node]
    sim_only: list[Node]


def match(real: list[Node], sim: list[Node]) -> _Match:
    """Pair nodes with equal keys in document order; the rest are one-sided."""
    waiting: dict[str, list[Node]] = defaultdict(list)
    for node in sim:
        waiting[node.key].append(node)
    pairs: list[tuple[Node, Node]] = []
    real_only: list[Node] = []
    for node in real:
        queue = waiting.get(node.key)
        if queue:
            pairs.append((node, queue.pop(0)))
        else:
            real_only.append(node)
    sim_only = [n for queue in waiting.values() for n in queue]
    return _Match(pairs, real_only, sim_only)


def _agreement(bad: int, total: int) -> float:
    return 1.0 - bad / total if total else 1.0


class OsComparator:
    """Compares OSWorld accessibility trees or their linearised tables (see module doc)."""

    domain = "os"

    def __init__(
        self,
        threshold: float | None = None,
        *,
        config: CompareConfig | None = None,
        calibrated: bool = True,
    ) -> None:
        config = config or CompareConfig()
        self.threshold = threshold if threshold is not None else config.threshold(self.domain, 1.0)
        self.calibration = calibration_for(self.domain, threshold, config, calibrated)
        self.fallback = ElementSetComparator(threshold, config=config)

    def entities(self, observation: Observation, context: CompareContext) -> set[str]:
        """Role:name labels of the observation's nodes (for cross-turn consistency)."""
        nodes = _table_nodes(observation)
        if nodes is None:
            return self.fallback.entities(observation, context)
        return {f"node:{n.key}" for n in nodes if n.key.split(":", 1)[1]}

    def compare(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> StepComparison:
        """Score *sim* against *real* for the step described by *context*."""
        failed = infra_failure(real, sim)
        if failed is not None:
            return failed
        both = nodes_of(real, sim)
        exit_match = None if sim.exit_code is None else sim.exit_code == real.exit_code
        if both is None:  # the benchmark's other os shapes (JSON, command output)
            return self.fallback.compare(real, sim, context)
        found = match(*both)
        return self._decide(self._verdict(found, *both), exit_match)

    def _verdict(self, found: _Match, real: list[Node], sim: list[Node]) -> StepComparison:
        texts = [(r, s) for r, s in found.pairs if r.text != s.text]
        geometry = [
            (r, s)
            for r, s in found.pairs
            if not (_close(r.position, s.position) and _close(r.size, s.size))
        ]
        states = [(r, s) for r, s in found.pairs if r.states != s.states]
        matched = len(found.pairs)
        identical = matched - len({id(r) for r, _ in (*texts, *geometry, *states)})
        metrics = {
            "node_precision": matched / len(sim) if sim else float(not real),
            "node_recall": matched / len(real) if real else float(not sim),
            "text_agreement": _agreement(len(texts), matched),
            "geometry_agreement": _agreement(len(geometry), matched),
            "state_agreement": _agreement(len(states), matched),
            "text_mismatches": float(len(texts)),
            "geometry_mismatches": float(len(geometry)),
            "state_mismatches": float(len(states)),
            "nodes_changed": float(len(found.real_only) + len(found.sim_only)),
        }
        score = identical / max(len(real), len(sim)) if real or sim else 1.0
        reasons = [f"text of {r.key}: {r.text[:60]!r} ≠ {s.text[:60]!r}" for r, s in texts[:5]]
        reasons += [
            f"moved {r.key}: {r.position}/{r.size} ≠ {s.position}/{s.size}" for r, s in geometry[:5]
        ]
        reasons += [f"states of {r.key}" for r, _ in states[:5]]
        return StepComparison(
            score=round(score, 6),
            drift=False,
            metrics=metrics,
            hallucinations=[n.key for n in found.sim_only],
            omissions=[n.key for n in found.real_only],
            reasons=reasons,
        )

    def _decide(self, comparison: StepComparison, exit_match: bool | None) -> StepComparison:
        findings = [
            *comparison.reasons,
            *listed("invented", comparison.hallucinations),
            *listed("missing", comparison.omissions),
        ]
        comparison = comparison.model_copy(update={"exit_match": exit_match})
        hard = ["the action's exit status differs"] if exit_match is False else []
        flipped = int(comparison.metrics.get("state_mismatches", 0))
        if flipped:  # checked, selected, focused…: a toggle the model got wrong is never volatile
            hard.append(f"states differ on {flipped} node(s)")
        if self.calibration is not None:
            return self.calibration.decide(comparison, hard, findings)
        drift = bool(hard) or comparison.score < self.threshold
        return comparison.model_copy(
            update={"drift": drift, "reasons": [*hard, *findings] if drift else []}
        )


# -- AgentWorldBench's os shapes: element sets, JSON, text ------------------------------

_TABLE_HEADER = re.compile(r"^[ \t]*tag\tname\ttext", re.MULTILINE)
_XML_ROOT = re.compile(r"<desktop-frame\b")
_XML_TAG = re.compile(r"<([A-Za-z][\w.:-]*)((?:\s+[\w.:-]+\s*=\s*(?:\"[^\"]*\"|'[^']*'))*)\s*/?>")
_NAME_ATTR = re.compile(r"(?:^|\s)name\s*=\s*(?:\"([^\"]*)\"|'([^']*)')")

Element = tuple[str, str, str]
"""(role, name, text) of one accessibility element."""


def parse_tree(text: str) -> list[Element] | None:
    """The elements of an OSWorld accessibility tree (table or XML); None when *text* is neither."""
    header = _TABLE_HEADER.search(text)
    if header is not None:
        rows = text[header.end() :].split("\n")[1:]
        elements = []
        for row in rows:
            cells = row.split("\t")
            if len(cells) >= 2 and cells[0].strip():
                text_cell = cells[2].strip() if len(cells) > 2 else ""
                elements.append((cells[0].strip(), cells[1].strip(), text_cell))
        return elements
    if _XML_ROOT.search(text) is None:
        return None
    elements = []
    for match in _XML_TAG.finditer(text):
        name = _NAME_ATTR.search(match.group(2))
        value = unescape((name.group(1) or name.group(2) or "") if name else "")
        elements.append((match.group(1), value, ""))
    return elements


def tree_entities(elements: list[Element]) -> set[str]:
    """``element:<role> '<name>'`` of every named element."""
    return {f"element:{role} {name!r}" for role, name, _ in elements if name}


class ElementSetComparator:
    """The benchmark's other os shapes: OSWorld trees as element sets (AgentWorldBench's
    form, without positions), JSON as JSON, else terminal text (see the module doc)."""

    domain = "os"

    def __init__(
        self, threshold: float | None = None, *, config: CompareConfig | None = None
    ) -> None:
        self.json = JsonComparator(threshold, config=config, domain=self.domain)
        self.threshold = self.json.threshold

    def entities(self, observation: Observation, context: CompareContext) -> set[str]:
        """The entities of one observation (for cross-turn consistency)."""
        tree = parse_tree(observation.text)
        if tree is not None:
            return tree_entities(tree)
        flat = self.json.flat(observation)
        if flat is not None:
            return json_entities(flat)
        text, _ = self.json.text.normalizer.cached(observation.text)
        return extract(text, context.action.render())

    def compare(
        self, real: Observation, sim: Observation, context: CompareContext
    ) -> StepComparison:
        """Score *sim* against *real* for the step described by *context*."""
        failed = infra_failure(real, sim)
        if failed is not None:
            return failed
        real_tree, sim_tree = parse_tree(real.text), parse_tree(sim.text)
        if real_tree is not None and sim_tree is not None:
            return self.compare_trees(real_tree, sim_tree, context)
        return self.json.compare(real, sim, context)

    def compare_trees(
        self, real: list[Element], sim: list[Element], context: CompareContext
    ) -> StepComparison:
        """The verdict on two element lists (positions and sizes left out)."""
        _, _, elements = overlap(Counter(e[:2] for e in real), Counter(e[:2] for e in sim))
        _, _, texts = overlap(Counter(real), Counter(sim))
        _, _, roles = overlap(Counter(e[0] for e in real), Counter(e[0] for e in sim))
        real_e, sim_e = tree_entities(real), tree_entities(sim)
        return verdict(
            score=0.5 * elements + 0.3 * texts + 0.2 * roles,
            threshold=self.threshold,
            metrics={"tree": 1.0, "element_f1": elements, "text_f1": texts, "role_f1": roles},
            sim_only=sim_e - real_e,
            real_only=real_e - sim_e,
            context=context,
            normalizations={},
        )
