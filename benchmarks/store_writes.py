"""Store writes: audited trajectories into DuckDB, fidelity's bulk path against the naive way.

Synthesizes records of 1-2 KB observations (real and simulated, with their
comparisons) and writes them, in the same run, three ways into fresh files:

- **fidelity**: what audits and gates do, ``RecordBuffer.add`` per record: one
  transaction per batch, one bulk insert per table from NumPy columns, named
  columns; a batch is built and inserted on the caller's thread, then committed
  (a checkpoint writing the rows, compressed, into the file) on a writer thread while the next one is built;
- **serial**: the same buffer with ``background=False`` (build, insert and
  commit on one thread, in turn: the path before the writer thread);
- **naive**: per trajectory, a transaction that deletes its old rows and
  inserts every row with a parameterised ``INSERT ... VALUES`` (``executemany``).

The observation texts are real text: slices of 1-2 KB of this Python's
standard-library sources (present wherever Python is), every one different,
each simulated text a slightly edited copy of its real one. They compress like
recorded agent observations (zstd level 1: 0.42 of their size, against 0.42
for the 1-2 KB observations of the mini-swe-agent runs in
``../shared/agent-trajectories``), where a repeated line would compress 20×
and flatter any compressed layout.

Prints steps per second of each (wall clock, closing the file included, and per
second of this process's CPU time, DuckDB's threads included); fidelity and
serial run ``--repeats`` times, alternating, and their medians are printed (the
machine may be busy: wall time counts what others take). ``--floor`` adds DuckDB
alone storing the same observation rows, built beforehand: the part of the
write no Python change can remove.

    python benchmarks/store_writes.py [--steps 100000] [--depth 10] [--repeats 3] [--floor]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sysconfig
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from fidelity.compare.base import StepComparison
from fidelity.store import COLUMNS, RecordBuffer, Store, TimedObservation, TrajectoryRecord
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory

INFO = {
    "domain": "terminal",
    "sandbox": "local",
    "world_model": {"backend": "synthetic"},
    "mode": "teacher-forced",
    "suite": "synthetic",
    "suite_digest": "synthetic",
    "code_version": "bench",
}


def records(steps: int, depth: int) -> list[TrajectoryRecord]:
    """``steps // depth`` records of *depth* steps, observations of 1-2 KB."""
    result = []
    for t in range(steps // depth):
        trajectory = Trajectory(
            id=f"traj-{t:06d}",
            domain="terminal",
            steps=[Step(action=CommandAction(command=f"cat file{d}.txt")) for d in range(depth)],
        )
        real = [
            TimedObservation(Observation(text=_text(t, d, "real"), exit_code=0), 3.0)
            for d in range(depth)
        ]
        sim = [
            TimedObservation(Observation(text=_text(t, d, "sim"), exit_code=0), 40.0)
            for d in range(depth)
        ]
        comparisons = [
            StepComparison(
                score=0.8,
                drift=d % 4 == 0,
                hallucinations=["file:ghost"] if d % 4 == 0 else [],
                metrics={"line": 0.8},
                normalizations={"timestamps": 1},
            )
            for d in range(depth)
        ]
        result.append(
            TrajectoryRecord(trajectory, real, sim, comparisons, "teacher-forced", 1.0, 2.0)
        )
    return result


@functools.cache
def _corpus() -> str:
    """About 20 MB of the standard library's Python sources, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts: list[str] = []
    size = 0
    for path in sorted(root.rglob("*.py")):
        try:
            parts.append(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, OSError):
            continue
        size += len(parts[-1])
        if size > 20_000_000:
            break
    return "".join(parts)


def _text(t: int, d: int, side: str) -> str:
    """A 1-2 KB slice of real text, different for every (t, d); the sim side edited."""
    corpus = _corpus()
    start = (t * 7919 + d * 104_729) % (len(corpus) - 4096)
    text = corpus[start : start + 1024 + (t * 31 + d * 17) % 1024]
    return text if side == "real" else text.replace("self", "this", 1) + "\n$ "


def fidelity_way(path: Path, batch: list[TrajectoryRecord], background: bool = True) -> None:
    """RecordBuffer.add per record, as the audit and the gate do."""
    with Store(path) as store:
        store.start_run("bench", INFO)
        buffer = RecordBuffer(store, "bench", background=background)
        for record in batch:
            buffer.add(record)
        buffer.flush()


def serial_way(path: Path, batch: list[TrajectoryRecord]) -> None:
    """The same, without the writer thread: each batch built, inserted and committed in turn."""
    fidelity_way(path, batch, background=False)


def naive_way(path: Path, batch: list[TrajectoryRecord]) -> None:
    """A transaction per trajectory: delete its rows, then parameterised row inserts."""
    from fidelity import store as module

    with Store(path) as store:
        store.start_run("bench", INFO)
        con = store.connection
        for record in batch:
            rows = module._Batch()
            rows.add_record(record, module._now())
            with store.transaction() as tx:
                for table in ("steps", "observations", "comparisons", "trajectories"):
                    tx.execute(
                        f"DELETE FROM {table} WHERE run_id = ? AND trajectory_id = ?",
                        ["bench", record.trajectory.id],
                    )
                for table, values in rows.rows("bench").items():
                    names = ", ".join(COLUMNS[table])
                    marks = ", ".join("?" * len(COLUMNS[table]))
                    tx.executemany(f"INSERT INTO {table} ({names}) VALUES ({marks})", values)
        del con


def floor_way(path: Path, batch: list[TrajectoryRecord]) -> None:
    """DuckDB alone: the observation rows (the texts), built beforehand, inserted per batch
    of 1,000 trajectories and committed, then the file closed (its last checkpoint). What
    any layout keeping these texts readable in DuckDB pays, before fidelity's own work."""
    from fidelity import store as module

    built = []
    for start in range(0, len(batch), 1_000):
        rows = module._Batch()
        for record in batch[start : start + 1_000]:
            rows.add_record(record, module._now())
        built.append(rows.tables["observations"])
    with Store(path) as store:
        store.start_run("bench", INFO)
        started, cpu = time.perf_counter(), time.process_time()
        for columns in built:
            with store.transaction() as tx:
                module._insert_columns(tx, "observations", columns, {"run_id": "bench"})
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    steps = len(batch) * len(batch[0].trajectory.steps)
    print(
        f"    floor: {steps:,} steps in {elapsed:6.2f} s = {steps / elapsed:10,.0f} steps/s "
        f"({steps / cpu:,.0f} per CPU second): DuckDB storing just the texts, rows prebuilt"
    )


def timed(
    way: str,
    function: Callable[[Path, list[TrajectoryRecord]], None],
    chosen: list[TrajectoryRecord],
    path: Path,
) -> tuple[float, float]:
    """Run one way into a fresh *path*; print and return its wall and CPU steps per second."""
    path.unlink(missing_ok=True)
    started, cpu = time.perf_counter(), time.process_time()
    function(path, chosen)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    steps = sum(len(record.trajectory.steps) for record in chosen)
    size = path.stat().st_size / 2**20
    print(
        f"{way:>9}: {steps:,} steps in {elapsed:6.2f} s = {steps / elapsed:10,.0f} steps/s "
        f"({steps / cpu:,.0f} per CPU second; file {size:.0f} MiB)"
    )
    return steps / elapsed, steps / cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument(
        "--naive-steps", type=int, default=5_000, help="the naive way on this many steps"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs of fidelity and serial (medians printed)"
    )
    parser.add_argument(
        "--floor", action="store_true", help="also time DuckDB alone storing the texts"
    )
    args = parser.parse_args()
    batch = records(args.steps, args.depth)
    naive_batch = batch[: max(1, args.naive_steps // args.depth)]
    runs: dict[str, list[tuple[float, float]]] = {"fidelity": [], "serial": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):
            for way, function in (("fidelity", fidelity_way), ("serial", serial_way)):
                runs[way].append(timed(way, function, batch, Path(folder) / f"{way}.duckdb"))
        naive, _ = timed("naive", naive_way, naive_batch, Path(folder) / "naive.duckdb")
        if args.floor:
            floor_way(Path(folder) / "floor.duckdb", batch)
    medians = {
        way: (statistics.median(w for w, _ in rates), statistics.median(c for _, c in rates))
        for way, rates in runs.items()
    }
    for way, (wall, cpu) in medians.items():
        print(
            f"median of {args.repeats} {way:>8}: {wall:10,.0f} steps/s wall clock, "
            f"{cpu:,.0f} per CPU second"
        )
    print(
        f"store write ratio fidelity/naive: {medians['fidelity'][0] / naive:.0f}x; "
        f"fidelity/serial: {medians['fidelity'][0] / medians['serial'][0]:.2f}x (wall medians)"
    )


if __name__ == "__main__":
    main()
