"""The android comparator's verdicts on real DroidBot screens (``devsets/android``).

The dev set: real screen transitions of public DroidBot recordings (apps run on
a real emulator, committed to GitHub), predicted by LLM helpers acting as world
models from fidelity's own prompts (teacher-forced: the screen before, then the
action), and real pairs of the same screen recorded a minute apart (a clock
changed); two labellers labelled every step against ``../shared/RUBRIC.md``
(see :mod:`devsets.android.load`). This script prints:

- the labellers' agreement (three-way label and drift/no-drift, Cohen's kappa);
- drift precision, recall, F1 and the false alarms on steps labelled identical
  or volatile, and on the volatile pairs alone, for fidelity's android comparator
  next to exact match and difflib's and rapidfuzz's ratios at their *oracle*
  thresholds (the best F1 on these very steps: an upper bound for them). The
  comparator has a fixed threshold and nothing is fitted on this set, so every
  source is held out; the F1 is also given per source;
- invented-content recall at the labellers' granularity (each listed
  hallucination named by a reported entity) and the share of faithful steps
  with any hallucination reported.

    python benchmarks/android_devset.py
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wm_devset import agreement_line, baselines, named, precision_recall_f1

from devsets.android.load import AndroidPair, load_pairs
from fidelity.compare.android import AndroidComparator
from fidelity.compare.base import CompareContext
from fidelity.trajectory import AndroidAction


@dataclass(frozen=True)
class Row:
    """A dev-set step and fidelity's verdict on it."""

    pair: AndroidPair
    drift: bool
    flagged: bool
    hallucinations: list[str]


def agreement(pairs: Sequence[AndroidPair]) -> str:
    """The two labellers' agreement on every doubly labelled step."""
    both = [(p.label_a.label, p.label_b.label) for p in pairs if p.label_a and p.label_b]
    return agreement_line([a for a, _ in both], [b for _, b in both])


def score(pairs: Sequence[AndroidPair]) -> list[Row]:
    """Each step compared by the android comparator, as an audit compares it."""
    comparator = AndroidComparator()
    rows = []
    for p in pairs:
        action = p.action or AndroidAction(action_type="wait")
        context = CompareContext(action=action, history=[], depth=1)
        c = comparator.compare(p.real, p.sim, context)
        rows.append(Row(p, p.label == "drift", c.drift, c.hallucinations))
    return rows


def verdict_line(name: str, flagged: Sequence[bool], rows: Sequence[Row]) -> str:
    """Precision, recall, F1, false alarms on quiet steps and on the volatile pairs."""
    precision, recall, f1 = precision_recall_f1(flagged, [r.drift for r in rows])
    quiet = [f for f, r in zip(flagged, rows, strict=True) if not r.drift]
    pairs = [f for f, r in zip(flagged, rows, strict=True) if r.pair.kind == "volatile"]
    return (
        f"  {name:<28} {precision:>9.4f} {recall:>7.4f} {f1:>7.4f} "
        f"{sum(quiet) / max(1, len(quiet)):>9.2%} ({sum(quiet)}/{len(quiet)}) "
        f"{sum(pairs) / max(1, len(pairs)):>9.2%} ({sum(pairs)}/{len(pairs)})"
    )


def f1(flagged: Sequence[bool], rows: Sequence[Row]) -> float:
    """Drift F1 of *flagged* against the labels of *rows*."""
    return precision_recall_f1(flagged, [r.drift for r in rows])[2]


def entity_lines(rows: Sequence[Row]) -> list[str]:
    """Invented-content recall and false hallucinations on faithful steps."""
    wanted = [(h, r) for r in rows if r.drift for h in r.pair.hallucinations()]
    found = sum(named(h, r.hallucinations) for h, r in wanted)
    faithful = [r for r in rows if not r.drift]
    false = sum(bool(r.hallucinations) for r in faithful)
    return [
        f"  invented-content recall {found / max(1, len(wanted)):.4f} ({found}/{len(wanted)})",
        f"  hallucinations reported on faithful steps {false / max(1, len(faithful)):.2%} "
        f"({false}/{len(faithful)})",
    ]


def per_source(flagged: Sequence[bool], rows: Sequence[Row]) -> str:
    """fidelity's F1 and exact match's, per source (app)."""
    parts = []
    for source in sorted({r.pair.source for r in rows}):
        at = [i for i, r in enumerate(rows) if r.pair.source == source]
        mine = [rows[i] for i in at]
        exact = [r.pair.real.text != r.pair.sim.text for r in mine]
        drifted = sum(r.drift for r in mine)
        parts.append(
            f"    {source.split(':', 1)[1]:<40} {len(mine):>3} steps, {drifted:>3} drift: "
            f"F1 {f1([flagged[i] for i in at], mine):.3f} (exact match {f1(exact, mine):.3f})"
        )
    return "\n".join(parts)


def main() -> None:
    pairs = load_pairs()
    if not pairs:
        raise SystemExit("devsets/android holds no labelled steps")
    print(agreement(pairs))
    rows = score(pairs)
    labels = [int(r.drift) for r in rows]
    counts = Counter(r.pair.label for r in rows)
    kinds = Counter(r.pair.kind for r in rows)
    sources = {r.pair.source for r in rows}
    print(f"android: {len(rows)} steps ({dict(counts)}; {dict(kinds)}), {len(sources)} sources")
    print(
        f"  {'method':<28} {'precision':>9} {'recall':>7} {'F1':>7} "
        f"{'false alarms (identical+volatile)':>9}  (volatile pairs)"
    )
    flagged = [r.flagged for r in rows]
    print(verdict_line("fidelity (fixed threshold)", flagged, rows))
    texts = [(r.pair.real.text, r.pair.sim.text) for r in rows]
    exact, *fuzzy = baselines(texts, labels)
    stripped = [real.strip() != sim.strip() for real, sim in texts]
    for name, baseline in [exact, ("exact match, ends stripped", stripped), *fuzzy]:
        print(verdict_line(name, baseline, rows))
    for text in entity_lines(rows):
        print(text)
    print("  per source:")
    print(per_source(flagged, rows))
    errors = [r.pair.id for r in rows if r.flagged != r.drift]
    print(f"  wrong verdicts: {', '.join(errors) if errors else 'none'}")


if __name__ == "__main__":
    main()
