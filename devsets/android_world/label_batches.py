"""Labelling sheets for the AndroidWorld dev set: one text file per pair, in parts.

Each sheet shows the agent's goal, the action, the screen before it (context), the real
screen after it and the second screen judged against it (``SIMULATED``): a world model's
prediction, the screen before (a prediction that nothing changes) or a second recording of
the same state. The kinds look alike on the sheet and nothing of fidelity's verdict is
shown. ``LABELLING.md`` (the instructions) is copied beside the sheets. Labellers answer
in ``labels/androidworld-a.jsonl`` / ``labels/androidworld-b.jsonl``.

    python devsets/android_world/label_batches.py --out /tmp/androidworld-label [--parts 2]
        [--unlabelled] [--kinds unchanged recapture]
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: devsets/

from devsets.android_world.load import HERE, KINDS, Pair, load_pairs


def sheet(pair: Pair) -> str:
    """The sheet of *pair*: goal, action, before screen, real and second screens."""
    action = pair.action.render() if pair.action is not None else "(not recorded)"
    return (
        f"TASK: {pair.id}\n"
        f"AGENT'S GOAL (context): {pair.goal}\n"
        f"ACTION:\n{action}\n\n"
        f"===== SCREEN BEFORE THE ACTION (context) =====\n{pair.before}\n"
        f"===== END BEFORE =====\n\n"
        f"===== REAL =====\n{pair.real.text}\n===== END REAL =====\n\n"
        f"===== SIMULATED =====\n{pair.sim.text}\n===== END SIMULATED =====\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--parts", type=int, default=2, help="folders part1..N (sheets dealt out)")
    parser.add_argument("--unlabelled", action="store_true", help="only pairs nobody labelled yet")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    args = parser.parse_args()
    pairs = [
        p
        for p in load_pairs(labelled_only=False)
        if p.kind in args.kinds and not (args.unlabelled and p.labels)
    ]
    pairs.sort(key=lambda p: p.id)
    for number, pair in enumerate(pairs):
        folder = args.out / f"part{number % args.parts + 1}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{pair.id}.txt").write_text(sheet(pair), encoding="utf-8")
    args.out.mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "LABELLING.md", args.out / "LABELLING.md")
    print(f"{len(pairs)} sheets in {args.out} ({args.parts} parts), instructions LABELLING.md")


if __name__ == "__main__":
    main()
