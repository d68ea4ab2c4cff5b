"""Throughput of the terminal comparator against plain difflib, on ~2 KB observations.

Builds N realistic (real, sim) pairs: ``ls -la`` listings, ``git log``, pytest
and unittest runs, ``find`` output and application logs. Each sim is the same
command run again (new timestamps, PIDs, SHAs, durations, temp names, ``find``
order); every other one also carries a meaningful change (a file added, a
number changed, the exit code flipped, an invented traceback). Then it times
``TerminalComparator.compare`` (normalization, score and entities) over all
pairs and ``difflib.SequenceMatcher(None, real, sim).ratio()`` over the same
texts, single process, in CPU time (``time.process_time``: the
throughput of one core, steady on a shared machine), and prints steps/s for both and their ratio (plus the
comparator with its reference normalizer: every regex on the whole text, no compiled rules).
Volatile values come from :class:`devsets.samples.Run`, shared with
the comparator tests.

    python benchmarks/compare_throughput.py [--pairs N] [--seed S] [--repeat R] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import difflib
import pstats
import random
import re
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the samples

from devsets.samples import Run
from fidelity.compare import CompareContext, TerminalComparator
from fidelity.compare.normalize import Normalizer
from fidelity.trajectory import CommandAction, Observation, Step

WORDS = [
    "parser",
    "config",
    "loader",
    "cache",
    "client",
    "server",
    "worker",
    "queue",
    "report",
    "schema",
    "model",
    "utils",
    "handler",
    "router",
    "session",
    "token",
    "store",
    "index",
    "metrics",
    "auth",
    "billing",
    "export",
]
EXTS = ["py", "txt", "json", "yaml", "md", "toml", "cfg", "sh", "csv", "log"]


@dataclass
class Pair:
    """One benchmark step."""

    real: Observation
    sim: Observation
    context: CompareContext
    altered: bool


class Project:
    """The stable facts of one sandbox: file names, sizes, tests, commits."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        names = {f"{rng.choice(WORDS)}_{rng.choice(WORDS)}.{rng.choice(EXTS)}" for _ in range(60)}
        self.files = sorted(names)[:32]
        self.sizes = {f: rng.randint(80, 90000) for f in self.files}
        self.tests = [f"test_{rng.choice(WORDS)}_{i}" for i in range(40)]
        self.messages = [
            f"{rng.choice(WORDS).title()} the {rng.choice(WORDS)} flow" for _ in range(13)
        ]

    def ls_la(self, v: Run, files: list[str]) -> str:
        lines = [f"total {len(files) * 4}"]
        lines += [
            f"drwxr-xr-x  5 root root  4096 {v.ls_date()} .",
            f"drwxr-xr-x  3 root root  4096 {v.ls_date()} ..",
        ]
        lines += [
            f"-rw-r--r--  1 root root {self.sizes.get(f, 33):5d} {v.ls_date()} {f}" for f in files
        ]
        return "\n".join(lines) + "\n"

    def git_log(self, v: Run) -> str:
        out = []
        for msg in self.messages:
            out += [
                f"commit {v.hex(40)}",
                "Author: Dev Example <dev@example.com>",
                f"Date:   {v.git_date()}",
                "",
                f"    {msg}",
                "",
            ]
        return "\n".join(out)

    def pytest(self, v: Run) -> str:
        out = [
            "============================= test session starts ==============================",
            "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
            f"rootdir: /tmp/pytest-of-root/pytest-{v.rng.randint(0, 9)}",
            f"collected {len(self.tests)} items",
            "",
        ]
        out += [f"tests/test_{t.split('_')[1]}.py::{t} PASSED" for t in self.tests]
        out += [
            "",
            f"{'=' * 30} 40 passed in {v.duration()} {'=' * 30}",
        ]
        return "\n".join(out) + "\n"

    def unittest(self, v: Run) -> str:
        out = [f"{t} (tests.test_app.AppTest.{t}) ... ok" for t in self.tests[:32]]
        out += ["", "-" * 70, f"Ran 32 tests in {v.rng.random():.3f}s", "", "OK"]
        return "\n".join(out) + "\n"

    def find(self, v: Run) -> str:
        paths = [f"./src/{f}" for f in self.files] + [f"./tests/{t}.py" for t in self.tests]
        paths += [f"./build/{f}.o" for f in self.files[:7]]
        v.rng.shuffle(paths)
        return "\n".join(paths) + "\n"

    def log(self, v: Run) -> str:
        out = []
        for i in range(24):
            out.append(
                f"{v.iso()},{v.rng.randint(0, 999):03d} worker[{v.pid()}]: job {i} "
                f"done in {v.duration()} (tmp /tmp/tmp{v.hex(8)})"
            )
        return "\n".join(out) + "\n"


Render = Callable[[Project, Run], tuple[str, str]]
SCENARIOS: list[Render] = [
    lambda p, v: ("ls -la", p.ls_la(v, p.files)),
    lambda p, v: ("git log", p.git_log(v)),
    lambda p, v: ("python -m pytest -v", p.pytest(v)),
    lambda p, v: ("python -m unittest -v", p.unittest(v)),
    lambda p, v: ("find . -type f", p.find(v)),
    lambda p, v: ("python worker.py", p.log(v)),
]

TRACEBACK = (
    'Traceback (most recent call last):\n  File "/workspace/app.py", line 12, in <module>\n'
    "    main()\nKeyError: 'x'\n"
)


def alter(rng: random.Random, command: str, text: str, exit_code: int) -> tuple[str, int]:
    """A meaningful change: one the comparator must flag."""
    kind = rng.randrange(4)
    if kind == 0 and command.startswith("ls"):
        return text + "-rw-r--r--  1 root root    33 Nov 20 23:55 secrets.txt\n", exit_code
    if kind == 1:
        # a size or count (3+ digits: not a day, hour or job index, which may be volatile)
        numbers = re.findall(r"(?<![\w:.,[-])\d{3,}(?![\w:.,\]-])", text)
        if numbers and command != "git log":  # git log's numbers are all volatile
            n = rng.choice(numbers)
            return re.sub(
                rf"(?<![\w:.,[-]){n}(?![\w:.,\]-])", str(int(n) + 9), text, count=1
            ), exit_code
    if kind == 2:
        return text, 1 - exit_code
    return text + TRACEBACK, 1


def build_pairs(n: int, seed: int) -> list[Pair]:
    """*n* (real, sim, context) triples of ~2 KB observations, half of them altered."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        project = Project(random.Random(rng.random()))
        scenario = SCENARIOS[i % len(SCENARIOS)]
        command, real_text = scenario(project, Run(rng.random()))
        _, sim_text = scenario(project, Run(rng.random()))
        exit_code = sim_exit = 0
        altered = (i // len(SCENARIOS)) % 2 == 1
        if altered:
            sim_text, sim_exit = alter(rng, command, sim_text, exit_code)
        action = CommandAction(command=command)
        history = [
            Step(
                action=CommandAction(command="cd /workspace && ls"),
                observation=Observation(text="src\ntests\nREADME.md\n", exit_code=0),
            )
        ]
        pairs.append(
            Pair(
                Observation(text=real_text, exit_code=exit_code),
                Observation(text=sim_text, exit_code=sim_exit),
                CompareContext(action=action, history=history),
                altered,
            )
        )
    return pairs


def time_fidelity(pairs: list[Pair], line_memo: bool = True) -> tuple[float, int]:
    """Seconds for TerminalComparator.compare over *pairs* (normalization caches and the
    clean-line memo cleared first), and how many pairs got the right verdict (drift exactly
    on the altered ones). ``line_memo=False``: the reference normalizer (every regex on the
    whole text, neither the compiled line-local rules nor the clean-line memo)."""
    comparator = TerminalComparator()
    if not line_memo:
        comparator.normalizer = Normalizer(line_memo=False)
    comparator.normalizer.cache_clear()
    started = time.process_time()
    results = [comparator.compare(p.real, p.sim, p.context) for p in pairs]
    seconds = time.process_time() - started
    return seconds, sum(r.drift == p.altered for r, p in zip(results, pairs, strict=True))


def time_difflib(pairs: list[Pair]) -> float:
    """Seconds for difflib.SequenceMatcher(None, real, sim).ratio() over *pairs*."""
    started = time.process_time()
    for p in pairs:
        difflib.SequenceMatcher(None, p.real.text, p.sim.text).ratio()
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the median is shown")
    parser.add_argument("--profile", action="store_true", help="print the top of a cProfile run")
    args = parser.parse_args()
    pairs = build_pairs(args.pairs, args.seed)
    size = sum(len(p.real.text) + len(p.sim.text) for p in pairs) / (2 * len(pairs))
    print(f"pairs: {len(pairs)}, mean observation size: {size:.0f} chars")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(time_fidelity, pairs)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)
    runs = [time_fidelity(pairs) for _ in range(args.repeat)]
    seconds, right = statistics.median(s for s, _ in runs), runs[0][1]
    no_memo = statistics.median(time_fidelity(pairs, False)[0] for _ in range(args.repeat))
    base = statistics.median(time_difflib(pairs) for _ in range(args.repeat))
    ours, theirs = len(pairs) / seconds, len(pairs) / base
    print(
        f"fidelity TerminalComparator: {ours:10.0f} steps/s  (right verdict: {right}/{len(pairs)})"
    )
    print(f"  with the regexes alone     : {len(pairs) / no_memo:8.0f} steps/s")
    print(f"difflib SequenceMatcher    : {theirs:10.0f} steps/s")
    print(f"ratio (fidelity / difflib) : {ours / theirs:10.2f}")


if __name__ == "__main__":
    main()
