"""The android comparator on AndroidWorld screens with a status bar (``devsets/android_world``).

The set: screens of public M3A agent runs on an AndroidWorld emulator, read at run time
from ``../shared/android-screens`` (status bar with clock, signal, battery and a
notification icon; no package names), paired three ways (see
:mod:`devsets.android_world.load`): a world model's prediction, the screen before the
action (a prediction that nothing changes), and the same state recorded twice. Two
labellers label every pair against ``../shared/RUBRIC.md``. This script prints:

- the labellers' agreement (three-way label and drift/no-drift, Cohen's kappa);
- per app held out (``calendar``, ``audio``, ``chrome``) and over all apps: drift
  precision, recall, F1 and false alarms on pairs labelled identical or volatile, for
  fidelity's android comparator (fixed threshold: nothing is fitted on this set, so every
  app is held out of it) next to exact match, exact match with the ends stripped, and
  difflib's and rapidfuzz's ratios with their threshold fitted on the other apps (held out
  like fidelity) and, for reference, at their *oracle* threshold (the best F1 on the scored
  pairs themselves: an upper bound for them);
- false alarms per kind (a second recording of the same state is what a second real run
  gives);
- invented-content recall at the labellers' granularity and the share of faithful pairs
  with any hallucination reported.

Without labels it says so and prints, per kind, how many pairs fidelity flags (no figure:
nothing to measure them against).

    python benchmarks/android_world_devset.py [--kinds predicted unchanged recapture]
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_devset import oracle
from wm_devset import (
    agreement_line,
    difflib_gap_texts,
    named,
    precision_recall_f1,
    rapidfuzz_gap_texts,
)

from devsets.android_world.load import KINDS, Pair, load_pairs, load_records
from devsets.calibration.fit import sweep
from fidelity.compare.android import AndroidComparator
from fidelity.compare.base import CompareContext
from fidelity.model import AndroidAction


@dataclass(frozen=True)
class Row:
    """A labelled pair and fidelity's verdict on it."""

    pair: Pair
    drift: bool
    flagged: bool
    hallucinations: list[str]


def compared(pairs: Sequence[Pair]) -> list[tuple[Pair, bool, list[str]]]:
    """Each pair compared by the android comparator as an audit compares it."""
    comparator = AndroidComparator()
    out = []
    for p in pairs:
        context = CompareContext(action=p.action or AndroidAction(action_type="wait"))
        c = comparator.compare(p.real, p.sim, context)
        out.append((p, c.drift, c.hallucinations))
    return out


def threshold_from(values: Sequence[float], labels: Sequence[int]) -> float:
    """The cutoff with the best F1 on *values* (flag ``value >= cutoff``)."""
    if not values:
        return 0.5
    return max(sweep(values, labels), key=lambda c: c[1])[0]


def verdict_line(name: str, flagged: Sequence[bool], rows: Sequence[Row]) -> str:
    """Precision, recall, F1 and false alarms on the identical and volatile pairs."""
    precision, recall, f1 = precision_recall_f1(flagged, [r.drift for r in rows])
    quiet = [f for f, r in zip(flagged, rows, strict=True) if not r.drift]
    return (
        f"    {name:<42} {precision:>9.3f} {recall:>7.3f} {f1:>7.3f} "
        f"{sum(quiet) / max(1, len(quiet)):>8.1%} ({sum(quiet)}/{len(quiet)})"
    )


def baseline_flags(rows: Sequence[Row], held: Sequence[int]) -> dict[str, list[bool]]:
    """The naive ways' flags on the *held* rows; the fuzzy ones with thresholds fitted on
    the other rows (held out by app) and at their oracle on the held rows."""
    texts = [(rows[i].pair.real.text, rows[i].pair.sim.text) for i in held]
    labels = [int(rows[i].drift) for i in held]
    others = [i for i in range(len(rows)) if i not in set(held)]
    flags: dict[str, list[bool]] = {
        "exact match": [real != sim for real, sim in texts],
        "exact match, ends stripped": [real.strip() != sim.strip() for real, sim in texts],
    }
    for name, gap in (
        ("difflib line ratio", difflib_gap_texts),
        ("rapidfuzz ratio", rapidfuzz_gap_texts),
    ):
        values = [gap(real, sim) for real, sim in texts]
        if others:
            fitted = threshold_from(
                [gap(rows[i].pair.real.text, rows[i].pair.sim.text) for i in others],
                [int(rows[i].drift) for i in others],
            )
            flags[f"{name} (fitted on other apps)"] = [v >= fitted for v in values]
        flags[f"{name} (oracle)"] = oracle(values, labels)
    return flags


def block(title: str, rows: Sequence[Row], held: Sequence[int]) -> list[str]:
    """The verdict lines of fidelity and the baselines on the *held* rows."""
    mine = [rows[i] for i in held]
    counts = Counter(r.pair.label for r in mine)
    lines = [f"  {title}: {len(mine)} pairs ({dict(counts)})"]
    lines.append(f"    {'method':<42} {'precision':>9} {'recall':>7} {'F1':>7} false alarms")
    lines.append(verdict_line("fidelity (fixed threshold)", [r.flagged for r in mine], mine))
    for name, flags in baseline_flags(rows, held).items():
        lines.append(verdict_line(name, flags, mine))
    return lines


def entity_lines(rows: Sequence[Row]) -> list[str]:
    """Invented-content recall and false hallucinations on faithful pairs."""
    wanted = [(h, r) for r in rows if r.drift for h in r.pair.hallucinations()]
    found = sum(named(h, r.hallucinations) for h, r in wanted)
    faithful = [r for r in rows if not r.drift]
    false = sum(bool(r.hallucinations) for r in faithful)
    return [
        f"  invented-content recall {found / max(1, len(wanted)):.3f} ({found}/{len(wanted)})",
        f"  hallucinations reported on faithful pairs {false / max(1, len(faithful)):.1%} "
        f"({false}/{len(faithful)})",
    ]


def unlabelled(kinds: Sequence[str]) -> None:
    """What fidelity flags per kind, for a set nobody has labelled yet (no figure)."""
    pairs = [p for p in load_pairs(labelled_only=False) if p.kind in kinds]
    records = Counter(p.kind for p in load_records())
    print(f"devsets/android_world holds no labelled pair yet (records: {dict(records)}).")
    print("Unlabelled: fidelity's flags per kind and app (nothing to measure them against):")
    flagged = Counter((p.kind, p.group, drift) for p, drift, _ in compared(pairs))
    for kind, group in sorted({(k, g) for k, g, _ in flagged}):
        print(
            f"  {kind:<10} {group:<9} flagged {flagged[(kind, group, True)]:>3} "
            f"of {flagged[(kind, group, True)] + flagged[(kind, group, False)]}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = parser.parse_args()
    pairs = [p for p in load_pairs() if p.kind in args.kinds]
    if not pairs:
        unlabelled(args.kinds)
        return
    both = [p for p in pairs if p.label_a is not None and p.label_b is not None]
    a = [p.label_a.label for p in both if p.label_a is not None]
    b = [p.label_b.label for p in both if p.label_b is not None]
    print(agreement_line(a, b))
    rows = [Row(p, p.label == "drift", flagged, h) for p, flagged, h in compared(pairs)]
    print(f"androidworld: {len(rows)} pairs ({dict(Counter(r.pair.kind for r in rows))})")
    groups = sorted({r.pair.group for r in rows})
    for group in groups:
        held = [i for i, r in enumerate(rows) if r.pair.group == group]
        print("\n".join(block(f"held out: {group}", rows, held)))
    print("\n".join(block("all apps", rows, list(range(len(rows))))))
    print("  false alarms per kind (pairs labelled identical or volatile):")
    for kind in KINDS:
        quiet = [r for r in rows if r.pair.kind == kind and not r.drift]
        if quiet:
            alarms = sum(r.flagged for r in quiet)
            print(f"    {kind:<10} {alarms}/{len(quiet)}")
    for text in entity_lines(rows):
        print(text)
    errors = [r.pair.id for r in rows if r.flagged != r.drift]
    print(f"  wrong verdicts: {', '.join(errors) if errors else 'none'}")


if __name__ == "__main__":
    main()
