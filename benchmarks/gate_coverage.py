"""The dataset gate's bounds on simulated gates: coverage, errors and replays saved (issue 41).

Thousands of simulated gates on clustered data, each on a fresh population of
``--population`` trajectories (3,600 by default) whose lengths are drawn from the
bundled suites' step counts (every ``suites/*/suite.jsonl``, read at run time).
Each trajectory drifts with its own probability ``p_i ~ Beta`` (mean the row's rate,
``a + b = --concentration``: small values make drift cluster in few trajectories) and
``D_i ~ Binomial(L_i, p_i)`` of its steps drift; the truth is the population's own
step-level rate ``ΣD/ΣL``. A gate draws from :class:`~fidelity.gate.design.MixtureDesign`
and bounds the rate with :mod:`fidelity.gate.bounds` at confidence 0.95 against
``max_drift_rate = 0.10``. Printed, beside the **point-estimate gate** on the same draws
(pass when the sample's weighted rate is at most the limit, what the gate did before):

1. zero events: the upper bound after 3 clean draws, and how many clean draws put it
   under 0.10 (and 0.05);
2. coverage: the share of gates whose upper bound covers the truth, the share that pass
   and the share that pass with the truth over the limit, at rates under, at and over
   the limit (1.5× it included), for fixed samples
   of 40, 100 and 200 draws and for the sequential rule (rounds of 10, budget 1000);
3. replays saved: the sequential rule's replays against the smallest fixed sample that
   reaches the same error (a wrong or missing decision), for rates far from and near
   the limit;
4. the issue's "done when" cases: a faithful population, one where 30% of the
   trajectories derail from a step in their first half (every later step drifts), one
   where 3% do;
5. the cost of one look at 10 limits of 2,000 draws each, computed from scratch.

    python benchmarks/gate_coverage.py                 # the docs' figures (1,000 gates a row)
    python benchmarks/gate_coverage.py --gates 100     # quick (noxfile.py)
    python benchmarks/gate_coverage.py --suite terminal   # the terminal suite's lengths only
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fidelity.gate.bounds import Observations, Sequential, bounds, bounds_path
from fidelity.gate.design import MixtureDesign

ROOT = Path(__file__).resolve().parent.parent

LIMIT = 0.10
ALPHA = 0.05
ROUND = 10
BUDGET = 1000
FIXED = (40, 100, 200)
COVERAGE_RATES = (0.05, 0.08, 0.10, 0.12, 0.15)
SAVED_RATES = (0.0, 0.02, 0.05, 0.2, 0.3)
SAVED_SIZES = tuple(range(10, BUDGET + 1, 10))


@dataclass(frozen=True)
class Population:
    """Lengths and drifting steps of every trajectory; the truth is ΣD/ΣL."""

    lengths: np.ndarray
    drifting: np.ndarray

    @property
    def truth(self) -> float:
        return float(self.drifting.sum() / self.lengths.sum())


@dataclass(frozen=True)
class Outcome:
    """One gate: its decision, draws, bound and the point estimate on the same draws."""

    decision: str
    draws: int
    upper: float
    estimate: float


def suite_lengths(name: str = "*") -> np.ndarray:
    """Step counts of every trajectory of the bundled suites (or of the one named)."""
    counts = []
    for suite in sorted((ROOT / "suites").glob(f"{name}/suite.jsonl")):
        for line in suite.read_text(encoding="utf-8").splitlines():
            if line.strip():
                counts.append(len(json.loads(line)["steps"]))
    return np.array(counts, dtype=np.int64)


def clustered(
    rng: np.random.Generator, lengths: np.ndarray, mean: float, kappa: float
) -> Population:
    """``p_i ~ Beta(mean·κ, (1−mean)·κ)``, ``D_i ~ Binomial(L_i, p_i)``."""
    if mean <= 0:
        return Population(lengths, np.zeros_like(lengths))
    p = rng.beta(mean * kappa, (1 - mean) * kappa, size=lengths.size)
    return Population(lengths, rng.binomial(lengths, p))


def derailing(rng: np.random.Generator, lengths: np.ndarray, share: float) -> Population:
    """A *share* of trajectories derail from a step in their first half: it and every later one drift."""
    derails = rng.random(lengths.size) < share
    first = rng.integers(0, (lengths + 1) // 2)  # 0-based step where the derailment starts
    return Population(lengths, np.where(derails, lengths - first, 0))


def observe(
    population: Population, design: MixtureDesign, seed: int, start: int, count: int
) -> Observations:
    """Draws ``start … start+count-1`` of gate *seed*, as the step-level drift limit reads them."""
    idx = design.draws(seed, start, count)
    share = population.drifting[idx] / population.lengths[idx]
    return Observations(design.step_weight(idx), share, np.ones(count), design.max_step_weight)


def point_estimates(obs: Observations) -> np.ndarray:
    """The weighted sample rate after each draw (the point-estimate gate)."""
    return np.cumsum(obs.weight * obs.numerator) / np.cumsum(obs.weight)


def fixed_gates(population: Population, seed: int, sizes: tuple[int, ...]) -> list[Outcome]:
    """Gates of fixed sizes on the first draws of one sequence (a fixed gate of n draws)."""
    design = MixtureDesign(population.lengths)
    obs = observe(population, design, seed, 0, max(sizes))
    lower, upper = bounds_path(obs, ALPHA)
    estimates = point_estimates(obs)
    outcomes = []
    for n in sizes:
        decision = (
            "pass" if upper[n - 1] <= LIMIT else "fail" if lower[n - 1] > LIMIT else "undecided"
        )
        outcomes.append(Outcome(decision, n, float(upper[n - 1]), float(estimates[n - 1])))
    return outcomes


def sequential_gate(population: Population, seed: int) -> Outcome:
    """Rounds of ``ROUND`` draws until the limit is decided or ``BUDGET`` draws are spent."""
    design = MixtureDesign(population.lengths)
    state = Sequential(design.max_step_weight, ALPHA)
    while len(state.observations) < BUDGET:
        state.add(observe(population, design, seed, len(state.observations), ROUND))
        if state.decided(LIMIT, "at_most"):
            break
    bound = state.bound
    estimate = bound.estimate if bound.estimate is not None else 0.0
    return Outcome(state.decision(LIMIT, "at_most"), bound.n, bound.upper, estimate)


def percent(flags: list[bool]) -> str:
    return f"{100 * np.mean(flags):5.1f}%"


def zero_events(lengths: np.ndarray) -> None:
    """Section 1: the bound at zero events."""
    print("\n1. zero events (a faithful sample), confidence 0.95")
    for name, weights, top in [("unit weights", np.ones(400), 1.0), *_mixture(lengths)]:
        obs = Observations(weights, np.zeros(weights.size), np.ones(weights.size), top)
        _, upper = bounds_path(obs, ALPHA)
        under = [int(np.argmax(upper <= limit)) + 1 for limit in (0.10, 0.05)]
        print(
            f"   {name}: upper bound after 3 draws {upper[2]:.3f}; under 0.10 after "
            f"{under[0]} draws, under 0.05 after {under[1]}"
        )
    exact = [math.ceil(math.log(ALPHA) / math.log(1 - limit)) for limit in (0.10, 0.05)]
    print(
        f"   naive ways: an exact binomial bound for a fixed n of unit weights needs {exact[0]} "
        f"and {exact[1]} draws (valid at that n only); the point estimate passes after 1 draw"
    )


def _mixture(lengths: np.ndarray) -> list[tuple[str, np.ndarray, float]]:
    rng = np.random.default_rng(1)
    design = MixtureDesign(rng.choice(lengths, 3600))
    picked = []
    for seed in (0, 1, 2):
        idx = design.draws(seed, 0, 400)
        picked.append(
            (
                f"mixture weights (suite lengths, gate {seed})",
                design.step_weight(idx),
                design.max_step_weight,
            )
        )
    return picked


def coverage(lengths: np.ndarray, gates: int, kappa: float, population: int) -> None:
    """Section 2: coverage and pass rates, beside the point-estimate gate."""
    print(f"\n2. coverage over {gates} gates per row (Beta concentration {kappa:g}; limit {LIMIT})")
    print(
        "   per gate (n = 40, 100, 200 draws, sequential): covers / passes / passes over the limit"
    )
    for rate in COVERAGE_RATES:
        gate_rows: dict[str, list[tuple[bool, bool, bool]]] = {}
        naive_rows: dict[str, list[tuple[bool, bool, bool]]] = {}
        truths, spent = [], []
        for gate in range(gates):
            rng = np.random.default_rng([int(rate * 1000), gate])
            pop = clustered(rng, rng.choice(lengths, population), rate, kappa)
            truths.append(pop.truth)
            outcomes = [*fixed_gates(pop, gate, FIXED), sequential_gate(pop, gate)]
            spent.append(outcomes[-1].draws)
            over = pop.truth > LIMIT
            for label, out in zip([*map(str, FIXED), "seq"], outcomes, strict=True):
                passed, naive = out.decision == "pass", out.estimate <= LIMIT
                gate_rows.setdefault(label, []).append(
                    (out.upper >= pop.truth, passed, passed and over)
                )
                naive_rows.setdefault(label, []).append(
                    (out.estimate >= pop.truth, naive, naive and over)
                )
        print(
            f"   rate {rate:.2f} (truth {np.mean(truths):.3f}; sequential: {np.mean(spent):.0f} draws on average)"
        )
        print(f"      gate:           {_cells(gate_rows)}")
        print(f"      point estimate: {_cells(naive_rows)}")


def _cells(rows: dict[str, list[tuple[bool, bool, bool]]]) -> str:
    return "; ".join(
        f"{label} {' / '.join(percent([r[i] for r in got]).strip() for i in range(3))}"
        for label, got in rows.items()
    )


def replays_saved(lengths: np.ndarray, gates: int, kappa: float, population: int) -> None:
    """Section 3: the sequential rule against the fixed sample with the same error."""
    print(
        f"\n3. replays saved ({gates} gates per rate): sequential (rounds of {ROUND}) vs fixed sample, same error"
    )
    needed = []
    for rate in SAVED_RATES:
        seq_draws, seq_wrong, fixed_wrong = [], [], np.zeros(len(SAVED_SIZES))
        for gate in range(gates):
            rng = np.random.default_rng([int(rate * 1000) + 7, gate])
            pop = clustered(rng, rng.choice(lengths, population), rate, kappa)
            right = "pass" if pop.truth <= LIMIT else "fail"
            out = sequential_gate(pop, gate)
            seq_draws.append(out.draws)
            seq_wrong.append(out.decision != right)
            fixed = fixed_gates(pop, gate, SAVED_SIZES)
            fixed_wrong += [o.decision != right for o in fixed]
        error = float(np.mean(seq_wrong))
        reach = np.flatnonzero(fixed_wrong / gates <= error)
        n_fixed = SAVED_SIZES[reach[0]] if reach.size else None
        needed.append(n_fixed)
        mean = float(np.mean(seq_draws))
        ratio = f"{n_fixed / mean:.2f}x" if n_fixed else f"> {BUDGET / mean:.2f}x"
        print(
            f"   rate {rate:.2f}: sequential {mean:6.1f} draws on average (90th percentile "
            f"{np.percentile(seq_draws, 90):.0f}), error {100 * error:4.1f}%; fixed sample "
            f"with that error: {n_fixed or f'> {BUDGET}'} draws ({ratio} the sequential rule)"
        )
    known = [n for n in needed if n]
    if known:
        print(
            f"   a fixed sample must be chosen before the rate is known: {max(known)} draws for all these rates"
        )


def done_when(lengths: np.ndarray, gates: int, population: int) -> None:
    """Section 4: the issue's acceptance cases, sequential rule."""
    print(f"\n4. the issue's cases, sequential rule, {gates} gates each, {population} trajectories")
    cases: list[tuple[str, float, str, int]] = [
        ("faithful", 0.0, "pass", 150),
        ("30% derail", 0.30, "fail", 60),
        ("3% derail", 0.03, "pass", BUDGET),
    ]
    for case, (name, share, wanted, within) in enumerate(cases):
        outs, truths, naive = [], [], []
        for gate in range(gates):
            rng = np.random.default_rng([100 + case, gate])
            pop = derailing(rng, rng.choice(lengths, population), share)
            truths.append(pop.truth)
            outs.append(sequential_gate(pop, gate))
            naive.append(fixed_gates(pop, gate, (40,))[0].estimate <= LIMIT)
        draws = np.array([o.draws for o in outs])
        decisions = ", ".join(
            f"{d} {percent([o.decision == d for o in outs]).strip()}"
            for d in ("pass", "fail", "undecided")
        )
        on_time = percent([o.decision == wanted and o.draws <= within for o in outs])
        covers = percent([o.upper >= t for o, t in zip(outs, truths, strict=True)])
        print(
            f"   {name} (true rate {np.mean(truths):.4f}): {decisions}; {wanted} within "
            f"{within} draws {on_time.strip()}; draws median {np.median(draws):.0f}, 95th "
            f"percentile {np.percentile(draws, 95):.0f}, max {draws.max()}\n"
            f"      stated bound: median {np.median([o.upper for o in outs]):.3f}, covers the "
            f"truth {covers.strip()}; point-estimate gate of 40 draws passes {percent(naive).strip()}"
        )


def look_cost() -> None:
    """A figure, not a test: one look at 10 limits of 2,000 draws each, from scratch."""
    rng = np.random.default_rng(0)
    obs = Observations(rng.random(2000), np.zeros(2000), np.ones(2000), 1.0)
    started = time.perf_counter()
    for _ in range(10):
        bounds(obs, ALPHA)
    print(
        f"\n5. cost: bounds of 10 limits over 2,000 draws from scratch: {time.perf_counter() - started:.2f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gates", type=int, default=1000, help="simulated gates per row")
    parser.add_argument(
        "--saved-gates", type=int, help="gates per rate in section 3 (default gates/5)"
    )
    parser.add_argument("--population", type=int, default=3600, help="trajectories per dataset")
    parser.add_argument("--suite", default="*", help="lengths from this suite only (terminal)")
    parser.add_argument("--concentration", type=float, default=2.0, help="a + b of the Beta")
    args = parser.parse_args()
    lengths = suite_lengths(args.suite)
    started = time.perf_counter()
    print(
        f"{lengths.size} trajectories in the bundled suites, {lengths.min()}-{lengths.max()} steps "
        f"(mean {lengths.mean():.1f}); populations of {args.population}"
    )
    zero_events(lengths)
    coverage(lengths, args.gates, args.concentration, args.population)
    replays_saved(
        lengths, args.saved_gates or max(args.gates // 5, 20), args.concentration, args.population
    )
    done_when(lengths, args.gates, args.population)
    look_cost()
    print(f"\n{time.perf_counter() - started:.0f} s in all")


if __name__ == "__main__":
    main()
