"""Shared by calibrate.py and compare_quality.py: the development set from real replays.

``--domain terminal`` (default): training pairs come from two real bubblewrap
replays of the bundled terminal suite (the logstats project). The held-out
split is, by default, a different project: two real replays of
``benchmarks/compare_heldout/suite.jsonl`` (shelfctl, a bash inventory tool
with its own files, commands and history), so no held-out trajectory, file
name or output is a near-copy of training data.

``--domain web`` / ``--domain swe``: two real replays of
``suites/web/suite.jsonl`` (Chromium) or ``suites/swe/suite.jsonl``
(Docker); the held-out split is a whole site or project (``--heldout-project``,
default datasette for web and idna for swe), trained on the others. Faithful
pairs are the two replays as they ran, volatile pairs the second one with
volatile content varied (web: element ids renumbered; swe: test durations,
hex ids, addresses, temp paths), drifted pairs the domain's corruptions.

``--split trajectory`` holds out 30% of the trajectories by a stable hash
instead. ``--cache DIR`` keeps the replays (``DIR/<domain>1.jsonl``,
``DIR/<domain>2.jsonl``) and reuses them when present.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the dev-set builders

from devsets.calibration.devset import CORRUPTIONS, Corruption, Pair, Volatile
from devsets.calibration.devset_swe import SWE_CORRUPTIONS
from devsets.calibration.devset_swe import vary_volatile as swe_volatile
from devsets.calibration.devset_web import WEB_CORRUPTIONS
from devsets.calibration.devset_web import vary_volatile as web_volatile
from devsets.calibration.fit import load_pairs, split
from fidelity.batch import replay_suite
from fidelity.formats.jsonl import read_trajectories
from fidelity.resources import default_suite

ROOT = Path(__file__).resolve().parent.parent
HELD_OUT_SUITE = Path(__file__).resolve().parent / "compare_heldout" / "suite.jsonl"


@dataclass(frozen=True)
class DevDomain:
    """How one domain's development set is made."""

    suite: Path
    corruptions: Mapping[str, Corruption]
    volatile: Volatile | None
    heldout_project: str | None


DOMAINS = {
    "terminal": DevDomain(Path(default_suite("terminal")), CORRUPTIONS, None, None),
    "web": DevDomain(ROOT / "suites/web/suite.jsonl", WEB_CORRUPTIONS, web_volatile, "datasette"),
    "swe": DevDomain(ROOT / "suites/swe/suite.jsonl", SWE_CORRUPTIONS, swe_volatile, "idna"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options both scripts share."""
    parser.add_argument("--domain", choices=sorted(DOMAINS), default="terminal")
    parser.add_argument("--seed", type=int, default=7, help="corruption and split seed")
    parser.add_argument(
        "--replays",
        nargs=2,
        metavar=("FIRST", "SECOND"),
        help="two real replays of the training suite (default: replay it twice now)",
    )
    parser.add_argument("--suite", default=None, help="training suite (default: the domain's)")
    parser.add_argument(
        "--heldout-replays",
        nargs=2,
        metavar=("FIRST", "SECOND"),
        help="terminal: two real replays of the held-out suite (default: replay it twice now)",
    )
    parser.add_argument("--heldout-suite", default=str(HELD_OUT_SUITE))
    parser.add_argument(
        "--heldout-project",
        default=None,
        help="web/swe: the site or project held out (default: datasette / idna)",
    )
    parser.add_argument(
        "--split",
        choices=("project", "trajectory"),
        default="project",
        help="hold out another project (default) or 30%% of the training suite's trajectories",
    )
    parser.add_argument("--cache", type=Path, default=None, help="keep and reuse replays here")


def dev_split(args: argparse.Namespace) -> tuple[list[Pair], list[Pair]]:
    """``(train, held-out)`` pairs as ``--domain`` and ``--split`` say."""
    domain = DOMAINS[args.domain]
    suite = args.suite or domain.suite
    replays = args.replays or cached_replays(suite, args.cache, args.domain)
    train = suite_pairs(suite, replays, args.seed, domain)
    if args.split == "trajectory":
        return split(train, args.seed)
    if domain.heldout_project is None:
        held = suite_pairs(args.heldout_suite, args.heldout_replays, args.seed, domain)
        return train, held
    project = args.heldout_project or domain.heldout_project
    ids = {t.id for t in read_trajectories(Path(replays[0])) if t.env.project == project}
    if not ids:
        raise SystemExit(f"no trajectory of project {project!r} in {replays[0]}")
    return [p for p in train if p.trajectory_id not in ids], [
        p for p in train if p.trajectory_id in ids
    ]


def cached_replays(suite: str | Path, cache: Path | None, name: str) -> list[str] | None:
    """Two replays of *suite* kept in *cache* (replayed now when missing), or None without one."""
    if cache is None:
        return None
    cache.mkdir(parents=True, exist_ok=True)
    paths = [cache / f"{name}{i}.jsonl" for i in (1, 2)]
    for path in paths:
        if not path.is_file():
            replay_suite(suite, path, concurrency=2)
    return [str(p) for p in paths]


def suite_pairs(
    suite: str | Path, replays: list[str] | None, seed: int, domain: DevDomain
) -> list[Pair]:
    """The labeled pairs of *suite*, replaying it twice in its real sandbox when no replays are given."""
    if replays:
        return load_pairs(replays[0], replays[1], seed, domain.corruptions, domain.volatile)
    with tempfile.TemporaryDirectory(prefix="fidelity-devset-") as tmp:
        paths = [Path(tmp) / f"replay{i}.jsonl" for i in (1, 2)]
        for path in paths:
            replay_suite(suite, path, concurrency=4)
        return load_pairs(paths[0], paths[1], seed, domain.corruptions, domain.volatile)
