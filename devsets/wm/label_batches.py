"""Labelling sheets for the world-model dev set: one text file per predicted step.

Each sheet shows the action, the earlier actions (context), the real
observation and the simulated one (as the audit parses it), and nothing of
fidelity's own verdict. Labellers answer in ``labels/<domain>-<labeller>.jsonl``.

    python devsets/wm/label_batches.py --out /tmp/wm-label [--unlabelled]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: devsets/

from devsets.wm.load import WMPair, load_pairs


def sheet(pair: WMPair) -> str:
    earlier = [s.action.render() for s in pair.context.history][-5:]
    context = "\n".join(f"  - {a[:300]}" for a in earlier) or "  (none: first step)"
    return (
        f"TASK: {pair.task}\n"
        f"EARLIER ACTIONS (last 5):\n{context}\n"
        f"ACTION:\n{pair.context.action.render()}\n\n"
        f"===== REAL (exit code: {pair.real.exit_code}) =====\n{pair.real.text}\n"
        f"===== END REAL =====\n\n"
        f"===== SIMULATED (exit code: {pair.sim.exit_code}) =====\n{pair.sim.text}\n"
        f"===== END SIMULATED =====\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--unlabelled", action="store_true", help="only steps nobody labelled yet")
    args = parser.parse_args()
    for pair in load_pairs(labelled_only=False):
        if args.unlabelled and pair.labels:
            continue
        folder = args.out / pair.domain
        folder.mkdir(parents=True, exist_ok=True)
        name = pair.task.replace("|", "_").replace("/", "_") + ".txt"
        (folder / name).write_text(sheet(pair), encoding="utf-8")


if __name__ == "__main__":
    main()
