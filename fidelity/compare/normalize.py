"""Normalization of terminal text: volatile content becomes placeholders.

Both sides of a comparison go through the same rules, so a timestamp, PID or
git SHA that differs between two runs of the same command stops counting as a
difference. Every rule counts its substitutions; nothing is rewritten silently.

A :class:`Rule` is a named regex rewrite; :data:`DEFAULT_RULES` is the terminal
rule set, in application order, and :data:`RULES` finds a rule by name so
other domains can compose their own sets. Two rules are not regex rewrites and
live in :class:`Normalizer` itself: the same truncation cap on both sides
(``truncate``) and sorting the lines of commands whose output order is
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

Most rules are line-local (:data:`LINE_LOCAL`: a match never spans or inspects
a line break beyond its own line). The trailing run of such passes runs
compiled: ``_fastnorm.c`` holds a hand translation of each built-in line-local
rule (and of :data:`GIT_SHORT_ID`) with ``re``'s semantics, used only while the
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
from dataclasses import dataclass
from functools import lru_cache

from fidelity.compare.commands import runs_git, unordered_output
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

PLACEHOLDER_RE = re.compile(r"<[A-Z]+>")
"""Matches every placeholder the rules write (``<TIMESTAMP>``, ``<HEX>``…)."""


@dataclass(frozen=True, slots=True)
class Rule:
    """A named regex rewrite applied to both observations.

    The regex is ``lead + pattern``: ``lead`` is what every match starts with
    (one character class, optionally followed by a lookbehind on it). Rules
    with the same non-empty ``lead`` and flags that sit next to each other in
    a rule set run as one fused regex (leftmost match wins, then rule order);
    they must then use a plain ``replacement`` (no group references) and no
    ``guard``. ``guard`` lists literal substrings of which one must occur for
    the rule to run: an optimization that must never change the result.
    """

    name: str
    pattern: str
    replacement: str
    flags: re.RegexFlag = re.NOFLAG
    guard: tuple[str, ...] = ()
    lead: str = ""
    description: str = ""

    @property
    def regex(self) -> str:
        """The full regular expression (``lead + pattern``)."""
        return self.lead + self.pattern

    @property
    def fusable(self) -> bool:
        """True when the rule may share one regex pass with neighbours of the same lead."""
        return bool(self.lead) and not self.guard and "\\" not in self.replacement


# -- building blocks ---------------------------------------------------------------------------

_MON = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_TIME = r"\d{1,2}:\d\d(?::\d\d(?:[.,]\d+)?)?"
_ZONE_NAME = r"(?:UTC|GMT|[ECMPA][SD]T|CES?T|[BIJ]ST|AE[SD]T)"
_ZONE = rf"(?:[+-]\d\d:?\d\d|{_ZONE_NAME})"
# The shared lead of the id/number rules: a hex digit that does not continue a word. They
# run fused as one pass, matching ASCII only (measurably faster; only ASCII digits count).
# The number rules add "the lead is a digit not continuing a number or dotted version"
# (_DIGIT); hex_id adds "the lead is lowercase".
_HEX_LEAD = r"[0-9a-fA-F](?<!\w.)"
_DIGIT = r"(?<=[0-9])(?<!\.[0-9])"

# After the lead digit: ISO-8601 date[time][zone], `20 Nov 2026 23:55:57 +0000`, clock times.
_NUMERIC_TIMESTAMP = (
    _DIGIT + r"(?:\d{3}-[01]\d-[0-3]\d(?:[T ]" + _TIME + r")?"
    r"(?:Z|[+-]\d\d(?::?\d\d)?| " + _ZONE + r")?"
    r"|\d? +" + _MON + r" +\d{4}(?: +" + _TIME + r")?(?: ?[AP]M)?(?: +" + _ZONE + r")?"
    r"|(?<!:.)\d?:[0-5]\d:[0-5]\d(?:[.,]\d+)?(?!:\d)"
    r")(?!\w)"
)
# A day or month name first: RFC 2822 (`Fri, 20 Nov 2026 23:55:57 +0000`), ctime, `date`,
# git (`Fri Nov 20 23:55:57 2026 +0000`), syslog and `ls -l` (`Nov 20 23:55`, `Nov 20  2025`).
_MON_REST = (
    r" +\d{1,2}(?: +" + _TIME + r"(?:(?: +" + _ZONE + r")? +\d{4}(?: +" + _ZONE + r")?)?"
    r"|,? +\d{4})"
)
_NAMED_DATE = (
    r"[a-z]{2}(?:"
    r"(?<=Mon|Tue|Wed|Thu|Fri|Sat|Sun),? +(?:\d{1,2} +" + _MON + r" +\d{4}(?: +" + _TIME + r")?"
    r"(?: ?[AP]M)?(?: +" + _ZONE + r")?|" + _MON + _MON_REST + r")"
    r"|(?<=Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)" + _MON_REST + r")(?!\w)"
)
_UNIT = r"(?:ns|us|µs|ms|sec|secs|seconds?|min|mins|minutes?|hours?|hrs?)"
# After the lead digit: 1.4s, 0m0.012s (time), 1h2m3s, 12ms, 12 ms, 1.4 seconds; not 1990s.
_DURATION = (
    _DIGIT + r"(?!\d\d0s(?!\w))\d*+(?:\.\d++)?+"
    r"(?:(?:h\d++)?+(?:m\d++)?+(?:\.\d++)?+s| ?+" + _UNIT + r")(?!\w)"
)


# curl's progress meter: two header lines, then rows (one per redraw, \r or line breaks
# between them): % Total, Total, % Received, Received, % Xferd, Xferd, two average speeds,
# three times, the current speed. Only the last row's first six columns stay.
_SIZE = r"\d+(?:\.\d+)?[kMGTP]?"
_METER_TIME = r"(?:--:--:--|\d+:\d\d:\d\d|\d+[dh] +\d+[hm]|>?\d+d)"
_METER_COLUMNS = r" +".join([r"(\d{1,3})", f"({_SIZE})"] * 3 + [_SIZE] * 2 + [_METER_TIME] * 3)
_METER_ROW = _METER_COLUMNS + r" +" + _SIZE
_CURL_METER = (
    r"^[ \t]*% Total +% Received % Xferd +Average Speed +Time +Time +Time +Current[ \t]*\n"
    r"[ \t]*Dload +Upload +Total +Spent +Left +Speed[ \t]*"
    r"(?:[\r\n]+[ \t]*" + re.sub(r"\((?!\?)", "(?:", _METER_ROW) + r")*"
    r"[\r\n]+[ \t]*" + _METER_ROW + r"[ \t]*$"
)


def _ruleset(*rules: Rule) -> tuple[Rule, ...]:
    names = [r.name for r in rules]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate rule names in {names}")
    return rules


DEFAULT_RULES: tuple[Rule, ...] = _ruleset(
    Rule(
        "ansi",
        r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][0-9A-Za-z]|[@-Z\\^_=>])",
        "",
        guard=("\x1b",),
        description="ANSI CSI/OSC escape sequences",
    ),
    Rule("crlf", r"\r\n", "\n", guard=("\r",), description="CRLF line endings"),
    Rule(
        "curl_progress",
        _CURL_METER,
        r"<PROGRESS> \1 \2 \3 \4 \5 \6",
        re.MULTILINE,
        guard=("% Xferd",),
        description="curl's progress meter (its two header lines and rows of sizes, speeds "
        "and times): one line, the last row's percent and size columns",
    ),
    Rule(
        "carriage_return",
        r"^[^\n]*\r(?=[^\n])|\r$",
        "",
        re.MULTILINE,
        guard=("\r",),
        description="progress lines redrawn with \\r: the text after the last \\r stays",
    ),
    Rule(
        "temp_path",
        r"/tmp/(?:tmp\.[A-Za-z0-9]{10}|tmp[a-z0-9_]{6,}|pytest-of-[^/\s]+(?:/pytest-\d+)?)"
        r"(?![\w.])",
        "<TMP>",
        guard=("/tmp/",),
        description="tempfile/mktemp/pytest temporary paths",
    ),
    Rule(
        "pip_temp",
        r"(/tmp/pip-[a-z]+(?:-[a-z]+)*-)[a-z0-9_]{8}(?![\w.])",
        r"\1<TMP>",
        guard=("/tmp/pip-",),
        description="pip's temporary folders (/tmp/pip-ephem-wheel-cache-07l9px25)",
    ),
    Rule(
        "test_seed",
        r"((?:random seed|[Rr]andom[ -]seed|randomly-seed|PYTHONHASHSEED|hypothesis seed)"
        r"[ \t]*[:=][ \t]*)-?\d+(?!\w)",
        r"\1<SEED>",
        guard=("seed", "SEED"),
        description="seeds test runners print (random seed: 2649877, PYTHONHASHSEED=1372323020, "
        "--randomly-seed=12)",
    ),
    Rule(
        "jwt",
        r"eyJ[\w-]{6,}\.eyJ[\w-]{6,}\.[\w-]{6,}",
        "<TOKEN>",
        guard=("eyJ",),
        description="JSON web tokens (eyJhbGciOi….eyJzdWIi….sig)",
    ),
    Rule(
        "signed_token",
        # starts at the "=" (a literal: fast to find), the key checked by fixed-width lookbehinds
        r"=(?:(?<=token=)|(?<=session=)|(?<=sessionid=)|(?<=session_id=)|(?<=sessid=)"
        r"|(?<=sid=)|(?<=jwt=)|(?<=signature=)|(?<=sig=)|(?<=csrf=)|(?<=session_key=))"
        r"[\w.~+/%-]{12,}=*",
        "=<TOKEN>",
        flags=re.IGNORECASE,
        guard=("=",),
        description="signed cookies and tokens: `sessionid=…`, `csrftoken=…`, `?token=…` in URLs "
        "(any key ending in token, session, sessionid, sid, jwt, sig, signature, csrf)",
    ),
    Rule(
        "bearer_token",
        r"((?:Bearer|Token) )[\w.~+/-]{16,}=*",
        r"\1<TOKEN>",
        guard=("Bearer ", "Token "),
        description="`Authorization: Bearer …` / `Token …` credentials",
    ),
    Rule(
        "hostname",
        r"@[0-9a-f]{12}(?![\w.-])",
        "@<HOST>",
        guard=("@",),
        description="container host names in prompts (root@3f2a9c1b7e4d)",
    ),
    Rule(
        "port",
        r":(?:(?<=localhost:)|(?<=127\.0\.0\.1:)|(?<=0\.0\.0\.0:)|(?<=\[::\]:)|(?<=\[::1\]:))"
        r"\d{2,5}(?!\d)",
        ":<PORT>",
        # each loopback spelling holds one of these (three substring searches, not five)
        guard=("localhost:", ".0.0.", "[::"),
        description="ports on loopback addresses (localhost:8000, 127.0.0.1:54321)",
    ),
    Rule(
        "pid",
        r"([pP](?<!\w[pP])(?:id|ID|rocess|ROCESS)[ \t]*[:=#]?[ \t]*)\d+(?!\w)",
        r"\1<PID>",
        # the lead's spellings: substring tests cost a tenth of the regex's scan for [pP]
        guard=("pid", "pID", "Pid", "PID", "process", "pROCESS", "Process", "PROCESS"),
        description="pid 1234, PID: 12, Process 1234",
    ),
    Rule(
        "bracket_pid",
        # syslog's `sshd[1234]: ` and job-control lines `[1] 12345` printed by `cmd &`
        r"\[(?:(?<=[A-Za-z]\[)\d{2,}(?=\]: )"
        r"|(?<![^\n]\[)(\d+\][+-]?[ \t]+)\d{2,}(?=[ \t]*(?:\n|$)))",
        r"[\1<PID>",
        description="syslog `sshd[1234]: ` and job lines `[1] 12345`",
    ),
    Rule(
        "hex_address",
        r"0x[0-9a-fA-F]{6,16}(?!\w)",
        "<ADDR>",
        guard=("0x",),
        description="memory addresses (0x7f3b2c1d9e80)",
    ),
    Rule(
        "date",
        _NAMED_DATE,
        "<TIMESTAMP>",
        re.ASCII,
        lead=r"[JFMASONDTW](?<!\w.)",
        description="RFC 2822, ctime/`date`, git and `ls -l` dates",
    ),
    Rule(
        "uuid",
        r"[0-9a-fA-F]{7}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}(?![\w-])",
        "<UUID>",
        re.ASCII,
        lead=_HEX_LEAD,
        description="UUIDs",
    ),
    Rule(
        "timestamp",
        _NUMERIC_TIMESTAMP,
        "<TIMESTAMP>",
        re.ASCII,
        lead=_HEX_LEAD,
        description="ISO-8601, `20 Nov 2026 23:55:57 +0000`, clock times (23:55:57)",
    ),
    Rule(
        "epoch",
        # 2014..2033 in seconds or milliseconds, optionally fractional (time.time())
        r"(?<=1)(?<!\.1)[4-9]\d{8}(?:\d{3})?(?:\.\d+)?(?!\w|\.\w)",
        "<TIMESTAMP>",
        re.ASCII,
        lead=_HEX_LEAD,
        description="epoch seconds/milliseconds",
    ),
    Rule(
        "duration",
        _DURATION,
        "<DURATION>",
        re.ASCII,
        lead=_HEX_LEAD,
        description="0.23s, 12ms, in 1.4 seconds, real 0m0.01s, test-runner summaries",
    ),
    Rule(
        "hex_id",
        # lowercase, 7-128 characters, at least one digit and one letter a-f
        r"(?:(?<=[a-f])(?=[a-f]*+\d)|(?<=\d)(?=\d*+[a-f]))[0-9a-f]{6,127}+(?!\w)",
        "<HEX>",
        re.ASCII,
        lead=_HEX_LEAD,
        description="git SHAs, digests, image ids",
    ),
)
"""The terminal rule set, in application order."""

RULES: Mapping[str, Rule] = {rule.name: rule for rule in DEFAULT_RULES}
"""Every built-in rule by name, for composing other domains' rule sets."""

LINE_LOCAL = frozenset(
    {
        "carriage_return",
        "temp_path",
        "pip_temp",
        "test_seed",
        "jwt",
        "signed_token",
        "bearer_token",
        "hostname",
        "port",
        "pid",
        "bracket_pid",
        "hex_address",
        "date",
        "uuid",
        "timestamp",
        "epoch",
        "duration",
        "hex_id",
    }
)
"""Built-in rules whose matches stay inside one line and whose lookarounds read a line break
exactly like the start or end of the text (so they give the same result line by line)."""

CLEAN_LINES_MAX = 1 << 16
"""Clean lines remembered per normalizer (the memo is emptied when it grows past this)."""

ORDER_RULE = "unordered_lines"
GIT_ID_RULE = "git_short_id"
GIT_SHORT_ID = Rule(
    GIT_ID_RULE,
    r"(?<![\w/<>-])[0-9a-f]{7,40}(?![\w/<>-])",
    "<HEX>",
    description="abbreviated commit ids in git's output (also all-digit ones)",
)
_GIT_SHORT_ID = re.compile(GIT_SHORT_ID.regex)
TRUNCATE_RULE = "truncate"
PID_OUTPUT_RULE = "action_pid"
CR_RULE = "carriage_return"
TRAILING_SPACE_RULE = "trailing_space"
BLANK_LINES_RULE = "trailing_blank_lines"
WHITESPACE_RULES = frozenset({TRAILING_SPACE_RULE, BLANK_LINES_RULE})
"""Whole-text rules for what people call the same text: spaces and tabs at line ends, blank
lines (and the final line break) at the end of the text. Line endings (``\\r\\n``, a lone
``\\r`` at a line's end) are the regex rules ``crlf`` and ``carriage_return``."""
_PID_LINE = re.compile(r"^([ \t]*(?:\[\d+\][+-]?[ \t]+)?)\d{1,7}[ \t]*$", re.MULTILINE)
_PID_COMMAND = re.compile(
    r"\$!|\$\$|\$\{[!$]\}|\$\{?BASHPID|\$\{?PPID\b|getpid\(\)|getppid\(\)|\bpgrep\b|\bpidof\b"
    r"|(?:^|[;&|(`]|\$\(|\bsudo|\bwatch|\bthen|\bdo)[ \t]*ps\b|\bjobs[ \t]+-l"
)


class PidPrinters:
    """Where the output of a command line holds a PID, read from what printed it.

    Inside a PID namespace (bubblewrap, a container) PIDs are small (``bg=3``, ``5``), so
    a PID is known by what printed it, not by its digit count, and normalized on both sides:

    - ``$!``, ``$$``, ``$BASHPID``, ``$PPID`` in ``echo``/``printf`` and ``os.getpid()``
      (``getppid``) in ``print``: the literal text printed just before it (``echo bg=$!``:
      ``bg=``; ``print(f"pid={os.getpid()}")``: ``pid=``; ``print("worker", os.getpid())``:
      ``worker``), else a bare number on its own line (``echo $!``, ``print(os.getpid())``);
    - ``pgrep`` (one PID a line; with ``-l``/``-a`` the number leading each line) and
      ``pidof`` (a line of numbers);
    - ``ps``: the values of the ``PID``, ``PPID``, ``PGID``, ``SID``, ``TGID``, ``SPID`` and
      ``LWP`` columns under a header naming them (the row's spacing, which follows the
      widths of those numbers, becomes single spaces);
    - job lines (``[1] 3``, ``jobs -l``'s ``[1]+ 3 Running``).
    """

    __slots__ = ("bare", "columns", "jobs", "listed", "pidof", "prefixes")

    def __init__(self, command: str) -> None:
        self.prefixes: tuple[re.Pattern[str], ...] = _pid_prefixes(command)
        self.bare = _bare_pid(command)
        self.listed = (
            re.search(r"\bpgrep\b[^;&|\n]*?\s-(?:\w*[la]\w*|-list-\w+)", command) is not None
        )
        self.columns = (
            re.search(r"(?:^|[;&|(`]|\$\(|\bsudo|\bwatch|\bthen|\bdo)[ \t]*ps\b", command)
            is not None
        )
        self.pidof = re.search(r"\bpidof\b", command) is not None
        self.jobs = _BACKGROUND.search(command) is not None or "jobs" in command

    def apply(self, text: str) -> tuple[str, int]:
        """*text* with each PID these printers print as ``<PID>``, and how many."""
        total = 0
        for pattern in self.prefixes:
            text, n = pattern.subn("<PID>", text)
            total += n
        if self.bare:
            text, n = _PID_LINE.subn(r"\1<PID>", text)
            total += n
        if self.jobs:
            text, n = _JOB_LINE.subn(r"\1 <PID>", text)  # the PID's width set the spacing
            total += n
        if self.listed:
            text, n = _PGREP_LIST.subn("<PID>", text)
            total += n
        if self.pidof:
            numbers = 0

            def each(match: re.Match[str]) -> str:
                nonlocal numbers
                line, n = _NUMBER_RUN.subn("<PID>", match[0])
                numbers += n
                return line

            text = _PIDOF_LINE.sub(each, text)
            total += numbers
        if self.columns:
            text, n = ps_columns(text)
            total += n
        return text, total


_BACKGROUND = re.compile(r"(?<![&>|<])&(?![&>])")
"""A job sent to the background (``cmd &``), not ``&&``, ``2>&1``, ``&>`` or ``|&``."""
_JOB_LINE = re.compile(
    r"^([ \t]*\[\d+\][+-]?)[ \t]+\d+(?=[ \t]*$|[ \t]+(?:Running|Done|Stopped|Terminated|Killed|Exit))",
    re.MULTILINE,
)
"""A job line (``[1] 3``, ``jobs -l``'s ``[1]+ 3 Running``): its number is the job's PID
(written after one space: ``jobs -l`` pads it to the PIDs' width)."""
_PGREP_LIST = re.compile(r"^\d+(?=[ \t]+\S)", re.MULTILINE)
_PIDOF_LINE = re.compile(r"^[ \t]*\d+(?:[ \t]+\d+)+[ \t]*$", re.MULTILINE)
_NUMBER_RUN = re.compile(r"\d+")
_PID_VAR = re.compile(r"\$(?:!|\$|\{[!$]\}|\{?BASHPID\}?|\{?PPID\b\}?)")
_ECHO_ARGS = re.compile(r"\b(echo|printf)\b((?:[^;&|\n`)]|\$\()*)")
_PY_PID = re.compile(r"(?:\bos\.)?\bgetp?pid\(\)")
_PS_COLUMN = frozenset({"PID", "PPID", "PGID", "SID", "TGID", "SPID", "LWP", "TID"})


def _literal_before(words: str) -> str:
    """The literal text an ``echo`` prints before a PID variable: *words* (the arguments
    up to the variable) without quotes, from the last other expansion on."""
    for cut in ("$", "`"):
        if cut in words:
            words = words[words.rindex(cut) + 1 :]
            if cut == "$":  # the other variable's name
                words = re.sub(r"^(?:[!$?#@*0-9]|\{[^}]*\}|\w+)", "", words)
    words = words.replace('"', "").replace("'", "").lstrip()
    return words[-24:]


def _pid_prefixes(command: str) -> tuple[re.Pattern[str], ...]:
    """Patterns of a PID printed after a literal (``bg=3``), one per such printer."""
    literals: list[str] = []
    for echo in _ECHO_ARGS.finditer(command):
        args = re.sub(r"^(?:\s+-[neE]+)+", "", echo[2])
        if echo[1] == "printf":
            fmt = re.match(r"\s*(['\"])(.*?)\1", args)
            conversion = re.search(r"%[-0-9]*[dsi]", fmt[2]) if fmt else None
            if fmt and conversion and _PID_VAR.search(args[fmt.end() :]):
                literals.append(fmt[2][: conversion.start()].rsplit("\\n", 1)[-1])
            continue
        for var in _PID_VAR.finditer(args):
            literals.append(_literal_before(args[: var.start()]))
    for call in _PY_PID.finditer(command):
        before = command[max(0, call.start() - 80) : call.start()]
        fstring = re.search(r"([^{}\"']*)\{\s*$", before)
        joined = re.search(r"[\"']([^\"']*)[\"']\s*(,|\+\s*str\()\s*$", before)
        if fstring and fstring[1].strip():
            literals.append(fstring[1][-24:])
        elif joined:
            literals.append(joined[1][-24:] + (" " if joined[2] == "," else ""))
    found = {literal for literal in literals if literal.strip()}
    return tuple(re.compile(rf"(?<={re.escape(literal)})\d+(?![\d.])") for literal in sorted(found))


def _bare_pid(command: str) -> bool:
    """Whether a command line prints a PID alone on a line (``echo $!``, ``pgrep``…)."""
    if re.search(r"\bpgrep\b|\bpidof\b", command):
        return True
    for echo in _ECHO_ARGS.finditer(command):
        args = re.sub(r"^(?:\s+-[neE]+)+", "", echo[2]).strip()
        var = _PID_VAR.search(args)
        if (
            echo[1] == "echo"
            and var is not None
            and not _literal_before(args[: var.start()]).strip()
        ):
            return True
    for call in _PY_PID.finditer(command):
        before = command[max(0, call.start() - 80) : call.start()]
        if re.search(r"print\(\s*(?:str\(\s*|f[\"']\{\s*)?$", before):
            return True
    return False


def ps_columns(text: str) -> tuple[str, int]:
    """``ps`` rows with the values of their PID columns as ``<PID>``, and how many.

    A header line naming a PID column (``PID``, ``PPID``…) starts a table; its rows are
    the lines after it until an empty one. A row's fields are split on whitespace (the
    last, the command, may hold spaces) and joined by one space."""
    if "PID" not in text and "LWP" not in text:
        return text, 0
    lines = text.split("\n")
    total = 0
    columns: list[int] = []
    width = 0
    for number, line in enumerate(lines):
        fields = line.split()
        if not fields:
            columns = []
            continue
        named = [i for i, f in enumerate(fields) if f in _PS_COLUMN]
        if named and all(not f.isdigit() for f in fields):
            columns, width = named, len(fields)
            continue
        if not columns:
            continue
        parts = line.split(None, width - 1)
        changed = 0
        for i in columns:
            if i < len(parts) and parts[i].isdigit():
                parts[i] = "<PID>"
                changed += 1
        if changed:
            lines[number] = " ".join(parts)
            total += changed
    return ("\n".join(lines), total) if total else (text, 0)


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
    printers = PidPrinters(command) if _PID_COMMAND.search(command) is not None else None
    return runs_git(command), printers, unordered_output(command)


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


def rules_named(names: Sequence[str]) -> tuple[Rule, ...]:
    """The built-in rules called *names*, in that order (for other domains' rule sets)."""
    unknown = [n for n in names if n not in RULES]
    if unknown:
        raise KeyError(f"unknown normalization rules {unknown}; known: {', '.join(RULES)}")
    return tuple(RULES[n] for n in names)
