"""The normalization rules: what a rule is, the terminal rule set and the rules' names.

A :class:`Rule` is a named regex rewrite; :data:`DEFAULT_RULES` is the terminal rule set, in
application order, and :data:`RULES` finds a rule by name so other domains can compose their
own sets (:func:`rules_named`). The rules that are not regex rewrites (truncation, line order,
the PIDs an action printed, short git ids, whitespace) are named here too;
:class:`~fidelity.compare.normalize.Normalizer` applies them all, and
:mod:`fidelity.compare.normalize` tells how the regexes are made fast (leads, fused passes,
guards, the compiled line-local rules of :data:`LINE_LOCAL`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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

ORDER_RULE = "unordered_lines"
GIT_ID_RULE = "git_short_id"
GIT_SHORT_ID = Rule(
    GIT_ID_RULE,
    r"(?<![\w/<>-])[0-9a-f]{7,40}(?![\w/<>-])",
    "<HEX>",
    description="abbreviated commit ids in git's output (also all-digit ones)",
)
TRUNCATE_RULE = "truncate"
PID_OUTPUT_RULE = "action_pid"
CR_RULE = "carriage_return"
TRAILING_SPACE_RULE = "trailing_space"
BLANK_LINES_RULE = "trailing_blank_lines"
WHITESPACE_RULES = frozenset({TRAILING_SPACE_RULE, BLANK_LINES_RULE})
"""Whole-text rules for what people call the same text: spaces and tabs at line ends, blank
lines (and the final line break) at the end of the text. Line endings (``\\r\\n``, a lone
``\\r`` at a line's end) are the regex rules ``crlf`` and ``carriage_return``."""


def rules_named(names: Sequence[str]) -> tuple[Rule, ...]:
    """The built-in rules called *names*, in that order (for other domains' rule sets)."""
    unknown = [n for n in names if n not in RULES]
    if unknown:
        raise KeyError(f"unknown normalization rules {unknown}; known: {', '.join(RULES)}")
    return tuple(RULES[n] for n in names)
