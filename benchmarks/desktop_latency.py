"""Per-step latency of the desktop backend: action, settle and final tree dump, against a dump alone.

    .nox/tests/bin/python benchmarks/desktop_latency.py [--steps 6]

For each quick-suite application (terminal, galculator, mousepad) it starts a
real desktop, runs ``--steps`` typing actions and reads the split of each step
(:class:`~fidelity.sandboxes.desktop.StepTiming`), then times ``--steps``
tree dumps on the settled screen: the floor any step pays (one read of the
tree; settling needs at least two). Prints medians in seconds and the ratio
of a whole step to the floor, measured in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from replay_cli import print_replay

from fidelity.model import CodeAction, EnvSpec
from fidelity.resources import default_suite
from fidelity.sandboxes.desktop import DesktopSandbox

ACTIONS = {
    "terminal": "pyautogui.typewrite('echo {i}\\n')",
    "galculator": "pyautogui.typewrite('{i}+1=')",
    "mousepad": "pyautogui.typewrite('line {i}\\n')",
}


def measure(project: str, steps: int) -> dict[str, float]:
    """Median seconds of action, settle, dump, whole step and a dump alone for *project*."""
    box = DesktopSandbox()
    try:
        started = time.monotonic()
        box.reset(EnvSpec(backend="desktop", project=project))
        start = time.monotonic() - started
        splits, wholes = [], []
        for i in range(steps):
            begun = time.monotonic()
            box.step(CodeAction(code=ACTIONS[project].format(i=i)))
            wholes.append(time.monotonic() - begun)
            splits.append(box.last_timing)
        floors = []
        for _ in range(steps):
            begun = time.monotonic()
            box._dump()
            floors.append(time.monotonic() - begun)
    finally:
        box.close()
    return {
        "start": start,
        "action": statistics.median(t.action for t in splits),
        "settle": statistics.median(t.settle for t in splits),
        "dump": statistics.median(t.dump for t in splits),
        "reads": statistics.median(t.reads for t in splits),
        "step": statistics.median(wholes),
        "floor": statistics.median(floors),
    }


def main() -> None:
    """Measure each application and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    print("app         start  action  settle  dump   reads  step   dump-alone  step/floor")
    for project in ACTIONS:
        m = measure(project, args.steps)
        print(
            f"{project:<11} {m['start']:5.2f}  {m['action']:6.2f}  {m['settle']:6.2f}  "
            f"{m['dump']:5.2f}  {m['reads']:5.1f}  {m['step']:5.2f}  {m['floor']:10.2f}  "
            f"{m['step'] / m['floor']:10.1f}"
        )
    print_replay(default_suite("os"))


if __name__ == "__main__":
    main()
