"""RL export to Parquet: fidelity's streamed writer against a plain pyarrow write.

Synthesizes simulated terminal trajectories of 10 steps (observations of 0.5-1.5 KB,
slices of this Python's standard-library sources, so they compress like real text)
with per-step verdicts, and turns them into verl rows two ways, each in a fresh
process (its own peak RSS, see ``child_usage.py``):

- **streamed**: :class:`fidelity.formats.rl_export.RLWriter`, one row group written
  per 1024 rows as they arrive;
- **plain**: the same rows (:func:`~fidelity.formats.rl_export.row`) collected in a
  list, then ``pa.Table.from_pylist`` and ``pq.write_table`` (the naive way).

Both time the same work (building the trajectories, the rows and the file). Printed:
rows/s (the child's own clocks, wall and CPU, interpreter start-up left out: the CPU
figure holds when the machine is busy), peak RSS, file size,
and the ratios; then both files are read back, batch by batch, to check that they
hold the same rows.

    python benchmarks/rl_export.py [--trajectories 5000] [--format verl|skyrl]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from child_usage import run_measured

from fidelity.formats.rl_export import (
    ExportOptions,
    RLWriter,
    StepVerdict,
    TrajectoryFidelity,
    parquet_schema,
    row,
)
from fidelity.trajectory import Trajectory

STEPS = 10
COMMANDS = ("ls -la", "cat setup.py", "python -m pytest -q", "git status", "grep -rn TODO .")


def corpus() -> str:
    """About 1 MB of real text: standard-library sources."""
    root = Path(sysconfig.get_paths()["stdlib"])
    names = ("argparse.py", "ast.py", "csv.py", "difflib.py", "json/decoder.py", "textwrap.py")
    return "".join((root / name).read_text(encoding="utf-8") for name in names)


def synthetic(count: int, seed: int = 0) -> Iterator[tuple[Trajectory, TrajectoryFidelity]]:
    """*count* trajectories of :data:`STEPS` steps and their verdicts, built one at a time."""
    rng = random.Random(seed)
    text = corpus()
    for t in range(count):
        steps = []
        for _ in range(STEPS):
            start = rng.randrange(len(text) - 2000)
            seen = text[start : start + rng.randint(512, 1536)]
            steps.append(
                {
                    "action": {"type": "command", "command": rng.choice(COMMANDS)},
                    "observation": {"text": seen, "exit_code": rng.choice((0, 0, 0, 1))},
                }
            )
        trajectory = Trajectory.model_validate(
            {
                "id": f"syn-{t:08d}",
                "domain": "terminal",
                "source": "sim",
                "steps": steps,
                "instruction": f"Fix the failing test number {t}.",
            }
        )
        scores = [rng.random() for _ in range(STEPS)]
        drifts = [score < 0.2 for score in scores]
        horizon = next((depth for depth, drift in enumerate(drifts) if drift), STEPS)
        verdicts = [StepVerdict(score=s, drift=d) for s, d in zip(scores, drifts, strict=True)]
        yield trajectory, TrajectoryFidelity(trust_horizon=horizon, verified=True, steps=verdicts)


def child(way: str, count: int, fmt: str, out: Path) -> None:
    """Write *count* rows the *way* given; print its wall and CPU seconds."""
    options = ExportOptions.model_validate({"format": fmt})
    started, cpu = time.perf_counter(), time.process_time()
    if way == "streamed":
        with RLWriter(out, options) as writer:
            for trajectory, fidelity in synthetic(count):
                writer.write(trajectory, fidelity)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows = [
            row(trajectory, fidelity, options, index=index)
            for index, (trajectory, fidelity) in enumerate(synthetic(count))
        ]
        pq.write_table(pa.Table.from_pylist(rows, schema=parquet_schema(options.format)), out)
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "cpu": time.process_time() - cpu}))


def rows_digest(path: Path) -> tuple[int, str]:
    """The rows of a Parquet file and a digest of their values, read batch by batch."""
    import pyarrow.parquet as pq

    digest = hashlib.sha256()
    rows = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
        for value in batch.to_pylist():
            digest.update(json.dumps(value, sort_keys=True).encode())
            rows += 1
    return rows, digest.hexdigest()


def measure(way: str, count: int, fmt: str, out: Path) -> dict[str, float]:
    """Run one way in a fresh process; its rows/s (wall, CPU), peak RSS (MiB), file size (MB)."""
    command = [sys.executable, __file__, "--child", way, "--format", fmt]
    command += ["--trajectories", str(count), "--out", str(out)]
    with tempfile.TemporaryFile("w+") as printed:
        usage = run_measured(command, stdout=printed)
        printed.seek(0)
        timed = json.loads(printed.read())
    if usage.returncode != 0:
        raise SystemExit(f"{way} failed with exit code {usage.returncode}")
    return {
        "rows_s": count / timed["seconds"],
        "rows_cpu_s": count / timed["cpu"],
        "peak_mib": usage.peak_mib,
        "size_mb": out.stat().st_size / 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=5000)
    parser.add_argument("--format", choices=("verl", "skyrl"), default="verl")
    parser.add_argument("--child", choices=("streamed", "plain"), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.trajectories, args.format, args.out)
        return
    print(f"{args.trajectories} trajectories of {STEPS} steps, {args.format} Parquet")
    with tempfile.TemporaryDirectory() as folder:
        figures = {}
        for way in ("streamed", "plain"):
            out = Path(folder) / f"{way}.parquet"
            figures[way] = measure(way, args.trajectories, args.format, out)
            found = figures[way]
            print(
                f"  {way:9} {found['rows_s']:7,.0f} rows/s ({found['rows_cpu_s']:,.0f} per CPU s)"
                f"   peak RSS {found['peak_mib']:6,.0f} MiB   file {found['size_mb']:7,.1f} MB",
                flush=True,
            )
        streamed, plain = figures["streamed"], figures["plain"]
        print(
            f"  streamed/plain: {streamed['rows_s'] / plain['rows_s']:.2f}x rows/s "
            f"({streamed['rows_cpu_s'] / plain['rows_cpu_s']:.2f}x per CPU s), "
            f"{streamed['peak_mib'] / plain['peak_mib']:.2f}x peak RSS"
        )
        same = rows_digest(Path(folder) / "streamed.parquet")
        if same != rows_digest(Path(folder) / "plain.parquet"):
            raise SystemExit("the two files hold different rows")
        print(f"  both files hold the same {same[0]:,} rows")


if __name__ == "__main__":
    main()
