"""Web drift verdicts held out by site: real Chromium replays of every bundled site, leave one out.

Replays ``suites/web/suite.jsonl`` twice for real (Chromium against each
site served on loopback: the Lantern library, the Valgrind and Python manuals,
Datasette, the Django admin, sqlite-web), or reads two replays given with
``--replays`` or kept in ``--cache``. Pairs (see
:mod:`devsets.calibration.devset_web`): the second replay as it ran
(``faithful``: what differs between two real runs), the second replay with
every element id renumbered (``volatile``: the same page reached another way),
and seeded world-model corruptions of it (invented elements, renamed labels,
dropped subtrees, changed values, wrong location, stale page, flipped
checkboxes). Every pair is scored once by the uncalibrated web comparator (the
features); then, for every site, the monotone calibration is fitted on the
other sites and scores the held-out one. Printed per site and overall, next to
exact match, a difflib line ratio and rapidfuzz's ratio at *oracle* thresholds
(the best F1 on the held-out pairs themselves, an upper bound for them):
precision, recall and F1 of drift, false alarms on second-run and on
renumbered pairs; invented-entity recall and the share of faithful steps with
any hallucination reported.

``--write`` then fits on every site and writes ``fidelity/compare/calibration/web.json``.

    python benchmarks/web_devset.py [--seed 7] [--cache DIR] [--replays A B] [--write]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the dev-set builders

from agent_devset import (
    cross_validate,
    difflib_gap,
    entity_figures,
    exact,
    flagged_per_kind,
    line,
    oracle,
    rapidfuzz_gap,
)
from compare_devset import DOMAINS, cached_replays

from devsets.calibration.devset_agents import GroupedPair
from devsets.calibration.fit import (
    MAX_FALSE_ALARMS,
    Scored,
    f1_score,
    fit_calibration,
    load_pairs,
)
from fidelity.batch import replay_suite
from fidelity.compare.calibration import Calibration, comparison_vector
from fidelity.compare.web import WebComparator
from fidelity.formats.jsonl import read_trajectories

from agent_devset import Row  # isort: skip

OUT = Path(__file__).resolve().parent.parent / "fidelity/compare/calibration/web.json"
SUITE = DOMAINS["web"].suite


def replays(args: argparse.Namespace, tmp: Path) -> list[str]:
    """Two real replays of the web suite: given, cached, or made now."""
    if args.replays:
        return list(args.replays)
    cached = cached_replays(SUITE, args.cache, "web")
    if cached:
        return cached
    paths = [tmp / f"web{i}.jsonl" for i in (1, 2)]
    for path in paths:
        replay_suite(SUITE, path, concurrency=2)
    return [str(p) for p in paths]


def grouped_pairs(first: str, second: str, seed: int) -> list[GroupedPair]:
    """The labeled pairs of two replays, each with its site (the trajectory's project)."""
    site = {t.id: t.env.project or "?" for t in read_trajectories(Path(first))}
    web = DOMAINS["web"]
    pairs = load_pairs(first, second, seed, web.corruptions, web.volatile)
    return [GroupedPair(site[p.trajectory_id], p) for p in pairs]


def score(items: Sequence[GroupedPair]) -> list[Row]:
    """Features and hallucinations of every pair under the uncalibrated web comparator."""
    comparator = WebComparator(calibrated=False)
    rows = []
    for item in items:
        p = item.pair
        c = comparator.compare(p.real, p.sim, p.context)
        rows.append(Row(item, Scored(p, comparison_vector("web", c), c.hallucinations), False))
    return rows


ALARM_KINDS = ("faithful", "volatile")
"""False alarms are counted on second-run pairs and on renumbered pages."""

BASELINES: list[tuple[str, Callable[[Row], float]]] = [
    ("difflib line ratio (oracle)", difflib_gap),
    ("rapidfuzz ratio (oracle)", rapidfuzz_gap),
]


def report(title: str, flagged: Sequence[bool], rows: Sequence[Row]) -> None:
    """The figures of one site (or all) for fidelity and the baselines."""
    labels = [int(r.item.pair.drift) for r in rows]
    copies = [r for r in rows if r.item.pair.kind == "faithful"]
    differ = sum(r.item.pair.real.text != r.item.pair.sim.text for r in copies)
    print(
        f"{title}: {len(rows)} pairs ({sum(labels)} drifted); {differ}/{len(copies)} steps "
        "differ as text between the two real replays"
    )
    print(line("fidelity (monotone, CV)", flagged, rows, ALARM_KINDS, "  "))
    print(line("exact match", [exact(r) > 0 for r in rows], rows, ALARM_KINDS, "  "))
    for name, scorer in BASELINES:
        print(line(name, oracle([scorer(r) for r in rows], labels), rows, ALARM_KINDS, "  "))
    print(entity_figures(rows, "  "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=7, help="corruption seed")
    parser.add_argument("--cache", type=Path, default=None, help="keep and reuse replays here")
    parser.add_argument("--replays", nargs=2, metavar=("FIRST", "SECOND"))
    parser.add_argument(
        "--max-false-alarms",
        type=float,
        default=MAX_FALSE_ALARMS,
        help="largest share of non-drifted training pairs the cutoff may flag",
    )
    parser.add_argument("--write", action="store_true", help="fit on all sites and write web.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fidelity-web-devset-") as tmp:
        started = time.perf_counter()
        first, second = replays(args, Path(tmp))
        replayed = time.perf_counter() - started
        items = grouped_pairs(first, second, args.seed)
    rows = score(items)
    sites = sorted({r.item.group for r in rows})
    print(
        f"web: {len(sites)} sites ({', '.join(sites)}); {len(rows)} pairs; replays ready in "
        f"{replayed:.0f}s; held out by site (leave one site out); baselines at an oracle "
        "threshold"
    )
    print(
        f"  {'method':<26} {'precision':>9} {'recall':>7} {'F1':>7} {'2nd-run FA':>10} "
        f"{'renum. FA':>10}"
    )
    flagged = cross_validate(rows, "web", args.seed, args.max_false_alarms)
    for site in sites:
        keep = [i for i, r in enumerate(rows) if r.item.group == site]
        report(f"held out {site}", [flagged[i] for i in keep], [rows[i] for i in keep])
    report("all sites", flagged, rows)
    print(flagged_per_kind(flagged, rows))
    labels = [int(r.item.pair.drift) for r in rows]
    if args.write:
        write(rows, args, f1_score(flagged, labels), len(sites))


def write(rows: Sequence[Row], args: argparse.Namespace, held_out_f1: float, sites: int) -> None:
    """Fit on every site and write ``web.json``."""
    calibration: Calibration = fit_calibration(
        [r.scored for r in rows], args.seed, "web", args.max_false_alarms
    )
    fit = {
        **calibration.fit,
        "data": f"two real Chromium replays of suites/web/suite.jsonl ({sites} sites)",
        "split": "leave one site out",
        "held_out_f1": round(held_out_f1, 4),
    }
    calibration = calibration.model_copy(update={"fit": fit})
    OUT.write_text(json.dumps(calibration.model_dump(), indent=2) + "\n")
    print(
        f"wrote {OUT}: "
        + ", ".join(
            f"{n} {c:+.3f}" for n, c in zip(calibration.features, calibration.coef, strict=True)
        )
        + f", intercept {calibration.intercept:+.3f}, cutoff {calibration.cutoff:.4f}"
    )


if __name__ == "__main__":
    main()
