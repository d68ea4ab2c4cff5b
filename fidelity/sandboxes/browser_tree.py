"""Accessibility tree text in BrowserGym's form, built from Chromium's CDP answers.

Element ids (bids) are set by :data:`MARK_BIDS_JS` as a ``bid`` attribute on
every element, numbered in document order from 0 at each observation (the same
page gets the same bids whatever path reached it). ``Accessibility.getFullAXTree``
gives the tree; ``DOMSnapshot.captureSnapshot`` maps each node's backend DOM id
to its ``bid``. The text has one node per line, indented by tabs:
``[12] link 'About', url='http://localhost:8000/about'`` (the form
:mod:`fidelity.compare.web` parses). Names and values are whitespace-collapsed
and quoted with ``\\`` escapes, so a page cannot forge extra lines.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

BID_ATTRIBUTE = "bid"

MARK_BIDS_JS = """() => {
  let next = 0;
  for (const el of document.querySelectorAll('*')) el.setAttribute('bid', String(next++));
  return next;
}"""
"""Number every element of the main document in document order (returns the count)."""

MUTATION_COUNTER_JS = """(() => {
  window.__fidelityMutations = 0;
  new MutationObserver((records) => {
    for (const r of records) if (r.attributeName !== 'bid') { window.__fidelityMutations++; return; }
  }).observe(document, {subtree: true, childList: true, attributes: true, characterData: true});
})();"""
"""Init script: counts DOM mutations other than bid marking (the settle check reads it)."""

READ_MUTATIONS_JS = "() => [document.readyState, window.__fidelityMutations ?? -1]"

_SKIPPED_ROLES = frozenset({"InlineTextBox", "LineBreak", "none"})
_UNNAMED_SKIPPED = frozenset({"generic", "group", "paragraph", "Section", "LayoutTable"})
_SKIPPED_PROPS = frozenset(
    {"focusable", "editable", "readonly", "level", "settable", "multiline", "invalid", "hiddenRoot"}
)
_FALSE_SHOWN = frozenset({"checked", "expanded", "pressed", "selected"})
_SPACE_RE = re.compile(r"\s+")
MAX_TEXT = 500


def quote(text: str, limit: int = MAX_TEXT) -> str:
    """*text* on one line, cut at *limit* characters, in single quotes with ``\\`` escapes."""
    flat = _SPACE_RE.sub(" ", text).strip()
    if len(flat) > limit:
        flat = flat[:limit] + "…"
    return "'" + flat.replace("\\", "\\\\").replace("'", "\\'") + "'"


def bids_by_backend_id(snapshot: Mapping[str, Any]) -> dict[int, str]:
    """``backendNodeId -> bid`` for the elements of a ``DOMSnapshot.captureSnapshot`` answer."""
    strings: list[str] = snapshot["strings"]
    found: dict[int, str] = {}
    for document in snapshot["documents"][:1]:  # the main frame; frames are not numbered
        nodes = document["nodes"]
        for backend_id, attributes in zip(
            nodes["backendNodeId"], nodes.get("attributes", []), strict=False
        ):
            for index in range(0, len(attributes) - 1, 2):
                if strings[attributes[index]] == BID_ATTRIBUTE:
                    found[backend_id] = strings[attributes[index + 1]]
                    break
    return found


def _value(entry: Mapping[str, Any] | None) -> Any:
    return None if entry is None else entry.get("value")


def _props(node: Mapping[str, Any]) -> list[str]:
    shown: list[str] = []
    value = _value(node.get("value"))
    if value not in (None, ""):
        shown.append(f"value={quote(str(value))}")
    for prop in node.get("properties", []):
        name, raw = prop["name"], _value(prop.get("value"))
        if name in _SKIPPED_PROPS or raw is None:
            continue
        if raw is True or raw == "true":
            shown.append(name)
        elif raw is False or raw == "false":
            if name in _FALSE_SHOWN:
                shown.append(f"{name}=false")
        elif isinstance(raw, int | float):
            shown.append(f"{name}={raw}")
        elif isinstance(raw, str) and raw:
            shown.append(f"{name}={quote(raw)}")
    return shown


def render_tree(
    ax_nodes: list[Mapping[str, Any]], bids: Mapping[int, str], *, max_lines: int = 2000
) -> tuple[str, bool]:
    """The indented text of a ``getFullAXTree`` answer, and whether it was cut at *max_lines*."""
    by_id = {node["nodeId"]: node for node in ax_nodes}
    roots = [node for node in ax_nodes if node.get("parentId") not in by_id]
    lines: list[str] = []
    stack: list[tuple[Mapping[str, Any], int, str]] = [(root, 0, "") for root in reversed(roots)]
    while stack:
        node, depth, parent_name = stack.pop()
        role = str(_value(node.get("role")) or "")
        name = _SPACE_RE.sub(" ", str(_value(node.get("name")) or "")).strip()
        shown = _shown(node, role, name, parent_name)
        if shown:
            if len(lines) >= max_lines:
                return "\n".join(lines), True
            lines.append(_line(node, role, name, depth, bids))
        child_depth = depth + 1 if shown else depth
        for child_id in reversed(node.get("childIds", [])):
            child = by_id.get(child_id)
            if child is not None:
                stack.append((child, child_depth, name if shown else parent_name))
    return "\n".join(lines), False


def _shown(node: Mapping[str, Any], role: str, name: str, parent_name: str) -> bool:
    if node.get("ignored") or not role or role in _SKIPPED_ROLES:
        return False
    if role in _UNNAMED_SKIPPED and not name:
        return False
    return not (role == "StaticText" and (not name or name == parent_name))


def _line(
    node: Mapping[str, Any], role: str, name: str, depth: int, bids: Mapping[int, str]
) -> str:
    bid = bids.get(node.get("backendDOMNodeId", -1))
    parts = [f"[{bid}] {role}" if bid is not None else role]
    if name:
        parts[0] += " " + quote(name)
    parts.extend(_props(node))
    return "\t" * depth + ", ".join(parts)
