"""How two normalized texts differ line by line, whatever they hold: their similarity (line,
token and character), the amount that changed and the order of the lines they share. The
terminal comparator's text metrics (:mod:`fidelity.compare.terminal` describes them);
other comparators reuse them."""

from __future__ import annotations

import functools
from bisect import bisect_left
from collections import Counter
from collections.abc import Sequence, Set
from itertools import pairwise

from rapidfuzz.distance import Indel

try:
    from fidelity.compare._fastnorm import sequence_codes
except ImportError:  # a source tree nobody built: the token lists give the same similarity
    sequence_codes = None  # type: ignore[assignment]

WEIGHTS = (0.5, 0.25, 0.25)
"""Weights of line, token and character similarity in ``text_sim`` (they sum to 1)."""


def similarity(real: str, sim: str) -> dict[str, float]:
    """Line, token and character similarity of two normalized texts, and their weighted mean."""
    if real == sim:
        return {"line_sim": 1.0, "token_sim": 1.0, "char_sim": 1.0, "text_sim": 1.0}
    if sequence_codes is not None and real.isascii() and sim.isascii():
        # a code point per distinct line or token: the same longest common subsequence,
        # without lists of strings to build and hash
        line = Indel.normalized_similarity(*sequence_codes(real, sim, True))
        token = Indel.normalized_similarity(*sequence_codes(real, sim, False))
    else:
        line = Indel.normalized_similarity(_lines(real), _lines(sim))
        token = Indel.normalized_similarity(real.split(), sim.split())
    char = Indel.normalized_similarity(real, sim)
    w_line, w_token, w_char = WEIGHTS
    text = min(1.0, w_line * line + w_token * token + w_char * char)
    return {"line_sim": line, "token_sim": token, "char_sim": char, "text_sim": text}


@functools.lru_cache(maxsize=8)
def _lines(text: str) -> tuple[str, ...]:
    """The lines of *text*, remembered a while: :func:`exact_entity_diff` after
    :func:`similarity` (on text that is not ASCII) split the same two texts."""
    return tuple(text.split("\n"))


def amount(real: str, sim: str) -> dict[str, float]:
    """How much two normalized texts differ, whatever the order of their lines:
    ``lines_changed``, ``changed_share`` and ``chars_changed`` (see the module docstring)."""
    if real == sim:
        return {"lines_changed": 0.0, "changed_share": 0.0, "chars_changed": 0.0}
    added, dropped = changed_lines(real, sim)
    changed = len(added) + len(dropped)
    lines = len(_lines(real)) + len(_lines(sim))
    return {
        "lines_changed": float(changed),
        "changed_share": changed / lines,
        "chars_changed": float(Indel.distance("\n".join(dropped), "\n".join(added))),
    }


def order(real: str, sim: str) -> dict[str, float]:
    """``lines_reordered`` and ``order_gap`` of two texts (see :func:`reordered`), or no
    metric when no line is out of order."""
    moved, compared = reordered(real, sim)
    return {"lines_reordered": float(moved), "order_gap": moved / compared} if moved else {}


def reorder_reasons(metrics: dict[str, float]) -> list[str]:
    """``lines reordered: k of n`` when *metrics* count lines out of order, else nothing."""
    moved = metrics.get("lines_reordered", 0.0)
    if not moved:
        return []
    return [f"lines reordered: {moved:.0f} of {round(moved / metrics['order_gap'])}"]


def reordered(real: str, sim: str) -> tuple[int, int]:
    """``(lines out of order, lines compared)``: the lines each text holds exactly once
    (patience diff's anchors: a repeated line, a brace, has no one place; nor has an empty
    line), in sim's order, and how many of them are not on a longest run that keeps real's
    order (the length less the longest increasing subsequence of their positions in real).

    O(n log n); a line one side lacks does not count, so a changed or dropped line never
    reads as a move.
    """
    moved, compared = _out_of_order(real, sim)
    return len(moved), compared


def moved_lines(real: str, sim: str) -> tuple[str, ...]:
    """The lines :func:`reordered` counts out of order, in sim's order: those of sim off
    one longest run that keeps real's order."""
    return _out_of_order(real, sim)[0]


@functools.lru_cache(maxsize=8)
def _out_of_order(real: str, sim: str) -> tuple[tuple[str, ...], int]:
    """``(moved lines, lines compared)`` (patience sorting, each pile top remembering the
    top it was put after, to read one longest increasing run back)."""
    if real == sim:
        return (), 0
    at_real, at_sim = _once(_lines(real)), _once(_lines(sim))
    positions = [at_real[line] for line in at_sim if line and line in at_real]
    if all(a < b for a, b in pairwise(positions)):  # the common case: nothing moved
        return (), len(positions)
    shared = [line for line in at_sim if line and line in at_real]
    tops: list[int] = []  # real positions: each pile's top
    top_index: list[int] = []  # index into shared of each pile's top
    before = [-1] * len(shared)
    for index, position in enumerate(positions):
        at = bisect_left(tops, position)
        before[index] = top_index[at - 1] if at else -1
        if at == len(tops):
            tops.append(position)
            top_index.append(index)
        else:
            tops[at], top_index[at] = position, index
    kept: set[int] = set()
    index = top_index[-1]
    while index >= 0:
        kept.add(index)
        index = before[index]
    return tuple(line for i, line in enumerate(shared) if i not in kept), len(shared)


def _once(lines: Sequence[str]) -> dict[str, int]:
    """The lines that occur once in *lines*, each with its index, in order."""
    # keyed in order of first occurrence, each with its last index: the same for a line
    # that occurs once
    index = dict(zip(lines, range(len(lines)), strict=True))
    if len(index) == len(lines):
        return index
    counts = Counter(lines)
    return {line: i for line, i in index.items() if counts[line] == 1}


@functools.lru_cache(maxsize=8)
def changed_lines(real: str, sim: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(lines of sim that real lacks, lines of real that sim lacks)``, as multisets (a line
    sim repeats once more than real is added once), each in its text's order."""
    real_lines, sim_lines = _lines(real), _lines(sim)
    real_set, sim_set = set(real_lines), set(sim_lines)
    if len(real_set) == len(real_lines) and len(sim_set) == len(sim_lines):
        # no line repeats (the common case): the set differences are the multiset ones
        return (
            tuple(line for line in sim_lines if line not in real_set),
            tuple(line for line in real_lines if line not in sim_set),
        )
    # both counted in C (Counter.subtract would loop in Python over every line); a line one
    # side lacks is taken whole, so only the lines both hold are compared by count
    real_count, sim_count = Counter(real_lines), Counter(sim_lines)
    both = real_set & sim_set
    added = {line: n - r for line in both if (n := sim_count[line]) > (r := real_count[line])}
    dropped = {line: n - s for line in both if (n := real_count[line]) > (s := sim_count[line])}
    return _take(sim_lines, real_set, added), _take(real_lines, sim_set, dropped)


def _take(lines: Sequence[str], other: Set[str], wanted: dict[str, int]) -> tuple[str, ...]:
    """The lines of *lines* that *other* lacks and the first ``wanted[line]`` occurrences of
    each wanted line, in order."""
    if not wanted:
        return tuple(line for line in lines if line not in other)
    out = []
    for line in lines:
        if line not in other:
            out.append(line)
        elif left := wanted.get(line, 0):
            out.append(line)
            wanted[line] = left - 1
    return tuple(out)
