"""What the model had been shown (the action, the history, the environment description):
a candidate entity found there is stale, not invented (:func:`unshown`,
:func:`shown_entities`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from fidelity.compare.base import CompareContext
from fidelity.compare.entities import MAX_ENTITIES, extract_among
from fidelity.compare.entitydiff import _base_name, _split_keys, lines_holding, search_key
from fidelity.compare.normalize import Normalizer
from fidelity.compare.ranking import LINES_EXAMINED
from fidelity.compare.rules import PLACEHOLDER_RE


def shown_entities(
    candidates: set[str], context: CompareContext, normalizer: Normalizer
) -> set[str]:
    """The *candidates* the model had been shown (action, history, environment description).

    A candidate counts as shown when the shown text yields the same entity,
    or, for files and paths, when its base name appears there as a word.
    """
    unshown: dict[str, list[str]] = {}  # search key -> the candidates not shown yet
    for entity in candidates:
        unshown.setdefault(search_key(entity), []).append(entity)
    shown: set[str] = set()
    searched: set[tuple[str, str | None]] = set()
    for text, command in context_texts(context):
        if (text, command) in searched:  # e.g. a command both histories hold: found nothing new
            continue
        searched.add((text, command))
        pending = {e: k for k in unshown if k in text for e in unshown[k]}
        if not pending:
            continue
        normalized, _ = normalizer.cached(text, command)
        specific = {e: k for e, k in pending.items() if not e.startswith(_PLAIN_KINDS)}
        lines = lines_holding(normalized, *_split_keys(specific.items())) if specific else ""
        found = extract_among(lines, set(specific), command) if lines else set()
        for entity, key in pending.items():
            if entity in found or (
                _plain_mentioned(entity, normalized)
                if entity.startswith(_PLAIN_KINDS)
                else _name_mentioned(entity, lines)
            ):
                shown.add(entity)
                unshown[key].remove(entity)
                if not unshown[key]:
                    del unshown[key]
        if not unshown:
            break
    return shown


_PLAIN_KINDS = ("line:", "word:")
"""Kinds no extraction yields: shown only as the text itself (checked on the whole text)."""


def _plain_mentioned(entity: str, normalized: str) -> bool:
    """Whether the ``line:`` or ``word:`` *entity* is in the *normalized* shown text: what
    :func:`_name_mentioned` finds on the lines holding its key, with ``str.find``."""
    kind, _, value = entity.partition(":")
    if kind == "line":
        return value in normalized
    return _as_word(value, normalized, "_.", "_")


def _as_word(value: str, text: str, not_before: str, not_after: str) -> bool:
    r"""Whether *value* is in *text* with no letter, digit or one of *not_before* just before
    it and no letter, digit or one of *not_after* just after it: ``(?<![\w.])value(?!\w)``
    for ``("_.", "_")``, without compiling a pattern per value (``str.isalnum`` is a
    pattern's ``\w`` less ``_``)."""
    at = text.find(value)
    while at != -1:
        end = at + len(value)
        before = text[at - 1] if at else " "
        after = text[end : end + 1]
        if not (before.isalnum() or before in not_before) and not (
            after.isalnum() or (after != "" and after in not_after)
        ):
            return True
        at = text.find(value, at + 1)
    return False


def unshown(
    ranked: Sequence[str], context: CompareContext, normalizer: Normalizer
) -> tuple[list[str], set[str]]:
    """``(hallucinations, stale)``: the first :data:`~fidelity.compare.entities.MAX_ENTITIES`
    of the *ranked* candidates the model had not been shown, and those it had (looked up
    only as far down the ranking as the hallucinations reach).

    A ``line:`` is never stale: a line the real output lacks is invented at this step even
    when an earlier step showed it (an edit's text echoed back, a run's output repeated),
    as the rubric's labellers name it; the names inside it may be stale. So a listed name
    shown before (``__pycache__`` in another folder's listing) is stale and its line names
    it as this listing's (:func:`lines_named`, after the others).
    """
    kept: list[str] = []
    stale: set[str] = set()
    at = 0
    while len(kept) < MAX_ENTITIES and at < len(ranked):
        batch = ranked[at : at + MAX_ENTITIES - len(kept)]
        at += len(batch)
        names = {e for e in batch if not e.startswith("line:")}
        shown = shown_entities(names, context, normalizer) if names else set()
        stale |= shown
        kept += [e for e in batch if e not in shown]
    return kept, stale


def lines_named(stale: Iterable[str], lines: Sequence[str]) -> list[str]:
    """``line:`` entities of the *lines* (changed, of one side) that are one *stale* name
    each: a line is never stale, and a line that is one name (``ls``, ``find``) is otherwise
    named by its name only."""
    whole = {line.strip() for line in lines[:LINES_EXAMINED]}
    return sorted("line:" + value for e in stale if (value := e.partition(":")[2]) in whole)


def context_texts(context: CompareContext) -> Iterator[tuple[str, str | None]]:
    """``(text, command)`` for everything the model was shown, newest first."""
    yield context.action.render(), None
    for step in reversed(context.history):
        command = step.action.render()
        if step.observation is not None and step.observation.text:
            yield step.observation.text, command
        yield command, None
    if context.env_description:
        yield context.env_description, None


def _name_mentioned(entity: str, text: str) -> bool:
    kind, _, value = entity.partition(":")
    if kind == "line":
        return value in text
    if kind in {"word", "ident"}:
        return _as_word(value, text, "_.", "_")
    if kind not in {"file", "path"}:
        return False
    name = _base_name(value)
    if not name or PLACEHOLDER_RE.fullmatch(name):
        return False
    return _as_word(name, text, "_.-", "_-")
