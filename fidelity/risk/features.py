"""Per-step drift-risk features read from a simulated trajectory alone (no real observation).

Every step of a simulated trajectory gets a :class:`StepFeatures`: what the world model
wrote there, measured against everything the trajectory had shown before it (the earlier
actions and observations, and this step's action: what the model was shown). Nothing
here looks at a real observation, so a dataset nobody replayed can be scored.

Numeric features (:data:`FEATURES`), each oriented so that more of it never lowers the
risk (the model's weights are non-negative, :mod:`fidelity.risk.model`); ``None`` means
*not measured* (the model fills in the mean it was fitted on), never zero:

=================  =====================================================================
``novel_entities`` entities of the observation (the comparator's extraction: paths, file
                   names, numbers, URLs, packages, errors, identifiers, test ids, and the
                   domain comparator's own kinds: UI nodes, JSON key paths…) that nothing
                   shown before names; a file or path counts as shown when its base name
                   was (:func:`fidelity.compare.entities.extract`, :func:`entity_source`)
``novel_numbers``  those of them that are numbers (``number:``)
``novel_words``    distinct word tokens (``[A-Za-z_]\\w*``) never shown
``novel_chars``    characters of the observation's distinct lines (stripped) that no
                   shown text holds as a line
``format_lines``   lines that echo a line of the action verbatim (4+ characters) or look
                   like a shell prompt (``user@host:dir$``): a wrapper no program prints.
                   Measured for command actions only (a keystroke's screen shows both)
``contradictions`` the trajectory contradicting itself: for a command run again with only
                   read-only commands since (``cat``, ``ls``, ``grep``… no ``>``, no
                   ``sed -i``), the entities one output has and the other lacks; plus the
                   names this step says are missing (``No such file or directory``,
                   ``cannot access``, ``command not found``…) that an earlier step showed
                   to exist (listed on a line with no such claim, or created by an action:
                   ``> x``, ``touch x``, ``mkdir x``, ``create x``; a program run before
                   without that claim) and no action since removed (``rm``, ``mv``,
                   ``git checkout``…). Measured for command and keystroke actions
``depth``          the step's 1-based depth
``size``           characters of the (normalized) observation
``mean_surprisal`` minus the mean of the world model's token log-probabilities for this
                   step (:data:`LOGPROBS_KEY`)
``max_surprisal``  minus their minimum
``sample_spread``  the mean pairwise text distance (``1 - fuzz.ratio / 100``,
                   :func:`fidelity.worldmodels.metrics.text_distance`) between this step's
                   observation and the other samples' (:func:`sample_groups`)
=================  =====================================================================

Texts are normalized first by the terminal comparator's default rules (dates, PIDs, hex
ids, temp paths… become placeholders), so a volatile value is never novel; a placeholder
is never an entity. A step whose observation is missing or failed (``error`` set) has
every content feature ``None``.

Besides the numbers, each step carries two categories the model turns into a risk of its
own (a drift rate fitted per category, :class:`fidelity.risk.model.ActionRates`): the
action type (:func:`action_key`: the command's program, ``git log``, ``python -m
pytest``, a tool or browser function name…) and the observation's shape (``empty``,
``short`` under :data:`SHORT_CHARS` characters, ``long``, ``none`` when there is none).

**Where a dataset carries them** (``Trajectory.meta``; absent: the features are ``None``):

- ``meta.logprobs`` (:data:`LOGPROBS_KEY`): one entry per step, ``null`` or the list of
  the token log-probabilities of that step's predicted observation (what an
  OpenAI-compatible endpoint returns as ``choices[0].logprobs.content[*].logprob``);
- several samples of one step: trajectories that ``fidelity simulate --samples K`` writes,
  one line per sample, adjacent, sharing ``meta.source_id`` and ``meta.mode`` with
  distinct ``meta.sample`` (:func:`sample_groups` finds them in a stream).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from statistics import fmean
from typing import TYPE_CHECKING, Any

from fidelity.compare.consistency import entity_source, stateful
from fidelity.compare.entities import extract, kind_of
from fidelity.errors import UsageError
from fidelity.trajectory import (
    Action,
    CommandAction,
    KeystrokesAction,
    Observation,
    Step,
    Trajectory,
    command_name,
    program_name,
)

if TYPE_CHECKING:
    from fidelity.compare.consistency import EntitySource
    from fidelity.compare.normalize import Normalizer

FEATURES: tuple[str, ...] = (
    "novel_entities",
    "novel_numbers",
    "novel_words",
    "novel_chars",
    "format_lines",
    "contradictions",
    "depth",
    "size",
    "mean_surprisal",
    "max_surprisal",
    "sample_spread",
)
"""The numeric features, in the order of :meth:`StepFeatures.values`."""

SHAPES = ("none", "empty", "short", "long")
"""The observation's shape (:attr:`StepFeatures.shape`)."""

SHORT_CHARS = 200
"""A normalized observation shorter than this (and not empty) is ``short``."""

LOGPROBS_KEY = "logprobs"
"""``Trajectory.meta`` key of the per-step token log-probabilities (see the module doc)."""

TEXT_ACTION = "(text)"
""":func:`action_key` of an action that names no program (prose an agent sent as its
command, a text action)."""

MIN_ECHO = 4
"""Shortest action line whose verbatim echo counts as a format line."""

_WORD_RE = re.compile(r"[A-Za-z_]\w*")
_PROMPT_RE = re.compile(r"^(?:\([^)]*\)\s*)?[\w.-]+@[\w.-]+:[^\n]*?[$#](?:\s|$)")
_PROGRAM_RE = re.compile(r"[A-Za-z0-9_.+/@-]+(?: [A-Za-z0-9_.+/@-]+){0,2}")
_MISSING_RE = re.compile(
    r"No such file or directory|cannot access|can't open file|cannot open|cannot stat"
    r"|cannot remove|does not exist|command not found|not found"
)
_NOT_FOUND_PROGRAM_RE = re.compile(r"([\w.+-]+): (?:command )?not found")
_COLON_NAME_RE = re.compile(r"([\w./@+-]+)['’\"]?: (?:No such file|Not a directory|cannot )")
_QUOTED_RE = re.compile(r"['‘`\"]([\w./@+-]+)['’`\"]")
_CREATED_RE = re.compile(r"(?<![<>&\d])>>?\s*([\w./@+-]+)")
_SEGMENT_RE = re.compile(r"&&|\|\||[;|]")
_SAFE_REDIRECT_RE = re.compile(r"\d?>&\d|\d>\s*/dev/null")

READ_ONLY = frozenset(
    {
        "cat", "ls", "ll", "dir", "grep", "egrep", "fgrep", "rg", "head", "tail", "nl", "find",
        "pwd", "wc", "stat", "file", "tree", "du", "df", "which", "type", "echo", "printf",
        "less", "more", "diff", "cmp", "sort", "uniq", "cut", "awk", "sed", "env", "printenv",
        "whoami", "id", "uname", "date", "git status", "git log", "git diff", "git show",
        "git branch", "git blame", "git grep", "git ls-files", "git rev-parse",
    }
)  # fmt: skip
"""Programs that change nothing (``sed`` unless ``-i``, ``find`` unless ``-delete``/``-exec``;
no output redirection anywhere on the line)."""

CREATORS = frozenset({"touch", "mkdir", "create", "tee", "cp", "git clone", "wget", "curl"})
"""Programs whose last argument is a name they bring into being (with ``>`` targets)."""

REMOVERS = frozenset(
    {"rm", "rmdir", "mv", "git checkout", "git clean", "git stash", "git restore", "git reset",
     "unlink", "shred"}
)  # fmt: skip
"""Programs after which a name an earlier step showed may rightly be missing."""


@dataclass(frozen=True, slots=True)
class StepFeatures:
    """What one simulated step alone says about its drift risk (see the module doc)."""

    depth: int
    domain: str
    action: str
    """:func:`action_key` of the step's action"""
    shape: str
    """one of :data:`SHAPES`"""
    novel_entities: int | None = None
    novel_numbers: int | None = None
    novel_words: int | None = None
    novel_chars: int | None = None
    format_lines: int | None = None
    contradictions: int | None = None
    size: int | None = None
    mean_surprisal: float | None = None
    max_surprisal: float | None = None
    sample_spread: float | None = None

    def values(self) -> tuple[float | None, ...]:
        """The numeric features in the order of :data:`FEATURES` (``None``: not measured)."""
        return tuple(
            float(self.depth) if name == "depth" else _as_float(getattr(self, name))
            for name in FEATURES
        )

    def with_values(self, **changes: Any) -> StepFeatures:
        """A copy with some numeric features changed (tests, what-if questions)."""
        unknown = set(changes) - set(FEATURES)
        if unknown:
            raise ValueError(f"not numeric features: {sorted(unknown)}")
        return replace(self, **changes)


def _as_float(value: float | None) -> float | None:
    return None if value is None else float(value)


def action_key(action: Action) -> str:
    """The action's type for the risk's per-type drift rates: ``action.name`` (the program
    of a command, ``git log``, a tool, browser or desktop function, an Android action),
    or :data:`TEXT_ACTION` when that is no plausible program name (prose an agent sent
    as its command: ``I'll``, ``Wait,``) or the action is plain text."""
    name = action.name
    if isinstance(action, CommandAction | KeystrokesAction):
        name = command_name(action.render())
        plausible = _PROGRAM_RE.fullmatch(name) is not None and not (
            name[:1].isupper() and name.isalpha()
        )
        return name if plausible else TEXT_ACTION
    return TEXT_ACTION if name in {"text", "?"} else name


def shape_of(text: str | None) -> str:
    """``none`` (no observation), ``empty``, ``short`` (< :data:`SHORT_CHARS`) or ``long``."""
    if text is None:
        return "none"
    stripped = len(text.strip())
    return "empty" if stripped == 0 else "short" if stripped < SHORT_CHARS else "long"


class _Extraction:
    """The comparator's normalizer and entity extraction for one domain (built once)."""

    def __init__(self, domain: str) -> None:
        from fidelity.compare import get_comparator
        from fidelity.compare.terminal import TerminalComparator

        self.normalizer: Normalizer = TerminalComparator(calibrated=False).normalizer
        self.structured: EntitySource | None = None
        if domain != "terminal":  # terminal: the text extraction below is its own
            self.structured = entity_source(get_comparator(domain))

    def entities(self, observation: Observation, action: Action, text: str) -> set[str]:
        """The entities of *observation* (normalized *text*) after *action*."""
        command = action.render()
        found = extract(text, command)
        if self.structured is not None:
            from fidelity.compare.base import CompareContext

            found |= self.structured.entities(observation, CompareContext(action=action))
        return found


_EXTRACTIONS: dict[str, _Extraction] = {}


def _extraction(domain: str) -> _Extraction:
    found = _EXTRACTIONS.get(domain)
    if found is None:
        found = _EXTRACTIONS[domain] = _Extraction(domain)
    return found


class _Shown:
    """Everything a trajectory has shown so far, kept as sets (one pass, linear in size)."""

    def __init__(self) -> None:
        self.entities: set[str] = set()
        self.names: set[str] = set()  # base names of the file and path entities
        self.words: set[str] = set()
        self.lines: set[str] = set()
        self.existing: set[str] = set()  # names shown to exist (no removal since)

    def add_text(
        self,
        text: str,
        entities: Iterable[str],
        words: Iterable[str] | None = None,
        lines: Iterable[str] | None = None,
    ) -> None:
        """Remember *text* as shown (its *words* and stripped *lines* when already split)."""
        self.entities.update(entities)
        self.names.update(
            _base_name(e.partition(":")[2]) for e in entities if e.startswith(("file:", "path:"))
        )
        self.words.update(_WORD_RE.findall(text) if words is None else words)
        self.lines.update((line.strip() for line in text.splitlines()) if lines is None else lines)

    def novel(self, entity: str) -> bool:
        if entity in self.entities:
            return False
        kind, _, value = entity.partition(":")
        if kind in {"file", "path"}:
            name = _base_name(value)
            return name not in self.names and name not in self.words
        return True


def _base_name(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def step_features(trajectory: Trajectory, samples: Sequence[Trajectory] = ()) -> list[StepFeatures]:
    """The features of every step of *trajectory*, read from its own steps only.

    *samples* are other simulations of the same steps (the other samples of a
    :func:`sample_groups` group, *trajectory* itself may be among them): with one or more,
    ``sample_spread`` is measured at each step both have. The token log-probabilities
    come from ``trajectory.meta`` (:data:`LOGPROBS_KEY`); a malformed entry is a
    :class:`~fidelity.errors.UsageError` naming the trajectory.
    """
    extraction = _extraction(trajectory.domain.value)
    logprobs = _logprobs(trajectory)
    others = [s for s in samples if s is not trajectory]
    shown = _Shown()
    previous: dict[str, tuple[int, set[str]]] = {}  # command -> (index, entities) last seen
    last_change = -1  # index of the last step whose action may change state
    result = []
    for index, step in enumerate(trajectory.steps):
        action = step.action
        command = action.render()
        shown.add_text(command, extract(command))
        observation = step.observation
        surprisal = _surprisal(logprobs[index] if logprobs is not None else None)
        spread = _spread(observation, [s.steps[index] for s in others if index < len(s.steps)])
        if observation is None or observation.failed:
            result.append(
                StepFeatures(
                    depth=index + 1,
                    domain=trajectory.domain.value,
                    action=action_key(action),
                    shape="none",
                    mean_surprisal=surprisal[0],
                    max_surprisal=surprisal[1],
                    sample_spread=spread,
                )
            )
            if isinstance(action, CommandAction | KeystrokesAction) and not read_only(command):
                last_change = index  # it may have changed state, whatever it printed
            continue
        text = extraction.normalizer.cached(observation.text, command)[0]
        entities = extraction.entities(observation, action, text)
        novel = [e for e in entities if shown.novel(e)]
        lines = [line.strip() for line in text.splitlines()]
        words = _WORD_RE.findall(text)
        is_command = isinstance(action, CommandAction | KeystrokesAction)
        contradictions = None
        claims = _MISSING_RE.search(text) is not None
        if is_command:
            contradictions = _missing_claims(text, shown) if claims else 0
            contradictions += _repeat_changes(command, entities, previous, last_change)
        result.append(
            StepFeatures(
                depth=index + 1,
                domain=trajectory.domain.value,
                action=action_key(action),
                shape=shape_of(text),
                novel_entities=len(novel),
                novel_numbers=sum(kind_of(e) == "number" for e in novel),
                novel_words=len(set(words) - shown.words),
                novel_chars=sum(map(len, set(lines) - shown.lines)),
                format_lines=_format_lines(lines, command)
                if isinstance(action, CommandAction)
                else None,
                contradictions=contradictions,
                size=len(text),
                mean_surprisal=surprisal[0],
                max_surprisal=surprisal[1],
                sample_spread=spread,
            )
        )
        if is_command:
            _remember_state(command, text, entities, shown, claims)
            previous[command] = (index, entities)
            if not read_only(command):
                last_change = index
        shown.add_text(text, entities, words, lines)
    return result


def _format_lines(lines: Sequence[str], command: str) -> int:
    """Lines that echo a line of the action verbatim or look like a shell prompt."""
    echoed = {line.strip() for line in command.splitlines() if len(line.strip()) >= MIN_ECHO}
    return sum(1 for line in lines if line in echoed or ("@" in line and _PROMPT_RE.match(line)))


def read_only(command: str) -> bool:
    """Whether *command* is one line whose every program is in :data:`READ_ONLY` and
    nothing is written (no ``>`` but ``2>&1`` and ``2>/dev/null``, no ``sed -i``, no
    ``find -delete/-exec``). A command of several lines is taken to change state."""
    command = command.strip()
    if "\n" in command or ">" in _SAFE_REDIRECT_RE.sub("", command):
        return False
    for words in _segments(command):
        program = program_name(words)
        if program not in READ_ONLY:
            return False
        if program == "sed" and any(w.startswith("-i") or w == "--in-place" for w in words):
            return False
        if program == "find" and any(w in {"-delete", "-exec", "-execdir"} for w in words):
            return False
    return True


def _segments(line: str) -> list[list[str]]:
    """The words of each command of one command line (split at ``&&``, ``||``, ``;``, ``|``;
    quotes are not parsed: a quoted separator makes a bogus segment, never a missed one)."""
    return [words for part in _SEGMENT_RE.split(line) if (words := part.split())]


def _repeat_changes(
    command: str,
    entities: set[str],
    previous: dict[str, tuple[int, set[str]]],
    last_change: int,
) -> int:
    """Entities one output of a repeated read-only command has and the other lacks."""
    earlier = previous.get(command)
    if earlier is None or earlier[0] <= last_change or not read_only(command):
        return 0
    return len(entities ^ earlier[1])


def _missing_claims(text: str, shown: _Shown) -> int:
    """Names this observation says are missing that an earlier step showed to exist."""
    claimed: set[str] = set()
    for line in text.splitlines():
        if _MISSING_RE.search(line):
            claimed |= _names_on(line)
    return len(claimed & shown.existing)


def _names_on(line: str) -> set[str]:
    """The base names a line names: its file and path entities, quoted names, the name
    before ``: No such file…`` (``cat: src: No such file or directory``) and the program
    of ``x: command not found``."""
    names = {
        _base_name(value)
        for entity in extract(line)
        for kind, _, value in [entity.partition(":")]
        if kind in {"file", "path"}
    }
    names.update(_base_name(q) for q in _QUOTED_RE.findall(line))
    names.update(_NOT_FOUND_PROGRAM_RE.findall(line))
    names.update(_base_name(n) for n in _COLON_NAME_RE.findall(line))
    names.discard("")
    return names


def _remember_state(
    command: str, text: str, entities: set[str], shown: _Shown, claims: bool
) -> None:
    """Update the names shown to exist after a command (its first line's programs, and
    ``>`` targets anywhere) and its output."""
    first = command.strip().split("\n", 1)[0]
    for words in _segments(first):
        program = program_name(words)
        if program in REMOVERS:
            shown.existing.difference_update(_base_name(w) for w in words[1:])
        elif program in CREATORS and len(words) > 1:
            shown.existing.add(_base_name(words[-1]))
    if ">" in command:
        shown.existing.update(_base_name(target) for target in _CREATED_RE.findall(command))
    if not claims:
        shown.existing.update(
            _base_name(value)
            for entity in stateful(entities)
            for kind, _, value in [entity.partition(":")]
            if kind in {"file", "path"}
        )
        program = command_name(command)
        if program not in {"?", "cd"}:
            shown.existing.add(program.split(" ", 1)[0])
        return
    for line in text.splitlines():  # only the lines claiming nothing missing show names
        if line.strip() and _MISSING_RE.search(line) is None:
            shown.existing.update(_names_on(line))


def _logprobs(trajectory: Trajectory) -> list[list[float] | None] | None:
    """``meta.logprobs`` checked: one ``null`` or list of numbers per step (None: absent)."""
    value = trajectory.meta.get(LOGPROBS_KEY)
    if value is None:
        return None
    where = f"trajectory {trajectory.id!r}: meta.{LOGPROBS_KEY}"
    if not isinstance(value, list) or len(value) != len(trajectory.steps):
        count = len(value) if isinstance(value, list) else type(value).__name__
        raise UsageError(
            f"{where}: expected one entry per step ({len(trajectory.steps)}), got {count}"
        )
    checked: list[list[float] | None] = []
    for depth, entry in enumerate(value, start=1):
        if entry is None:
            checked.append(None)
            continue
        if not isinstance(entry, list) or not all(_finite(x) for x in entry):
            raise UsageError(f"{where}[{depth - 1}]: expected null or a list of numbers <= 0")
        checked.append([float(x) for x in entry])
    return checked


def _finite(value: Any) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value <= 0
    )


def _surprisal(logprobs: list[float] | None) -> tuple[float | None, float | None]:
    """(minus the mean, minus the minimum) of one step's token log-probabilities."""
    if not logprobs:
        return None, None
    return -fmean(logprobs), -min(logprobs)


def _spread(observation: Observation | None, others: Sequence[Step]) -> float | None:
    """Mean pairwise text distance among this step's usable samples (None: fewer than two)."""
    from fidelity.worldmodels.metrics import text_distance

    texts = [
        o.text
        for o in (observation, *(s.observation for s in others))
        if o is not None and not o.failed
    ]
    if len(texts) < 2:
        return None
    return fmean(text_distance(a, b) for a, b in combinations(texts, 2))


def sample_key(trajectory: Trajectory) -> tuple[str, str] | None:
    """``(meta.source_id, meta.mode)`` of a trajectory that is one of several samples
    (``meta.sample`` an integer), else None."""
    meta = trajectory.meta
    source, mode, sample = meta.get("source_id"), meta.get("mode"), meta.get("sample")
    if isinstance(source, str) and isinstance(sample, int) and not isinstance(sample, bool):
        return source, str(mode)
    return None


def sample_groups(
    trajectories: Iterable[Trajectory], limit: int = 64
) -> Iterator[list[Trajectory]]:
    """*trajectories* in order, adjacent samples of one step sequence grouped together.

    A group is a run of adjacent trajectories with one :func:`sample_key` (as
    ``fidelity simulate --samples K`` writes them), at most *limit* long (the most
    samples a simulation draws); every other trajectory is a group of its own. Memory
    holds one group at a time.
    """
    group: list[Trajectory] = []
    key: tuple[str, str] | None = None
    for trajectory in trajectories:
        this = sample_key(trajectory)
        if group and (this is None or this != key or len(group) >= limit):
            yield group
            group = []
        group.append(trajectory)
        key = this
    if group:
        yield group
