"""Per-step latency of the desktop backend: action, settle and final tree dump, against a dump alone.

    .nox/tests/bin/python benchmarks/desktop_latency.py [--steps 6] [--apps terminal]
        [--settle-interval 0.2]

For each quick-suite application (terminal, galculator, mousepad) it starts a
real desktop, runs ``--steps`` typing actions and reads the split of each step
(:class:`~fidelity.sandboxes.desktop.StepTiming`), then times ``--steps``
tree dumps on the settled screen: the floor any step pays (one read of the
tree; settling needs at least two). Then, on the same desktop, the naive way:
the same actions each in a fresh sandboxed interpreter importing pyautogui
(what the backend did before its action runner, each paying pyautogui's
0.1 s pause after its last call), followed by the same settling. Prints
medians in seconds and the ratio of a whole step to the floor for both,
measured in the same run; ``--settle-interval 0.2`` gives the previous
default's settling.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from replay_cli import print_replay

from fidelity.resources import default_suite
from fidelity.sandboxes.desktop import DesktopConfig, DesktopSandbox
from fidelity.trajectory import CodeAction, EnvSpec

ACTIONS = {
    "terminal": "pyautogui.typewrite('echo {i}\\n')",
    "galculator": "pyautogui.typewrite('{i}+1=')",
    "mousepad": "pyautogui.typewrite('line {i}\\n')",
}
ONE_SHOT = (
    "import sys, time, pyautogui\n"
    "pyautogui.FAILSAFE = False\n"
    "exec(compile(sys.argv[1], '<action>', 'exec'), {'pyautogui': pyautogui, 'time': time})\n"
)
"""The per-action interpreter the backend started before it had an action runner."""


def measure(project: str, steps: int, config: DesktopConfig) -> dict[str, float]:
    """Median seconds of action, settle, dump, whole step, a dump alone, and the naive step."""
    box = DesktopSandbox(config)
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
        naive_actions, naive_steps = [], []
        shown = box._shown
        for i in range(steps):
            code = ACTIONS[project].format(i=steps + i)
            begun = time.monotonic()
            subprocess.run(box.action_argv(["-c", ONE_SHOT, code]), capture_output=True, check=True)
            naive_actions.append(time.monotonic() - begun)
            shown, _ = box._settled_tree(shown)
            naive_steps.append(time.monotonic() - begun)
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
        "naive_action": statistics.median(naive_actions),
        "naive_step": statistics.median(naive_steps),
    }


def main() -> None:
    """Measure each application and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--apps", nargs="+", choices=sorted(ACTIONS), default=list(ACTIONS))
    parser.add_argument("--settle-interval", type=float, default=DesktopConfig().settle_interval)
    parser.add_argument("--no-replay", action="store_true", help="skip the end-to-end replay")
    args = parser.parse_args()
    config = DesktopConfig(settle_interval=args.settle_interval)
    print(f"settle interval {config.settle_interval:g} s; medians of {args.steps} steps, seconds")
    print(
        "app         start  action  settle  dump   reads  step   dump-alone  step/floor"
        "  naive-action  naive-step  naive/floor"
    )
    for project in args.apps:
        m = measure(project, args.steps, config)
        print(
            f"{project:<11} {m['start']:5.2f}  {m['action']:6.3f}  {m['settle']:6.3f}  "
            f"{m['dump']:5.3f}  {m['reads']:5.1f}  {m['step']:5.3f}  {m['floor']:10.3f}  "
            f"{m['step'] / m['floor']:10.1f}  {m['naive_action']:12.3f}  {m['naive_step']:10.3f}"
            f"  {m['naive_step'] / m['floor']:11.1f}"
        )
    if not args.no_replay:
        print_replay(default_suite("os"))


if __name__ == "__main__":
    main()
