"""The web comparator: BrowserGym accessibility-tree text.

Input: one node per line, indented by depth, ``[bid] role 'name' props``
(``[12] link 'About', clickable, url='http://localhost:8000/about'``); names
in double quotes (``[7] heading "Today's deals"``, as BrowserGym and WebArena
print a name holding an apostrophe) and space-separated properties
(``focused: True``) are read too; lines
without a bid are accepted. Element ids (bids) are dropped before anything
else (rule ``web_bid``): BrowserGym numbers nodes in document order, so the
same page reached another way gets other ids. Random per-page suffixes of
element ids and names (``form-notice-k2j4h9``: six to twelve lowercase
letters and digits, both present, after a word and a dash) become ``<ID>``
(rule ``web_random_id``); session tokens in link URLs are normalized by the
shared ``signed_token`` rule. Two more things differ between two real runs of
one site: folders made by ``mkdtemp`` (``/tmp/fidelity-browser-4gm_ywzu``: a
prefix ending in a dash, then eight of ``[a-z0-9_]``; fidelity's own put the owner's
pid before them, ``/tmp/fidelity-browser-812-4gm_ywzu``) become ``<TMP>`` (rule
``web_temp_dir``), and masked secrets (Django's ``salt: UY**********``: up to
eight characters, then six or more asterisks) become ``<MASKED>`` (rule
``web_masked_secret``).

A node's key is its role, name and ancestor path (``main:/list:Menu/link:About``).
The header lines ``# tab N: 'title'`` and ``# error: 'message'`` are top-level nodes
of role ``tab`` (``active`` as a property) and ``error``, so an action error or a
tab that one side lacks counts like any other node; ``# url:`` is the root's ``url``.

Metrics (in [0, 1]):

- ``node_precision`` / ``node_recall`` / ``node_f1``: over the multisets of node keys;
- ``tree_sim``: 1 - normalized Indel distance between the pre-order sequences of
  ``(depth, role, name)``. A cheap approximation of tree edit distance
  (Zhang-Shasha is quadratic per node pair): inserting or deleting a node costs
  one, a renamed node two, a moved subtree about twice its size;
- ``prop_agreement``: share of matched nodes whose properties (``checked``,
  ``value``, ``url``…) agree (nodes sharing a key, such as a table's row
  checkboxes, are matched in page order);
- ``score`` = 0.4 × node_f1 + 0.4 × tree_sim + 0.2 × prop_agreement.

Entities: ``ui:role:name`` for every named node (UI labels) and ``url:`` for
URLs in properties or names. Property changes of a matched node are reported
as mismatches (``prop link:About: url='/a' != url='/b'``); their count is the
``prop_mismatches`` metric.

Drift, calibrated (the default): the drift probability of the shipped logistic
regression (``calibration/web.json``, fitted by ``benchmarks/calibrate.py
--domain web`` on real Chromium replays and seeded corruptions) over the
node, tree and property gaps and the entity counts reaches its cutoff; the
probability is the ``drift_p`` metric. Fixed rule (an explicit threshold, a
``[thresholds]`` entry, or no calibration file): the score is below 0.9 plus
the shared structured rule (see :mod:`fidelity.compare.structured`).

Text that holds no tree line on either side is compared as terminal text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable
from typing import NamedTuple

from rapidfuzz.distance import Indel

from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.calibration.apply import calibration_for
from fidelity.compare.config import CompareConfig
from fidelity.compare.normalize import merge_counts
from fidelity.compare.structured import ItemComparator, listed, matched_pairs, overlap, verdict
from fidelity.trajectory import Observation

_BID_RE = re.compile(r"^([ \t]*)\[[^\]\s]*\][ \t]*", re.MULTILINE)
_NODE_RE = re.compile(
    r"^(?P<indent>[ \t]*)(?P<role>[A-Za-z][\w-]*)"
    r"(?:[ \t]+(?:'(?P<name>(?:[^'\\]|\\.)*)'|\"(?P<dname>(?:[^\"\\]|\\.)*)\")"
    r"(?P<spaced>[ \t]+[^,\s][^,]*)?)?(?P<props>[ \t]*(?:,.*)?)$"
)
_URL_RE = re.compile(
    r"[a-z][a-z0-9+.-]{1,15}://(?:[^\s'\"<>,]|<[A-Z]+>)+"
    r"|(?<![\w.-])(?:mailto|tel|sms|data|javascript|about|blob|urn|view-source):[^\s'\"<>,]+"
)
_HEADER_RE = re.compile(
    r"^# (?P<kind>tab|error)(?: \d+)?(?P<active> \(active\))?: "
    r"(?:'(?P<name>(?:[^'\\]|\\.)*)'|\"(?P<dname>(?:[^\"\\]|\\.)*)\")$"
)
_TEMP_DIR_RE = re.compile(r"(/tmp/[A-Za-z][\w.-]*?-)(?:\d+-)?[a-z0-9_]{8}(?![\w-])")
_MASKED_RE = re.compile(r"(?<![\w*])[A-Za-z0-9+/=$.]{0,8}\*{6,}")
_RANDOM_ID_RE = re.compile(
    r"(?<=[A-Za-z][-_])(?=[a-z]*[0-9])(?=[0-9]*[a-z])[a-z0-9]{6,12}(?![\w-])"
)
MAX_MISMATCHES = 5


class Node(NamedTuple):
    """One accessibility-tree node after normalization."""

    depth: int
    role: str
    name: str
    props: str
    key: str

    @property
    def label(self) -> str:
        """The UI label entity value ``role:name``."""
        return f"{self.role}:{self.name}"


def strip_bids(text: str) -> tuple[str, int]:
    """*text* without the ``[bid]`` prefixes; the count is how many were removed."""
    return _BID_RE.subn(r"\1", text)


def parse_tree(text: str) -> list[Node]:
    """Nodes of a bid-free accessibility-tree text, keyed by role, name and ancestor path."""
    nodes: list[Node] = []
    stack: list[tuple[int, str]] = []
    for line in text.split("\n"):
        if line.startswith("# "):
            nodes.extend(_header_node(line))
            continue
        match = _NODE_RE.match(line)
        if match is None or not line.strip():
            continue
        indent = len(match["indent"].expandtabs(4))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        role, name = match["role"], match["name"] or match["dname"] or ""
        raw = f"{match['spaced'] or ''},{match['props']}"
        props = ", ".join(p.strip() for p in raw.split(",") if p.strip())
        path = "/".join(label for _, label in stack)
        label = f"{role}:{name}"
        stack.append((indent, label))
        nodes.append(Node(len(stack) - 1, role, name, props, f"{path}/{label}"))
    return nodes


def _header_node(line: str) -> list[Node]:
    """A ``# tab N: 'title'`` or ``# error: 'message'`` header line as a top-level node."""
    match = _HEADER_RE.match(line)
    if match is None:
        return []
    role, name = match["kind"], match["name"] or match["dname"] or ""
    return [Node(0, role, name, "active" if match["active"] else "", f"#/{role}:{name}")]


def tree_similarity(real: list[Node], sim: list[Node]) -> float:
    """1 - normalized Indel distance of the pre-order ``(depth, role, name)`` sequences."""
    return Indel.normalized_similarity(
        [(n.depth, n.role, n.name) for n in real], [(n.depth, n.role, n.name) for n in sim]
    )


def tree_entities(nodes: list[Node]) -> set[str]:
    """UI labels (``ui:role:name`` of named nodes) and URLs of *nodes*."""
    found = {f"ui:{n.label}" for n in nodes if n.name}
    for node in nodes:
        found.update("url:" + u for u in _URL_RE.findall(node.props + " " + node.name))
    return found


class WebComparator(ItemComparator[Node]):
    """Compares accessibility trees (the ``web`` domain); calibrated, see the module doc."""

    domain = "web"

    def __init__(
        self,
        threshold: float | None = None,
        *,
        config: CompareConfig | None = None,
        calibrated: bool = True,
    ) -> None:
        config = config or CompareConfig()
        super().__init__(threshold, config=config)
        self.calibration = calibration_for(self.domain, threshold, config, calibrated)

    def parse(self, observation: Observation) -> tuple[list[Node], dict[str, int]]:
        """The nodes of *observation* and the normalizations that fired."""
        text, bids = strip_bids(observation.text)
        text, counts = self.normalizer.cached(text)
        text, temps = _TEMP_DIR_RE.subn(r"\1<TMP>", text)
        text, masked = _MASKED_RE.subn("<MASKED>", text)
        text, suffixes = _RANDOM_ID_RE.subn("<ID>", text)
        own = {
            "web_bid": bids,
            "web_temp_dir": temps,
            "web_masked_secret": masked,
            "web_random_id": suffixes,
        }
        return parse_tree(text), merge_counts(counts, {k: n for k, n in own.items() if n})

    def item_entities(self, items: list[Node]) -> set[str]:
        """UI labels and URLs of *items*."""
        return tree_entities(items)

    def score_items(
        self,
        real_nodes: list[Node],
        sim_nodes: list[Node],
        context: CompareContext,
        normalizations: dict[str, int],
    ) -> StepComparison:
        """Node overlap, tree similarity, property agreement, entities; then the calibration."""
        real_keys: Counter[Hashable] = Counter(n.key for n in real_nodes)
        sim_keys: Counter[Hashable] = Counter(n.key for n in sim_nodes)
        precision, recall, f1 = overlap(real_keys, sim_keys)
        tree = tree_similarity(real_nodes, sim_nodes)
        agreement, differ, mismatches = _props(real_nodes, sim_nodes)
        real_e, sim_e = tree_entities(real_nodes), tree_entities(sim_nodes)
        metrics = {
            "node_precision": precision,
            "node_recall": recall,
            "node_f1": f1,
            "tree_sim": tree,
            "prop_agreement": agreement,
            "prop_mismatches": float(differ),
            "nodes_changed": float((real_keys - sim_keys).total() + (sim_keys - real_keys).total()),
        }
        result = verdict(
            score=0.4 * f1 + 0.4 * tree + 0.2 * agreement,
            threshold=self.threshold,
            metrics=metrics,
            sim_only=sim_e - real_e,
            real_only=real_e - sim_e,
            context=context,
            normalizations=normalizations,
            mismatches=mismatches,
        )
        if self.calibration is None:
            return result
        findings = [
            *mismatches,
            *listed("hallucinated", result.hallucinations),
            *listed("omitted", result.omissions),
        ]
        return self.calibration.decide(result, [], findings)


def _props(real: list[Node], sim: list[Node]) -> tuple[float, int, list[str]]:
    """Share of matched nodes whose properties agree, how many do not, and reasons for them.

    Nodes are matched by key and, among nodes sharing a key (the checkboxes of
    a table's rows), by their order on the page.
    """
    pairs = matched_pairs(real, sim)
    differ = [(a, b) for a, b in pairs if a.props != b.props]
    reasons = [f"prop {a.label}: {a.props or '-'} != {b.props or '-'}" for a, b in differ]
    agreement = 1 - len(differ) / len(pairs) if pairs else 1.0
    return agreement, len(differ), reasons[:MAX_MISMATCHES]
