"""The entities by which two normalized texts differ (:func:`exact_entity_diff`, extracting
only the lines they do not share), the lines of a text that may hold given entities
(:func:`lines_holding`, by their search keys), and the lines real printed that sim dropped
without naming anything (:func:`dropped_lines`)."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Set
from typing import NamedTuple

from rapidfuzz.distance import Indel
from rapidfuzz.process import extractOne

from fidelity.compare.entities import extract, extract_among
from fidelity.compare.rules import PLACEHOLDER_RE
from fidelity.compare.textdiff import _lines


def entity_diff(real: str, sim: str, command: str | None = None) -> tuple[set[str], set[str]]:
    """``(sim-only entities, real-only entities)`` of two normalized texts.

    The real-only side also names the non-trivial lines sim dropped without
    naming anything (:func:`dropped_lines`).
    """
    if real == sim:
        return set(), set()
    diff = exact_entity_diff(real, sim, command)
    dropped = dropped_lines(diff.real_lines, diff.sim_lines, diff.unshared, command)
    return set(diff.sim_only), set(diff.real_only) | dropped


class EntityDiff(NamedTuple):
    """What :func:`exact_entity_diff` finds."""

    sim_only: frozenset[str]
    """``E(sim) - E(real)``."""
    real_only: frozenset[str]
    """``E(real) - E(sim)``."""
    unshared: frozenset[str]
    """Entities of real's own lines that sim's own lines lack (a superset of ``real_only``)."""
    real_lines: frozenset[str] = frozenset()
    """The lines of real that sim lacks."""
    sim_lines: frozenset[str] = frozenset()
    """The lines of sim that real lacks."""


@functools.lru_cache(maxsize=256)
def exact_entity_diff(real: str, sim: str, command: str | None = None) -> EntityDiff:
    """The entity sets by which two normalized texts differ, for :func:`extract` ``E``.

    Extraction is line-local, so only lines that differ are extracted; a
    candidate is then dropped when a line common to both sides holds it.
    Remembered (the comparison and the consistency check both ask).
    """
    if real == sim:
        return EntityDiff(frozenset(), frozenset(), frozenset())
    real_lines, sim_lines = set(_lines(real)), set(_lines(sim))
    real_own, sim_own = frozenset(real_lines - sim_lines), frozenset(sim_lines - real_lines)
    real_found = extract("\n".join(real_own), command) if real_own else set()
    sim_found = extract("\n".join(sim_own), command) if sim_own else set()
    sim_only, real_only = sim_found - real_found, real_found - sim_found
    unshared = frozenset(real_only)
    if sim_only or real_only:
        shared = entities_held("\n".join(real_lines & sim_lines), sim_only | real_only, command)
        sim_only -= shared
        real_only -= shared
    return EntityDiff(frozenset(sim_only), frozenset(real_only), unshared, real_own, sim_own)


def entities_held(
    text: str, candidates: Set[str], command: str | None, chunk: int = 1024
) -> set[str]:
    """The *candidates* that :func:`extract` finds in *text* (only lines with a search key run).

    Extraction is line-local, so when many lines hold a key (a short number
    like ``1``) the first *chunk* characters of them are extracted first and
    the rest only for the candidates still missing (in chunks twice as long).
    """
    if not candidates:
        return set()
    keys, numbers = _search_keys(candidates)
    held = lines_holding(text, keys, numbers)
    cut = held.find("\n", chunk)
    if cut == -1:
        return extract_among(held, candidates, command) if held else set()
    found = extract_among(held[:cut], candidates, command)
    pending = candidates - found
    if pending:
        found |= entities_held(held[cut + 1 :], pending, command, 2 * chunk)
    return found


@functools.lru_cache(maxsize=1024)
def _keys_of(candidates: frozenset[str]) -> tuple[frozenset[str], frozenset[str]]:
    """:func:`_search_keys` of a set of candidates asked again and again, remembered."""
    keys, numbers = _search_keys(candidates)
    return frozenset(keys), frozenset(numbers)


def _search_keys(candidates: Iterable[str]) -> tuple[set[str], set[str]]:
    """``(keys, number keys)``: the :func:`search_key` of *candidates*, numbers apart."""
    keys: set[str] = set()
    numbers: set[str] = set()
    for entity in candidates:  # _split_keys, inlined: the consistency check asks step after step
        (numbers if entity.startswith("number:") else keys).add(search_key(entity))
    return keys, numbers - keys


def _split_keys(keyed: Iterable[tuple[str, str]]) -> tuple[set[str], set[str]]:
    """``(keys, number keys)`` of ``(entity, key)`` pairs (see :func:`lines_holding`).

    A ``number:`` entity's key is its whole value, which a text holds only as
    a standalone number.
    """
    keys: set[str] = set()
    numbers: set[str] = set()
    for entity, key in keyed:
        (numbers if entity.startswith("number:") else keys).add(key)
    return keys, numbers - keys


def lines_holding(text: str, keys: Iterable[str], numbers: Iterable[str] = ()) -> str:
    """The lines of *text* that contain one of *keys*, in order, joined by line breaks.

    Each key is found with ``str.find`` (so a key absent from the text costs
    one scan and lines are never tested one by one). A key of *numbers*
    counts only where :func:`extract` could find it as a ``number:`` entity:
    not right after a word character, ``.`` or ``,``, nor right before a word
    character or a ``.`` and a word character.
    """
    keys = keys if isinstance(keys, (set, frozenset)) else set(keys)
    if "" in keys:  # the empty key is in every line
        return text
    spans: set[tuple[int, int]] = set()
    for key in keys:
        at = text.find(key)
        while at != -1:
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end == -1 else end
            spans.add((start, end))
            at = text.find(key, end)
    for key in numbers:
        at = text.find(key)
        while at != -1:
            if not _standalone(text, at, at + len(key)):
                at = text.find(key, at + 1)
                continue
            start = text.rfind("\n", 0, at) + 1
            end = text.find("\n", at)
            end = len(text) if end == -1 else end
            spans.add((start, end))
            at = text.find(key, end)
    return "\n".join(text[start:end] for start, end in sorted(spans))


def _standalone(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` could be a whole match of the ``number`` entity."""
    before, after = text[start - 1 : start] if start else "", text[end : end + 1]
    if before and (before.isalnum() or before in "_.,"):
        return False
    if after.isalnum() or after == "_":
        return False
    return not (
        after == "." and (text[end + 1 : end + 2].isalnum() or text[end + 1 : end + 2] == "_")
    )


DROPPED_MIN_CHARS = 12
"""A dropped line counts as an omission when it has this many non-blank characters."""

DROPPED_SIMILAR = 0.5
"""A real-only line this similar to a sim-only line was changed, not dropped."""

DROPPED_MAX_LINES = 32
"""At most this many real-only lines are examined for omissions (the rest are not named)."""

_WORD_RE = re.compile(r"[A-Za-z]{2}")


def dropped_lines(
    real_only: Set[str], sim_only: Set[str], named: Set[str], command: str | None
) -> set[str]:
    """``line:<text>`` omissions: non-trivial real lines sim dropped without naming anything.

    A real-only line is dropped when no sim-only line is at least
    :data:`DROPPED_SIMILAR` like it (else it was changed, which the
    similarity features see); it is named only when it has a word, at least
    :data:`DROPPED_MIN_CHARS` non-blank characters and none of its entities is
    already an omission.
    """
    found: set[str] = set()
    candidates = sorted(
        line
        for line in real_only
        if len(line) - line.count(" ") >= DROPPED_MIN_CHARS and _WORD_RE.search(line)
    )[:DROPPED_MAX_LINES]
    others = list(sim_only)
    for line in candidates:
        if (
            others
            and extractOne(
                line, others, scorer=Indel.normalized_similarity, score_cutoff=DROPPED_SIMILAR
            )
            is not None
        ):
            continue
        if named and extract_among(line, named, command):
            continue
        found.add("line:" + line.strip()[:120])
    return found


@functools.lru_cache(maxsize=8192)
def search_key(entity: str) -> str:
    """A substring of every text that holds *entity* (for cheap prefiltering).

    For files and paths it is the base name, which :func:`shown_entities`
    also accepts as a mention.
    """
    kind, _, value = entity.partition(":")
    if kind == "package":
        value = value.split("==", 1)[0]
    elif kind in {"file", "path"}:
        value = _base_name(value) or value
    return max(PLACEHOLDER_RE.split(value), key=len)


def _base_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]
