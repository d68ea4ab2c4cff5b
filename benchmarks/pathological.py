"""Hostile observations at the observation cap: the terminal comparator's time, whole and half.

An untrusted dataset chooses its observations, so no text may make a step cost more than a
constant times its length. For each pattern, the comparator compares a text of the cap's
length with itself less its last character (a one-character drift: every rule and the entity
scan run on both sides), and one of half that length; linear work doubles (ratio about 2),
quadratic work quadruples (about 4). The naive way, difflib's ratio on the same pair, is
printed beside it.

    python benchmarks/pathological.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import difflib
import statistics
import time
from collections.abc import Callable

from fidelity.compare import CompareContext, TerminalComparator
from fidelity.defaults import OBSERVATION_CAP
from fidelity.trajectory import CommandAction, Observation

PATTERNS = ("a+", "a-", "a@", "a1", "a.", "Nov 20 ", "1,", "x/", "<A>/", "é+", "\x1b[1m")


def seconds(work: Callable[[str], Callable[[], object]], text: str, repeat: int) -> float:
    """The median wall time of *repeat* runs of ``work(text)``, each on a text of its own
    (its last characters numbered), so that no cache of an earlier run answers."""
    times = []
    for run in range(repeat):
        tag = f"#{run:03d}"
        call = work(text[: -len(tag)] + tag)
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the median")
    args = parser.parse_args()
    comparator = TerminalComparator()
    context = CompareContext(action=CommandAction(command="cat out.txt"))

    def compare(text: str) -> Callable[[], object]:
        real, sim = Observation(text=text), Observation(text=text[:-1] + "#")
        return lambda: comparator.compare(real, sim, context)

    def naive(text: str) -> Callable[[], object]:
        return lambda: difflib.SequenceMatcher(None, text, text[:-1] + "#").ratio()

    print(f"{'pattern':>10}  {'cap s':>8}  {'half s':>8}  {'ratio':>5}  {'difflib s':>9}")
    worst = 0.0
    for pattern in PATTERNS:
        whole = (pattern * (OBSERVATION_CAP // len(pattern) + 1))[:OBSERVATION_CAP]
        half = whole[: OBSERVATION_CAP // 2]
        compare("warm " + half)()  # the comparator's one-off set-up, outside the figures
        at_cap = seconds(compare, whole, args.repeat)
        at_half = seconds(compare, half, args.repeat)
        worst = max(worst, at_cap)
        baseline = seconds(naive, whole, 1)
        ratio = at_cap / at_half if at_half else float("nan")
        print(f"{pattern!r:>10}  {at_cap:8.4f}  {at_half:8.4f}  {ratio:5.1f}  {baseline:9.4f}")
    print(f"slowest step at the cap ({OBSERVATION_CAP:,} characters a side): {worst:.4f} s")


if __name__ == "__main__":
    main()
