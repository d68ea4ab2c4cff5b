"""Realistic terminal outputs for the comparator tests (imported by the test modules).

Each ``*_output(run)`` renders what a command prints in one run; ``run`` is a
seeded :class:`~devsets.samples.Run` holding that run's volatile values (dates, PIDs, SHAs,
durations, temp names). Two runs of the same builder differ only in volatile
content, like two real executions of the same command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from devsets.samples import DAYS, MONTHS, Run
from fidelity.compare import CompareContext
from fidelity.trajectory import CommandAction, Observation, Step

__all__ = ["DAYS", "MONTHS", "OUTPUTS", "Run", "context", "obs"]

LS_FILES = [
    ("drwxr-xr-x", 5, 4096, "."),
    ("drwxr-xr-x", 3, 4096, ".."),
    ("-rw-r--r--", 1, 220, ".bashrc"),
    ("-rw-r--r--", 1, 35, ".gitignore"),
    ("-rw-r--r--", 1, 1234, "README.md"),
    ("-rw-r--r--", 1, 512, "Makefile"),
    ("-rw-r--r--", 1, 87, "notes"),
    ("-rw-r--r--", 1, 1893, "config.yaml"),
    ("drwxr-xr-x", 2, 4096, "src"),
    ("drwxr-xr-x", 2, 4096, "tests"),
]

COMMITS = [
    "Fix parsing of dates in the config loader",
    "Add tests for the parser",
    "Initial commit",
]

TESTS = ["test_parse_dates", "test_parse_empty", "test_load_config", "test_missing_key"]


Row = tuple[str, int, int, str]


def ls_la_output(run: Run, extra: Sequence[Row] = ()) -> str:
    rows = [*LS_FILES, *extra]
    lines = [f"total {8 * len(rows)}"]
    lines += [
        f"{mode} {links:2d} root root {size:5d} {run.ls_date()} {name}"
        for mode, links, size, name in rows
    ]
    return "\n".join(lines) + "\n"


def git_log_output(run: Run) -> str:
    out: list[str] = []
    for message in COMMITS:
        out += [
            f"commit {run.hex(40)}",
            "Author: Dev Example <dev@example.com>",
            f"Date:   {run.git_date()}",
            "",
            f"    {message}",
            "",
        ]
    return "\n".join(out)


def unittest_output(run: Run) -> str:
    out = [f"{t} (tests.test_parser.ParserTest.{t}) ... ok" for t in TESTS]
    out += ["", "-" * 70, f"Ran {len(TESTS)} tests in {run.seconds()}", "", "OK"]
    return "\n".join(out) + "\n"


def pytest_output(run: Run) -> str:
    return "\n".join(
        [
            "============================= test session starts ==============================",
            "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
            f"rootdir: /tmp/pytest-of-root/pytest-{run.rng.randint(0, 9)}",
            f"collected {len(TESTS)} items",
            "",
            "tests/test_parser.py ....                                                [100%]",
            "",
            f"============================== {len(TESTS)} passed in {run.rng.random():.2f}s "
            "===============================",
            "",
        ]
    )


def xdist_output(run: Run) -> str:
    """``pytest -n 2``: failures reported in the order the workers finish them (this order
    differs between two real runs; a listing's order, ``find``'s, does not)."""
    sections = [
        f"{'_' * 20} test_{name} {'_' * 20}\n[gw{line % 2}] linux -- Python 3.11\n\n"
        f"    def test_{name}():\n>       assert {name}() == {value}\nE       assert 0 == {value}\n\n"
        f"tests/test_{name}.py:{line}: AssertionError\n"
        for name, value, line in (("parse", 3, 12), ("render", 5, 40), ("load", 7, 9))
    ]
    order = run.rng.sample(range(3), 3)
    failed = "".join(f"FAILED tests/test_{('parse', 'render', 'load')[i]}.py\n" for i in order)
    return (
        "gw0 I / gw1 I\ngw0 [3] / gw1 [3]\n\n"
        + "=" * 10
        + " FAILURES "
        + "=" * 10
        + "\n"
        + "".join(sections[i] for i in order)
        + failed
        + f"3 failed in {run.rng.random() + 1:.2f}s\n"
    )


def time_output(run: Run) -> str:
    return (
        f"[1] {run.pid()}\nworker started, pid {run.pid()}, tmp /tmp/tmp{run.hex(8)}\n"
        f"listening on http://127.0.0.1:{run.rng.randint(30000, 60000)}/\n"
        f"{run.rng.randint(1_700_000_000, 1_800_000_000)}\n"
        f"\nreal\t0m{run.rng.random():.3f}s\nuser\t0m{run.rng.random():.3f}s\n"
        f"sys\t0m{run.rng.random():.3f}s\n"
    )


OUTPUTS: dict[str, tuple[str, Callable[[Run], str]]] = {
    "ls": ("ls -la", ls_la_output),
    "git_log": ("git log", git_log_output),
    "unittest": ("python -m unittest -v", unittest_output),
    "pytest": ("python -m pytest", pytest_output),
    "xdist": ("pytest -n 2", xdist_output),
    "time": ("time ./worker.sh", time_output),
}


def context(
    command: str, history: Sequence[tuple[str, str]] = (), description: str = ""
) -> CompareContext:
    """A context for *command* whose history is ``(command, output)`` pairs."""
    steps = [
        Step(action=CommandAction(command=c), observation=Observation(text=t, exit_code=0))
        for c, t in history
    ]
    return CompareContext(
        action=CommandAction(command=command),
        history=steps,
        env_description=description,
        depth=len(steps) + 1,
    )


def obs(text: str, exit_code: int | None = 0, **fields: object) -> Observation:
    """An observation with exit code 0 unless told otherwise."""
    return Observation(text=text, exit_code=exit_code, **fields)  # type: ignore[arg-type]
