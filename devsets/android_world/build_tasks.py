"""World-model tasks for the AndroidWorld dev set: what a served world model is asked.

One task per transition of the step logs (:func:`devsets.android_world.load.load_records`,
the ``predicted`` pairs), rendered with fidelity's own prompts exactly as ``fidelity
simulate`` sends them (:func:`fidelity.worldmodels.prompting.build_messages`),
teacher-forced: the agent's goal is the task instruction, the screen before the action
the trajectory's initial observation (shown on turn 1 as the current state), then the
action. A task holds the prompt only, never the screen after the action. Predictors write
``predictions/<name>.jsonl`` (``{"task": id, "answer": ...}``: the whole answer, with its
``<predicted_observation>`` block).

    python devsets/android_world/build_tasks.py --out /tmp/androidworld-tasks [--shards 3]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: devsets/

from devsets.android_world.load import Pair, load_records
from devsets.wm.build_tasks import prompt_text
from fidelity.trajectory import Domain, EnvSpec, Step, Trajectory
from fidelity.worldmodels.prompting import build_messages


def task(pair: Pair) -> dict[str, object]:
    """The prompt for *pair*'s action after its screen before."""
    assert pair.action is not None
    trajectory = Trajectory(
        id=pair.id,
        domain=Domain.android,
        instruction=pair.goal or None,  # AndroidWorld's goal: the agent's task
        env=EnvSpec(initial_observation=pair.before),
        steps=[Step(action=pair.action)],
        source="real",
    )
    messages = build_messages(trajectory, [], pair.action, 1)
    return {
        "task": pair.id,
        "mode": "teacher-forced",
        "group": pair.group,
        "prompt": prompt_text(messages),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--shards", type=int, default=3, help="folders shard1..N, one per predictor"
    )
    args = parser.parse_args()
    records = [p for p in load_records() if p.kind == "predicted" and p.action is not None]
    for number, pair in enumerate(records):
        folder = args.out / f"shard{number % args.shards + 1}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{pair.id}.json"
        path.write_text(json.dumps(task(pair), indent=1, ensure_ascii=False), encoding="utf-8")
    print(f"{len(records)} tasks in {args.out} ({args.shards} shards)")


if __name__ == "__main__":
    main()
