"""Analysis and report of a 100k-step run: time and peak memory, against the naive way.

Synthesizes a run into a DuckDB file through the store's own bulk writer
(``RecordBuffer`` → ``Store.write_trajectories``, the path an audit takes):
trajectories × depth steps, real and simulated observations, and comparisons
whose drift grows with depth, with entity lists and normalization counts.
Then, each in a fresh process (so its peak RSS is its own) and in the same run:

- **fidelity**: ``python -m fidelity report --db DB --run bench -o report.html``,
  the command a user runs (DuckDB aggregates, bootstrap intervals over
  per-trajectory counts, the HTML report written), timed as a whole process;
- **naive**: every comparison row (with both observation texts) fetched into
  Python, aggregated per depth, action and trajectory in loops, then the same
  bootstrap with ``rng.poisson`` per metric (no report written), also timed as
  a whole process.

Prints CPU time (user + system: steady on a shared machine), wall time and
peak RSS of each process, the report size, and the ratios.

    python benchmarks/analysis_scale.py [--trajectories 2000] [--depth 50]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: this driver process stays small (see timed())
    from fidelity.store import TimedObservation, TrajectoryRecord

INFO = {
    "domain": "terminal",
    "sandbox": "local",
    "world_model": {"backend": "endpoint", "model": "synthetic"},
    "mode": "open-loop",
    "suite": "synthetic",
    "suite_digest": "synthetic",
    "code_version": "bench",
}
NAMES = ["ls", "cat", "git log", "pytest", "grep", "python"]


def _unit(*key: int) -> float:
    """A deterministic number in [0, 1) for *key* (the synthetic run's randomness)."""
    return zlib.crc32(repr(key).encode()) % 10_000 / 10_000


def _record(t: int, depth: int) -> TrajectoryRecord:
    """Trajectory *t* of the synthetic run: *depth* steps, drift growing with depth."""
    from fidelity.compare.base import StepComparison
    from fidelity.store import TimedObservation, TrajectoryRecord
    from fidelity.trajectory import Observation, Trajectory

    commands = [f"{NAMES[(t + d) % len(NAMES)]} arg{d}" for d in range(1, depth + 1)]
    trajectory = Trajectory.model_validate(
        {
            "id": f"traj-{t:06d}",
            "domain": "terminal",
            "steps": [{"action": {"type": "command", "command": c}} for c in commands],
        }
    )

    def side(name: str, d: int) -> TimedObservation:
        text = f"{name} output line {d}\n" * 8
        return TimedObservation(Observation(text=text, exit_code=0, cwd="/workspace"), 12.5)

    comparisons = []
    for d in range(1, depth + 1):
        u = _unit(t, d)
        drifted = u * d / depth
        comparisons.append(
            StepComparison(
                score=1.0 - drifted,
                drift=drifted > 0.3,
                infra_failure=u > 0.999,
                exit_match=True,
                metrics={"line": 0.9},
                hallucinations=[f"file:ghost{d}", f"number:{t}"] if drifted > 0.5 else [],
                omissions=["error:KeyError"] if u > 0.9 else [],
                normalizations={"timestamps": 1, "pids": 2},
            )
        )
    real = [side("real", d) for d in range(1, depth + 1)]
    sim = [side("sim", d) for d in range(1, depth + 1)]
    return TrajectoryRecord(trajectory, real, sim, comparisons, "open-loop", 1.0, 1.0)


def synthesize(path: Path, trajectories: int, depth: int) -> int:
    """Write one run of ``trajectories × depth`` steps through the store; returns steps."""
    from fidelity.store import RecordBuffer, Store

    with Store(path) as store:
        store.start_run("bench", INFO)
        buffer = RecordBuffer(store, "bench", size=256, seconds=3600)
        for t in range(trajectories):
            buffer.add(_record(t, depth))
        buffer.flush()
        store.finish_run("bench", "done")
    return trajectories * depth


def timed(command: list[str]) -> dict[str, Any]:
    """Run *command* as a fresh process: wall and CPU seconds, peak RSS, its stdout.

    Linux counts the parent's RSS at fork into a child's peak (``ru_maxrss``), so
    the parent running this stays small: the run is synthesized in a child too.
    """
    started = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, stdout=out)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - started
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(command[:4])}… failed: exit code {process.returncode}")
        out.seek(0)
        return {
            "wall": wall,
            "cpu": usage.ru_utime + usage.ru_stime,
            "peak_mib": usage.ru_maxrss / 1024,
            "stdout": out.read(),
        }


def fidelity_way(path: Path, report: Path) -> dict[str, Any]:
    """``fidelity report`` as a user runs it: a fresh process, timed whole."""
    command = [sys.executable, "-m", "fidelity", "report", "--db", str(path), "--run", "bench"]
    result = timed([*command, "-o", str(report)])
    return {**result, "report_bytes": report.stat().st_size}


def naive_way(path: Path) -> dict[str, Any]:
    """The same figures the straightforward way: every row in Python, loops, then a bootstrap."""
    import numpy as np

    from fidelity.store import Store

    started = time.perf_counter()
    with Store(path, read_only=True) as store:
        rows = store.connection.execute(
            """SELECT c.trajectory_id, c.depth, s.action_name, c.score, c.drift, c.infra_failure,
                      c.hallucinations, c.omissions, c.normalizations, r.text, m.text
               FROM comparisons c JOIN steps s USING (run_id, trajectory_id, depth)
               JOIN observations r ON r.run_id = c.run_id AND r.trajectory_id = c.trajectory_id
                    AND r.depth = c.depth AND r.side = 'real'
               JOIN observations m ON m.run_id = c.run_id AND m.trajectory_id = c.trajectory_id
                    AND m.depth = c.depth AND m.side = 'sim'
               WHERE c.run_id = 'bench'"""
        ).fetchall()
    cells: dict[Any, dict[str, list[float]]] = defaultdict(
        lambda: defaultdict(lambda: [0, 0, 0, 0.0])
    )
    kinds: dict[str, int] = defaultdict(int)
    rules: dict[str, int] = defaultdict(int)
    for tid, depth, action, score, drift, infra, halls, _omits, norms, _real, _sim in rows:
        if infra:
            continue
        for key in (("depth", depth), ("action", action)):
            cell = cells[key][tid]
            cell[0] += 1
            cell[1] += drift
            cell[2] += bool(halls)
            cell[3] += score
        for entity in halls:
            kinds[entity.split(":", 1)[0]] += 1
        for rule, n in json.loads(norms).items():
            rules[rule] += n
    rng = np.random.default_rng(0)
    for per_trajectory in cells.values():
        data = np.array(list(per_trajectory.values()))
        for column in (1, 2, 3):
            weights = rng.poisson(1.0, size=(1000, len(data)))
            np.percentile((weights @ data[:, column]) / (weights @ data[:, 0]), [2.5, 97.5])
    return {
        "analysis_s": round(time.perf_counter() - started, 2),
        "cells": len(cells),
        "rows_in_python": len(rows),
    }


def measure(path: Path) -> None:
    """The naive way in this process: print its figures."""
    result = naive_way(path)
    print(f"RESULT {result['cells']} {result['rows_in_python']}", flush=True)


def naive_process(path: Path) -> dict[str, Any]:
    """The naive way in a fresh process (imports included, like the CLI), timed whole."""
    result = timed([sys.executable, __file__, "--measure", "naive", "--db", str(path)])
    line = next(x for x in result["stdout"].splitlines() if x.startswith("RESULT"))
    _, cells, rows = line.split()
    return {**result, "cells": int(cells), "rows": int(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=2000)
    parser.add_argument("--depth", type=int, default=50)
    parser.add_argument("--measure", choices=["naive", "synthesize"], help=argparse.SUPPRESS)
    parser.add_argument("--db", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure == "naive":
        measure(args.db)
        return
    if args.measure == "synthesize":
        print(synthesize(args.db, args.trajectories, args.depth))
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "bench.duckdb"
        started = time.perf_counter()
        size_args = ["--trajectories", str(args.trajectories), "--depth", str(args.depth)]
        made = timed(
            [sys.executable, __file__, "--measure", "synthesize", "--db", str(path), *size_args]
        )
        steps = int(made["stdout"].split()[-1])
        size = path.stat().st_size / 2**20
        print(
            f"synthesized {steps:,} steps through the store in "
            f"{time.perf_counter() - started:.2f} s ({size:.0f} MiB)"
        )
        ours = fidelity_way(path, Path(folder) / "report.html")
        naive = naive_process(path)
        for name, way in (("fidelity report", ours), ("naive (rows into Python, loops)", naive)):
            print(
                f"{name:>31}: {way['cpu']:6.2f} s CPU, {way['wall']:6.2f} s wall, "
                f"peak RSS {way['peak_mib']:6.1f} MiB, {steps / way['cpu']:8,.0f} steps/s of CPU"
            )
        print(f"report: {ours['report_bytes']:,} bytes; naive fetched {naive['rows']:,} rows")
        print(
            f"ratio naive/fidelity: {naive['cpu'] / max(ours['cpu'], 1e-9):.1f}x CPU time, "
            f"{naive['wall'] / max(ours['wall'], 1e-9):.1f}x wall, "
            f"{naive['peak_mib'] / max(ours['peak_mib'], 1e-9):.1f}x peak RSS"
        )


if __name__ == "__main__":
    main()
