"""The PIDs a command line prints, found by what printed them.

Inside a PID namespace (bubblewrap, a container) PIDs are small, so a digit count cannot
tell a PID from a count: :class:`PidPrinters` reads the command line for what prints one
(``echo $!``, ``os.getpid()``, ``pgrep``, ``pidof``, ``ps``, job lines) and rewrites those
numbers to ``<PID>`` on both sides. :class:`~fidelity.compare.normalize.Normalizer` runs it
as the ``action_pid`` rule.
"""

from __future__ import annotations

import re

__all__ = ["PidPrinters", "pid_printers", "ps_columns"]

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


def pid_printers(command: str) -> PidPrinters | None:
    """Where ``command``'s output holds PIDs, or None when nothing in it prints one."""
    return PidPrinters(command) if _PID_COMMAND.search(command) is not None else None
