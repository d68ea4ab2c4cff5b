"""Fit a domain's drift calibration and write ``fidelity/compare/calibration/<domain>.json``.

Replays the domain's suite twice in its real sandboxes (bubblewrap for
terminal, Chromium for web, Docker for swe; or reads two replays given with
``--replays`` or kept in ``--cache``), builds the seeded development set
(faithful and volatile pairs plus realistic corruptions), fits a logistic
regression on the training split and prints the coefficients and the figures
on the held-out split: another project (see ``compare_devset.py``). The
shipped ``web.json`` comes from ``web_devset.py --write`` instead (every site
replayed, leave one site out).

    python benchmarks/calibrate.py [--domain terminal|web|swe] [--seed 7] [--replays A B]
        [--heldout-replays A B] [--heldout-project NAME] [--cache DIR]
        [--split project|trajectory] [--out PATH] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the dev-set builders

from compare_devset import DOMAINS, add_arguments, dev_split

from devsets.calibration.fit import (
    MAX_FALSE_ALARMS,
    f1_score,
    fit_calibration,
    score_pairs,
)
from fidelity.compare.calibration import feature_names

OUT = Path(__file__).resolve().parent.parent / "fidelity/compare/calibration"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser)
    parser.add_argument("--out", type=Path, default=None, help="default: <domain>.json")
    parser.add_argument("--dry-run", action="store_true", help="print the fit, write nothing")
    parser.add_argument(
        "--max-false-alarms",
        type=float,
        default=MAX_FALSE_ALARMS,
        help="largest share of non-drifted training pairs the cutoff may flag",
    )
    args = parser.parse_args()
    train, test = dev_split(args)
    scored_train = score_pairs(train, args.domain)
    scored_test = score_pairs(test, args.domain)
    calibration = fit_calibration(scored_train, args.seed, args.domain, args.max_false_alarms)
    labels = [int(s.pair.drift) for s in scored_test]
    flagged = [calibration.probability(s.vector) >= calibration.cutoff for s in scored_test]
    held_f1 = round(f1_score(flagged, labels), 4)
    fit = {
        **calibration.fit,
        "split": args.split,
        **({"held_out_project": held} if (held := heldout_name(args)) else {}),
        "held_out_pairs": len(test),
        "held_out_f1": held_f1,
    }
    calibration = calibration.model_copy(update={"fit": fit})
    print(f"train pairs {len(train)}, held-out pairs {len(test)} (split by {args.split})")
    for name, coef in zip(feature_names(args.domain), calibration.coef, strict=True):
        print(f"  {name:<14} {coef:+.3f}")
    print(f"  {'intercept':<14} {calibration.intercept:+.3f}   cutoff {calibration.cutoff:.4f}")
    print(f"held-out drift F1 {held_f1:.4f}")
    if not args.dry_run:
        out = args.out or OUT / f"{args.domain}.json"
        out.write_text(json.dumps(calibration.model_dump(), indent=2) + "\n")
        print(f"wrote {out}")


def heldout_name(args: argparse.Namespace) -> str | None:
    """The held-out site or project of a project split of web or swe."""
    if args.split != "project":
        return None
    return args.heldout_project or DOMAINS[args.domain].heldout_project


if __name__ == "__main__":
    main()
