"""Shared by calibrate.py and compare_quality.py: the development set from real replays.

Training pairs come from two real bubblewrap replays of the bundled terminal
suite (the logstats project). The held-out split is, by default, a different
project: two real replays of ``benchmarks/compare_heldout/suite.jsonl``
(shelfctl, a bash inventory tool with its own files, commands and history), so
no held-out trajectory, file name or output is a near-copy of training data.
``--split trajectory`` keeps the older split (30% of the bundled suite's
trajectories, by a stable hash).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from fidelity.batch import replay_suite
from fidelity.compare.calibration.devset import Pair
from fidelity.compare.calibration.fit import load_pairs, split
from fidelity.resources import default_suite

HELD_OUT_SUITE = Path(__file__).resolve().parent / "compare_heldout" / "suite.jsonl"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both scripts share."""
    parser.add_argument("--seed", type=int, default=7, help="corruption and split seed")
    parser.add_argument(
        "--replays",
        nargs=2,
        metavar=("FIRST", "SECOND"),
        help="two real replays of the training suite (default: replay it twice now)",
    )
    parser.add_argument("--suite", default=None, help="training suite (default: terminal)")
    parser.add_argument(
        "--heldout-replays",
        nargs=2,
        metavar=("FIRST", "SECOND"),
        help="two real replays of the held-out suite (default: replay it twice now)",
    )
    parser.add_argument("--heldout-suite", default=str(HELD_OUT_SUITE))
    parser.add_argument(
        "--split",
        choices=("project", "trajectory"),
        default="project",
        help="hold out another project (default) or 30%% of the training suite's trajectories",
    )


def dev_split(args: argparse.Namespace) -> tuple[list[Pair], list[Pair]]:
    """``(train, held-out)`` pairs as ``--split`` says."""
    train = suite_pairs(args.suite or default_suite("terminal"), args.replays, args.seed)
    if args.split == "trajectory":
        return split(train, args.seed)
    held = suite_pairs(args.heldout_suite, args.heldout_replays, args.seed)
    return train, held


def suite_pairs(suite: str | Path, replays: list[str] | None, seed: int) -> list[Pair]:
    """The labeled pairs of *suite*, replaying it twice in bubblewrap when no replays are given."""
    if replays:
        return load_pairs(replays[0], replays[1], seed)
    with tempfile.TemporaryDirectory(prefix="fidelity-devset-") as tmp:
        paths = [Path(tmp) / f"replay{i}.jsonl" for i in (1, 2)]
        for path in paths:
            replay_suite(suite, path, concurrency=4)
        return load_pairs(paths[0], paths[1], seed)
