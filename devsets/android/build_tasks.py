"""World-model tasks for the android dev set: what a served world model is asked.

One task per real transition of ``data/transitions.jsonl``, rendered with
fidelity's own prompts exactly as ``fidelity simulate`` sends them
(:func:`fidelity.worldmodels.prompting.build_messages`), teacher-forced: the
screen before the action is the trajectory's initial observation (shown on
turn 1 as the current state), then the action. The task files hold the prompt
only, never the screen after the action. Predictors write
``predictions/*.jsonl`` (``{"task": id, "answer": ...}``).

    python devsets/android/build_tasks.py --out /tmp/android-tasks
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: devsets/

from devsets.android.load import Record, load_records
from devsets.wm.build_tasks import prompt_text
from fidelity.trajectory import Domain, EnvSpec, Step, Trajectory
from fidelity.worldmodels.prompting import build_messages


def task(record: Record) -> dict[str, object]:
    """The prompt for *record*'s action after its before screen."""
    assert record.action is not None
    trajectory = Trajectory(
        id=record.id,
        domain=Domain.android,
        env=EnvSpec(initial_observation=record.before),
        steps=[Step(action=record.action)],
        source="real",
    )
    messages = build_messages(trajectory, [], record.action, 1)
    return {
        "task": record.id,
        "mode": "teacher-forced",
        "group": record.source,
        "prompt": prompt_text(messages),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    records = [r for r in load_records() if r.kind == "transition"]
    for number, record in enumerate(records, start=1):
        path = args.out / f"{number:03d}.json"
        path.write_text(json.dumps(task(record), indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"{len(records)} tasks in {args.out}")


if __name__ == "__main__":
    main()
