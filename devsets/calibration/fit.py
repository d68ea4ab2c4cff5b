"""Fitting and scoring drift calibrations on a labeled development set (needs scikit-learn)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devsets.calibration.devset import (
    CORRUPTIONS,
    Corruption,
    Pair,
    Volatile,
    build_pairs,
)
from fidelity.compare.base import Comparator
from fidelity.compare.calibration import Calibration, comparison_vector, feature_names
from fidelity.compare.swe import SweComparator
from fidelity.compare.terminal import TerminalComparator
from fidelity.compare.web import WebComparator
from fidelity.formats.jsonl import read_trajectories

HELD_OUT = 0.3
"""Share of trajectories kept out of the fit."""

MAX_FALSE_ALARMS = 0.01
"""The cutoff is the one with the best F1 among those raising at most this share on faithful pairs."""


def held_out(trajectory_id: str, seed: int, share: float = HELD_OUT) -> bool:
    """Whether a trajectory belongs to the held-out split (stable hash of id and seed)."""
    digest = hashlib.sha256(f"{seed}:{trajectory_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def split(pairs: Sequence[Pair], seed: int) -> tuple[list[Pair], list[Pair]]:
    """``(train, held-out)``, split by trajectory so no trajectory is on both sides."""
    test = [p for p in pairs if held_out(p.trajectory_id, seed)]
    train = [p for p in pairs if not held_out(p.trajectory_id, seed)]
    return train, test


def load_pairs(
    first: str | os.PathLike[str],
    second: str | os.PathLike[str],
    seed: int,
    corruptions: Mapping[str, Corruption] = CORRUPTIONS,
    volatile: Volatile | None = None,
) -> list[Pair]:
    """The development set of two replay files (see :func:`build_pairs`)."""
    real, sim = read_trajectories(Path(first)), read_trajectories(Path(second))
    return list(build_pairs(real, sim, seed, corruptions, volatile))


@dataclass(frozen=True)
class Scored:
    """A pair with the uncalibrated comparator's verdict and its feature vector."""

    pair: Pair
    vector: list[float]
    hallucinations: list[str]


UNCALIBRATED: dict[str, Callable[[], Comparator]] = {
    "terminal": lambda: TerminalComparator(calibrated=False),
    "web": lambda: WebComparator(calibrated=False),
    "swe": lambda: SweComparator(calibrated=False),
}
"""The comparator of each calibrated domain with its fixed rules (the features' source)."""


def score_pairs(pairs: Sequence[Pair], domain: str = "terminal") -> list[Scored]:
    """Feature vectors of *pairs* under the uncalibrated comparator of *domain*."""
    comparator = UNCALIBRATED[domain]()
    scored = []
    for pair in pairs:
        c = comparator.compare(pair.real, pair.sim, pair.context)
        scored.append(Scored(pair, comparison_vector(domain, c), c.hallucinations))
    return scored


def fit_calibration(
    train: Sequence[Scored],
    seed: int,
    domain: str = "terminal",
    max_false_alarms: float = MAX_FALSE_ALARMS,
) -> Calibration:
    """A monotone logistic regression over the features of *domain*, cutoff chosen on *train*.

    Every coefficient is constrained to be non-negative (see
    :func:`fit_monotone_logistic`): a larger difference never lowers the drift
    probability.
    """
    x = [s.vector for s in train]
    y = [int(s.pair.drift) for s in train]
    coef, intercept = fit_monotone_logistic(x, y)
    model = Calibration(
        domain=domain,
        features=list(feature_names(domain)),
        coef=[round(c, 6) for c in coef],
        intercept=round(intercept, 6),
        cutoff=0.5,
    )
    probabilities = [model.probability(v) for v in x]
    cutoff = choose_cutoff(probabilities, y, max_false_alarms)
    return model.model_copy(
        update={
            "cutoff": cutoff,
            "fit": {
                "seed": seed,
                "train_pairs": len(train),
                "train_drifted": sum(y),
                "max_false_alarms": max_false_alarms,
                "model": "logistic, coefficients >= 0",
            },
        }
    )


L2 = 1e-3
"""Ridge penalty on the coefficients, against the mean balanced log-loss (sklearn C=10 on ~50 pairs)."""


def fit_monotone_logistic(
    x: Sequence[Sequence[float]], y: Sequence[int], l2: float = L2
) -> tuple[list[float], float]:
    """``(coefficients, intercept)`` of a class-balanced logistic regression with coef >= 0.

    Minimizes the balanced log-loss plus ``l2 * |coef|^2`` with L-BFGS-B, each
    coefficient bounded below by 0 (the intercept is free), so the fitted
    probability is monotone non-decreasing in every feature.
    """
    import numpy as np
    from scipy.optimize import minimize

    features = np.asarray(x, dtype=float)
    labels = np.asarray(y, dtype=float)
    positives = max(1.0, float(labels.sum()))
    negatives = max(1.0, float(len(labels) - labels.sum()))
    weights = np.where(labels > 0, len(labels) / (2 * positives), len(labels) / (2 * negatives))
    total = float(weights.sum())
    width = features.shape[1]

    def loss(theta: Any) -> tuple[float, Any]:
        z = features @ theta[:width] + theta[width]
        # log(1 + exp(-z)) for positives, log(1 + exp(z)) for negatives, stably
        signed = np.where(labels > 0, -z, z)
        value = float((weights * np.logaddexp(0.0, signed)).sum()) / total
        value += l2 * float(theta[:width] @ theta[:width])
        p = 1.0 / (1.0 + np.exp(-np.clip(z, -60, 60)))
        residual = weights * (p - labels) / total
        grad = np.concatenate([features.T @ residual + 2 * l2 * theta[:width], [residual.sum()]])
        return value, grad

    start = np.zeros(width + 1)
    bounds = [(0.0, None)] * width + [(None, None)]
    result = minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds)
    theta = result.x
    return [max(0.0, float(c)) for c in theta[:width]], float(theta[width])


def choose_cutoff(
    probabilities: Sequence[float],
    labels: Sequence[int],
    max_false_alarms: float = MAX_FALSE_ALARMS,
) -> float:
    """The probability cutoff with the best F1 whose false-alarm rate stays within bounds.

    Candidates are midpoints between consecutive distinct probabilities; among
    equally good ones the middle one is taken (the widest margin on both sides).
    One sorted sweep: O(n log n).
    """
    negatives = max(1, sum(1 for y in labels if not y))
    scored = [
        (round(f1, 6), cutoff)
        for cutoff, f1, false in sweep(probabilities, labels)
        if false / negatives <= max_false_alarms
    ]
    if not scored:
        return 0.5
    best = max(f1 for f1, _ in scored)
    tied = sorted(cutoff for f1, cutoff in scored if f1 == best)
    return round(min(0.99, max(0.01, tied[len(tied) // 2])), 6)


def sweep(values: Sequence[float], labels: Sequence[int]) -> list[tuple[float, float, int]]:
    """``(cutoff, F1, false alarms)`` of flagging ``value >= cutoff``, for every midpoint cutoff.

    The cutoffs are the midpoints between consecutive distinct values (0.5
    when all values are equal), computed in one pass over the sorted values.
    """
    order = sorted(zip(values, labels, strict=True), reverse=True)
    positives = sum(1 for y in labels if y)
    out: list[tuple[float, float, int]] = []
    tp = fp = 0
    for index, (value, label) in enumerate(order):
        tp += 1 if label else 0
        fp += 0 if label else 1
        following = order[index + 1][0] if index + 1 < len(order) else None
        if following is None or following == value:
            continue
        fn = positives - tp
        f1 = 2 * tp / (2 * tp + fp + fn) if tp else 0.0
        out.append(((value + following) / 2, f1, fp))
    if not out:
        tp_all = positives
        f1 = 2 * tp_all / (2 * tp_all + len(labels) - positives) if tp_all else 0.0
        out.append((0.5, f1 if values and values[0] >= 0.5 else 0.0, 0))
    return out


def f1_score(flagged: Sequence[bool], labels: Sequence[int]) -> float:
    """F1 of *flagged* against *labels*."""
    tp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and y)
    fp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and not y)
    fn = sum(1 for f, y in zip(flagged, labels, strict=True) if not f and y)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0
