"""Start-up cost of the CLI: what a command imports beyond what it needs (issue 31).

Two figures, each the median of N alternated runs in fresh processes (as a user
runs them: ``python -m fidelity …``), with their spread and the CPU time each
command used (its own and its children's: steadier than wall time on a busy machine):

- ``fidelity runs --db X`` against the import of its own dependencies (target
  <= 1.3x), two ways: ``import duckdb, typer, pydantic`` (the baseline of issue 31
  and of every earlier figure) and :data:`USED` (the modules the command uses:
  since Typer is held below 0.29 and the store imports no pydantic, ``fidelity
  runs`` loads no pydantic machinery, and its table is rich's). Importing them is
  not all a command of theirs costs: DuckDB starts a database to open the file
  (its catalog of built-in functions: ~0.05 s at the first connection of a
  process) and rich measures and draws the table. A third line therefore sets
  ``fidelity runs`` beside :data:`BARE_RUNS`, the same listing written with those
  libraries alone (one Typer command with the same options, the file opened
  read-only and queried, the same table printed): what fidelity itself adds;
- ``fidelity audit --sim-baseline copy`` against ``fidelity replay`` on the
  bundled terminal suite (same sandboxes, same concurrency): the audit's
  overhead over the replay itself (simulate, compare, store, report; target
  <= 1.15x).

    python benchmarks/startup.py [--runs 7] [--runs-only | --audit-only]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "suites" / "terminal" / "suite.jsonl"
FIDELITY = [sys.executable, "-m", "fidelity"]
DEPENDENCIES = [sys.executable, "-c", "import duckdb, typer, pydantic"]
USED = [sys.executable, "-c", "import duckdb, typer, rich.console, rich.table"]
"""What ``fidelity runs`` imports from its dependencies (tests/test_imports.py checks that
it imports no pydantic machinery)."""
BARE_RUNS = """
from pathlib import Path
import duckdb, typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False)

@app.command()
def runs(db: Path = typer.Option(Path("x"), "--db"), as_json: bool = False) -> None:
    connection = duckdb.connect(str(db), read_only=True)
    query = "SELECT run_id, started_at, status FROM runs ORDER BY started_at DESC"
    rows = connection.execute(query).fetchall()
    columns = ("run", "started", "status", "owner", "domain", "world model", "mode", "steps", "drift")
    table = Table(*columns)
    for row in rows:
        table.add_row(*map(str, row), *[""] * 6)
    Console(highlight=False, soft_wrap=True).print(table)

@app.command()
def other() -> None:
    "Makes ``runs`` a sub-command, as in fidelity."

app()
"""
"""``fidelity runs`` written with its dependencies alone: the floor fidelity's start-up adds to."""
CONCURRENCY = "2"
BYTECODE_WRITTEN = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""The environment of the warm-up runs: every measured run then starts as an installed CLI
does (the set-up compiles the package; where ``PYTHONDONTWRITEBYTECODE`` is set, as on this
workplace's machines, a module edited since would otherwise be compiled again at each start)."""


class Timing(NamedTuple):
    """One run of a command: wall seconds, and CPU seconds of the process and its children."""

    wall: float
    cpu: float


def timed(command: Sequence[str], env: dict[str, str] | None = None) -> Timing:
    """Run *command* (it must succeed) and time it."""
    before, started = os.times(), time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL, env=env)
    elapsed, after = time.perf_counter() - started, os.times()
    cpu = (after.children_user + after.children_system) - (
        before.children_user + before.children_system
    )
    return Timing(elapsed, cpu)


def alternated(runs: int, *commands: Callable[[int], Timing]) -> list[list[Timing]]:
    """*runs* timings of each of *commands*, taken in turn (first, second, …, first, …); each
    command is given the run's index."""
    timings: list[list[Timing]] = [[] for _ in commands]
    for index in range(runs):
        for times, command in zip(timings, commands, strict=True):
            times.append(command(index))
    return timings


def audit_command(folder: Path, index: int) -> list[str]:
    """A fresh audit of the bundled terminal suite with the copy baseline (report written)."""
    return [
        *FIDELITY,
        "audit",
        str(SUITE),
        "--sim-baseline",
        "copy",
        "--concurrency",
        CONCURRENCY,
        "--db",
        str(folder / f"audit{index}.duckdb"),
        "--report",
        str(folder / f"report{index}.html"),
    ]


def replay_command(folder: Path) -> list[str]:
    """``fidelity replay`` of the same suite, same concurrency."""
    out = str(folder / "real.jsonl")
    return [*FIDELITY, "replay", str(SUITE), "-o", out, "--concurrency", CONCURRENCY]


def print_ratio(
    label: str,
    times: list[Timing],
    base_label: str,
    base_times: list[Timing],
    target: float | None,
) -> None:
    """Both wall medians, their ratio and its target; the spread (range of each command's
    wall times, range and median of the ratio of each run to the base run taken beside it:
    steadier than the ratio of medians where the host's speed drifts during a measurement);
    the CPU medians and their ratio."""
    seconds, base = (statistics.median(t.wall for t in ts) for ts in (times, base_times))
    print(
        f"{label}: {seconds:.3f} s vs {base_label}: {base:.3f} s: {seconds / base:.2f}x "
        f"(+{seconds - base:.3f} s{'' if target is None else f'; target <= {target}x'})"
    )
    pairs = sorted(t.wall / b.wall for t, b in zip(times, base_times, strict=True))
    print(
        f"  spread: {min(t.wall for t in times):.3f}-{max(t.wall for t in times):.3f} s vs "
        f"{min(t.wall for t in base_times):.3f}-{max(t.wall for t in base_times):.3f} s; "
        f"ratio of each pair {pairs[0]:.2f}-{pairs[-1]:.2f}x (median {statistics.median(pairs):.2f}x)"
    )
    cpu, base_cpu = (statistics.median(t.cpu for t in ts) for ts in (times, base_times))
    print(f"  CPU: {cpu:.3f} s vs {base_cpu:.3f} s: {cpu / base_cpu:.2f}x")


def print_runs(count: int, db: str) -> None:
    """``fidelity runs --db *db*`` against its three baselines, *count* alternated runs each."""
    runs, deps, used, bare = alternated(
        count,
        lambda _: timed([*FIDELITY, "runs", "--db", db]),
        lambda _: timed(DEPENDENCIES),
        lambda _: timed(USED),
        lambda _: timed([sys.executable, "-c", BARE_RUNS, "runs", "--db", db]),
    )
    print_ratio("fidelity runs --db X", runs, "import duckdb, typer, pydantic", deps, 1.3)
    print_ratio("fidelity runs --db X", runs, USED[-1], used, 1.3)
    print_ratio("fidelity runs --db X", runs, "the same listing without fidelity", bare, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="alternated runs of each command")
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--runs-only", action="store_true", help="measure `fidelity runs` only, not the audit"
    )
    only.add_argument(
        "--audit-only", action="store_true", help="measure the audit only, not `fidelity runs`"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        # the database `runs` lists; these first runs warm the page cache and write the
        # bytecode of every module the commands import
        timed(audit_command(folder, -1), env=BYTECODE_WRITTEN)
        db = str(folder / "audit-1.duckdb")
        timed(replay_command(folder), env=BYTECODE_WRITTEN)
        timed([*FIDELITY, "runs", "--db", db], env=BYTECODE_WRITTEN)
        print(f"median of {args.runs} alternated runs each ({sys.executable})")
        if not args.audit_only:
            print_runs(args.runs, db)
        if args.runs_only:
            return
        audit, replay = alternated(
            args.runs,
            lambda i: timed(audit_command(folder, i)),
            lambda _: timed(replay_command(folder)),
        )
        print_ratio(
            f"fidelity audit --sim-baseline copy ({SUITE.parent.name} suite)",
            audit,
            "fidelity replay",
            replay,
            1.15,
        )


if __name__ == "__main__":
    main()
