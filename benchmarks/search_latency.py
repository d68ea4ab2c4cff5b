"""Per-step latency of the search backend against querying the engine directly.

For each local engine (tantivy, SQLite FTS5): ``web_search`` through the sandbox
(query parsing, ten results, snippets, rendering) against ``engine.search`` alone
(the floor), and ``web_extractor`` against ``engine.page``; median, p95, steps/s
and the ratio. Also a fresh trajectory's start-up (``reset`` of a new sandbox:
opening the engine) and the corpus build time when it is not cached yet.

    python benchmarks/search_latency.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from replay_cli import print_replay

from fidelity.resources import default_suite
from fidelity.sandboxes.search import SearchConfig, SearchSandbox
from fidelity.sandboxes.search_corpus import build_corpus
from fidelity.sandboxes.search_engines import open_engine
from fidelity.trajectory import EnvSpec, ToolAction

ENV = EnvSpec(backend="search")


def suite_calls(tool: str, key: str) -> list[str]:
    """Every *key* argument of *tool* in the bundled search suite."""
    found = []
    for line in default_suite("search").read_text().splitlines():
        for step in json.loads(line)["steps"]:
            action = step["action"]
            if action["tool"] == tool and isinstance(action["args"].get(key), str):
                found.append(action["args"][key])
    return found


def timed(calls: list[str], run: Callable[[str], object], rounds: int) -> list[float]:
    timings = []
    for _ in range(rounds):
        for value in calls:
            started = time.perf_counter()
            run(value)
            timings.append(time.perf_counter() - started)
    return timings


def p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def line(label: str, ours: list[float], floor: list[float]) -> str:
    mine, theirs = statistics.median(ours), statistics.median(floor)
    return (
        f"{label:<24} {mine * 1000:>7.2f} (p95 {p95(ours) * 1000:5.1f}) {theirs * 1000:>7.2f} "
        f"(p95 {p95(floor) * 1000:5.1f}) {mine / theirs:>6.2f}x {len(ours) / sum(ours):>9.0f} "
        f"{len(floor) / sum(floor):>9.0f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    started = time.perf_counter()
    folder: Path = build_corpus()
    print(
        f"corpus {folder} ready in {time.perf_counter() - started:.1f} s ({(folder / 'complete').read_text()} pages)"
    )
    queries, urls = suite_calls("web_search", "query"), suite_calls("web_extractor", "url")
    print(f"{len(queries)} queries and {len(urls)} URLs from the bundled suite, x{options.rounds}")
    print(
        f"{'step':<24} {'sandbox ms':>22} {'direct ms':>22} {'ratio':>7} {'sandbox/s':>9} {'direct/s':>9}"
    )
    for kind in ("tantivy", "fts5"):
        measure(kind, folder, queries, urls, options.rounds)
    print_replay(default_suite("search"))


def measure(kind: str, folder: Path, queries: list[str], urls: list[str], rounds: int) -> None:
    """Print one engine's rows: web_search, web_extractor, start-up."""
    config = SearchConfig(corpus=str(folder), engine=kind)  # type: ignore[arg-type]
    engine = open_engine(kind, folder, None)
    with SearchSandbox(config) as box:
        box.reset(ENV)
        ours = timed(
            queries, lambda q: box.step(ToolAction(tool="web_search", args={"query": q})), rounds
        )
        floor = timed(queries, lambda q: engine.search(q, 10), rounds)
        print(line(f"{kind} web_search", ours, floor))
        ours = timed(
            urls, lambda u: box.step(ToolAction(tool="web_extractor", args={"url": u})), rounds
        )
        floor = timed(urls, engine.page, rounds)
        print(line(f"{kind} web_extractor", ours, floor))
    engine.close()
    starts = []
    for _ in range(5):
        began = time.perf_counter()
        with SearchSandbox(config) as fresh:
            fresh.reset(ENV)
        starts.append(time.perf_counter() - began)
    median_ms = statistics.median(starts) * 1000
    print(f"{kind} fresh trajectory start-up (new sandbox, engine opened): {median_ms:.1f} ms")


if __name__ == "__main__":
    main()
