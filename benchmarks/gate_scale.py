"""The dataset gate at scale: 10k and 100k synthetic trajectories (1M with --sizes), end to end.

For each size, a synthetic simulated dataset of the bundled terminal shape
(2-6 command steps, observations of 1-2 KB) is written as JSONL,
then gated in a fresh process with ``fidelity gate DATASET --sample N`` (the
CLI a user runs: real bubblewrap replays of the sample, DuckDB store, verdict,
admitted/quarantined/decisions written). Printed per size: wall time, peak
RSS of the gating process, MB/s of dataset scanned (3 streaming passes), and
beside it, in the same run, the naive way's figures on the smallest size:
``read_trajectories`` (the whole file as pydantic objects, what the gate did
before) and a plain ``json.loads`` loop (the floor of any reader).

Then the smallest size split into ``--shards`` shards is gated four times, with
``--executor local`` and ``--executor ray`` (a Ray cluster of this machine's
CPUs, started by the gate), each with ``--layout joined`` (the driver joins the
shards' part files into one file per output) and ``--layout sharded`` (each
shard's task writes its own output files, no join): each pass reads the shards
in Ray tasks, so the ratio shows how reading spreads over cores. Ends with two
estimates, from these figures, of gating 1 TB with a 10,000-trajectory sample
on a 16-node cluster: joined (the driver copies every output byte) and sharded.

    python benchmarks/gate_scale.py [--sizes 10000,100000] [--sample 20] [--shards 8]
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from child_usage import run_measured

JOIN_MB_S = 500
"""Sequential copy rate assumed for the driver's join of 1 TB of outputs (shared storage)."""

STORAGE_MB_S = 2000
"""Aggregate read rate assumed for the cluster's shared storage (the shards' three passes)."""

NAIVE_MAX = 100_000
"""The naive whole-file reader needs about 4x the file in memory: not run on larger sizes."""

COMMANDS = ("ls", "pwd", "echo hello", "cat README.md", "ls -la", "whoami")


def synthesize(path: Path, count: int, seed: int = 0) -> int:
    """Write *count* simulated terminal trajectories; returns the file's bytes."""
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as handle:
        for t in range(count):
            steps = []
            for _ in range(rng.randint(2, 6)):
                command = rng.choice(COMMANDS)
                line = f"{command.split()[0]}: -rw-r--r-- 1 agent agent 4096 file_{t}.txt\n"
                text = line * rng.randint(20, 40)  # 1-2 KB
                steps.append(
                    {
                        "action": {"type": "command", "command": command},
                        "observation": {"text": text, "exit_code": 0},
                    }
                )
            line = {
                "id": f"syn-{t:08d}",
                "domain": "terminal",
                "source": "sim",
                "steps": steps,
                "meta": {"model": "synthetic-wm", "mode": "open-loop"},
            }
            handle.write(json.dumps(line, separators=(",", ":")) + "\n")
    return path.stat().st_size


def gate(dataset: Path, folder: Path, sample: int, *extra: str) -> tuple[float, float, int]:
    """``fidelity gate`` in a fresh process: (seconds, its own peak RSS MiB, exit code)."""
    policy = folder / "policy.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.99\n")
    command = [
        sys.executable, "-m", "fidelity", "gate", str(dataset), "--policy", str(policy),
        "--sample", str(sample), "--db", str(folder / "gate.duckdb"),
        "-o", str(folder / "out"), "--json", *extra,
    ]  # fmt: skip
    usage = run_measured(command, stdout=subprocess.DEVNULL)
    if usage.returncode not in (0, 1):
        raise SystemExit(f"fidelity gate failed ({usage.returncode})")
    return usage.wall, usage.peak_mib, usage.returncode


def shard(dataset: Path, folder: Path, count: int) -> None:
    """Split *dataset* into *count* JSONL shards in *folder* (consecutive blocks of lines).

    Streamed: this process stays small (``child_usage`` measures the gates apart anyway)."""
    folder.mkdir()
    with dataset.open(encoding="utf-8") as handle:
        total = sum(1 for _ in handle)
    per = -(-total // count)
    with dataset.open(encoding="utf-8") as handle:
        for index in range(count):
            with (folder / f"part-{index:04d}.jsonl").open("w", encoding="utf-8") as part:
                part.writelines(itertools.islice(handle, per))


def sharded(size: int, shards: int, sample: int) -> float:
    """Gate *size* trajectories in *shards* shards locally and on a Ray cluster of this
    machine's CPUs (started by the gate), in both layouts; returns the Ray run's MB/s."""
    import os

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        whole = folder / "whole.jsonl"
        megabytes = synthesize(whole, size) / 1e6
        shard(whole, folder / "shards", shards)
        whole.unlink()
        runs = {}
        for way, layout in itertools.product(("local", "ray"), ("joined", "sharded")):
            extra = ("--layout", layout) + (("--executor", "ray") if way == "ray" else ())
            (folder / f"{way}-{layout}").mkdir()
            seconds, peak, code = gate(
                folder / "shards", folder / f"{way}-{layout}", sample, *extra
            )
            runs[way, layout] = seconds
            print(
                f"{size:>9,} trajectories in {shards} shards ({megabytes:6.1f} MB), --executor "
                f"{way:5} --layout {layout:7}: {seconds:6.1f} s, driver peak RSS {peak:5.0f} MiB, "
                f"{megabytes / seconds:5.1f} MB/s, exit {code}",
                flush=True,
            )
        join = time_join(folder / "local-joined" / "out")
        ray, local = runs["ray", "joined"], runs["local", "joined"]
        print(
            f"    ray/local: {local / ray:.2f}x faster on {os.cpu_count()} CPUs "
            f"(each pass reads the shards in Ray tasks); the driver's join of the outputs "
            f"copies {join:.0f} MB/s; sharded/joined: {local / runs['local', 'sharded']:.2f}x "
            f"locally, {ray / runs['ray', 'sharded']:.2f}x on Ray"
        )
        return megabytes / ray


def time_join(out: Path) -> float:
    """MB/s of a byte copy of the gate's outputs (what the driver does after pass 3 on Ray)."""
    files = [out / f"{name}.jsonl" for name in ("admitted", "quarantined", "decisions")]
    total = sum(f.stat().st_size for f in files) / 1e6
    started = time.perf_counter()
    with tempfile.TemporaryFile() as sink:
        for path in files:
            with path.open("rb") as handle:
                while block := handle.read(1 << 20):
                    sink.write(block)
    return total / max(time.perf_counter() - started, 1e-9)


def naive(dataset: Path) -> None:
    """Run in a fresh process: time and peak RSS of the two naive readers."""
    code = f"""
import json, resource, time
from fidelity.formats.jsonl import read_trajectories
t = time.perf_counter()
n = sum(1 for line in open({str(dataset)!r}, encoding="utf-8") if json.loads(line))
plain = time.perf_counter() - t
t = time.perf_counter()
whole = read_trajectories({str(dataset)!r})
pydantic = time.perf_counter() - t
print(plain, pydantic, len(whole), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    plain, pydantic, n, peak = (float(x) for x in out.stdout.split())
    size = dataset.stat().st_size / 1e6
    print(
        f"    naive: read_trajectories (whole file as pydantic) {pydantic:6.1f} s, peak RSS "
        f"{peak:6.0f} MiB; plain json.loads loop {plain:5.1f} s ({size / plain:5.1f} MB/s), "
        f"{int(n):,} trajectories"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="comma-separated counts")
    parser.add_argument("--sample", type=int, default=20)
    parser.add_argument(
        "--shards", type=int, default=8, help="shards of the local-vs-Ray run (0: skip it)"
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rates = []
    for index, size in enumerate(sizes):
        with tempfile.TemporaryDirectory() as name:
            folder = Path(name)
            dataset = folder / "dataset.jsonl"
            written = synthesize(dataset, size)
            seconds, peak, code = gate(dataset, folder, args.sample)
            megabytes = written / 1e6
            rates.append((megabytes / seconds, seconds, size))
            print(
                f"{size:>9,} trajectories ({megabytes:7.1f} MB): fidelity gate --sample "
                f"{args.sample} {seconds:7.1f} s, peak RSS {peak:6.0f} MiB, "
                f"{megabytes / seconds:5.1f} MB/s of dataset end to end (3 streaming passes, "
                f"{3 * megabytes / seconds:5.1f} MB/s read), exit {code}",
                flush=True,
            )
            if index == 0 and size <= NAIVE_MAX:
                naive(dataset)
            elif index == 0:
                print(f"    naive: not run above {NAIVE_MAX:,} trajectories (it holds the file)")
    per_mb, seconds, size = rates[-1]
    if args.shards:
        sharded(sizes[0], args.shards, args.sample)
    replay_per_trajectory = 1.0  # seconds, a terminal trajectory in bubblewrap (README figure)
    cores = 16 * 16
    # each core gates its shards at one process's rate, unless shared storage cannot keep up
    # with 3 passes' reads at once
    read_seconds = max(1e6 / (per_mb * cores), 3e6 / STORAGE_MB_S)
    join_seconds = 1e6 / JOIN_MB_S
    replay_seconds = 10_000 * replay_per_trajectory / cores
    reading = (
        f"estimate, 1 TB with a 10,000-trajectory sample on 16 nodes x 16 cores, in shards of "
        f"a few GB: the 3 passes read the shards in Ray tasks at {per_mb:.1f} MB/s a core "
        f"(one process's rate above), capped by shared storage at {STORAGE_MB_S} MB/s "
        f"(assumed; 3 TB read) = {read_seconds / 60:.0f} min, + replaying "
        f"~{replay_seconds / 60:.0f} min (10,000 x {replay_per_trajectory:.0f} s over "
        f"{cores} workers)"
    )
    print(
        f"{reading}:\n    --layout joined: + the driver joining ~1 TB of outputs at "
        f"{JOIN_MB_S} MB/s (a disk's sequential copy, assumed) = {join_seconds / 60:.0f} min: "
        f"about {(read_seconds + join_seconds + replay_seconds) / 3600:.1f} h\n"
        f"    --layout sharded: each shard's task writes its own outputs (no join): about "
        f"{(read_seconds + replay_seconds) / 3600:.1f} h\n"
        f"    (one driver streaming every pass: {1e6 / per_mb / 3600:.1f} h)"
    )


if __name__ == "__main__":
    main()
