"""Drift verdicts on real world-model predictions, held out by source (``devsets/wm``).

The dev set: LLM helpers acting as world models predicted steps of the public
agent runs (``../shared/agent-trajectories``) from fidelity's own prompts,
teacher-forced and open-loop, never seeing the real observation they predict;
two labellers labelled every step against ``../shared/RUBRIC.md`` (see
:mod:`devsets.wm.load`). This script prints:

- the labellers' agreement (three-way label and drift/no-drift, Cohen's kappa);
- per domain, held out by source (each repository or CTF category scored by a
  calibration fitted without it: on the public-run pairs of the other groups,
  and the dev set's own other groups): drift precision, recall, F1, false
  alarms on steps labelled identical or volatile; next to exact match, difflib's
  line ratio and rapidfuzz's ratio at their *oracle* thresholds (the best F1 on
  the held-out steps themselves, an upper bound for them);
- invented-content recall at the labellers' granularity (each listed
  hallucination named by a reported one: one contains the other, whitespace
  aside) and the share of faithful steps with any hallucination reported;
  the same for omissions.

    python benchmarks/wm_devset.py [--domain swe|terminal|all] [--seed 7] [--no-agent-pairs]
    python benchmarks/wm_devset.py --only shard7 shard8 shard9   # one round on its own
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import difflib

from agent_devset import oracle
from rapidfuzz import fuzz

from devsets.calibration.devset import Pair
from devsets.calibration.devset_agents import agent_pairs, load_runs
from devsets.calibration.fit import UNCALIBRATED, Scored, fit_calibration
from devsets.wm.load import WMPair, load_pairs, load_prediction_sources
from fidelity.compare.calibration import comparison_vector
from fidelity.compare.terminal import blank_lines_changed, hard_mismatches


@dataclass(frozen=True)
class Row:
    """A dev-set step scored by the uncalibrated comparator."""

    pair: WMPair
    scored: Scored
    hard: bool
    hallucinations: list[str]
    omissions: list[str]


def difflib_gap_texts(real: str, sim: str) -> float:
    """1 - difflib's ratio over the two texts' lines."""
    matcher = difflib.SequenceMatcher(None, real.split("\n"), sim.split("\n"), autojunk=False)
    return 1.0 - matcher.ratio()


def rapidfuzz_gap_texts(real: str, sim: str) -> float:
    """1 - rapidfuzz's ratio over the two texts."""
    return 1.0 - fuzz.ratio(real, sim) / 100.0


def baselines(
    texts: Sequence[tuple[str, str]], labels: Sequence[int]
) -> list[tuple[str, list[bool]]]:
    """The naive ways' drift flags on *texts* (real, sim): exact match, then difflib's line
    ratio and rapidfuzz's ratio at their oracle thresholds (the best F1 on *labels*)."""
    exact = [real != sim for real, sim in texts]
    diff = [difflib_gap_texts(real, sim) for real, sim in texts]
    fuzz = [rapidfuzz_gap_texts(real, sim) for real, sim in texts]
    return [
        ("exact match", exact),
        ("difflib line ratio (oracle)", oracle(diff, labels)),
        ("rapidfuzz ratio (oracle)", oracle(fuzz, labels)),
    ]


def kappa(a: Sequence[str], b: Sequence[str]) -> float:
    """Cohen's kappa of two labellings of the same items."""
    n = len(a)
    if n == 0:
        return float("nan")
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    ca, cb = Counter(a), Counter(b)
    expected = sum(ca[k] * cb[k] for k in set(ca) | set(cb)) / (n * n)
    return 1.0 if expected == 1 else (observed - expected) / (1 - expected)


def agreement(pairs: Sequence[WMPair]) -> str:
    """The two labellers' agreement on every doubly labelled step."""
    both = [p for p in pairs if len(p.labels) >= 2]
    a = [next(iter(p.labels.values())).label for p in both]
    b = [list(p.labels.values())[1].label for p in both]
    return agreement_line(a, b)


def agreement_line(a: Sequence[str], b: Sequence[str]) -> str:
    """Three-way and drift/no-drift agreement of two labellings of the same steps."""
    drift_a = ["drift" if x == "drift" else "no" for x in a]
    drift_b = ["drift" if x == "drift" else "no" for x in b]
    same = sum(x == y for x, y in zip(a, b, strict=True))
    same_drift = sum(x == y for x, y in zip(drift_a, drift_b, strict=True))
    return (
        f"labellers: {len(a)} steps labelled twice; three-way agreement {same}/{len(a)} "
        f"(kappa {kappa(a, b):.3f}); drift/no-drift {same_drift}/{len(a)} "
        f"(kappa {kappa(drift_a, drift_b):.3f})"
    )


def score(pairs: Sequence[WMPair], domain: str) -> list[Row]:
    comparator = UNCALIBRATED[domain]()
    rows = []
    for p in pairs:
        c = comparator.compare(p.real, p.sim, p.context)
        hard = (
            bool(hard_mismatches(p.real, p.sim) or blank_lines_changed(c.metrics))
            or c.metrics.get("tests_flipped", 0.0) > 0
        )
        pair = Pair(p.trajectory_id, p.depth, p.real, p.sim, p.context, p.drift, p.label)
        rows.append(
            Row(
                p,
                Scored(pair, comparison_vector(domain, c), c.hallucinations),
                hard,
                c.hallucinations,
                c.omissions,
            )
        )
    return rows


def agent_scored(domain: str, seed: int) -> list[tuple[str, Scored]]:
    """The public-run pairs (faithful, second run, corruptions) of *domain*, scored."""
    runs = [r for r in load_runs() if r.group.startswith("ctf-") == (domain == "terminal")]
    comparator = UNCALIBRATED[domain]()
    out = []
    for item in agent_pairs(runs, seed):
        p = item.pair
        c = comparator.compare(p.real, p.sim, p.context)
        out.append((item.group, Scored(p, comparison_vector(domain, c), c.hallucinations)))
    return out


def held_out(
    rows: Sequence[Row], extra: Sequence[tuple[str, Scored]], domain: str, seed: int
) -> list[bool]:
    flagged = [False] * len(rows)
    for group in sorted({r.pair.group for r in rows}):
        train = [s for g, s in extra if g != group] + [
            r.scored for r in rows if r.pair.group != group
        ]
        calibration = fit_calibration(train, seed, domain)
        for i, r in enumerate(rows):
            if r.pair.group == group:
                flagged[i] = (
                    r.hard or calibration.probability(r.scored.vector) >= calibration.cutoff
                )
    return flagged


def precision_recall_f1(
    flagged: Sequence[bool], labels: Sequence[bool]
) -> tuple[float, float, float]:
    """Drift precision, recall and F1 of *flagged* against *labels*."""
    tp = sum(f and y for f, y in zip(flagged, labels, strict=True))
    fp = sum(f and not y for f, y in zip(flagged, labels, strict=True))
    fn = sum(y and not f for f, y in zip(flagged, labels, strict=True))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def verdict_line(name: str, flagged: Sequence[bool], rows: Sequence[Row]) -> str:
    precision, recall, f1 = precision_recall_f1(flagged, [r.pair.drift for r in rows])
    quiet = [f for f, r in zip(flagged, rows, strict=True) if not r.pair.drift]
    return (
        f"  {name:<28} {precision:>9.4f} {recall:>7.4f} {f1:>7.4f} "
        f"{sum(quiet) / max(1, len(quiet)):>10.2%} ({sum(quiet)}/{len(quiet)})"
    )


def _norm(text: str) -> str:
    return " ".join(text.split())


def named(listed: str, reported: Sequence[str]) -> bool:
    """Whether a labeller's item is named by a reported entity (either contains the other)."""
    want = _norm(listed)
    if not want:
        return True
    for entity in reported:
        got = _norm(entity.split(":", 1)[1] if ":" in entity else entity)
        if got and (want in got or got in want):
            return True
    return False


def entity_lines(rows: Sequence[Row]) -> list[str]:
    drifted = [r for r in rows if r.pair.drift]
    wanted = [(h, r) for r in drifted for h in r.pair.hallucinations()]
    found = sum(named(h, r.hallucinations) for h, r in wanted)
    missed = [(o, r) for r in drifted for o in r.pair.omissions()]
    found_o = sum(named(o, r.omissions) for o, r in missed)
    faithful = [r for r in rows if not r.pair.drift]
    false = sum(bool(r.hallucinations) for r in faithful)
    return [
        f"  invented-content recall {found / max(1, len(wanted)):.4f} ({found}/{len(wanted)}); "
        f"omission recall {found_o / max(1, len(missed)):.4f} ({found_o}/{len(missed)})",
        f"  hallucinations reported on faithful steps {false / max(1, len(faithful)):.2%} "
        f"({false}/{len(faithful)})",
    ]


def report(
    domain: str, pairs: Sequence[WMPair], seed: int, with_agent: bool, only: set[str] | None
) -> None:
    all_rows = score(pairs, domain)
    extra = agent_scored(domain, seed) if with_agent else []
    all_flagged = held_out(all_rows, extra, domain, seed)
    kept = [i for i, r in enumerate(all_rows) if only is None or r.pair.task in only]
    rows, flagged = [all_rows[i] for i in kept], [all_flagged[i] for i in kept]
    labels = [int(r.pair.drift) for r in rows]
    counts = Counter(r.pair.label for r in rows)
    groups = sorted({r.pair.group for r in rows})
    modes = Counter(r.pair.mode for r in rows)
    print(
        f"{domain}: {len(rows)} steps ({dict(counts)}; {dict(modes)}), {len(groups)} source groups"
    )
    print(
        f"  {'method':<28} {'precision':>9} {'recall':>7} {'F1':>7} {'false alarms (identical+volatile)':>10}"
    )
    print(verdict_line("fidelity (held out by source)", flagged, rows))
    texts = [(r.pair.real.text, r.pair.sim.text) for r in rows]
    for name, baseline in baselines(texts, labels):
        print(verdict_line(name, baseline, rows))
    for text in entity_lines(rows):
        print(text)
    errors = [r.pair.task for r, f in zip(rows, flagged, strict=True) if f != r.pair.drift]
    print(f"  wrong verdicts: {', '.join(errors) if errors else 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=("swe", "terminal", "all"), default="all")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--no-agent-pairs",
        action="store_true",
        help="fit on the dev set's other groups only (not on the public-run pairs too)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="SHARD",
        help="report only the steps these prediction files answered (e.g. one round: "
        "shard7 shard8 shard9); every step still calibrates the others' groups",
    )
    args = parser.parse_args()
    pairs = load_pairs()
    if not pairs:
        raise SystemExit("devsets/wm holds no labelled predictions")
    only = answered_by(args.only) if args.only else None
    print(agreement([p for p in pairs if only is None or p.task in only]))
    for domain in ("swe", "terminal") if args.domain == "all" else (args.domain,):
        chosen = [p for p in pairs if p.domain == domain]
        if chosen:
            report(domain, chosen, args.seed, not args.no_agent_pairs, only)


def answered_by(shards: Sequence[str]) -> set[str]:
    """The tasks whose used answer comes from one of *shards* (prediction files' stems)."""
    return {task for task, stem in load_prediction_sources().items() if stem in shards}


if __name__ == "__main__":
    main()
