"""Normalization of terminal text: volatile content becomes placeholders.

Both sides of a comparison go through the same rules, so a timestamp, PID or
git SHA that differs between two runs of the same command stops counting as a
difference. Every rule counts its substitutions; nothing is rewritten silently.

A :class:`~fidelity.compare.rules.Rule` is a named regex rewrite;
:data:`~fidelity.compare.rules.DEFAULT_RULES` is the terminal rule set, in application
order, and :data:`~fidelity.compare.rules.RULES` finds a rule by name so other domains
can compose their own sets (all in :mod:`fidelity.compare.rules`). Two rules are not
regex rewrites and live in :class:`Normalizer` itself: the same truncation cap on both
sides (``truncate``) and sorting the lines of commands whose output order is
unspecified (``unordered_lines``).

The rules keep meaningful content: plain integers, file sizes, line counts,
versions such as ``3.11.2`` and words are left alone.

Speed: CPython's ``re`` skips quickly to candidate positions only when a
pattern starts with a literal or one character class, so every rule starts
with one (its ``lead``) and checks word boundaries *after* it: ``(?<!\\w.)``
right after the lead means "the character before this one is not a word
character". Consecutive rules with the same lead are fused into
one regex (one pass over the text, a callback counts which rule matched), and
rules whose anchor text is absent are skipped by a substring test (``guard``).

Most rules are line-local (:data:`~fidelity.compare.rules.LINE_LOCAL`: a match never
spans or inspects a line break beyond its own line). The trailing run of such passes runs
compiled: ``_fastnorm.c`` holds a hand translation of each built-in line-local rule (and
of :data:`~fidelity.compare.rules.GIT_SHORT_ID`) with ``re``'s semantics, used only while the
rule's name, regex, replacement and flags keep the fingerprint it was written
from, and only on ASCII text (other text, and text where a rule it does not
translate has work, goes through the regexes). The regexes stay the reference:
the tests run both on the rule examples, the public agent runs and generated
texts and require the same text and counts. Without the extension (a source
tree nobody built) the regex passes skip lines already seen to come out of them
unchanged ("clean lines": a line with a substitution always changes, since no
replacement equals what it replaces); the result and the counts are exactly
those of the whole-text passes either way.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache

from fidelity.compare.commands import runs_git, unordered_output
from fidelity.compare.pids import PidPrinters, pid_printers
from fidelity.compare.rules import BLANK_LINES_RULE as BLANK_LINES_RULE
from fidelity.compare.rules import (
    CR_RULE,
    DEFAULT_RULES,
    GIT_SHORT_ID,
    LINE_LOCAL,
    PID_OUTPUT_RULE,
    PLACEHOLDER_RE,
    RULES,
    WHITESPACE_RULES,
    Rule,
    rules_named,
)
from fidelity.compare.rules import GIT_ID_RULE as GIT_ID_RULE
from fidelity.compare.rules import ORDER_RULE as ORDER_RULE
from fidelity.compare.rules import TRAILING_SPACE_RULE as TRAILING_SPACE_RULE
from fidelity.compare.rules import TRUNCATE_RULE as TRUNCATE_RULE
from fidelity.defaults import OBSERVATION_CAP

try:
    from fidelity.compare import _fastnorm
except ImportError:  # a source tree nobody built: the regex passes alone give the same result
    _fastnorm = None  # type: ignore[assignment]

__all__ = [
    "DEFAULT_RULES",
    "PID_OUTPUT_RULE",
    "PLACEHOLDER_RE",
    "RULES",
    "TRUNCATED",
    "TRUNCATE_AT",
    "WHITESPACE_RULES",
    "Normalizer",
    "Rule",
    "merge_counts",
    "normalize",
    "normalizer_for",
    "rules_named",
    "sort_lines",
    "strip_blank_end",
    "strip_line_ends",
    "truncate",
    "unordered_output",
]

TRUNCATE_AT = OBSERVATION_CAP
"""Characters kept from each side before comparing (the same cap on both)."""

TRUNCATED = "<TRUNCATED>"

CLEAN_LINES_MAX = 1 << 16
"""Clean lines remembered per normalizer (the memo is emptied when it grows past this)."""

_GIT_SHORT_ID = re.compile(GIT_SHORT_ID.regex)


class _Pass:
    """One regex pass: a single rule, or several fused rules sharing a lead."""

    __slots__ = ("guard", "names", "regex", "replacement", "replacements", "rules")

    def __init__(self, rules: Sequence[Rule]) -> None:
        first = rules[0]
        self.rules = tuple(rules)
        self.guard = _guard(first.guard)
        self.names = tuple(r.name for r in rules)
        self.replacement = first.replacement
        if len(rules) == 1:
            self.regex = re.compile(first.regex, first.flags)
            self.replacements: dict[int, tuple[str, str]] = {}
            return
        body = "|".join(f"(?:{r.pattern})()" for r in rules)
        self.regex = re.compile(f"{first.lead}(?:{body})", first.flags)
        if self.regex.groups != len(rules):
            raise ValueError(f"fused rules {self.names} must not use capturing groups")
        self.replacements = {i: (r.name, r.replacement) for i, r in enumerate(rules, start=1)}

    def apply(self, text: str, counts: dict[str, int]) -> str:
        if self.guard is not None and not self.guard(text):
            return text
        return self.run(text, counts)

    def run(self, text: str, counts: dict[str, int]) -> str:
        """The pass without its guard (the caller has tested it)."""
        if not self.replacements:
            text, n = self.regex.subn(self.replacement, text)
            if n:
                counts[self.names[0]] = counts.get(self.names[0], 0) + n
            return text
        return self.regex.sub(self._counting(counts), text)

    def _counting(self, counts: dict[str, int]) -> Callable[[re.Match[str]], str]:
        replacements = self.replacements

        def replace(match: re.Match[str]) -> str:
            name, replacement = replacements[match.lastindex or 0]
            counts[name] = counts.get(name, 0) + 1
            return replacement

        return replace


def _guard(literals: tuple[str, ...]) -> Callable[[str], bool] | None:
    """A fast "does any literal occur" test (``str.__contains__`` for one literal).

    Literals that are case variants of each other (``pid``, ``PID``, ``Pid``…)
    are looked for once each in the lowercased text: one ``lower()`` costs about
    half a substring search, so this pays from two spared searches on. It is
    looser, never stricter: an ASCII literal in the text is, lowercased, in the
    lowercased text.
    """
    if not literals:
        return None
    if len(literals) == 1:
        literal = literals[0]
        return lambda text: literal in text
    lowered = tuple(dict.fromkeys(literal.lower() for literal in literals))
    if all(literal.isascii() for literal in literals) and len(literals) - len(lowered) >= 2:

        def any_lowered(text: str) -> bool:
            text = text.lower()
            for literal in lowered:  # noqa: SIM110 - a loop beats any() on a generator here
                if literal in text:
                    return True
            return False

        return any_lowered

    def any_literal(text: str) -> bool:
        for literal in literals:  # noqa: SIM110 - a loop beats any() on a generator here
            if literal in text:
                return True
        return False

    return any_literal


def _passes(rules: Sequence[Rule]) -> list[_Pass]:
    groups: list[list[Rule]] = []
    for rule in rules:
        previous = groups[-1][-1] if groups else None
        if (
            previous
            and rule.fusable
            and previous.fusable
            and (rule.lead, rule.flags) == (previous.lead, previous.flags)
        ):
            groups[-1].append(rule)
        else:
            groups.append([rule])
    return [_Pass(group) for group in groups]


BLOB_IDS = re.compile(r"^(index )([0-9a-f]{7,64})\.\.([0-9a-f]{7,64})(?![\w.])", re.MULTILINE)
"""A diff's ``index`` line: the blob ids of a file before and after, hashes of its content.
Two runs that write the same file show the same ids, so by the rubric they are not volatile:
they are kept from the hex-id rules (the file's lines differ exactly where they do)."""
_BLOB_MARK = "fidelityblob"
_BLOB_MARKED = rf"\1{_BLOB_MARK}\2..{_BLOB_MARK}\3"
"""A word prefix: the hex-id rules need a non-word character before an id."""


class Normalizer:
    """Applies a rule set (plus truncation and line ordering) to texts.

    Build one per rule set and reuse it: construction compiles the regexes.
    With *line_memo* (the default) the trailing line-local passes run apart
    from the others: compiled (*compiled*, the default, when ``_fastnorm`` is
    built) or skipping lines already known to be clean; the result is the same
    (see the module docstring). ``line_memo=False`` runs every regex on the
    whole text: the reference.
    :meth:`cached` remembers recent results (history texts are normalized
    again at every later depth); its counts must not be mutated.
    """

    def __init__(
        self,
        rules: Iterable[Rule] = DEFAULT_RULES,
        limit: int = TRUNCATE_AT,
        cache_size: int = 256,
        *,
        whole_text: frozenset[str] = frozenset({GIT_ID_RULE, ORDER_RULE, PID_OUTPUT_RULE}),
        line_memo: bool = True,
        compiled: bool = True,
    ) -> None:
        self.rules = tuple(rules)
        self.limit = limit
        self.pids = PID_OUTPUT_RULE in whole_text
        self.git_ids = GIT_ID_RULE in whole_text
        self.ordering = ORDER_RULE in whole_text
        self.trailing_space = TRAILING_SPACE_RULE in whole_text
        self.blank_lines = BLANK_LINES_RULE in whole_text
        # carriage returns are rendered as a terminal shows them (not a regex): with the rule
        names = {rule.name: rule for rule in self.rules}
        self.render_cr = names.get(CR_RULE) == RULES[CR_RULE]
        self.crlf = names.get("crlf") == RULES["crlf"]
        self.ansi = names.get("ansi") == RULES["ansi"]
        self._passes = _passes(self.rules)
        local = len(self._passes)
        while line_memo and local > 0 and all(_line_local(r) for r in self._pass_rules(local - 1)):
            local -= 1
        self._whole_passes, self._line_passes = self._passes[:local], self._passes[local:]
        self._clean: set[str] = set()
        self._program = compiled_program(self._line_passes) if compiled else None
        self._program_names = tuple(name for step in self._line_passes for name in step.names)
        self._git_program = compiled_program([_Pass([GIT_SHORT_ID])]) if compiled else None
        # the guards' literals of the whole-text passes, when every one has a guard and the
        # line-local passes run compiled: a text holding none goes straight to _fastnorm
        whole_guards = [rule.guard for step in self._whole_passes for rule in step.rules]
        self._direct: tuple[str, ...] | None = (
            tuple(literal for guard in whole_guards for literal in guard)
            if self._program is not None and all(whole_guards)
            else None
        )
        self._cached = lru_cache(maxsize=cache_size)(self.__call__)

    def _pass_rules(self, index: int) -> list[Rule]:
        names = set(self._passes[index].names)
        return [r for r in self.rules if r.name in names]

    def cached(self, text: str, command: str | None = None) -> tuple[str, dict[str, int]]:
        """Like calling the normalizer, remembering results for texts up to ``limit`` long."""
        if len(text) > self.limit:
            return self(text, command)
        return self._cached(text, command)

    def cache_clear(self) -> None:
        """Forget remembered results and clean lines (benchmarks, tests)."""
        self._cached.cache_clear()
        self._clean.clear()

    def __call__(self, text: str, command: str | None = None) -> tuple[str, dict[str, int]]:
        """``(normalized text, substitutions per rule name)``; see :func:`normalize`."""
        if "\nindex " in text or text.startswith("index "):
            marked, found = BLOB_IDS.subn(_BLOB_MARKED, text)
            if found:
                normalized, counts = self._normalized(marked, command)
                return normalized.replace(_BLOB_MARK, ""), counts
        return self._normalized(text, command)

    def _normalized(self, text: str, command: str | None) -> tuple[str, dict[str, int]]:
        counts: dict[str, int] = {}
        rendering = self.render_cr and "\r" in text
        if (
            self._direct is not None
            and len(text) <= self.limit
            and text.isascii()
            and not rendering
        ):
            # the common case in one step: nothing for the whole-text passes (none of their
            # guards occurs), the line-local ones compiled
            for literal in self._direct:
                if literal in text:
                    break
            else:
                text = self._line_local_compiled(self._progress(text, counts), counts)
                return self._command_rules(self._whitespace(text, counts), counts, command)
        text, n = truncate(text, self.limit)
        if n:
            counts[TRUNCATE_RULE] = n
        if rendering:
            text = self._rendered(text, counts)
        text = self._progress(text, counts)
        for step in self._whole_passes:
            text = step.apply(text, counts)
        if self._line_passes:
            text = self._line_local(text, counts)
        return self._command_rules(self._whitespace(text, counts), counts, command)

    def _rendered(self, text: str, counts: dict[str, int]) -> str:
        """*text* with its carriage returns rendered (:func:`render_carriage_returns`); a
        ``\\r\\n`` is a line ending first (the ``crlf`` rule, when it is on)."""
        if self.crlf and "\r\n" in text:
            n = text.count("\r\n")
            text = text.replace("\r\n", "\n")
            counts["crlf"] = counts.get("crlf", 0) + n
        text, rendered, escapes = render_carriage_returns(text, erase_escapes=self.ansi)
        if rendered:
            counts[CR_RULE] = counts.get(CR_RULE, 0) + rendered
        if escapes:
            counts["ansi"] = counts.get("ansi", 0) + escapes
        return text

    def _progress(self, text: str, counts: dict[str, int]) -> str:
        """Redraws of one progress line written one after another collapsed to the last
        (:func:`collapse_progress`), counted as ``carriage_return``."""
        if not self.render_cr or "%" not in text:
            return text
        text, n = collapse_progress(text)
        if n:
            counts[CR_RULE] = counts.get(CR_RULE, 0) + n
        return text

    def _whitespace(self, text: str, counts: dict[str, int]) -> str:
        """:data:`WHITESPACE_RULES` (those switched on) over *text*."""
        if self.trailing_space:
            text, n = strip_line_ends(text)
            if n:
                counts[TRAILING_SPACE_RULE] = n
        if self.blank_lines:
            text, n = strip_blank_end(text)
            if n:
                counts[BLANK_LINES_RULE] = n
        return text

    def _command_rules(
        self, text: str, counts: dict[str, int], command: str | None
    ) -> tuple[str, dict[str, int]]:
        """The rules the action's command line turns on (git ids, a printed PID, order)."""
        if not command:
            return text, counts
        git, printers, unordered = _command_traits(command)
        if git and self.git_ids:
            # An abbreviated commit id is all digits 1 time in 27 (7 chars): hex_id,
            # which needs a letter to stay clear of plain numbers, cannot see those.
            text = self._git_short_ids(text, counts)
        if printers is not None and self.pids:
            # the action prints a PID (`cmd & echo bg=$!`, `os.getpid()`, `ps`): where it
            # prints it, the number is that PID, different in every run, of any length
            text, n = printers.apply(text)
            if n:
                counts[PID_OUTPUT_RULE] = n
        if unordered and self.ordering:
            text, n = sort_lines(text)
            if n:
                counts[ORDER_RULE] = n
        return text, counts

    def _git_short_ids(self, text: str, counts: dict[str, int]) -> str:
        """:data:`GIT_SHORT_ID` over *text*, compiled when it is ASCII."""
        if self._git_program is not None and _fastnorm is not None and text.isascii():
            done = _fastnorm.normalize(text, self._git_program, (GIT_ID_RULE,), counts)
            if done is not None:
                return done
        text, n = _GIT_SHORT_ID.subn(GIT_SHORT_ID.replacement, text)
        if n:
            counts[GIT_ID_RULE] = counts.get(GIT_ID_RULE, 0) + n
        return text

    def _line_local(self, text: str, counts: dict[str, int]) -> str:
        """The line-local passes over *text*: compiled when they can be, on ASCII text (the
        regexes' counts come in the order they meet the rules: splitting a text would change
        that order in the output)."""
        if self._program is not None and text.isascii():
            return self._line_local_compiled(text, counts)
        return self._line_local_regex(text, counts)

    def _line_local_compiled(self, text: str, counts: dict[str, int]) -> str:
        """The line-local passes over ASCII *text* by ``_fastnorm`` (the regexes where it bails)."""
        assert self._program is not None and _fastnorm is not None
        done = _fastnorm.normalize(text, self._program, self._program_names, counts)
        if done is None:  # a rule it does not translate has work to do (see _fastnorm.c)
            return self._line_local_regex(text, counts)
        return done

    def _line_local_regex(self, text: str, counts: dict[str, int]) -> str:
        """The line-local passes over the lines of *text* not known to be clean."""
        lines = text.split("\n")
        clean = self._clean
        at = [i for i, line in enumerate(lines) if line not in clean]
        if not at:
            return text
        dirty = [lines[i] for i in at]
        block = "\n".join(dirty)
        for step in self._line_passes:
            guard = step.guard
            if guard is None or guard(block):  # inlined: most guards fail, skip the call
                block = step.run(block, counts)
        done = block.split("\n")
        if len(done) != len(dirty):  # a rule that is not line-local after all
            raise RuntimeError(f"line-local rules changed the line count of {text[:80]!r}")
        for i, line in zip(at, done, strict=True):
            lines[i] = line
        if len(clean) > CLEAN_LINES_MAX:
            clean.clear()
        clean.update(a for a, b in zip(dirty, done, strict=True) if a == b)
        return block if len(at) == len(lines) else "\n".join(lines)


def compiled_program(passes: Sequence[_Pass]) -> tuple[tuple[int, ...], ...] | None:
    """The ``_fastnorm`` program of line-local *passes*, or None when a rule has no compiled
    matcher (or the extension is not built): then the regexes run."""
    if _fastnorm is None or not passes:
        return None
    program = []
    for step in passes:
        ids = tuple(_fastnorm.rule_id(*_fingerprint(rule)) for rule in step.rules)
        if -1 in ids:
            return None
        program.append(ids)
    return tuple(program)


def _fingerprint(rule: Rule) -> tuple[str, str, str, int]:
    return rule.name, rule.regex, rule.replacement, int(rule.flags)


@lru_cache(maxsize=4096)
def _command_traits(command: str) -> tuple[bool, PidPrinters | None, bool]:
    """``(runs git, where it prints PIDs or None, output order unspecified)`` of a command."""
    return runs_git(command), pid_printers(command), unordered_output(command)


def _line_local(rule: Rule) -> bool:
    return RULES.get(rule.name) == rule and rule.name in LINE_LOCAL


@lru_cache(maxsize=16)
def normalizer_for(
    rules: tuple[Rule, ...],
    limit: int = TRUNCATE_AT,
    whole_text: frozenset[str] = frozenset({GIT_ID_RULE, ORDER_RULE, PID_OUTPUT_RULE}),
) -> Normalizer:
    """A cached :class:`Normalizer` for *rules* (and the whole-text rules switched on)."""
    return Normalizer(rules, limit, whole_text=whole_text)


def normalize(
    text: str,
    command_name: str | None = None,
    rules: Iterable[Rule] = DEFAULT_RULES,
    *,
    limit: int = TRUNCATE_AT,
) -> tuple[str, dict[str, int]]:
    """Apply *rules* to *text*; returns the text and the substitutions per rule name.

    *command_name* is the action's command line (a program name alone works
    too, but ``grep -r`` and ``ls -U`` need their flags): it decides whether the
    output lines are sorted (see :func:`unordered_output`). Use the same
    *rules* and *limit* on both sides of a comparison.
    """
    return normalizer_for(tuple(rules), limit)(text, command_name)


# -- whole-text rules --------------------------------------------------------------------------


_CONTROL = re.compile(
    r"(\r|\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]"
    r"|\x1b[@-Z\\^_=>])"
)
_ERASE_LINE = re.compile(r"\x1b\[([012]?)K")


def render_carriage_returns(text: str, *, erase_escapes: bool = True) -> tuple[str, int, int]:
    """*text* with each line holding a carriage return rendered as a terminal shows it.

    ``\\r`` moves the cursor to the line's start and what follows overwrites what was
    there (a shorter redraw leaves the end of a longer one, as on a screen); erase-in-line
    escapes (``ESC[K``, ``ESC[1K``, ``ESC[2K``) erase as a terminal does; a ``\\r`` at a
    line's end ends the line. Returns ``(text, lines rendered + line ends dropped, other
    escape sequences dropped from rendered lines)``; with *erase_escapes* False (the
    ``ansi`` rule off) escapes are characters like any other.
    """
    lines = text.split("\n")
    rendered = escapes = 0
    for number, line in enumerate(lines):
        if "\r" not in line:
            continue
        body = line.rstrip("\r")
        if len(body) < len(line):
            rendered += 1  # a line ending
        if "\r" not in body:
            lines[number] = body
            continue
        rendered += 1
        cells: list[str] = []
        column = 0
        pieces = _CONTROL.split(body) if erase_escapes else re.split(r"(\r)", body)
        for index, piece in enumerate(pieces):
            if not piece:
                continue
            if index % 2 == 0:  # text
                end = column + len(piece)
                cells[column:end] = piece
                column = end
            elif piece == "\r":
                column = 0
            elif (erase := _ERASE_LINE.fullmatch(piece)) is not None:
                mode = erase[1] or "0"
                if mode == "0":
                    del cells[column:]
                elif mode == "1":
                    cells[: column + 1] = " " * min(len(cells), column + 1)
                else:
                    cells = [" "] * min(len(cells), column)
            else:
                escapes += 1  # a colour or title: no width
        lines[number] = "".join(cells).rstrip(" ") if cells else ""
    return "\n".join(lines), rendered, escapes


_PERCENT = re.compile(r"\d{1,3}(?:\.\d+)?[ \t]?%")
_BAR = re.compile(r"[\[|][#█▏▎▍▌▋▊▉=>\- ]{3,}[\]|]")
_COUNTER = re.compile(r"\d+[ \t]*(?:/|of)[ \t]*\d+")
_TEMPLATE_DROP = re.compile(r"[\d.,:?#█▏▎▍▌▋▊▉=>\-\s]+")


def _progress_like(segment: str) -> bool:
    return _PERCENT.search(segment) is not None and (
        _BAR.search(segment) is not None or _COUNTER.search(segment) is not None
    )


def _template(segment: str) -> str:
    """A progress state without what changes between redraws (numbers, bar, spacing)."""
    return _TEMPLATE_DROP.sub("", segment)


def progress_states(line: str) -> list[str] | None:
    """The redraws of one progress line that *line* holds (one or more, the last its current
    state), or None when it is not a progress line: each state names a percentage and has a
    bar (``[###  ]``, ``|███ |``) or a count (``2/5``, ``2 of 5``); states written one after
    another (``100.0%  2 of 2 [####]100.0%  2 of 2 [####]``) share one template."""
    if not _progress_like(line):
        return None
    starts = [m.start() for m in _PERCENT.finditer(line)]
    if len(starts) > 1:
        cuts = []
        for start in starts:
            while start > 0 and line[start - 1] in " \t":
                start -= 1
            cuts.append(start)
        states = [line[a:b] for a, b in zip(cuts, [*cuts[1:], len(line)], strict=True)]
        if all(_progress_like(s) for s in states) and len({_template(s) for s in states}) == 1:
            return states
    return [line]


def collapse_progress(text: str) -> tuple[str, int]:
    """*text* with redraws of a progress line written in a row, on one line or on several,
    collapsed to the last (a terminal shows one line: a model writing each redraw on its
    own line, or the redraws without their ``\\r``, shows the same); the count is the
    redraws dropped."""
    lines = text.split("\n")
    out: list[str] = []
    dropped = 0
    previous: str | None = None
    for line in lines:
        states = progress_states(line) if "%" in line else None
        if states is None:
            out.append(line)
            previous = None
            continue
        if len(states) > 1:
            dropped += len(states) - 1
            line = states[-1].lstrip(" \t")
        template = _template(line)
        if template == previous:
            out[-1] = line
            dropped += 1
        else:
            out.append(line)
        previous = template
    return ("\n".join(out), dropped) if dropped else (text, 0)


def sort_lines(text: str) -> tuple[str, int]:
    """Lines sorted; the count is how many lines changed position."""
    trailing = text.endswith("\n")
    lines = (text[:-1] if trailing else text).split("\n")
    ordered = sorted(lines)
    if ordered == lines:
        return text, 0
    moved = sum(map(operator.ne, lines, ordered))
    return "\n".join(ordered) + ("\n" if trailing else ""), moved


def strip_line_ends(text: str) -> tuple[str, int]:
    """Spaces and tabs at the end of every line removed; the count is the lines changed.

    Plain ``str`` operations: substring tests decide whether any line needs it (the
    two-character one for a tab only where a tab occurs at all: a one-character test is
    a tenth of its cost).
    """
    if not (" \n" in text or ("\t" in text and "\t\n" in text) or text.endswith((" ", "\t"))):
        return text, 0
    lines = text.split("\n")
    stripped = [line.rstrip(" \t") for line in lines]
    return "\n".join(stripped), sum(map(operator.ne, lines, stripped))


def strip_blank_end(text: str) -> tuple[str, int]:
    """*text* without its final line breaks; the count is the blank lines dropped (the final
    line break itself ends the last line: dropping it alone is not counted)."""
    if not text.endswith("\n"):
        return text, 0
    kept = text.rstrip("\n")
    return kept, max(0, len(text) - len(kept) - 1)


def truncate(text: str, limit: int = TRUNCATE_AT) -> tuple[str, int]:
    """Cut *text* to *limit* characters (at the last line break when there is one)."""
    if len(text) <= limit:
        return text, 0
    head = text[:limit]
    cut = head.rfind("\n")
    return (head[: cut + 1] if cut > 0 else head + "\n") + TRUNCATED, 1


def merge_counts(*counts: Mapping[str, int]) -> dict[str, int]:
    """Sum several per-rule count mappings."""
    total: dict[str, int] = {}
    for mapping in counts:
        for name, n in mapping.items():
            total[name] = total.get(name, 0) + n
    return total
