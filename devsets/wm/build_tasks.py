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
    python devsets/wm/build_tasks.py --out /tmp/wm-tasks-2 --more --seed 12

``--more`` builds a further round from what ``predictions/`` does not cover yet; its
shards are numbered after the existing prediction files, and the terminal runs'
open-loop tasks come in a shard of their own (its predictor sees no teacher-forced
prompt, so no real observation, of those runs). Once every swe run has been used,
``--more --swe-steps N`` asks for N further teacher-forced steps of ``--swe-runs`` swe
runs, steps no prediction covers (swe only):

    python devsets/wm/build_tasks.py --out /tmp/wm-tasks-5 --more --swe-steps 1 --swe-runs 36 --seed 15
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: devsets/

from devsets.calibration.devset_agents import Run, load_runs
from fidelity.trajectory import Domain, Trajectory
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


def teacher_forced(
    run: Run, picks: int, rng: random.Random, skip: frozenset[str] = frozenset()
) -> list[dict[str, object]]:
    """Up to *picks* steps of *run*, each after its real history (task ids in *skip* aside)."""
    t = run.trajectory
    indices = [
        i
        for i in range(len(t.steps))
        if usable(t, i) and f"{t.domain}|tf|{t.id}|{i + 1}" not in skip
    ]
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


def first_round(
    runs: dict[str, list[Run]], rng: random.Random, swe_runs: int
) -> list[list[dict[str, object]]]:
    """The first round's tasks, grouped by run (a run's tasks go to one predictor)."""
    tasks: list[dict[str, object]] = []
    swe = rng.sample(runs["swe"], swe_runs)
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
    return list(_by_run(tasks).values())


def further_round(
    runs: dict[str, list[Run]], rng: random.Random, predicted: frozenset[str]
) -> tuple[list[list[dict[str, object]]], list[dict[str, object]]]:
    """Tasks no prediction covers yet: swe runs never used (30 teacher-forced, 10 open-loop),
    up to 5 more teacher-forced steps of each terminal run, and, apart (for a predictor
    that sees no teacher-forced prompt of those runs), the terminal runs open-loop."""
    used = {task.split("|")[2] for task in predicted}
    fresh = [r for r in runs["swe"] if r.trajectory.id not in used]
    swe = rng.sample(fresh, min(40, len(fresh)))
    tasks: list[dict[str, object]] = []
    for run in swe[:30]:
        tasks += teacher_forced(run, 2, rng)
    for run in swe[30:]:
        if (task := open_loop(run, 4)) is not None:
            tasks.append(task)
    for run in runs["terminal"]:
        tasks += teacher_forced(run, 5, rng, predicted)
    apart = [t for run in runs["terminal"] if (t := open_loop(run, 3)) is not None]
    return list(_by_run(tasks).values()), apart


def more_swe_steps(
    runs: dict[str, list[Run]],
    rng: random.Random,
    predicted: frozenset[str],
    steps: int,
    count: int,
) -> list[list[dict[str, object]]]:
    """*steps* teacher-forced steps no prediction covers of each of *count* swe runs that
    still have such steps."""
    open_ = [
        r
        for r in runs["swe"]
        if any(
            usable(r.trajectory, i) and f"swe|tf|{r.trajectory.id}|{i + 1}" not in predicted
            for i in range(len(r.trajectory.steps))
        )
    ]
    tasks: list[dict[str, object]] = []
    for run in rng.sample(open_, min(count, len(open_))):
        tasks += teacher_forced(run, steps, rng, predicted)
    return list(_by_run(tasks).values())


def _by_run(tasks: list[dict[str, object]]) -> dict[str, list[dict[str, object]]]:
    by_run: dict[str, list[dict[str, object]]] = {}
    for task in tasks:
        by_run.setdefault(str(task["task"]).split("|")[2], []).append(task)
    return by_run


def write_shard(folder: Path, shard: list[dict[str, object]]) -> None:
    """One predictor's task files, in the order it must answer them."""
    folder.mkdir(parents=True, exist_ok=True)
    for k, task in enumerate(shard, start=1):
        (folder / f"{k:03d}.json").write_text(json.dumps(task, indent=1, ensure_ascii=False))
    steps = sum(len(t.get("ids", [0])) for t in shard)  # type: ignore[arg-type]
    print(f"{folder.name}: {len(shard)} tasks, {steps} predictions")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--swe-runs", type=int, default=44)
    parser.add_argument("--swe-steps", type=int, default=0, help="with --more: see above")
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument(
        "--more",
        action="store_true",
        help="a further round: only runs and steps no prediction in predictions/ covers",
    )
    args = parser.parse_args()
    rng = random.Random(args.seed)
    runs = domain_runs()
    apart: list[dict[str, object]] = []
    first = 0
    if args.more:
        from devsets.wm.load import load_predictions

        predicted = frozenset(load_predictions())
        if args.swe_steps:
            groups = more_swe_steps(runs, rng, predicted, args.swe_steps, args.swe_runs)
        else:
            groups, apart = further_round(runs, rng, predicted)
        first = len(list((Path(__file__).parent / "predictions").glob("*.jsonl")))
    else:
        groups = first_round(runs, rng, args.swe_runs)
    shards: list[list[dict[str, object]]] = [[] for _ in range(args.shards)]
    for group in sorted(groups, key=len, reverse=True):
        min(shards, key=lambda s: sum(len(json.dumps(x)) for x in s)).extend(group)
    if apart:
        shards.append(apart)
    for n, shard in enumerate(shards, start=first):
        write_shard(args.out / f"shard{n}", shard)


if __name__ == "__main__":
    main()
