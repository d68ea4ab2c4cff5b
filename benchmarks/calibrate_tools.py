"""Fit the mcp or search drift calibration on real replays plus labeled corruptions.

Replays the domain's bundled suite twice for real (MCP servers / the search
engine; or reads ``--replays A B``), builds the labeled pairs
(:mod:`devsets.calibration.devset_tools`), holds out 30% of the
trajectories by a stable hash, fits a logistic regression with non-negative
weights on the rest, and prints held-out precision, recall, F1 and false-alarm
rate next to two naive baselines measured on the same held-out pairs: the
comparator's fixed rules (threshold 0.9, any mismatch or entity drifts) and
"drift whenever the text differs". Writes ``fidelity/compare/calibration/<domain>.json``.

    python benchmarks/calibrate_tools.py [--domain mcp|search] [--replays A B] [--seed 7] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the dev-set builders

from devsets.calibration.devset import Pair
from devsets.calibration.devset_tools import (
    MCP_CORRUPTIONS,
    SEARCH_CORRUPTIONS,
    fit_monotone,
    mcp_volatile,
    search_volatile,
)
from devsets.calibration.fit import MAX_FALSE_ALARMS, Scored, load_pairs, split
from fidelity.batch import replay_suite
from fidelity.compare.base import Comparator
from fidelity.compare.calibration import comparison_vector
from fidelity.compare.jsondata import JsonComparator
from fidelity.compare.search import SearchComparator
from fidelity.resources import default_suite

OUT = Path(__file__).resolve().parent.parent / "fidelity/compare/calibration"


def pairs(domain: str, replays: list[str] | None, seed: int) -> list[Pair]:
    corruptions = MCP_CORRUPTIONS if domain == "mcp" else SEARCH_CORRUPTIONS
    volatile = mcp_volatile if domain == "mcp" else search_volatile
    if replays:
        return load_pairs(replays[0], replays[1], seed, corruptions, volatile)
    with tempfile.TemporaryDirectory(prefix="fidelity-devset-") as tmp:
        paths = [Path(tmp) / f"replay{i}.jsonl" for i in (1, 2)]
        for path in paths:
            replay_suite(default_suite(domain), path, concurrency=4)
        return load_pairs(paths[0], paths[1], seed, corruptions, volatile)


def uncalibrated(domain: str) -> Comparator:
    return (
        JsonComparator(calibrated=False) if domain == "mcp" else SearchComparator(calibrated=False)
    )


def figures(flagged: Sequence[bool], labels: Sequence[int]) -> dict[str, float]:
    tp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and y)
    fp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and not y)
    fn = sum(1 for f, y in zip(flagged, labels, strict=True) if not f and y)
    negatives = sum(1 for y in labels if not y)
    return {
        "precision": round(tp / (tp + fp), 4) if tp + fp else 0.0,
        "recall": round(tp / (tp + fn), 4) if tp + fn else 0.0,
        "f1": round(2 * tp / (2 * tp + fp + fn), 4) if tp else 0.0,
        "false_alarms": round(fp / negatives, 4) if negatives else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=["mcp", "search"], help="default: both")
    parser.add_argument("--replays", nargs=2, metavar=("FIRST", "SECOND"))
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args()
    if args.domain is None and args.replays:
        parser.error("--replays needs --domain")
    for domain in [args.domain] if args.domain else ["mcp", "search"]:
        calibrate(domain, args.replays, args.seed, args.dry_run)


def calibrate(domain: str, replays: list[str] | None, seed: int, dry_run: bool) -> None:
    """Fit, print the held-out figures and (unless *dry_run*) write one domain's calibration."""
    args = argparse.Namespace(domain=domain, replays=replays, seed=seed, dry_run=dry_run)
    comparator = uncalibrated(args.domain)
    labeled = pairs(args.domain, args.replays, args.seed)
    train, test = split(labeled, args.seed)
    scored = {}
    for name, group in (("train", train), ("test", test)):
        rows = []
        for pair in group:
            c = comparator.compare(pair.real, pair.sim, pair.context)
            rows.append((Scored(pair, comparison_vector(args.domain, c), c.hallucinations), c))
        scored[name] = rows
    calibration = fit_monotone(
        [s for s, _ in scored["train"]], args.seed, args.domain, MAX_FALSE_ALARMS
    )
    labels = [int(s.pair.drift) for s, _ in scored["test"]]
    fixed = [c.drift for _, c in scored["test"]]
    ours = [  # the shipped verdict: the fixed rules, plus what the calibration flags
        c.drift or calibration.probability(s.vector) >= calibration.cutoff
        for s, c in scored["test"]
    ]
    naive = [s.pair.real.text != s.pair.sim.text for s, _ in scored["test"]]
    kinds = Counter(s.pair.kind for s, _ in scored["test"])
    caught = Counter(s.pair.kind for (s, _), f in zip(scored["test"], ours, strict=True) if f)
    trajectories = len({p.trajectory_id for p in test})
    print(
        f"{args.domain}: {len(train)} training pairs, {len(test)} held-out pairs ({trajectories} trajectories)"
    )
    print("held-out            precision  recall  f1      false alarms")
    for label, flagged in (
        ("fixed + calibrated", ours),
        ("fixed rules", fixed),
        ("text differs", naive),
    ):
        f = figures(flagged, labels)
        print(f"{label:<19} {f['precision']:<10} {f['recall']:<7} {f['f1']:<7} {f['false_alarms']}")
    print(
        "flagged per kind (held out): "
        + ", ".join(f"{k} {caught[k]}/{n}" for k, n in sorted(kinds.items()))
    )
    held = figures(ours, labels)
    fit = {
        **calibration.fit,
        "split": "trajectory",
        "held_out_pairs": len(test),
        "held_out_f1": held["f1"],
        "held_out_false_alarms": held["false_alarms"],
        "fixed_rules_held_out_f1": figures(fixed, labels)["f1"],
    }
    calibration = calibration.model_copy(update={"fit": fit})
    print(json.dumps(calibration.model_dump(), indent=2))
    if not args.dry_run:
        (OUT / f"{args.domain}.json").write_text(
            json.dumps(calibration.model_dump(), indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
