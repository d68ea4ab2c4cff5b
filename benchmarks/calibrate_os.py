"""Calibrate the os comparator (OSWorld trees) on two real desktop replays plus labeled corruptions.

    .nox/tests/bin/python -m fidelity replay suites/os/suite.jsonl -o A.jsonl   # twice
    .nox/tests/bin/python benchmarks/calibrate_os.py A.jsonl B.jsonl [--write]

Held out by source: each desktop application (mousepad, galculator, terminal)
is held out in turn, the model is fitted on the two others and scored on it.
Printed next to naive baselines measured on the same pairs: the uncalibrated
comparator (any mismatch is drift), exact equality of the normalized texts,
and line similarity below 0.9. ``--write`` stores the fit on all pairs in
``fidelity/compare/calibration/os.json``. The logistic regression is fitted
with non-negative coefficients (every feature grows with the difference), so
a larger difference never lowers the drift probability.
"""

from __future__ import annotations

import argparse
import difflib
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the dev-set builders

import numpy as np
from scipy.optimize import minimize

from devsets.calibration.devset import Pair
from devsets.calibration.devset_os import build_os_pairs
from devsets.calibration.fit import choose_cutoff, f1_score
from fidelity.compare.calibration import Calibration, comparison_vector, feature_names
from fidelity.compare.osworld import OsComparator, normalize
from fidelity.formats.jsonl import read_trajectories

OUT = Path(__file__).resolve().parents[1] / "fidelity/compare/calibration/os.json"
MAX_FALSE_ALARMS = 0.02


def fit_nonnegative(x: np.ndarray, y: np.ndarray, l2: float = 0.01) -> tuple[np.ndarray, float]:
    """Class-balanced logistic regression with coefficients >= 0 (L-BFGS-B)."""
    weights = np.where(y == 1, len(y) / (2 * max(1, y.sum())), len(y) / (2 * max(1, (1 - y).sum())))

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ theta[:-1] + theta[-1]
        p = 1 / (1 + np.exp(-np.clip(z, -60, 60)))
        eps = 1e-12
        value = -np.sum(weights * (y * np.log(p + eps) + (1 - y) * np.log(1 - p + eps))) / len(y)
        value += l2 * np.sum(theta[:-1] ** 2)
        grad_z = weights * (p - y) / len(y)
        grad = np.append(x.T @ grad_z + 2 * l2 * theta[:-1], grad_z.sum())
        return float(value), grad

    start = np.zeros(x.shape[1] + 1)
    bounds = [(0.0, None)] * x.shape[1] + [(None, None)]
    result = minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds)
    return result.x[:-1], float(result.x[-1])


def probabilities(x: np.ndarray, coef: np.ndarray, intercept: float) -> list[float]:
    """Drift probabilities of the rows of *x*."""
    return [float(v) for v in 1 / (1 + np.exp(-np.clip(x @ coef + intercept, -60, 60)))]


def rates(flagged: Sequence[bool], labels: Sequence[int]) -> dict[str, float]:
    """F1, recall and false-alarm rate of *flagged*."""
    positives = max(1, sum(labels))
    negatives = max(1, len(labels) - sum(labels))
    hits = sum(1 for f, y in zip(flagged, labels, strict=True) if f and y)
    false = sum(1 for f, y in zip(flagged, labels, strict=True) if f and not y)
    return {
        "f1": round(f1_score(flagged, labels), 3),
        "recall": round(float(hits / positives), 3),
        "false_alarms": round(float(false / negatives), 3),
    }


def baselines(pairs: Sequence[Pair], scores: Sequence[float]) -> dict[str, list[bool]]:
    """Naive verdicts on the same pairs."""
    exact = [normalize(p.real.text) != normalize(p.sim.text) for p in pairs]
    lines = [
        difflib.SequenceMatcher(
            None, normalize(p.real.text).splitlines(), normalize(p.sim.text).splitlines()
        ).ratio()
        < 0.9
        for p in pairs
    ]
    return {
        "uncalibrated (any mismatch)": [s < 1.0 for s in scores],
        "exact normalized text": exact,
        "line similarity < 0.9": lines,
    }


def main() -> None:
    """Build the pairs, evaluate held out by application, print figures, optionally write."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("first")
    parser.add_argument("second")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    first, second = read_trajectories(Path(args.first)), read_trajectories(Path(args.second))
    project = {t.id: t.env.project or "none" for t in first}
    pairs = list(build_os_pairs(first, second, args.seed))
    comparator = OsComparator(calibrated=False)
    compared = [comparator.compare(p.real, p.sim, p.context) for p in pairs]
    x = np.array([comparison_vector("os", c) for c in compared])
    y = np.array([int(p.drift) for p in pairs])
    apps = sorted(set(project.values()))
    print(f"pairs {len(pairs)}: drifted {int(y.sum())}, faithful {len(y) - int(y.sum())}")
    held_flags: list[bool] = []
    held_labels: list[int] = []
    held_index: list[int] = []
    for app in apps:
        test = [i for i, p in enumerate(pairs) if project[p.trajectory_id] == app]
        train = [i for i, p in enumerate(pairs) if project[p.trajectory_id] != app]
        coef, intercept = fit_nonnegative(x[train], y[train])
        cutoff = choose_cutoff(
            probabilities(x[train], coef, intercept), list(y[train]), MAX_FALSE_ALARMS
        )
        flags = [p >= cutoff for p in probabilities(x[test], coef, intercept)]
        print(f"held-out {app:<11} pairs {len(test):4d}  calibrated {rates(flags, list(y[test]))}")
        held_flags += flags
        held_labels += [int(v) for v in y[test]]
        held_index += test
    held = rates(held_flags, held_labels)
    print(f"held-out, all applications: calibrated {held}")
    ordered = [pairs[i] for i in held_index]
    scores = [compared[i].score for i in held_index]
    for name, flags in baselines(ordered, scores).items():
        print(f"held-out, all applications: {name:<28} {rates(flags, held_labels)}")
    faithful = [
        f
        for f, i in zip(held_flags, held_index, strict=True)
        if pairs[i].kind.startswith("faithful")
    ]
    print(
        f"two real replays (faithful pairs, held-out models): {sum(faithful)}/{len(faithful)} "
        f"steps drift ({100 * sum(faithful) / max(1, len(faithful)):.1f}%)"
    )
    coef, intercept = fit_nonnegative(x, y)
    cutoff = choose_cutoff(probabilities(x, coef, intercept), list(y), MAX_FALSE_ALARMS)
    calibration = Calibration(
        domain="os",
        features=list(feature_names("os")),
        coef=[round(float(c), 6) for c in coef],
        intercept=round(intercept, 6),
        cutoff=cutoff,
        fit={
            "seed": args.seed,
            "train_pairs": len(pairs),
            "train_drifted": int(y.sum()),
            "max_false_alarms": MAX_FALSE_ALARMS,
            "split": "application",
            "held_out_f1": held["f1"],
            "held_out_false_alarms": held["false_alarms"],
            "nonnegative": "true",
        },
    )
    assert all(c >= 0 for c in calibration.coef) and not math.isnan(calibration.intercept)
    print(json.dumps(calibration.model_dump(), indent=2))
    if args.write:
        OUT.write_text(json.dumps(calibration.model_dump(), indent=2) + "\n")
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
