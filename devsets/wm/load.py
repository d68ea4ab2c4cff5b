"""The world-model dev set: real world-model predictions on public agent runs, labelled twice.

What is stored here (``devsets/wm/``):

- ``predictions/*.jsonl``: ``{"task": id, "answer": ...}``, the whole answer of a
  world model (LLM helpers acting as world models, prompted with fidelity's own
  prompts by :mod:`devsets.wm.build_tasks`), parsed as the audit parses a
  served model's answer (:func:`fidelity.worldmodels.prompting.parse_prediction`);
- ``labels/<labeller>.jsonl``: ``{"task": id, "label": identical|volatile|drift,
  "hallucinations": [...], "omissions": [...]}`` by two independent labellers
  against ``../shared/RUBRIC.md``.

The real observations are read from ``../shared/agent-trajectories`` at run time
(never copied). A task id is ``domain|tf|run id|depth`` (teacher-forced) or
``domain|ol|run id|depth`` (open-loop: the history is the model's own earlier
predictions).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from fidelity.compare.base import CompareContext
from fidelity.trajectory import Observation, Step, Trajectory
from fidelity.worldmodels.prompting import parse_prediction

HERE = Path(__file__).resolve().parent
LABELS = ("identical", "volatile", "drift")


@dataclass(frozen=True)
class Label:
    """One labeller's verdict on one step."""

    label: str
    hallucinations: tuple[str, ...] = ()
    omissions: tuple[str, ...] = ()


@dataclass
class WMPair:
    """One predicted step: the real and simulated observations, context, and its labels."""

    task: str
    domain: str
    mode: str
    group: str
    trajectory_id: str
    depth: int
    real: Observation
    sim: Observation
    context: CompareContext
    labels: dict[str, Label] = field(default_factory=dict)

    @property
    def label(self) -> str:
        """The agreed label (see :func:`agreed_label`)."""
        return agreed_label(self.labels)

    @property
    def drift(self) -> bool:
        return self.label == "drift"

    def hallucinations(self) -> list[str]:
        """The union of the labellers' hallucinations, in order, without repeats."""
        return union(lab.hallucinations for lab in self.labels.values())

    def omissions(self) -> list[str]:
        return union(lab.omissions for lab in self.labels.values())


def agreed_label(labels: dict[str, Label]) -> str:
    """Drift when any labeller says drift, else the first labeller's label ("" for none)."""
    found = [lab.label for lab in labels.values()]
    if "drift" in found:
        return "drift"
    return found[0] if found else ""


def union(lists: Iterable[tuple[str, ...]]) -> list[str]:
    """The items of *lists* in order, without repeats (the labellers' lists together)."""
    seen: dict[str, None] = {}
    for items in lists:
        for item in items:
            seen.setdefault(item, None)
    return list(seen)


def read_jsonl(path: Path) -> list[dict[str, object]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SystemExit(f"{path}:{number}: invalid JSON ({exc.msg})") from exc
    return rows


def load_predictions(root: Path = HERE) -> dict[str, str]:
    """Each task's first answer by a predictor that had not seen its real observation.

    An open-loop answer is unusable when its predictor (its file) also answered a
    teacher-forced step of the same run: those prompts hold the run's real observations.
    A task answered by several predictors keeps the first usable answer, in file order.
    """
    return {task: answer for task, (answer, _) in _usable_answers(root).items()}


def load_prediction_sources(root: Path = HERE) -> dict[str, str]:
    """The prediction file (its stem) each task's used answer comes from."""
    return {task: stem for task, (_, stem) in _usable_answers(root).items()}


def _usable_answers(root: Path) -> dict[str, tuple[str, str]]:
    answers: dict[str, list[tuple[str, str]]] = {}
    for path in sorted((root / "predictions").glob("*.jsonl"), key=_file_order):
        for row in read_jsonl(path):
            answers.setdefault(str(row["task"]), []).append((str(row["answer"]), path.stem))
    forced = {
        (who, task.split("|")[2])
        for task, got in answers.items()
        if "|tf|" in task
        for _, who in got
    }
    usable: dict[str, tuple[str, str]] = {}
    for task, got in answers.items():
        run = task.split("|")[2]
        clean = [(a, who) for a, who in got if "|ol|" not in task or (who, run) not in forced]
        if clean:
            usable[task] = clean[0]
    return usable


def _file_order(path: Path) -> tuple[str, int]:
    """``shard2`` before ``shard10``: the files in the order they were written."""
    stem = path.stem.rstrip("0123456789")
    return stem, int(path.stem[len(stem) :] or 0)


def load_labels(root: Path = HERE) -> dict[str, dict[str, Label]]:
    """Labels by task id, then by labeller (the label file's stem)."""
    labels: dict[str, dict[str, Label]] = {}
    for path in sorted((root / "labels").glob("*.jsonl")):
        for row in read_jsonl(path):
            label = str(row["label"])
            if label not in LABELS:
                raise SystemExit(f"{path}: task {row['task']}: unknown label {label!r}")
            labels.setdefault(str(row["task"]), {})[path.stem] = Label(
                label,
                tuple(str(h) for h in row.get("hallucinations") or []),  # type: ignore[attr-defined]
                tuple(str(o) for o in row.get("omissions") or []),  # type: ignore[attr-defined]
            )
    return labels


def runs_by_id() -> dict[str, tuple[str, Trajectory]]:
    """The public runs by trajectory id, as the tasks were built (terminal for the CTF runs)."""
    from devsets.wm.build_tasks import domain_runs

    found: dict[str, tuple[str, Trajectory]] = {}
    for runs in domain_runs().values():
        for run in runs:
            found[run.trajectory.id] = (run.group, run.trajectory)
    return found


def load_pairs(root: Path = HERE, labelled_only: bool = True) -> list[WMPair]:
    """Every predicted step with its real observation and its labels."""
    answers = load_predictions(root)
    labels = load_labels(root)
    runs = runs_by_id()
    own: dict[str, list[Step]] = {}  # open-loop: the model's own history per run
    pairs = []
    for task in sorted(answers, key=_order):
        domain, mode, run_id, depth_text = task.split("|")
        depth = int(depth_text)
        group, trajectory = runs[run_id]
        step = trajectory.steps[depth - 1]
        assert step.observation is not None
        sim = _parsed(answers[task], step)
        if mode == "tf":
            history = list(trajectory.steps[: depth - 1])
        else:
            history = own.setdefault(run_id, [])[: depth - 1]
            own[run_id] = [*history, step.model_copy(update={"observation": sim})]
        pair = WMPair(
            task=task,
            domain=domain,
            mode="teacher-forced" if mode == "tf" else "open-loop",
            group=group,
            trajectory_id=run_id,
            depth=depth,
            real=step.observation,
            sim=sim,
            context=CompareContext(action=step.action, history=history, depth=depth),
            labels=labels.get(task, {}),
        )
        if pair.labels or not labelled_only:
            pairs.append(pair)
    return pairs


def _order(task: str) -> tuple[str, str, str, int]:
    domain, mode, run_id, depth = task.split("|")
    return (domain, mode, run_id, int(depth))


def _parsed(answer: str, step: Step) -> Observation:
    from fidelity.errors import MalformedPredictionError

    try:
        return parse_prediction(answer, step.action)
    except MalformedPredictionError as exc:
        return Observation(text="", error=f"malformed prediction: {exc}")
