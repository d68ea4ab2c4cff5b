"""What a command line tells the comparator: which program printed the output, and how.

Only the last command of the first line counts (``cd src && ls -la`` prints
what ``ls -la`` prints), split into its pipeline stages.
"""

from __future__ import annotations

import re
import shlex
from functools import lru_cache
from typing import NamedTuple

from fidelity.trajectory import program_name


class Stage(NamedTuple):
    """One stage of a pipeline: its program (``git status``, ``ls``…) and its words."""

    program: str
    words: tuple[str, ...]


# Programs whose output lines come in no defined order (directory/hash order, parallelism).
_UNORDERED = frozenset({"find", "du", "locate", "mlocate", "plocate", "rg", "fd"})
# Programs whose output order is unspecified only with some flags.
_UNORDERED_WITH = {"grep": ("r", "R", "--recursive", "--dereference-recursive"), "ls": ("f", "U")}
# Stages that pass lines through (a subset, possibly reordered) without rewriting them.
_LINE_FILTERS = frozenset({"head", "tail", "grep", "sort", "uniq", "cat", "less", "more", "tee"})


@lru_cache(maxsize=4096)
def pipeline(command: str) -> tuple[Stage, ...]:
    """The stages of the last command on the first line of *command*."""
    lines = command.strip().splitlines()
    tokens = _tokens(lines[0]) if lines else []
    last: list[str] = []
    for token in tokens:
        if token in {"&&", "||", ";"}:
            last = []
        elif token != "&":
            last.append(token)
    stages: list[Stage] = []
    words: list[str] = []
    for token in [*last, "|"]:
        if token != "|":
            words.append(token)
        elif words:
            stages.append(Stage(program_name(words), tuple(words)))
            words = []
    return tuple(stages)


def _tokens(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: fall back to whitespace words
        return line.split()


@lru_cache(maxsize=4096)
def unordered_output(command: str) -> bool:
    """True when *command* prints lines in no defined order.

    ``find``, ``du``, ``locate``, ``rg``, ``fd``, recursive ``grep``
    (``-r``/``-R``) and unsorted ``ls`` (``-f``/``-U``), anywhere in the
    pipeline, unless a ``sort`` stage orders the output; and the commands
    whose order differs between two runs (:func:`volatile_order`).
    """
    stages = pipeline(command)
    if any(stage.program == "sort" for stage in stages):
        return False
    return any(_unordered(stage) for stage in stages) or volatile_order(command)


@lru_cache(maxsize=4096)
def volatile_order(command: str) -> bool:
    """True when two real runs of *command* may print its lines in another order.

    pytest with pytest-xdist's workers (``-n N``, ``-nauto``, ``--numprocesses``): its
    README says the workers get the tests "randomly", and each result is reported when
    its worker finishes it. (A listing's order, ``find`` or ``grep -r``, is the same in
    two runs on one file system: the rubric calls another order drift.)
    """
    return any(_parallel_tests(stage) for stage in pipeline(command))


_XDIST_WORKERS_RE = re.compile(r"-n(?:\d+|auto|logical)?|--numprocesses(?:=.*)?")


def _parallel_tests(stage: Stage) -> bool:
    if not stage.program.endswith(("pytest", "py.test")):
        return False
    return any(_XDIST_WORKERS_RE.fullmatch(word) for word in stage.words)


def _unordered(stage: Stage) -> bool:
    if stage.program in _UNORDERED:
        return True
    flags = _UNORDERED_WITH.get(stage.program, ())
    return any(has_flag(stage.words, flag) for flag in flags)


def has_flag(words: tuple[str, ...], flag: str) -> bool:
    """Whether *words* hold *flag*: ``--long`` exactly, ``r`` inside any short group (``-rn``)."""
    if flag.startswith("--"):
        return flag in words
    return any(w.startswith("-") and not w.startswith("--") and flag in w[1:] for w in words)


@lru_cache(maxsize=4096)
def printing_program(command: str) -> str | None:
    """The program whose lines reach the output: the first stage, when the rest only filter lines.

    ``ls -la | grep py`` → ``ls``; ``ls | wc -l`` → ``None`` (``wc`` prints
    its own lines); ``cd src && git status`` → ``git status``.
    """
    stages = pipeline(command)
    if not stages or any(s.program not in _LINE_FILTERS for s in stages[1:]):
        return None
    return stages[0].program


def runs_git(command: str) -> bool:
    """True when a stage of *command* is git, whose output abbreviates commit ids."""
    return any(stage.program.split(" ", 1)[0] == "git" for stage in pipeline(command))
