"""Fitting and scoring drift calibrations on a labeled development set (needs scikit-learn)."""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from fidelity.compare.base import Comparator
from fidelity.compare.calibration import Calibration, comparison_vector, feature_names
from fidelity.compare.calibration.devset import (
    CORRUPTIONS,
    Corruption,
    Pair,
    Volatile,
    build_pairs,
)
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
    """A logistic regression over the features of *domain* and the cutoff chosen on *train*."""
    from sklearn.linear_model import LogisticRegression

    x = [s.vector for s in train]
    y = [int(s.pair.drift) for s in train]
    model = LogisticRegression(class_weight="balanced", C=10.0, max_iter=2000, random_state=seed)
    model.fit(x, y)
    probabilities = [float(p) for p in model.predict_proba(x)[:, 1]]
    cutoff = choose_cutoff(probabilities, y, max_false_alarms)
    return Calibration(
        domain=domain,
        features=list(feature_names(domain)),
        coef=[round(float(c), 6) for c in model.coef_[0]],
        intercept=round(float(model.intercept_[0]), 6),
        cutoff=cutoff,
        fit={
            "seed": seed,
            "train_pairs": len(train),
            "train_drifted": sum(y),
            "max_false_alarms": max_false_alarms,
        },
    )


def choose_cutoff(
    probabilities: Sequence[float],
    labels: Sequence[int],
    max_false_alarms: float = MAX_FALSE_ALARMS,
) -> float:
    """The probability cutoff with the best F1 whose false-alarm rate stays within bounds.

    Candidates are midpoints between consecutive distinct probabilities; among
    equally good ones the middle one is taken (the widest margin on both sides).
    """
    negatives = max(1, sum(1 for y in labels if not y))
    levels = sorted(set(probabilities))
    candidates = [(a + b) / 2 for a, b in itertools.pairwise(levels)] or [0.5]
    scored: list[tuple[float, float]] = []
    for cutoff in candidates:
        flagged = [p >= cutoff for p in probabilities]
        false = sum(1 for f, y in zip(flagged, labels, strict=True) if f and not y)
        if false / negatives <= max_false_alarms:
            scored.append((round(f1_score(flagged, labels), 6), cutoff))
    if not scored:
        return 0.5
    best = max(f1 for f1, _ in scored)
    tied = [cutoff for f1, cutoff in scored if f1 == best]
    return round(min(0.99, max(0.01, tied[len(tied) // 2])), 6)


def f1_score(flagged: Sequence[bool], labels: Sequence[int]) -> float:
    """F1 of *flagged* against *labels*."""
    tp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and y)
    fp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and not y)
    fn = sum(1 for f, y in zip(flagged, labels, strict=True) if not f and y)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0
