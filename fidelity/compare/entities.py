"""Entity extraction from (normalized) terminal text.

An entity is a string ``kind:value``: the things a world model can invent or
forget. Kinds:

============  ==============================================================
``url``       ``url:http://localhost:<PORT>/health``
``path``      anything with a slash: ``path:/workspace/src/app.py``, ``path:src/app.py``
``file``      a name with an extension (``file:config.yaml``), a dotfile, and every
              name listed by ``ls``, ``tree`` or ``git status`` (``file:Makefile``)
``package``   ``package:requests==2.31.0`` (also from ``requests-2.31.0``),
              ``package:lodash@4.17.21``
``error``     an exception class: ``error:ZeroDivisionError``
``errmsg``    a standard error message: ``errmsg:No such file or directory``
``test``      a test name: ``test:test_parse_dates``, ``test:TestParser``
``number``    a standalone integer or decimal with its unit: ``number:42``, ``number:4.0K``,
              ``number:12%``, ``number:3.11.2`` (every number counts, so 17 vs 71 shows)
``ident``     a code identifier: ``def``/``class`` names, the function of a traceback frame
              (``in load``), a called method (``.to_csv(``), a missing attribute
              (``has no attribute 'rows'``): ``ident:to_csv``
``import``    an import path: ``import:astropy.io.ascii`` (``from x import y``, ``import x``)
``nodeid``    a test node id: ``nodeid:tests/test_io.py::TestRST::test_header_rows``
============  ==============================================================

Comparators add two kinds for the lines two texts do not share
(:func:`fidelity.compare.ranking.line_entities`): ``line`` (a whole added,
changed or dropped line, stripped: ``line:ValueError: bad header``) and ``word``
(a word of such a line that the other text lacks: ``word:header``); an
identifier-like token there (``_meta_cache``, ``io.ascii``) is an ``ident``.
:func:`rank` orders a step's entities most telling first and caps them.

Placeholders written by normalization (``<TIMESTAMP>``…) are never entities.
Extraction is one pass of one regex (:data:`_ENTITY_RE`; on ASCII text its
compiled translation in ``_fastentities.c``, which the tests hold to the same
entities) plus, for listing commands, one line-oriented regex. It is line-local: the entities of a text are the union of
those of its lines (every substring guard is a sound prefilter), so callers may
extract only the lines two texts do not share (``entitydiff.entity_diff``, the
cross-turn consistency check).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Set

from fidelity.compare.commands import printing_program

try:
    from fidelity.compare import _fastentities
except ImportError:  # a source tree nobody built: the regex gives the same entities
    _fastentities = None  # type: ignore[assignment]

_ERRMSGS = (
    "No such file or directory",
    "Permission denied",
    "command not found",
    "Is a directory",
    "Not a directory",
    "File exists",
    "Directory not empty",
    "Operation not permitted",
    "Connection refused",
    "Connection timed out",
    "Network is unreachable",
    "Name or service not known",
    "Temporary failure in name resolution",
    "Read-only file system",
    "No space left on device",
    "Invalid argument",
    "Broken pipe",
    "Too many open files",
    "Text file busy",
    "Device or resource busy",
    "Argument list too long",
    "Resource temporarily unavailable",
    "Segmentation fault",
    "Bus error",
    "Killed",
    "Aborted",
    "cannot access",
    "cannot open",
    "cannot stat",
    "cannot remove",
    "cannot create directory",
    "syntax error",
    "unexpected EOF",
    "not a git repository",
    "pathspec",
    "did not match any file",
    "No module named",
    "missing operand",
    "invalid option",
    "unrecognized option",
    "Unable to locate package",
    "No matching distribution found",
    "Could not find a version",
    "nothing to commit",
    "Already up to date",
    "merge conflict",
    "CONFLICT",
)

# One regex for all kinds. Every alternative starts with one character that does not continue
# a word; that character is consumed by a shared lead (so CPython's ``re`` can skip whitespace
# quickly), then each alternative checks it with a one-character lookbehind (``(?<=[a-z])``)
# plus its own boundary (``(?<!\..)``: "not after a dot"), and ends in an empty marker group so
# that ``match.lastindex`` names the kind. The boundary must exclude every character the
# alternative scans over, or runs like "-----" or "1,1,1,1" take quadratic time.
_PATH_CHAR = r"[\w.@+~-]"
_ALTERNATIVES: tuple[tuple[str, str], ...] = (
    # url: any scheme; placeholders may sit inside (http://localhost:<PORT>/)
    ("url", r"(?<=[a-z])[a-z0-9+.-]{1,9}+://(?:[^\s<>\"'`]|<[A-Z]+>)*(?<![.,;:!?)\]])"),
    # package: name==1.2, name@1.2.3, name-1.2.3 (pip's "Successfully installed"). The
    # lookahead only skips what cannot match (the first character after the name's run of
    # [\w.] must be "=", "@" or "-"), so the greedy [\w.-]* does not backtrack through
    # every word: a seventh of the regex's time
    (
        "package",
        r"(?<=[A-Za-z])(?<![.@/-].)(?=[\w.]*+[=@-])"
        r"[\w.-]*(?:==|@|(?<=[A-Za-z0-9])-)\d+(?:\.\d+)+(?:\.?[a-z]+\d*)?(?![\w.-])",
    ),
    # error: exception classes (also the class of a dotted path: requests.exceptions.X)
    ("error", r"(?<=[A-Z])\w*?(?:Error|Exception|Warning|Interrupt|Exit)(?!\w)"),
    ("error", r"(?<=S)topIteration(?!\w)"),
    # test: pytest/unittest test functions and classes
    ("test", r"(?<=[tT])(?<!\..)est(?:_\w+|[A-Z]\w*)(?![\w.])"),
    # path: needs a slash; may start with a placeholder (<TMP>/out.txt)
    ("path", rf"(?<=<)[A-Z]+>(?:/{_PATH_CHAR}++)+/?"),
    ("path", rf"(?<=/)(?<![.~@+/-].){_PATH_CHAR}++(?:/{_PATH_CHAR}++)*+/?"),
    (
        "path",
        rf"(?<=[\w.~@+-])(?<![.~@+/-].){_PATH_CHAR}*+(?:(?:/{_PATH_CHAR}++)++/?|/(?![\w.]))",
    ),
    # number: standalone, with an optional unit; not a version tail or inside a word
    (
        "number",
        r"(?<=[0-9])(?<![.,].)(?<!\w-.)[0-9]*+(?:[.,][0-9]++)*+(?:[KMGTP]i?B?|[kKMGT]B|%|[kmg]b)?"
        r"(?!\w|\.\w)",
    ),
    # file: name.ext (the extension has a letter) or a dotfile
    (
        "file",
        r"(?<=[\w.])(?<![.>+-].)[\w.+-]*\.(?=[a-zA-Z0-9]*[A-Za-z])(?:[a-z0-9]{1,8}|[A-Z0-9]{1,4})"
        r"(?![\w/-])",
    ),
    ("file", r"(?<=\.)(?<![.>-].)\w[\w.-]*+(?<!\.)(?![\w/-])"),
)
_ENTITY_RE = re.compile(
    r"[\w.~@+</-](?<!\w.)(?:" + "|".join(f"(?:{alt})()" for _, alt in _ALTERNATIVES) + ")"
)
# Marker group number - 1 -> kind.
_KIND_OF_GROUP = tuple(kind for kind, _ in _ALTERNATIVES)
# ``match.lastindex`` -> ``kind:`` prefix (group 0 is never a marker).
_PREFIX = ("", *(kind + ":" for kind in _KIND_OF_GROUP))
_PACKAGE_GROUP = _KIND_OF_GROUP.index("package") + 1
_CODE_KINDS = frozenset({"ident", "import", "nodeid"})
if _ENTITY_RE.groups != len(_KIND_OF_GROUP):  # an alternative with a capturing group
    raise RuntimeError("entity alternatives must not use capturing groups")

_PACKAGE_DASH_RE = re.compile(r"-(?=\d[^-]*$)")
# Error messages are literals: a separate regex, so ``re`` can skip to their first letters.
_ERRMSG_RE = re.compile("|".join(re.escape(m) for m in _ERRMSGS))

_LS_LONG_RE = re.compile(r"^[-dlcbpsD][rwxsStT-]{9}\S*[ \t].*$", re.MULTILINE)
_LS_SKIP_RE = re.compile(r"^(?:total \S+|\S.*:|ls: .*)$")
_GIT_STATUS_RE = re.compile(
    r"^(?:\t(?:(?:modified|new file|deleted|renamed|typechange|copied|both \w+):[ \t]+)?"
    r"|[ MADRCU?!]{2} )(.+)$",
    re.MULTILINE,
)
# Each identifier regex starts with a literal (or a one-character class), so ``re`` skips fast.
_IDENT_RES = (
    ("def", re.compile(r"def[ \t]+([A-Za-z_]\w*)")),
    ("class", re.compile(r"class[ \t]+([A-Za-z_]\w*)")),
    (", in ", re.compile(r", in ([A-Za-z_]\w*)$", re.MULTILINE)),
    ("(", re.compile(r"\.(?<=[\w)\]]\.)([A-Za-z_]\w{2,})\(")),
    ("attribute", re.compile(r"has no attribute '(\w+)'")),
)
_IMPORT_RE = re.compile(
    r"^\s*(?:from[ \t]+([\w.]+)[ \t]+import\b|import[ \t]+([\w.]+))", re.MULTILINE
)
_NODEID_RE = re.compile(r"(?<![\w/.-])([\w/.-]+\.py::[\w:\[\]-]+)")
_TREE_RE = re.compile(r"(?:├──|└──|\|--|`--)[ \xa0]+(.+)$", re.MULTILINE)


def extract(text: str, command: str | None = None) -> set[str]:
    """Entities of *text* as ``kind:value`` strings.

    *command* (the action's command line or program name) turns on
    listing-aware extraction: with ``ls`` every listed name is a ``file:``
    entity, likewise for ``git status`` and ``tree`` output.
    """
    return _extract(text, command, None)


def extract_among(text: str, candidates: Set[str], command: str | None = None) -> set[str]:
    """``extract(text, command) & candidates``, running only the passes that yield their kinds."""
    if not candidates:
        return set()
    kinds = {e.partition(":")[0] for e in candidates}  # kind_of, inlined
    return _extract(text, command, kinds).intersection(candidates)


def _extract(text: str, command: str | None, kinds: Set[str] | None) -> set[str]:
    """:func:`extract`, limited to the passes that can yield one of *kinds* (all when None).

    The result may hold other kinds too (callers intersect with what they ask).
    """
    found: set[str] = set()
    if kinds is None or not kinds.isdisjoint(_KIND_OF_GROUP):
        found = _COMPILED(text) if _COMPILED is not None and text.isascii() else _regex_found(text)
        if ".." in text:  # `a59f0c8..4b3e6d5` (a diff's index line, `git log A..B`) is no file
            found = {e for e in found if not _REVISION_RANGE.fullmatch(e)}
    if kinds is None or "errmsg" in kinds:
        found.update("errmsg:" + m for m in _error_messages(text))
    if kinds is None or "file" in kinds:
        program = printing_program(command) if command else None
        if program is not None:
            lister = _LISTERS.get(program)
            if lister is not None:
                found.update("file:" + name for name in lister(text))
        if "──" in text or "--" in text:  # every tree marker holds one of these
            found.update("file:" + name for name in _tree_names(text))
    if kinds is None or not kinds.isdisjoint(_CODE_KINDS):
        found.update(code_entities(text))
    return found


_REVISION_RANGE = re.compile(r"file:[0-9a-f]{7,64}\.\.\.?[0-9a-f]{7,64}")
"""A git revision range read as a file name with an extension."""


def _regex_found(text: str) -> set[str]:
    """The entities :data:`_ENTITY_RE` finds in *text* (``kind:value``)."""
    return {
        _package(m[0]) if (group := m.lastindex or 1) == _PACKAGE_GROUP else _PREFIX[group] + m[0]
        for m in _ENTITY_RE.finditer(text)
    }


# The compiled translation of _ENTITY_RE (``_fastentities.c``), only for the very pattern it
# was written from: an edited regex runs in ``re`` (the tests compare both on every text).
_COMPILED: Callable[[str], set[str]] | None = (
    _fastentities.entities
    if _fastentities is not None and _fastentities.matches_pattern(_ENTITY_RE.pattern)
    else None
)


def _error_messages(text: str) -> list[str]:
    """The standard error messages in *text* (what ``_ERRMSG_RE.findall`` finds, as a set).

    A substring test per message is several times quicker than the alternation;
    the regex runs only when two or more messages occur (one may hide another).
    """
    present = [m for m in _ERRMSGS if m in text]
    return _ERRMSG_RE.findall(text) if len(present) > 1 else present


def code_entities(text: str) -> set[str]:
    """Identifiers, import paths and test node ids of code-bearing *text* (see the kinds)."""
    found: set[str] = set()
    for guard, regex in _IDENT_RES:
        if guard in text:
            found.update("ident:" + name for name in regex.findall(text))
    if "import" in text:
        found.update("import:" + (a or b) for a, b in _IMPORT_RE.findall(text))
    if "::" in text:
        found.update("nodeid:" + m for m in _NODEID_RE.findall(text))
    return found


def _package(value: str) -> str:
    """``package:`` and *value*, a dash before the version written ``==``."""
    if "==" not in value and "@" not in value:
        value = _PACKAGE_DASH_RE.sub("==", value, count=1)
    return "package:" + value


def _clean_name(name: str) -> str:
    """A listed name without ``-> target`` and without ``ls -F`` type marks."""
    name = name.split(" -> ", 1)[0].strip()
    return name[:-1] if len(name) > 1 and name[-1] in "*/=>@|" else name


def _ls_names(text: str) -> list[str]:
    names: list[str] = []
    for line in text.splitlines():
        if not line.strip() or _LS_SKIP_RE.match(line):
            continue
        if _LS_LONG_RE.match(line):
            names.append(_long_listing_name(line))
        else:
            names.extend(line.split())
    return [n for n in map(_clean_name, names) if n and n not in {".", ".."}]


def _long_listing_name(line: str) -> str:
    if "<TIMESTAMP>" in line:
        return line.rsplit("<TIMESTAMP>", 1)[1]
    fields = line.split(None, 8)
    return fields[8] if len(fields) > 8 else fields[-1]


def _git_status_names(text: str) -> list[str]:
    names: list[str] = []
    for entry in _GIT_STATUS_RE.findall(text):
        names.extend(part.strip() for part in entry.split(" -> "))
    return [_clean_name(n) for n in names if n]


def _tree_names(text: str) -> list[str]:
    return [n for n in map(_clean_name, _TREE_RE.findall(text)) if n]


_LISTERS: dict[str, Callable[[str], list[str]]] = {
    "ls": _ls_names,
    "dir": _ls_names,
    "git status": _git_status_names,
    "tree": _tree_names,
}


MAX_ENTITIES = 10
"""Hallucinations (and omissions) reported per step, most telling first (the rubric's cap)."""

_TIER = {"line": 1, "word": 2}
"""Rank of a kind: specific tokens (0, every other kind), whole lines, then generic words."""


def rank(entities: Iterable[str], cap: int | None = MAX_ENTITIES) -> list[str]:
    """*entities* without repeats, specific ones first, then ``line:``, then ``word:``
    (stable: each tier keeps the given order), at most *cap* of them (all when None)."""
    unique = list(dict.fromkeys(entities))
    unique.sort(key=lambda e: _TIER.get(e[: e.find(":")], 0))
    return unique if cap is None else unique[:cap]


def named_once(entities: Iterable[str]) -> list[str]:
    """*entities* without a ``line:`` whose whole text an entity before it names: a line of
    ``ls`` or ``find`` that is one name is named as a line only while the name is stale
    (the terminal comparator's ``lines_named``), so once the name is a hallucination again
    (propagated) its line repeats it."""
    values: set[str] = set()
    out: list[str] = []
    for entity in entities:
        kind, _, value = entity.partition(":")
        if kind != "line" or value not in values:
            out.append(entity)
            values.add(value)
    return out


def invented(entities: Iterable[str]) -> int:
    """How many of a step's hallucinations name content: all but the ``moved:`` lines (an
    equal line printed elsewhere, counted by the ``lines_reordered`` metric instead)."""
    return sum(not entity.startswith("moved:") for entity in entities)


def kind_of(entity: str) -> str:
    """The kind part of ``kind:value``."""
    return entity.partition(":")[0]
