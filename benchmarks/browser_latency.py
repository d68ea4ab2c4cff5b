"""Browser sandbox speed: steps per second, per-step latency, and what the settle wait costs.

Replays the bundled web suite (or its first N trajectories) twice in one
Chromium: settle by DOM stability (the default: load event, no request in
flight, N equal mutation-counter reads) and settle by a fixed sleep (the naive
way, 500 ms after every action). Prints steps/s, median and p95 per step, the
mean reset, the settle wait alone, and the ratios; also how many observations
the two modes disagree on (a fixed sleep is not more faithful, only slower).

    python benchmarks/browser_latency.py [--trajectories 12]
"""

from __future__ import annotations

import argparse
import statistics
import time

from replay_cli import print_replay

from fidelity.pipeline import load_suite
from fidelity.resources import default_suite
from fidelity.sandboxes.browser import BrowserConfig, BrowserSandbox, _Browser
from fidelity.trajectory import Trajectory


def run(trajectories: list[Trajectory], config: BrowserConfig) -> dict[str, object]:
    """Replay *trajectories*; per-step and per-reset seconds, settle seconds, observations."""
    steps: list[float] = []
    resets: list[float] = []
    settles: list[float] = []
    texts: list[str] = []
    original = _Browser.settle

    def timed_settle(self: _Browser) -> None:
        started = time.perf_counter()
        original(self)
        settles.append(time.perf_counter() - started)

    _Browser.settle = timed_settle  # type: ignore[method-assign]
    try:
        with BrowserSandbox(config) as box:
            for trajectory in trajectories:
                started = time.perf_counter()
                box.reset(trajectory.env)
                resets.append(time.perf_counter() - started)
                for step in trajectory.steps:
                    started = time.perf_counter()
                    texts.append(box.step(step.action).text)
                    steps.append(time.perf_counter() - started)
    finally:
        _Browser.settle = original  # type: ignore[method-assign]
    return {"steps": steps, "resets": resets, "settles": settles, "texts": texts}


def p95(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.95 * len(values)) - 1)]


def report(name: str, result: dict[str, object]) -> tuple[float, float]:
    steps: list[float] = result["steps"]  # type: ignore[assignment]
    resets: list[float] = result["resets"]  # type: ignore[assignment]
    settles: list[float] = result["settles"]  # type: ignore[assignment]
    rate = len(steps) / sum(steps)
    settle = statistics.median(settles)
    print(
        f"{name:<16} {len(steps):>4} steps  {rate:5.2f} steps/s  "
        f"median {statistics.median(steps) * 1000:6.0f} ms  p95 {p95(steps) * 1000:6.0f} ms  "
        f"settle median {settle * 1000:5.0f} ms  reset mean {statistics.mean(resets) * 1000:5.0f} ms"
    )
    return rate, settle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--trajectories", type=int, default=12)
    args = parser.parse_args()
    suite = load_suite(default_suite("web"))
    # the same share of each site: the suite lists them one after another
    trajectories = [
        t for i, t in enumerate(suite) if i % max(1, len(suite) // args.trajectories) == 0
    ]
    trajectories = trajectories[: args.trajectories]
    dom = run(trajectories, BrowserConfig(settle="dom"))
    sleep = run(trajectories, BrowserConfig(settle="sleep", settle_sleep_ms=500))
    dom_rate, dom_settle = report("settle=dom", dom)
    sleep_rate, sleep_settle = report("settle=sleep 500", sleep)
    differ = sum(a != b for a, b in zip(dom["texts"], sleep["texts"], strict=True))  # type: ignore[call-overload]
    print(
        f"DOM-stability settle: {dom_rate / sleep_rate:.1f}x the steps/s of a fixed 500 ms sleep "
        f"(settle wait {dom_settle * 1000:.0f} ms vs {sleep_settle * 1000:.0f} ms, "
        f"{sleep_settle / dom_settle:.1f}x shorter); observations that differ: "
        f"{differ} of {len(dom['texts'])}"  # type: ignore[arg-type]
    )
    print_replay(default_suite("web"))


if __name__ == "__main__":
    main()
