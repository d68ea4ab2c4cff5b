"""``fidelity diff`` end to end through the CLI against a plain difflib loop, at two file sizes.

Writes a real and a simulated JSONL file (terminal trajectories of ``--depth``
steps; observations of 1-2 KB built by ``compare_throughput.build_pairs``: the
same command run twice, half of them with a meaningful change), then runs, each
in its own process and in the same run:

- **fidelity**: ``python -m fidelity diff REAL SIM --format jsonl`` to
  ``/dev/null`` (streaming: parse, pair by id, compare, print each row);
- **json**: the same with ``--format json`` (one indented JSON document, written
  row by row as well);
- **naive**: this script's ``--naive`` mode: both files loaded whole with
  ``json.loads``, ``difflib.SequenceMatcher(None, real, sim).ratio()`` per
  step, one JSON line per step to ``/dev/null``.

Prints, per file size and way, steps per second of wall time (what a user waits;
``fidelity`` as a user runs it, which compares in one process per CPU from a
simulated file of 1 MiB up, and ``-j 1``, one process) and of one core (user +
system CPU time of the command and its worker processes, steadier on a shared
machine; process start and imports included, with bytecode caches written by a
first run, as an installed CLI has them), the peak RSS of its largest process,
and the ratio fidelity/naive. The second size is ``--scale`` times the first: a
streaming diff's peak RSS should barely move. Last, the marginal rate per core
of each way between the two sizes (process start and imports cancelled out).

    python benchmarks/diff_throughput.py [--trajectories 200] [--depth 10] [--scale 4]

``--large N`` then runs ``fidelity diff --format jsonl`` alone on N trajectories
(``--large 10000``: 100,000 steps, the scale the throughput target was set at)
and prints its steps per second in wall time and per core, start-up included,
beside ``--jobs 1`` (``--repeats R``: R runs of each, alternated, the least wall and
CPU time standing, each run shown: other tenants of a shared host only ever add
to a run's time); the difflib loop is not run at
that size (it would take about 8 minutes), its marginal rate from the two sizes
stands for it.

``--instructions`` instead counts what one step costs in instructions, with valgrind's
callgrind (``apt-get install valgrind``): those of ``fidelity diff --format jsonl`` on
``--trajectories`` trajectories less those on one, per step. Unlike seconds it does not
move with the host's load (timings on a shared 2-core host moved by 30% within
minutes), so it is the way to tell whether a change to the comparator saves work: run
it on both versions (``--root`` names the other checkout, e.g. a ``git archive`` copy
with the compiled extensions). Slow: each run executes about 50 times slower.

``--beside ROOT`` instead times ``fidelity diff --format jsonl --jobs 1`` of this checkout
and of the checkout at ROOT (``git worktree add /tmp/prev HEAD``, its compiled extensions
copied in) on the same files of ``--trajectories`` × ``--depth`` steps, ``--repeats`` runs
of each alternated (the least wall and CPU time of each standing, every run shown), next to
the difflib loop on the same files, and checks that both versions print the same drift
verdicts (``--trajectories 1000``: the 10,000-step terminal set of issue 42's speed target).

``--parts`` instead prints where the time of one diff goes: the CPU of
``fidelity diff`` on one trajectory (start-up: imports, option parsing), then,
in this process on the first size, microseconds per step of reading and pairing
both files, of the comparison (``pipeline.compare``: comparator and consistency
check), of building the rows around it, and of writing them as JSONL.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the dev-set builders

from child_usage import Usage, run_measured
from compare_throughput import build_pairs

from fidelity.formats.jsonl import write_trajectories
from fidelity.trajectory import Domain, Step, Trajectory


def write_files(folder: Path, trajectories: int, depth: int, seed: int) -> tuple[Path, Path, int]:
    """``(real.jsonl, sim.jsonl, mean observation bytes)`` of *trajectories* × *depth* steps."""
    pairs = build_pairs(trajectories * depth, seed)
    real, sim = [], []
    for t in range(trajectories):
        chunk = pairs[t * depth : (t + 1) * depth]
        for side, out in (("real", real), ("sim", sim)):
            steps = [
                Step(action=p.context.action, observation=p.real if side == "real" else p.sim)
                for p in chunk
            ]
            out.append(Trajectory(id=f"traj-{t:06d}", domain="terminal", steps=steps))
    paths = folder / "real.jsonl", folder / "sim.jsonl"
    write_trajectories(paths[0], real)
    write_trajectories(paths[1], sim)
    size = sum(len(p.real.text or "") + len(p.sim.text or "") for p in pairs) // (2 * len(pairs))
    return paths[0], paths[1], size


def write_agent_files(folder: Path, domain: str, seed: int) -> tuple[Path, Path, int]:
    """``(real.jsonl, sim.jsonl, mean observation bytes)`` of the public agent runs in
    ``../shared/agent-trajectories`` (read now, never copied into the project): the recorded
    run as the real side; as the simulated side, each step a second real run of the same
    command (30%), a seeded corruption of the kinds world models make (50%) or untouched."""
    from devsets.calibration.devset_agents import (
        AGENT_CORRUPTIONS,
        load_runs,
        second_run,
    )

    rng = random.Random(seed)
    real, sim = [], []
    for run in load_runs():
        trajectory = run.trajectory.model_copy(update={"domain": Domain(domain)})
        steps = []
        for index, step in enumerate(trajectory.steps):
            observation = step.observation
            draw = rng.random()
            if observation is not None and not observation.failed and draw < 0.8:
                if draw < 0.3:
                    observation = second_run(observation, step.action.render(), rng) or observation
                else:
                    kinds = list(AGENT_CORRUPTIONS.values())
                    rng.shuffle(kinds)
                    done = (c(observation, trajectory.steps[: index + 1], rng) for c in kinds)
                    observation = next((d[0] for d in done if d is not None), observation)
            steps.append(step.model_copy(update={"observation": observation}))
        real.append(trajectory)
        sim.append(trajectory.model_copy(update={"steps": steps}))
    paths = folder / "real.jsonl", folder / "sim.jsonl"
    write_trajectories(paths[0], real)
    write_trajectories(paths[1], sim)
    texts = [s.observation.text for t in real for s in t.steps if s.observation is not None]
    return *paths, sum(len(t.encode()) for t in texts) // max(1, len(texts))


def naive(real_path: str, sim_path: str) -> None:
    """Both files whole, a difflib ratio per step, a JSON line per step to stdout."""
    real = {t["id"]: t for t in map(json.loads, Path(real_path).read_text().splitlines())}
    sim = {t["id"]: t for t in map(json.loads, Path(sim_path).read_text().splitlines())}
    for tid, trajectory in real.items():
        if tid not in sim:
            continue
        for step, (r, s) in enumerate(
            zip(trajectory["steps"], sim[tid]["steps"], strict=False), start=1
        ):
            a, b = r["observation"]["text"], s["observation"]["text"]
            score = difflib.SequenceMatcher(None, a, b).ratio()
            line = {"trajectory_id": tid, "step": step, "score": score, "drift": score < 0.9}
            sys.stdout.write(json.dumps(line) + "\n")


def measured(command: list[str]) -> Usage:
    """Wall and CPU seconds (its worker processes' included) and peak RSS of *command* run
    to completion, stdout to /dev/null (the peak its own, not this process's: see
    ``child_usage``)."""
    usage = run_measured(command, stdout=subprocess.DEVNULL)
    if usage.returncode != 0:
        raise SystemExit(f"{' '.join(command[:5])} failed (exit code {usage.returncode})")
    return usage


def warm_bytecode(depth: int, seed: int) -> None:
    """Run ``fidelity diff`` once with bytecode caching on, so that every measured run starts
    as an installed CLI does after its first run (with ``PYTHONDONTWRITEBYTECODE`` set, as on
    this workplace's machines, every run would compile the CLI's 85 modules again: 0.27 s)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory() as folder:
        real, sim, _ = write_files(Path(folder), 1, depth, seed)
        command = [sys.executable, "-m", "fidelity", "diff", str(real), str(sim), "-f", "jsonl"]
        subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=True)


def startup_cpu(folder: Path, depth: int, seed: int) -> float:
    """Least CPU seconds of three ``fidelity diff --format jsonl`` runs on one trajectory."""
    real, sim, _ = write_files(folder, 1, depth, seed)
    command = [sys.executable, "-m", "fidelity", "diff", str(real), str(sim), "--format", "jsonl"]
    return min(measured(command).cpu for _ in range(3))


def per_step(steps: int, work: Callable[[], object], repeats: int = 3) -> float:
    """Least CPU microseconds per step of *work* over *repeats* runs."""
    best = float("inf")
    for _ in range(repeats):
        started = time.process_time()
        work()
        best = min(best, time.process_time() - started)
    return best / steps * 1e6


def parts(trajectories: int, depth: int, seed: int) -> None:
    """Print the start-up CPU of ``fidelity diff`` and the per-step cost of each of its parts."""
    from fidelity import pipeline
    from fidelity.diffing import DiffStream, diff_trajectories

    with tempfile.TemporaryDirectory() as folder:
        print(f"start-up (1 trajectory): {startup_cpu(Path(folder), depth, seed):.2f} s CPU")
    with tempfile.TemporaryDirectory() as folder:
        real, sim, _ = write_files(Path(folder), trajectories, depth, seed)
        steps = trajectories * depth
        pairs = list(DiffStream(real, sim).pairs())
        sides = [
            (r, [s.observation for s in r.steps], [s.observation for s in m.steps])
            for r, m in pairs
        ]
        shown = [pipeline.shown_history(r, a, b, None) for r, a, b in sides]

        def compare() -> None:
            for (trajectory, a, b), history in zip(sides, shown, strict=True):
                pipeline.compare(trajectory, a, b, history)  # type: ignore[arg-type]

        done = {
            t.id: pipeline.compare(t, a, b, h)  # type: ignore[arg-type]
            for (t, a, b), h in zip(sides, shown, strict=True)
        }
        real_compare = pipeline.compare

        def rows() -> None:
            """diff_trajectories with the comparison already made: the work around it."""
            pipeline.compare = lambda trajectory, *_: done[trajectory.id]  # type: ignore[assignment]
            try:
                for r, m in pairs:
                    diff_trajectories(r, m, str(real), str(sim))
            finally:
                pipeline.compare = real_compare

        built = [row for r, m in pairs for row in diff_trajectories(r, m, str(real), str(sim))]
        with open(os.devnull, "w") as sink:
            timings = {
                "read, parse, pair both files": per_step(
                    steps, lambda: list(DiffStream(real, sim).pairs())
                ),
                "compare (pipeline.compare)": per_step(steps, compare),
                "rows around the comparison": per_step(steps, rows),
                "write rows as JSONL": per_step(
                    steps, lambda: [sink.write(row.model_dump_json() + "\n") for row in built]
                ),
                "all (stream to /dev/null)": per_step(
                    steps,
                    lambda: [
                        sink.write(row.model_dump_json() + "\n") for row in DiffStream(real, sim)
                    ],
                ),
            }
    print(f"{steps:,} steps, CPU microseconds per step (least of 3):")
    for label, micros in timings.items():
        print(f"  {label:>30}: {micros:7.1f}")


def run_ways(
    real: Path,
    sim: Path,
    steps: int,
    size: int,
    cpus: dict[str, list[tuple[int, float]]],
    label: str = "",
) -> None:
    """Time every way on one pair of files and print the figures; CPU seconds into *cpus*."""
    megabytes = (real.stat().st_size + sim.stat().st_size) / 2**20
    print(f"{label}{steps:,} steps, ~{size:,} B per observation, {megabytes:.1f} MiB of JSONL")
    rates = {}
    cli = [sys.executable, "-m", "fidelity", "diff", str(real), str(sim), "--format"]
    walls = {}
    for way, command in (
        ("fidelity", [*cli, "jsonl"]),
        ("-j 1", [*cli, "jsonl", "--jobs", "1"]),
        ("json", [*cli, "json"]),
        ("naive", [sys.executable, __file__, "--naive", str(real), str(sim)]),
    ):
        usage = measured(command)
        cpus.setdefault(way, []).append((steps, usage.cpu))
        rates[way], walls[way] = steps / usage.cpu, steps / usage.wall
        print(
            f"  {way:>8}: {usage.wall:6.2f} s = {walls[way]:7,.0f} steps/s; "
            f"{usage.cpu:6.2f} s CPU = {rates[way]:7,.0f} steps/s of one core; "
            f"peak RSS {usage.peak_mib:6.1f} MiB"
        )
    print(
        f"  ratio fidelity/naive: {walls['fidelity'] / walls['naive']:.2f}x in wall time, "
        f"{rates['fidelity'] / rates['naive']:.2f}x per core"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trajectories", type=int, default=200)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--scale", type=int, default=4, help="the second size, in first sizes")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--large", type=int, default=0, help="then fidelity alone on this many trajectories"
    )
    parser.add_argument(
        "--repeats", type=int, default=1, help="runs of --large (the least CPU time stands)"
    )
    parser.add_argument("--naive", nargs=2, metavar=("REAL", "SIM"), help=argparse.SUPPRESS)
    parser.add_argument(
        "--parts", action="store_true", help="print where the time goes (start-up, parts per step)"
    )
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="instead: instructions per step under callgrind (deterministic; see the docstring)",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="with --instructions: the checkout whose fidelity runs (default: this one)",
    )
    parser.add_argument(
        "--beside",
        type=Path,
        help="instead: -j 1 of this checkout and of this other one, alternated (see docstring)",
    )
    parser.add_argument(
        "--agent",
        choices=("terminal", "swe"),
        help="instead: once, on the public agent runs in ../shared (second runs, corruptions)",
    )
    args = parser.parse_args()
    if args.naive:
        naive(*args.naive)
        return
    if args.instructions:
        instructions(args.root, args.trajectories, args.depth, args.seed)
        return
    warm_bytecode(args.depth, args.seed)
    if args.beside:
        beside(args.beside, args.trajectories, args.depth, args.seed, args.repeats)
        return
    if args.parts:
        parts(args.trajectories, args.depth, args.seed)
        return
    if args.agent:
        with tempfile.TemporaryDirectory() as folder:
            real, sim, size = write_agent_files(Path(folder), args.agent, args.seed)
            steps = sum(1 for line in real.open() for _ in json.loads(line)["steps"])
            run_ways(real, sim, steps, size, {}, f"public agent runs as {args.agent}: ")
        return
    cpus: dict[str, list[tuple[int, float]]] = {}
    for trajectories in (args.trajectories, args.trajectories * args.scale):
        with tempfile.TemporaryDirectory() as folder:
            real, sim, size = write_files(Path(folder), trajectories, args.depth, args.seed)
            run_ways(real, sim, trajectories * args.depth, size, cpus)
    marginals = {}
    for way, ((small, cpu_small), (large, cpu_large)) in cpus.items():
        marginals[way] = marginal = (large - small) / (cpu_large - cpu_small)
        print(f"marginal {way:>8} (start-up cancelled out): {marginal:7,.0f} steps/s")
    if args.large:
        run_large(args.large, args.depth, args.seed, marginals["naive"], args.repeats)


def run_large(
    trajectories: int, depth: int, seed: int, naive_rate: float, repeats: int = 1
) -> None:
    """``fidelity diff --format jsonl`` alone on *trajectories* × *depth* steps, *repeats*
    times alternated with ``--jobs 1``: of each, the least wall and the least CPU time stand
    (a busy host only ever adds to them), every run is shown."""
    with tempfile.TemporaryDirectory() as folder:
        real, sim, size = write_files(Path(folder), trajectories, depth, seed)
        steps = trajectories * depth
        megabytes = (real.stat().st_size + sim.stat().st_size) / 2**20
        command = [sys.executable, "-m", "fidelity", "diff", str(real), str(sim), "-f", "jsonl"]
        ways = {"fidelity": command, "-j 1": [*command, "--jobs", "1"]}
        runs: dict[str, list[Usage]] = {way: [] for way in ways}
        for _ in range(repeats):
            for way, each in ways.items():
                runs[way].append(measured(each))
    print(f"{steps:,} steps, ~{size:,} B per observation, {megabytes:.0f} MiB of JSONL")
    for way, usages in runs.items():
        wall, cpu = min(u.wall for u in usages), min(u.cpu for u in usages)
        rss = max(u.peak_mib for u in usages)
        print(
            f"  {way:>8}: {wall:6.2f} s = {steps / wall:7,.0f} steps/s; {cpu:6.2f} s CPU = "
            f"{steps / cpu:7,.0f} steps/s of one core; peak RSS {rss:6.1f} MiB"
        )
        if repeats > 1:
            each = ", ".join(f"{steps / u.wall:,.0f}" for u in usages)
            print(f"  ({way}: least of {repeats} runs; each run: {each} steps/s)")
    best = steps / min(u.wall for u in runs["fidelity"])
    print(f"  ratio fidelity/naive (the naive way's marginal rate): {best / naive_rate:.2f}x")


def beside(other: Path, trajectories: int, depth: int, seed: int, repeats: int) -> None:
    """``fidelity diff -f jsonl --jobs 1`` of this checkout and of *other*, alternated on the
    same files, *repeats* runs each, beside the difflib loop; the verdicts must agree."""
    here = Path(__file__).resolve().parent.parent
    versions = {"this checkout": here, f"{other}": other.resolve()}
    with tempfile.TemporaryDirectory() as folder:
        real, sim, size = write_files(Path(folder), trajectories, depth, seed)
        steps = trajectories * depth
        cli = ["-m", "fidelity", "diff", str(real), str(sim), "-f", "jsonl", "--jobs", "1"]
        verdicts = {}
        for name, root in versions.items():  # warm each version's bytecode, keep its verdicts
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            done = subprocess.run(
                [sys.executable, *cli],
                cwd=root,
                env={**env, "PYTHONPATH": str(root)},
                stdout=subprocess.PIPE,
                check=True,
            )
            verdicts[name] = [json.loads(line)["drift"] for line in done.stdout.splitlines()]
        runs: dict[str, list[Usage]] = {name: [] for name in versions}
        for _ in range(repeats):
            for name, root in versions.items():
                usage = run_measured([*_in(root), sys.executable, *cli], stdout=subprocess.DEVNULL)
                if usage.returncode != 0:
                    raise SystemExit(f"fidelity diff of {root} failed ({usage.returncode})")
                runs[name].append(usage)
        naive_usage = measured([sys.executable, __file__, "--naive", str(real), str(sim)])
    print(f"{steps:,} steps, ~{size:,} B per observation, fidelity diff -f jsonl --jobs 1")
    least = {}
    for name, usages in runs.items():
        wall, cpu = min(u.wall for u in usages), min(u.cpu for u in usages)
        least[name] = wall
        each = ", ".join(f"{steps / u.wall:,.0f}" for u in usages)
        print(
            f"  {name}: {steps / wall:7,.0f} steps/s wall, {steps / cpu:7,.0f} per core "
            f"(least of {repeats}; each run: {each})"
        )
    mine, theirs = least["this checkout"], least[str(other)]
    print(f"  this checkout / {other}: {theirs / mine:.3f}x the steps per second")
    print(
        f"  difflib loop, same files: {steps / naive_usage.wall:7,.0f} steps/s wall, "
        f"{steps / naive_usage.cpu:7,.0f} per core"
    )
    same = sum(a == b for a, b in zip(*verdicts.values(), strict=True))
    print(f"  the same drift verdict on {same:,} of {steps:,} steps")


def _in(root: Path) -> list[str]:
    """A command prefix that runs the rest in *root* with its package first on the path
    (``python -m`` puts the working folder first: the folder must be the checkout)."""
    return ["env", f"PYTHONPATH={root}", "sh", "-c", 'cd "$0" && exec "$@"', str(root)]


def callgrind_instructions(root: Path, real: Path, sim: Path) -> int:
    """Instructions executed by ``fidelity diff REAL SIM --format jsonl`` of *root*'s checkout."""
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind: apt-get install valgrind")
    command = [
        *("valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"),
        *(sys.executable, "-m", "fidelity", "diff", str(real), str(sim), "--format", "jsonl"),
    ]
    done = subprocess.run(
        command,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    found = re.search(r"refs:\s+([\d,]+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise SystemExit(f"fidelity diff under callgrind failed: {done.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))


def instructions(root: Path, trajectories: int, depth: int, seed: int) -> None:
    """Print the instructions per step of *root*'s ``fidelity diff`` (start-up cancelled out)."""
    with tempfile.TemporaryDirectory() as folder:
        small, large = Path(folder) / "one", Path(folder) / "many"
        small.mkdir()
        large.mkdir()
        one = callgrind_instructions(root, *write_files(small, 1, depth, seed)[:2])
        many = callgrind_instructions(root, *write_files(large, trajectories, depth, seed)[:2])
    steps = (trajectories - 1) * depth
    print(f"fidelity diff of {root}: {one:,} instructions for 1 trajectory (start-up)")
    print(f"  {(many - one) / steps:,.0f} instructions per step ({trajectories} trajectories)")


if __name__ == "__main__":
    main()
