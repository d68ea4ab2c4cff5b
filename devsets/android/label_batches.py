"""Labelling sheets for the android dev set: one text file per step.

Each sheet shows the action, the screen before it (context), the real screen
after it and a second one: a world model's prediction (transitions with a
prediction in ``predictions/``) or a second real recording of the same screen
(volatile pairs). Both kinds look alike and nothing of fidelity's verdict is
shown. Labellers answer in ``labels/android-a.jsonl`` / ``labels/android-b.jsonl``.

    python devsets/android/label_batches.py --out /tmp/android-label
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: devsets/

from devsets.android.load import AndroidPair, load_pairs


def sheet(pair: AndroidPair) -> str:
    """The sheet of *pair*: action, before screen, real and simulated screens."""
    action = pair.action.render() if pair.action is not None else "(not recorded)"
    before = pair.before or "(not recorded)"
    return (
        f"TASK: {pair.id}\n"
        f"ACTION:\n{action}\n\n"
        f"===== SCREEN BEFORE THE ACTION (context) =====\n{before}\n"
        f"===== END BEFORE =====\n\n"
        f"===== REAL =====\n{pair.real.text}\n===== END REAL =====\n\n"
        f"===== SIMULATED =====\n{pair.sim.text}\n===== END SIMULATED =====\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = load_pairs(labelled_only=False)
    for pair in pairs:
        (args.out / f"{pair.id}.txt").write_text(sheet(pair), encoding="utf-8")
    print(f"{len(pairs)} sheets in {args.out}")


if __name__ == "__main__":
    main()
