"""OSWorld's accessibility tree: parsing the XML and the linearised table agents see.

The table follows OSWorld's ``linearize_accessibility_tree`` (``mm_agents``):
a header ``tag name text class description position (top-left x&y) size (w&h)``
(tab separated) and one row per node kept by its ``judge_node`` filter:
interactive or textual roles, showing and visible, with a name or text, and
on screen (non-negative position, positive size). Text holding ``"`` is
quoted CSV-style.
"""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from dataclasses import dataclass

ST = "https://accessibility.ubuntu.example.org/ns/state"
ATTR = "https://accessibility.ubuntu.example.org/ns/attributes"
CP = "https://accessibility.ubuntu.example.org/ns/component"
VAL = "https://accessibility.ubuntu.example.org/ns/value"
HEADER = "tag\tname\ttext\tclass\tdescription\tposition (top-left x&y)\tsize (w&h)"

_KEPT_SUFFIXES = (
    "item", "button", "heading", "label", "scrollbar", "searchbox", "textbox", "link",
    "tabelement", "textfield", "textarea", "menu",
)  # fmt: skip
_KEPT_TAGS = frozenset(
    {
        "alert", "canvas", "check-box", "combo-box", "entry", "icon", "image", "paragraph",
        "scroll-bar", "section", "slider", "static", "table-cell", "terminal", "text",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One row of the linearised table."""

    tag: str
    name: str
    text: str
    cls: str
    description: str
    position: tuple[int, int] | None
    size: tuple[int, int] | None


def parse_xml(xml: str) -> ET.Element | None:
    """The tree's root element, or None when *xml* is not well-formed XML."""
    try:
        return ET.fromstring(xml)
    except ET.ParseError:
        return None


def pair(value: str | None) -> tuple[int, int] | None:
    """``"(12, 34)"`` → ``(12, 34)``; None for anything else."""
    if not value:
        return None
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if (
        isinstance(parsed, tuple)
        and len(parsed) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in parsed)
    ):
        return (parsed[0], parsed[1])
    return None


def kept(node: ET.Element) -> bool:
    """OSWorld's ``judge_node`` for Ubuntu (images not checked)."""
    tag = node.tag
    role_kept = tag.startswith("document") or tag.endswith(_KEPT_SUFFIXES) or tag in _KEPT_TAGS
    if not role_kept:
        return False
    if node.get(f"{{{ST}}}showing") != "true" or node.get(f"{{{ST}}}visible") != "true":
        return False
    if not node.get("name") and not node.text:
        return False
    position = pair(node.get(f"{{{CP}}}screencoord")) or (-1, -1)
    size = pair(node.get(f"{{{CP}}}size")) or (-1, -1)
    return position[0] >= 0 and position[1] >= 0 and size[0] > 0 and size[1] > 0


def _quoted(text: str) -> str:
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if '"' in text else text


def rows(root: ET.Element) -> list[Row]:
    """The kept nodes of the tree, in document order."""
    return [
        Row(
            tag=node.tag,
            name=node.get("name", ""),
            text=node.text or "",
            cls=node.get(f"{{{ATTR}}}class", ""),
            description=node.get(f"{{{ATTR}}}description", ""),
            position=pair(node.get(f"{{{CP}}}screencoord")),
            size=pair(node.get(f"{{{CP}}}size")),
        )
        for node in root.iter()
        if kept(node)
    ]


def linearize(root: ET.Element) -> str:
    """The table OSWorld's agents read, one line per kept node."""
    lines = [HEADER]
    for node in root.iter():
        if not kept(node):
            continue
        text = _quoted(node.text) if node.text else '""'
        lines.append(
            "\t".join(
                (
                    node.tag,
                    node.get("name", ""),
                    text,
                    node.get(f"{{{ATTR}}}class", ""),
                    node.get(f"{{{ATTR}}}description", ""),
                    node.get(f"{{{CP}}}screencoord", ""),
                    node.get(f"{{{CP}}}size", ""),
                )
            )
        )
    return "\n".join(lines)


def parse_table(text: str) -> list[Row] | None:
    """The rows of a linearised table, or None when *text* does not start with its header.

    OSWorld does not escape newlines in a node's text, so a row may span lines:
    lines are gathered until they hold the seven tab-separated cells.
    """
    lines = text.strip("\n").split("\n")
    if not lines or lines[0].strip() != HEADER:
        return None
    parsed: list[Row] = []
    pending: list[str] = []
    for line in lines[1:]:
        pending.append(line)
        cells = "\n".join(pending).split("\t")
        if len(cells) < 7:
            continue
        pending = []
        cell = "\t".join(cells[2:-4])
        if len(cell) >= 2 and cell.startswith('"') and cell.endswith('"'):
            cell = cell[1:-1].replace('""', '"')
        cls, description, position, size = cells[-4:]
        parsed.append(Row(cells[0], cells[1], cell, cls, description, pair(position), pair(size)))
    return parsed
