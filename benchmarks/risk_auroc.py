"""Drift risk without replay: how well it ranks drifting steps of real world-model predictions.

The data nobody here wrote: ``devsets/wm`` (LLM helpers acting as world models predicted
steps of the public agent runs in ``../shared/agent-trajectories`` from fidelity's own
prompts; two labellers labelled every step against ``../shared/RUBRIC.md``). Each
prediction becomes the simulated trajectory the model had written up to it
(:mod:`devsets.wm.risk`); the risk reads that trajectory alone, never the real
observation.

Held out by source, leave one source out: each repository (swe) or CTF category
(terminal) is scored by a model fitted on the others' steps (:meth:`RiskModel.fit`, no
prior). Printed, on the same held-out steps and with their counts:

- AUROC of the risk for the labelled drifting steps, pooled, per domain and per mode,
  next to the naive score measured in the same run: the share of the simulated
  observation's whitespace tokens that its history (earlier actions and observations,
  and its own action) never showed; 95% intervals by resampling sources (2,000 draws);
- ablations: the action-type rates alone, the content features alone;
- the cost of the risk per step (features and scoring with the shipped prior, CPU time of
  one core) on the bundled terminal suite replayed for real (bubblewrap; kept in
  ``--cache``), on the public agent runs and on the dev set's trajectories, next to the
  naive score's cost on the same steps.

``--write`` then fits on every labelled step and writes ``fidelity/_data/risk/prior.json``
(the prior :func:`fidelity.risk.prior_model` loads), its held-out figures recorded.

    python benchmarks/risk_auroc.py [--cache DIR] [--repeat 3] [--no-timing] [--write]
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the dev-set builders

from devsets.wm.load import load_pairs
from devsets.wm.risk import RiskStep, risk_steps
from fidelity.risk import FEATURES, RiskModel, StepFeatures, score_trajectories, step_features
from fidelity.risk.model import dump_model
from fidelity.trajectory import Trajectory

ROOT = Path(__file__).resolve().parent.parent
PRIOR = ROOT / "fidelity/_data/risk/prior.json"
DRAWS = 2000


def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The area under the ROC curve (Mann-Whitney; ties count one half)."""
    ranked = sorted(zip(scores, labels, strict=True), key=lambda pair: pair[0])
    positives = sum(labels)
    negatives = len(labels) - positives
    if not positives or not negatives:
        return float("nan")
    rank_sum = 0.0
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and ranked[j][0] == ranked[i][0]:
            j += 1
        mid = (i + j + 1) / 2  # 1-based mean rank of the tie block
        rank_sum += mid * sum(label for _, label in ranked[i:j])
        i = j
    return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives)


def held_out(
    steps: Sequence[RiskStep], transform: Callable[[StepFeatures], StepFeatures] = lambda f: f
) -> list[float]:
    """Each step's risk from a model fitted without its source (leave one source out)."""
    risks = [0.0] * len(steps)
    for source in sorted({s.source for s in steps}):
        train = [s for s in steps if s.source != source]
        model = RiskModel.fit(
            [transform(s.features) for s in train],
            [s.drift for s in train],
            [s.run for s in train],
            source=f"devsets/wm without {source}",
        )
        for i, s in enumerate(steps):
            if s.source == source:
                risks[i] = model.score([transform(s.features)])[0]
    return risks


def interval(
    steps: Sequence[RiskStep], first: Sequence[float], second: Sequence[float], seed: int
) -> tuple[tuple[float, float], tuple[float, float], tuple[float, float]]:
    """95% percentile intervals of AUROC(first), AUROC(second) and their difference, by
    resampling sources with replacement (the steps of one source stay together)."""
    rng = random.Random(seed)
    sources = sorted({s.source for s in steps})
    members = {src: [i for i, s in enumerate(steps) if s.source == src] for src in sources}
    a, b, gap = [], [], []
    for _ in range(DRAWS):
        drawn = [i for _ in sources for i in members[rng.choice(sources)]]
        labels = [steps[i].drift for i in drawn]
        if all(labels) or not any(labels):
            continue
        x = auroc([first[i] for i in drawn], labels)
        y = auroc([second[i] for i in drawn], labels)
        a.append(x)
        b.append(y)
        gap.append(x - y)

    def bounds(values: list[float]) -> tuple[float, float]:
        values.sort()
        return values[int(0.025 * len(values))], values[int(0.975 * len(values)) - 1]

    return bounds(a), bounds(b), bounds(gap)


def subset_line(name: str, steps: Sequence[RiskStep], risk: list[float], naive: list[float]) -> str:
    labels = [s.drift for s in steps]
    return (
        f"  {name:<22} {len(steps):>5} {sum(labels):>7}   "
        f"{auroc(risk, labels):>6.3f}   {auroc(naive, labels):>6.3f}"
    )


def report(steps: list[RiskStep], seed: int) -> dict[str, float | int | str]:
    labels = [s.drift for s in steps]
    risk = held_out(steps)
    naive = [s.naive for s in steps]
    sources = sorted({s.source for s in steps})
    print(f"held out by source (leave one of {len(sources)} sources out: {', '.join(sources)})")
    print(f"  {'steps':<22} {'count':>5} {'drifted':>7}   {'risk':>6}   {'naive':>6}  (AUROC)")
    print(subset_line("all", steps, risk, naive))
    for key, value in (("domain", "swe"), ("domain", "terminal"), ("mode", "teacher-forced"),
                       ("mode", "open-loop")):  # fmt: skip
        chosen = [i for i, s in enumerate(steps) if getattr(s, key) == value]
        print(
            subset_line(
                value,
                [steps[i] for i in chosen],
                [risk[i] for i in chosen],
                [naive[i] for i in chosen],
            )
        )
    (lo, hi), (nlo, nhi), (glo, ghi) = interval(steps, risk, naive, seed)
    print(
        f"  95% intervals, sources resampled ({DRAWS} draws): risk [{lo:.3f}, {hi:.3f}], "
        f"naive [{nlo:.3f}, {nhi:.3f}], risk - naive [{glo:+.3f}, {ghi:+.3f}]"
    )
    no_action = held_out(steps, _without_action)
    action_only = held_out(steps, _action_only)
    print(
        f"  ablations (AUROC, all steps): content features without the action-type rates "
        f"{auroc(no_action, labels):.3f}; action-type rates alone {auroc(action_only, labels):.3f}"
    )
    return {
        "split": f"leave one source out ({len(sources)} repositories and CTF categories)",
        "steps": len(steps),
        "drifted": sum(labels),
        "auroc": round(auroc(risk, labels), 4),
        "naive_auroc": round(auroc(naive, labels), 4),
    }


def _without_action(features: StepFeatures) -> StepFeatures:
    return dataclasses.replace(features, action="", shape="")


def _action_only(features: StepFeatures) -> StepFeatures:
    return features.with_values(**dict.fromkeys((f for f in FEATURES if f != "depth"), None))


def agreement_line() -> str:
    """The labellers' drift/no-drift agreement on the doubly labelled steps."""
    both = [p for p in load_pairs() if len(p.labels) >= 2]
    same = sum(len({lab.label == "drift" for lab in p.labels.values()}) == 1 for p in both)
    return f"labellers: drift/no-drift agreement {same}/{len(both)} doubly labelled steps"


# -- cost -----------------------------------------------------------------------------------


def replay_terminal_suite(cache: Path) -> Path:
    """The bundled terminal suite replayed for real once (bubblewrap), kept in *cache*."""
    path = cache / "terminal-suite-replay.jsonl"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "fidelity", "replay", str(ROOT / "suites/terminal/suite.jsonl"),
             "-o", str(path)],
            check=True,
        )  # fmt: skip
    return path


def cost_line(name: str, trajectories: Sequence[Trajectory], repeat: int) -> str:
    """CPU µs per step of features + prior scoring, of features alone, and of the naive score."""
    from fidelity.formats.jsonl import read_trajectories  # noqa: F401 (warm imports)
    from fidelity.risk import prior_model

    model = prior_model()
    steps = sum(len(t.steps) for t in trajectories)
    list(score_trajectories(trajectories[:2], model))  # warm: comparators, caches of imports

    def best(work: Callable[[], object]) -> float:
        times = []
        for _ in range(repeat):
            _clear_caches()
            start = time.process_time()
            work()
            times.append(time.process_time() - start)
        return min(times) / steps * 1e6

    scored = best(lambda: list(score_trajectories(trajectories, model)))
    features = best(lambda: [step_features(t) for t in trajectories])
    naive = best(lambda: [_naive_all(t) for t in trajectories])
    return (
        f"  {name:<34} {len(trajectories):>6} {steps:>6}   {scored:>8.0f} {features:>9.0f}"
        f" {naive:>8.0f}   {scored / naive:>5.1f}x"
    )


def _naive_all(trajectory: Trajectory) -> list[float]:
    """The naive score of every step, in one pass (the tokens shown kept as a set)."""
    shown: set[str] = set()
    scores = []
    for step in trajectory.steps:
        shown.update(step.action.render().split())
        tokens = step.observation.text.split() if step.observation is not None else []
        scores.append(sum(t not in shown for t in tokens) / len(tokens) if tokens else 0.0)
        shown.update(tokens)
    return scores


def timing(steps: Sequence[RiskStep], cache: Path, repeat: int) -> None:
    from devsets.calibration.devset_agents import load_runs
    from fidelity.formats.jsonl import read_trajectories

    print(
        f"cost per step (CPU time of one core, best of {repeat}; observations normalized "
        "by the comparator's rules, memoized per text: every text is new here)"
    )
    print(
        f"  {'trajectories':<34} {'count':>6} {'steps':>6}   {'risk µs':>8} {'features':>9}"
        f" {'naive µs':>8}   ratio"
    )
    suite = read_trajectories(replay_terminal_suite(cache))
    runs = [r.trajectory for r in load_runs()]
    dev = [s.trajectory for s in steps]
    for name, trajectories in (
        ("bundled terminal suite (real replay)", suite),
        ("public agent runs", runs),
        ("wm dev set (simulated)", dev),
    ):
        print(cost_line(name, trajectories, repeat))


def _clear_caches() -> None:
    """Forget memoized normalizations (a dataset's texts are new to it)."""
    from fidelity.risk.features import _EXTRACTIONS

    for extraction in _EXTRACTIONS.values():
        extraction.normalizer.cache_clear()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7, help="seed of the source resampling")
    parser.add_argument("--cache", type=Path, default=None, help="keeps the suite's replay")
    parser.add_argument("--repeat", type=int, default=3, help="timing repeats (best kept)")
    parser.add_argument("--no-timing", action="store_true")
    parser.add_argument("--write", action="store_true", help="write the shipped prior")
    args = parser.parse_args()
    steps = risk_steps()
    if not steps:
        raise SystemExit("devsets/wm holds no labelled predictions")
    counts = Counter(s.domain for s in steps)
    drifted = Counter(s.domain for s in steps if s.drift)
    print(
        f"world-model dev set: {len(steps)} labelled steps "
        f"({', '.join(f'{d} {counts[d]} ({drifted[d]} drifted)' for d in sorted(counts))})"
    )
    print(agreement_line())
    figures = report(steps, args.seed)
    if args.write:
        model = RiskModel.fit(
            [s.features for s in steps],
            [s.drift for s in steps],
            [s.run for s in steps],
            source="devsets/wm (real world-model predictions, labelled twice)",
        )
        model.fitted.held_out.update(figures)
        PRIOR.parent.mkdir(parents=True, exist_ok=True)
        PRIOR.write_text(dump_model(model), encoding="utf-8")
        print(f"wrote {PRIOR.relative_to(ROOT)}")
    if not args.no_timing:
        with tempfile.TemporaryDirectory() as scratch:
            timing(steps, args.cache or Path(scratch), args.repeat)


if __name__ == "__main__":
    main()
