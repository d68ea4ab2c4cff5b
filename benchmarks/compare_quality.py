"""Quality of a domain's drift verdicts on the held-out split, next to plain baselines.

Same development set as ``calibrate.py`` (see ``compare_devset.py``): pairs
from two real replays of the domain's suite, the held-out split another
project, seeded corruptions on both. Prints, for the shipped comparator and
for exact match, difflib ratio and rapidfuzz ratio (raw text, no
normalization; their thresholds tuned for F1 on the training split): ROC AUC,
precision, recall and F1 of drift, the false-alarm rate on pairs that did not
drift (faithful and volatile-only) and on volatile-only pairs alone; then the
recall and false rate of hallucination detection and the recall per
corruption kind.

    python benchmarks/compare_quality.py [--domain terminal|web|swe] [--seed 7]
        [--replays A B] [--heldout-replays A B] [--cache DIR]
"""

from __future__ import annotations

import argparse
import difflib
import itertools
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the dev-set builders

from compare_devset import add_arguments, dev_split
from rapidfuzz import fuzz
from sklearn.metrics import roc_auc_score

from devsets.calibration.devset import Pair
from devsets.calibration.fit import f1_score
from fidelity.compare import Comparator, SweComparator, TerminalComparator, WebComparator
from fidelity.compare.normalize import normalize
from fidelity.compare.terminal import context_texts

Scorer = Callable[[Pair], float]
"""A drift score: higher means more likely drifted."""

COMPARATORS: dict[str, Callable[[], Comparator]] = {
    "terminal": TerminalComparator,
    "web": WebComparator,
    "swe": SweComparator,
}
"""The shipped (calibrated) comparator of each domain."""


def exact(pair: Pair) -> float:
    return float(pair.real.text != pair.sim.text or pair.real.exit_code != pair.sim.exit_code)


def difflib_gap(pair: Pair) -> float:
    return 1.0 - difflib.SequenceMatcher(None, pair.real.text, pair.sim.text).ratio()


def rapidfuzz_gap(pair: Pair) -> float:
    return 1.0 - fuzz.ratio(pair.real.text, pair.sim.text) / 100.0


def tuned_cutoff(scorer: Scorer, train: Sequence[Pair]) -> float:
    """The cutoff of *scorer* with the best F1 on the training split."""
    values = [scorer(p) for p in train]
    labels = [int(p.drift) for p in train]
    levels = sorted(set(values))
    candidates = [(a + b) / 2 for a, b in itertools.pairwise(levels)] or [0.5]
    return max(candidates, key=lambda c: f1_score([v >= c for v in values], labels))


def row(name: str, values: list[float], flagged: list[bool], pairs: Sequence[Pair]) -> str:
    labels = [int(p.drift) for p in pairs]
    tp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and y)
    fp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and not y)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / sum(labels)
    faithful = [f for f, p in zip(flagged, pairs, strict=True) if not p.drift]
    volatile = [f for f, p in zip(flagged, pairs, strict=True) if p.kind == "volatile"]
    false_alarms = sum(faithful) / len(faithful)
    on_volatile = f"{sum(volatile) / len(volatile):>9.2%}" if volatile else f"{'-':>9}"
    auc = roc_auc_score(labels, values)
    f1 = f1_score(flagged, labels)
    return (
        f"{name:<22} {auc:>7.4f} {precision:>9.4f} {recall:>7.4f} {f1:>7.4f} "
        f"{false_alarms:>12.2%} {on_volatile}"
    )


def injected_unshown(pair: Pair) -> bool:
    """Whether the pair's injected entity is a hallucination by definition (not real, not shown)."""
    if pair.injected is None or pair.injected in pair.real.text:
        return False
    return not any(pair.injected in text for text, _ in context_texts(pair.context))


def detected(injected: str, hallucinations: list[str]) -> bool:
    """Whether a reported hallucination names *injected* (as is or normalized: ports, ids…)."""
    forms = {injected, normalize(injected)[0]}
    return any(
        form in h.split(":", 1)[1] or h.split(":", 1)[1] in form
        for h in hallucinations
        for form in forms
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    args = parser.parse_args()
    train, test = dev_split(args)
    comparator = COMPARATORS[args.domain]()
    results = [comparator.compare(p.real, p.sim, p.context) for p in test]
    print(
        f"held-out: {len(test)} pairs from {len({p.trajectory_id for p in test})} trajectories "
        f"({sum(p.drift for p in test)} drifted); train: {len(train)} pairs"
    )
    print(
        f"{'method':<22} {'ROC AUC':>7} {'precision':>9} {'recall':>7} {'F1':>7} "
        f"{'false alarms':>12} {'volatile':>9}"
    )
    print(
        row(
            "fidelity (calibrated)",
            [r.metrics.get("drift_p", 1.0 - r.score) for r in results],
            [r.drift for r in results],
            test,
        )
    )
    for name, scorer in (
        ("exact match", exact),
        ("difflib ratio", difflib_gap),
        ("rapidfuzz ratio", rapidfuzz_gap),
    ):
        cutoff = tuned_cutoff(scorer, train)
        values = [scorer(p) for p in test]
        print(row(name, values, [v >= cutoff for v in values], test))
    targets = [(p, r) for p, r in zip(test, results, strict=True) if injected_unshown(p)]
    found = sum(detected(p.injected or "", r.hallucinations) for p, r in targets)
    faithful = [r for p, r in zip(test, results, strict=True) if not p.drift]
    false = sum(bool(r.hallucinations) for r in faithful)
    print(
        f"hallucination recall {found / len(targets):.4f} ({found}/{len(targets)} injected entities); "
        f"hallucinations on faithful steps {false / len(faithful):.2%} ({false}/{len(faithful)})"
    )
    by_kind: dict[str, list[bool]] = defaultdict(list)
    for p, r in zip(test, results, strict=True):
        by_kind[p.kind].append(r.drift)
    print(
        "drift flagged per kind: "
        + ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in sorted(by_kind.items()))
    )


if __name__ == "__main__":
    main()
