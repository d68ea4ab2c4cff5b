"""World-model tasks from the public agent runs: what a served world model is asked.

Each task is one step of a public run (``../shared/agent-trajectories``), rendered
with fidelity's own prompts exactly as ``fidelity simulate`` sends them
(:func:`fidelity.worldmodels.prompting.build_messages`):

- teacher-forced: the real history up to the step, then the action;
- open-loop: the first steps of a run, the world model's own earlier
  predictions standing in for the history (the predictor answers the turns in
  order and never sees a real observation of the run).

The task files hold the prompt only, never the real observation of the step
asked for. Predictions are written by the predictors to ``predictions/*.jsonl``
(``{"task": id, "text": ...}``); the real side is read from the shared runs at
evaluation time (:mod:`devsets.wm.load`), so no recorded observation is copied
into the project.

    python devsets/wm/build_tasks.py --out /tmp/wm-tasks [--seed 11]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: devsets/

from devsets.calibration.devset_agents import Run, load_runs
from fidelity.model import Domain, Trajectory
from fidelity.worldmodels.prompting import build_messages, render_action, render_system

MAX_OBSERVATION = 5_000
"""Steps whose real observation is longer are left out (a predictor writes it whole)."""
MAX_PROMPT = 36_000
"""Teacher-forced prompts longer than this (characters) are left out."""


def domain_runs() -> dict[str, list[Run]]:
    """The swe runs (mini-swe-agent, by repository) and the terminal runs (SWE-agent CTF)."""
    runs = load_runs()
    swe = [r for r in runs if not r.group.startswith("ctf-")]
    ctf = [
        Run(r.group, r.trajectory.model_copy(update={"domain": Domain.terminal}))
        for r in runs
        if r.group.startswith("ctf-")
    ]
    return {"swe": swe, "terminal": ctf}


def usable(trajectory: Trajectory, index: int) -> bool:
    obs = trajectory.steps[index].observation
    return obs is not None and not obs.failed and len(obs.text) <= MAX_OBSERVATION


def prompt_text(messages: list[dict[str, str]]) -> str:
    """The chat as one readable text: each message under its role."""
    return "\n\n".join(f"===== {m['role'].upper()} =====\n{m['content']}" for m in messages)


def teacher_forced(run: Run, picks: int, rng: random.Random) -> list[dict[str, object]]:
    t = run.trajectory
    indices = [i for i in range(len(t.steps)) if usable(t, i)]
    tasks = []
    for index in sorted(rng.sample(indices, min(picks, len(indices)))):
        history = t.steps[:index]
        if any(s.observation is None or s.observation.failed for s in history):
            continue
        messages = build_messages(t, history, t.steps[index].action, index + 1)
        text = prompt_text(messages)  # type: ignore[arg-type]
        if len(text) > MAX_PROMPT:
            continue
        tasks.append(
            {
                "task": f"{t.domain}|tf|{t.id}|{index + 1}",
                "mode": "teacher-forced",
                "group": run.group,
                "prompt": text,
            }
        )
    return tasks


def open_loop(run: Run, depth: int) -> dict[str, object] | None:
    t = run.trajectory
    if not all(usable(t, i) for i in range(min(depth, len(t.steps)))):
        return None
    turns = [
        render_action(
            t.steps[i].action,
            i + 1,
            str(t.domain),
            None,
            t.steps[i].control,
            task=str(t.meta.get("task") or "") if i == 0 else "",
            predicted=True,
        )
        for i in range(min(depth, len(t.steps)))
    ]
    return {
        "task": f"{t.domain}|ol|{t.id}",
        "mode": "open-loop",
        "group": run.group,
        "system": render_system(t),
        "turns": turns,
        "ids": [f"{t.domain}|ol|{t.id}|{i + 1}" for i in range(len(turns))],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--swe-runs", type=int, default=44)
    parser.add_argument("--shards", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    runs = domain_runs()
    tasks: list[dict[str, object]] = []
    swe = rng.sample(runs["swe"], args.swe_runs)
    for run in swe[:36]:
        tasks += teacher_forced(run, 2, rng)
    for run in swe[36:]:
        if (task := open_loop(run, 4)) is not None:
            tasks.append(task)
    for run in runs["terminal"]:
        tasks += teacher_forced(run, 6, rng)
    for run in runs["terminal"]:
        if (task := open_loop(run, 3)) is not None:
            tasks.append(task)
    shards: list[list[dict[str, object]]] = [[] for _ in range(args.shards)]
    by_run: dict[str, list[dict[str, object]]] = {}
    for task in tasks:
        by_run.setdefault(str(task["task"]).split("|")[2], []).append(task)
    for group in sorted(by_run.values(), key=len, reverse=True):
        min(shards, key=lambda s: sum(len(json.dumps(x)) for x in s)).extend(group)
    for n, shard in enumerate(shards):
        folder = args.out / f"shard{n}"
        folder.mkdir(parents=True, exist_ok=True)
        for k, task in enumerate(shard, start=1):
            (folder / f"{k:03d}.json").write_text(json.dumps(task, indent=1, ensure_ascii=False))
        steps = sum(len(t.get("ids", [0])) for t in shard)  # type: ignore[arg-type]
        print(f"shard{n}: {len(shard)} tasks, {steps} predictions")


if __name__ == "__main__":
    main()
