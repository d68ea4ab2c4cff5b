"""The candidate entities of the lines two normalized texts do not share, ranked most telling
first (:func:`line_entities`; :mod:`fidelity.compare.terminal` describes the ranking), and
the hex ids given back to the ``line:`` entities that name them (:func:`with_hex`)."""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Sequence

from fidelity.compare.entities import MAX_ENTITIES
from fidelity.compare.entitydiff import exact_entity_diff, search_key
from fidelity.compare.rules import PLACEHOLDER_RE
from fidelity.compare.textdiff import changed_lines

LINES_EXAMINED = 40
"""Changed lines per side whose tokens become entities (the rest are counted, not named)."""

LINE_CHARS = 200
"""Characters kept of a ``line:`` entity."""

_TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


@functools.lru_cache(maxsize=256)
def line_entities(
    real: str, sim: str, command: str | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(sim side, real side)`` candidate entities of two normalized texts, ranked.

    Each side: the extracted entities the other side lacks (:func:`exact_entity_diff`)
    and the identifier-like tokens of its changed lines that the other text lacks
    (``ident:``), those whose value the other text holds nowhere first, each in
    text order; then each changed line (``line:``, stripped; lines without a letter
    or digit, and lines that are one entity's whole value, aside); then the other words of three letters or more
    of those lines that the other text lacks (``word:``), and last the numbers of a numbered
    view's number column. Placeholders (volatile values) never become tokens. At most three
    times
    :data:`~fidelity.compare.entities.MAX_ENTITIES` per side (stale ones are taken out
    of the sim side before the cap).
    """
    if real == sim:
        return (), ()
    diff = exact_entity_diff(real, sim, command)
    added, dropped = changed_lines(real, sim)
    return _candidates(diff.sim_only, added, sim, real), _candidates(
        diff.real_only, dropped, real, sim
    )


@functools.lru_cache(maxsize=64)
def every_line_entity(
    real: str, sim: str, command: str | None = None
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(sim side, real side)``: :func:`line_entities` (the capped ranking, first), then
    the candidates past its caps, every changed line examined, in the same ranking: what
    machine outputs list beyond the :data:`~fidelity.compare.entities.MAX_ENTITIES` a
    step names."""
    capped = line_entities(real, sim, command)
    if real == sim:
        return capped
    diff = exact_entity_diff(real, sim, command)
    added, dropped = changed_lines(real, sim)
    sides = (
        _candidates(diff.sim_only, added, sim, real, examined=None, cap=None),
        _candidates(diff.real_only, dropped, real, sim, examined=None, cap=None),
    )
    return tuple(  # type: ignore[return-value]
        tuple(dict.fromkeys([*head, *everything]))
        for head, everything in zip(capped, sides, strict=True)
    )


def _cut(sim_side: Sequence[str], real_side: Sequence[str], real: str, sim: str) -> bool:
    """Whether :func:`line_entities` may have left candidates of either side out."""
    added, dropped = changed_lines(real, sim)
    return _capped(sim_side, added) or _capped(real_side, dropped)


def _capped(ranked: Sequence[str], lines: Sequence[str]) -> bool:
    """Whether :func:`line_entities` may have left candidates out of *ranked* (it examines
    :data:`LINES_EXAMINED` changed lines and keeps three times ``MAX_ENTITIES``)."""
    return len(ranked) >= 3 * MAX_ENTITIES or len(lines) > LINES_EXAMINED


def _candidates(
    specific: frozenset[str],
    lines: Sequence[str],
    text: str,
    other: str,
    *,
    examined: int | None = LINES_EXAMINED,
    cap: int | None = 3 * MAX_ENTITIES,
) -> tuple[str, ...]:
    values = [e.partition(":")[2] for e in specific]
    named, held = set(values), "\n".join(values)
    tokens: list[str] = []
    whole: list[str] = []
    words: list[str] = []
    seen: set[str] = set()
    numbering: set[str] = set()
    lines = lines[: examined if examined is not None else len(lines)]
    for line in lines:
        stripped = line.strip()
        if not stripped.strip(_NOT_ALNUM):  # no letter or digit
            continue
        if stripped not in named:  # a line that is one name (ls, find) is named once
            whole.append("line:" + stripped[:LINE_CHARS])
        if stripped[0].isdigit() and (numbered := _NUMBERED_RE.match(line)):
            numbering.add(numbered[1])
        for token in _TOKEN_RE.findall(PLACEHOLDER_RE.sub(" ", stripped)):
            # a token seen before adds nothing (the ranking keeps first occurrences)
            if token in seen or len(token) < 3:
                continue
            seen.add(token)
            if token in other or token in held:
                continue
            if _identifier(token):
                tokens.append("ident:" + token)
            else:
                words.append("word:" + token)
    # most telling first: what the other text holds nowhere, then the rest, each in text order
    telling = sorted(
        {*specific, *tokens},
        key=lambda e: (search_key(e) in other, _generic(e), _position(text, e), e),
    )
    # a numbered view's number column (cat -n, nl, SWE-agent's viewer, grep -n of one file):
    # a view one line off changes every number, and its lines say more than ten numbers in
    # a row, so these numbers come last
    positional = [e for e in telling if e.startswith("number:") and e[7:] in numbering]
    if positional:
        telling = [e for e in telling if e not in positional]
    first, more = _one_per_line(telling, lines)
    if "Error" in text or "Exception" in text or "Warning" in text:
        whole.sort(key=lambda line: not _EXCEPTION_RE.match(line, 5))
    ranked = [*first, *whole, *more, *words, *positional]
    unique = tuple(dict.fromkeys(ranked))
    return unique if cap is None else unique[:cap]


_EXCEPTION_RE = re.compile(r"(?:E\s+)?[A-Za-z_][\w.]*(?:Error|Exception|Warning)\b")
"""A line that states an exception (``ValueError: too many values to unpack``, pytest's
``E   AssertionError``): of a traceback's lines the one a reader reads first, so among the
changed lines it is named first."""


_NUMBERED_RE = re.compile(r"\s*(\d+)(?:[\t:]|  )")
"""A line of a numbered file view: ``cat -n`` and ``nl`` (a tab), SWE-agent's viewer and
``grep -n`` on one file (a colon)."""


def with_hex(entities: Sequence[str], raw: str) -> list[str]:
    """*entities* with the ``<HEX>`` of each ``line:`` given back from the *raw* text.

    A hex id is volatile when a line is otherwise equal; in a line that is invented or
    dropped anyway it is what the model wrote (a build id, a flag, a blob hash: content,
    not chance), so it is named as written. The other placeholders stay.
    """
    out = list(entities)
    if "<HEX>" not in "\n".join(out):  # the common case: one scan, no loop
        return out
    for i, entity in enumerate(out):
        if entity.startswith("line:") and "<HEX>" in entity:
            out[i] = "line:" + _raw_hex(entity[5:], raw)
    return out


def _raw_hex(line: str, raw: str) -> str:
    """*line* (normalized) with its ``<HEX>`` placeholders filled from where *raw* holds it."""
    parts = PLACEHOLDER_RE.split(line)
    holders = PLACEHOLDER_RE.findall(line)
    pattern = re.escape(parts[0]) + "".join(
        ("([0-9a-f]+)" if h == "<HEX>" else ".*?") + re.escape(p)
        for h, p in zip(holders, parts[1:], strict=True)
    )
    match = re.search(pattern, raw)
    if match is None:
        return line
    values = iter(match.groups())
    filled = [parts[0]]
    for h, p in zip(holders, parts[1:], strict=True):
        filled += [next(values) if h == "<HEX>" else h, p]
    return "".join(filled)[:LINE_CHARS]


def _one_per_line(ranked: Sequence[str], lines: Sequence[str]) -> tuple[list[str], list[str]]:
    """*ranked* split into the first entity of each changed line and the others (each in
    order): the cap then names as many changed lines as it can before a line's second name
    (the ``line:`` entities, ranked between both, name the rest of a line)."""
    first: list[str] = []
    more: list[str] = []
    used: set[int] = set()
    for entity in ranked:
        key = search_key(entity)
        at = next((i for i, line in enumerate(lines) if key in line), -1)
        if at in used:
            more.append(entity)
        else:
            if at >= 0:  # a name found in no examined line stands on its own
                used.add(at)
            first.append(entity)
    return first, more


_NOT_ALNUM = string.punctuation + string.whitespace
"""What :func:`_candidates` strips to tell whether a line holds a letter or digit."""


def _generic(entity: str) -> bool:
    """Numbers, and listed "files" without an extension (any word a lister split out), tell
    less than names, paths, errors and identifiers (a dotfile, ``.flake8``, is a name)."""
    kind, _, value = entity.partition(":")
    return kind == "number" or (kind == "file" and "." not in value.rstrip("."))


def _position(text: str, entity: str) -> int:
    at = text.find(search_key(entity))
    return len(text) if at < 0 else at


def _identifier(token: str) -> bool:
    """Whether *token* reads as a code identifier rather than a word of a message."""
    if _CODE_MARK_RE.search(token):
        return True
    tail = token[1:]
    return tail != tail.lower() and tail != tail.upper()  # camelCase


_CODE_MARK_RE = re.compile(r"[_.0-9]")
