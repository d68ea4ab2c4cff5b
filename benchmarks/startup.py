"""Start-up cost of the CLI: what a command imports beyond what it needs (issue 31).

Two figures, each the median of N alternated runs in fresh processes (as a user
runs them: ``python -m fidelity …``):

- ``fidelity runs --db X`` against ``python -c "import duckdb, typer, pydantic"``
  (the command's own dependencies): the ratio is what fidelity's own imports
  cost on top (target <= 1.3x);
- ``fidelity audit --sim-baseline copy`` against ``fidelity replay`` on the
  bundled terminal suite (same sandboxes, same concurrency): the audit's
  overhead over the replay itself (simulate, compare, store, report; target
  <= 1.15x).

    python benchmarks/startup.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "sandboxes" / "terminal" / "suite.jsonl"
FIDELITY = [sys.executable, "-m", "fidelity"]
DEPENDENCIES = [sys.executable, "-c", "import duckdb, typer, pydantic"]
CONCURRENCY = "2"


def wall(command: Sequence[str]) -> float:
    """Seconds *command* takes from start to exit (it must succeed)."""
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def alternated(
    runs: int, first: Callable[[int], float], second: Callable[[int], float]
) -> tuple[float, float]:
    """Medians of *runs* timings of each, taken in turn (first, second, first, …)."""
    a, b = [], []
    for index in range(runs):
        a.append(first(index))
        b.append(second(index))
    return statistics.median(a), statistics.median(b)


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


def print_ratio(label: str, seconds: float, base_label: str, base: float, target: float) -> None:
    """One line: both medians, the ratio and its target."""
    ratio = seconds / base
    print(
        f"{label}: {seconds:.3f} s vs {base_label}: {base:.3f} s: {ratio:.2f}x "
        f"(+{seconds - base:.3f} s; target <= {target}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="alternated runs of each command")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        wall(audit_command(folder, -1))  # the database `runs` lists; warms the page cache too
        db = str(folder / "audit-1.duckdb")
        wall(replay_command(folder))
        runs, deps = alternated(
            args.runs,
            lambda _: wall([*FIDELITY, "runs", "--db", db]),
            lambda _: wall(DEPENDENCIES),
        )
        print(f"median of {args.runs} alternated runs each ({sys.executable})")
        print_ratio("fidelity runs --db X", runs, "import duckdb, typer, pydantic", deps, 1.3)
        audit, replay = alternated(
            args.runs,
            lambda i: wall(audit_command(folder, i)),
            lambda _: wall(replay_command(folder)),
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
