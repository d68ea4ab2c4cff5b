"""Fit the terminal drift calibration and write ``fidelity/compare/calibration/terminal.json``.

Replays the bundled terminal suite twice in real bubblewrap sandboxes (or reads
two replays given with ``--replays``), builds the seeded development set
(faithful pairs plus realistic corruptions), fits a logistic regression on it
and prints the coefficients and the figures on the held-out split: by default
another project replayed twice (see ``compare_devset.py``).

    python benchmarks/calibrate.py [--seed 7] [--replays A B] [--heldout-replays A B]
        [--split project|trajectory] [--out PATH] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from compare_devset import add_arguments, dev_split

from fidelity.compare.calibration import FEATURES
from fidelity.compare.calibration.fit import f1_score, fit_calibration, score_pairs

OUT = Path(__file__).resolve().parent.parent / "fidelity/compare/calibration/terminal.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    args = parser.parse_args()
    train, test = dev_split(args)
    scored_train, scored_test = score_pairs(train), score_pairs(test)
    calibration = fit_calibration(scored_train, args.seed)
    labels = [int(s.pair.drift) for s in scored_test]
    flagged = [calibration.probability(s.vector) >= calibration.cutoff for s in scored_test]
    held_f1 = round(f1_score(flagged, labels), 4)
    fit = {
        **calibration.fit,
        "split": args.split,
        "held_out_pairs": len(test),
        "held_out_f1": held_f1,
    }
    calibration = calibration.model_copy(update={"fit": fit})
    print(f"train pairs {len(train)}, held-out pairs {len(test)} (split by {args.split})")
    for name, coef in zip(FEATURES, calibration.coef, strict=True):
        print(f"  {name:<14} {coef:+.3f}")
    print(f"  {'intercept':<14} {calibration.intercept:+.3f}   cutoff {calibration.cutoff:.4f}")
    print(f"held-out drift F1 {held_f1:.4f}")
    if not args.dry_run:
        args.out.write_text(json.dumps(calibration.model_dump(), indent=2) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
