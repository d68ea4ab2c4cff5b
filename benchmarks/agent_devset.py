"""Drift verdicts on public agent runs nobody here wrote, held out by source repository.

Reads the real mini-swe-agent runs (SWE-bench repositories) and SWE-agent CTF
demonstrations from ``../shared/agent-trajectories`` at run time (see
:mod:`devsets.calibration.devset_agents`), builds faithful,
second-run and corrupted pairs, scores them once with the domain's
uncalibrated comparator (the features) and then, for every source group
(repository or CTF category), fits the monotone calibration on the other
groups and scores the held-out one. Printed next to exact match, a difflib
line ratio and rapidfuzz's ratio, whose thresholds are *oracle* ones (the best
F1 on the held-out pairs themselves, an upper bound for them):

- drift precision, recall and F1 over all held-out pairs;
- false alarms on second-run-only pairs and on untouched copies;
- invented-entity recall (the injected entity named among the hallucinations)
  and the share of faithful (untouched or second-run) steps with any
  hallucination reported; recall per corruption kind.

``--write`` then fits on every group and writes ``fidelity/compare/calibration/<domain>.json``.

    python benchmarks/agent_devset.py [--domain swe|terminal] [--seed 7] [--root DIR]
        [--runs N] [--write]
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # devsets/: the dev-set builders

from compare_quality import detected, injected_unshown
from rapidfuzz import fuzz

from devsets.calibration.devset_agents import SHARED, GroupedPair, agent_pairs, load_runs
from devsets.calibration.fit import (
    MAX_FALSE_ALARMS,
    UNCALIBRATED,
    Scored,
    f1_score,
    fit_calibration,
    sweep,
)
from fidelity.compare.calibration import Calibration, comparison_vector
from fidelity.compare.terminal import hard_mismatches

OUT = Path(__file__).resolve().parent.parent / "fidelity/compare/calibration"


@dataclass(frozen=True)
class Row:
    """One pair with what the uncalibrated comparator found."""

    item: GroupedPair
    scored: Scored
    hard: bool


def score(items: Sequence[GroupedPair], domain: str) -> list[Row]:
    """Features, hallucinations and hard mismatches of every pair."""
    comparator = UNCALIBRATED[domain]()
    rows = []
    for item in items:
        p = item.pair
        c = comparator.compare(p.real, p.sim, p.context)
        hard = bool(hard_mismatches(p.real, p.sim)) or c.metrics.get("tests_flipped", 0.0) > 0
        vector = comparison_vector(domain, c)
        rows.append(Row(item, Scored(p, vector, c.hallucinations), hard))
    return rows


def cross_validate(
    rows: Sequence[Row], domain: str, seed: int, max_false_alarms: float = MAX_FALSE_ALARMS
) -> list[bool]:
    """Held-out verdicts: each group scored by a calibration fitted on the other groups."""
    groups = sorted({r.item.group for r in rows})
    if len(groups) < 2:
        raise SystemExit(f"holding out by source needs two groups or more, got {groups}")
    flagged = [False] * len(rows)
    for group in groups:
        train = [r.scored for r in rows if r.item.group != group]
        calibration = fit_calibration(train, seed, domain, max_false_alarms)
        for i, r in enumerate(rows):
            if r.item.group == group:
                flagged[i] = verdict(calibration, r)
    return flagged


def verdict(calibration: Calibration, row: Row) -> bool:
    """The calibrated comparator's decision: a hard mismatch or the probability over the cutoff."""
    return row.hard or calibration.probability(row.scored.vector) >= calibration.cutoff


def difflib_gap(row: Row) -> float:
    real, sim = row.item.pair.real.text.split("\n"), row.item.pair.sim.text.split("\n")
    return 1.0 - difflib.SequenceMatcher(None, real, sim, autojunk=False).ratio()


def rapidfuzz_gap(row: Row) -> float:
    return 1.0 - fuzz.ratio(row.item.pair.real.text, row.item.pair.sim.text) / 100.0


def exact(row: Row) -> float:
    p = row.item.pair
    return float(p.real.text != p.sim.text or p.real.exit_code != p.sim.exit_code)


def oracle(values: Sequence[float], labels: Sequence[int]) -> list[bool]:
    """Flags at the threshold with the best F1 on these very pairs (an upper bound)."""
    best = max(sweep(values, labels), key=lambda c: c[1])[0]
    return [v >= best for v in values]


def line(
    name: str,
    flagged: Sequence[bool],
    rows: Sequence[Row],
    alarm_kinds: tuple[str, str] = ("second_run", "faithful"),
    indent: str = "",
) -> str:
    """Precision, recall, F1 and the false alarms on pairs of each of *alarm_kinds*."""
    labels = [int(r.item.pair.drift) for r in rows]
    tp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and y)
    fp = sum(1 for f, y in zip(flagged, labels, strict=True) if f and not y)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / max(1, sum(labels))

    def alarms(kind: str) -> str:
        marks = [f for f, r in zip(flagged, rows, strict=True) if r.item.pair.kind == kind]
        return f"{sum(marks) / max(1, len(marks)):>10.2%}"

    return (
        f"{indent}{name:<26} {precision:>9.4f} {recall:>7.4f} {f1_score(flagged, labels):>7.4f} "
        + " ".join(alarms(kind) for kind in alarm_kinds)
    )


def entity_figures(rows: Sequence[Row], indent: str = "") -> str:
    """Invented-entity recall and hallucinations reported on faithful steps."""
    targets = [r for r in rows if injected_unshown(r.item.pair)]
    found = sum(detected(r.item.pair.injected or "", r.scored.hallucinations) for r in targets)
    faithful = [r for r in rows if not r.item.pair.drift]
    false = sum(bool(r.scored.hallucinations) for r in faithful)
    return (
        f"{indent}invented-entity recall {found / max(1, len(targets)):.4f} "
        f"({found}/{len(targets)}); "
        f"hallucinations on faithful steps {false / max(1, len(faithful)):.2%} "
        f"({false}/{len(faithful)})"
    )


def flagged_per_kind(flagged: Sequence[bool], rows: Sequence[Row]) -> str:
    """How many pairs of each kind (faithful, second run, each corruption) were flagged."""
    per_kind: dict[str, list[bool]] = defaultdict(list)
    for f, r in zip(flagged, rows, strict=True):
        per_kind[r.item.pair.kind].append(f)
    return "flagged per kind: " + ", ".join(
        f"{k} {sum(v)}/{len(v)}" for k, v in sorted(per_kind.items())
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=("swe", "terminal"), default="swe")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--root", type=Path, default=SHARED, help="the agent-trajectories folder")
    parser.add_argument("--runs", type=int, default=0, help="use only the first N runs (0: all)")
    parser.add_argument("--write", action="store_true", help="fit on all groups and write it")
    args = parser.parse_args()
    runs = load_runs(args.root)
    if args.domain == "swe":
        runs = [r for r in runs if not r.group.startswith("ctf-")]
    if args.runs:
        runs = runs[: args.runs]
    if not runs:
        raise SystemExit(f"no agent runs under {args.root}")
    items = list(agent_pairs(runs, args.seed))
    started = time.perf_counter()
    rows = score(items, args.domain)
    seconds = time.perf_counter() - started
    groups = sorted({r.item.group for r in rows})
    print(
        f"{args.domain}: {len(runs)} runs, {len(groups)} groups ({', '.join(groups)}); "
        f"{len(rows)} pairs ({sum(r.item.pair.drift for r in rows)} drifted), "
        f"scored in {seconds:.1f}s"
    )
    flagged = cross_validate(rows, args.domain, args.seed)
    labels = [int(r.item.pair.drift) for r in rows]
    print("held out by group (leave one group out); baselines at an oracle threshold")
    print(
        f"{'method':<26} {'precision':>9} {'recall':>7} {'F1':>7} {'2nd-run FA':>10} "
        f"{'copy FA':>10}"
    )
    print(line("fidelity (monotone, CV)", flagged, rows))
    print(line("exact match", [exact(r) > 0 for r in rows], rows))
    baselines: list[tuple[str, Callable[[Row], float]]] = [
        ("difflib line ratio", difflib_gap),
        ("rapidfuzz ratio", rapidfuzz_gap),
    ]
    for name, scorer in baselines:
        print(line(name + " (oracle)", oracle([scorer(r) for r in rows], labels), rows))
    print(entity_figures(rows))
    print(flagged_per_kind(flagged, rows))
    if args.write:
        write(rows, args, f1_score(flagged, labels))


def write(rows: Sequence[Row], args: argparse.Namespace, held_out_f1: float) -> None:
    """Fit on every group and write the domain's calibration file."""
    calibration = fit_calibration([r.scored for r in rows], args.seed, args.domain)
    fit = {
        **calibration.fit,
        "data": "public agent runs (../shared/agent-trajectories)",
        "split": "leave one source repository out",
        "held_out_f1": round(held_out_f1, 4),
    }
    calibration = calibration.model_copy(update={"fit": fit})
    out = OUT / f"{args.domain}.json"
    out.write_text(json.dumps(calibration.model_dump(), indent=2) + "\n")
    print(
        f"wrote {out}: "
        + ", ".join(
            f"{n} {c:+.3f}" for n, c in zip(calibration.features, calibration.coef, strict=True)
        )
    )


if __name__ == "__main__":
    main()
