"""The android dev set: real DroidBot transitions and volatile pairs, with predictions and labels.

What is stored here (``devsets/android/``):

- ``data/transitions.jsonl``: ``{"id", "source", "files", "app", "before",
  "action", "after"}``, one real transition of a public DroidBot recording
  (screens as the android comparator's JSON element list, the action as a
  fidelity :class:`~fidelity.trajectory.AndroidAction`);
- ``data/volatile.jsonl``: ``{"id", "source", "files", "app", "action",
  "real", "second"}``, the same screen recorded twice (no prediction needed);
- ``predictions/*.jsonl``: ``{"task": id, "answer": ...}``, a world model's
  answer for a transition (parsed as the audit parses a served model's answer);
- ``labels/android-a.jsonl``, ``labels/android-b.jsonl``: ``{"task": id,
  "label": identical|volatile|drift, "hallucinations": [...], "omissions":
  [...]}`` by two independent labellers against ``../shared/RUBRIC.md``.

``source`` (repository and app) is the hold-out unit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devsets.wm.load import Label, agreed_label, load_labels, read_jsonl, union
from fidelity.errors import MalformedPredictionError
from fidelity.trajectory import AndroidAction, Observation
from fidelity.worldmodels.prompting import parse_prediction

HERE = Path(__file__).resolve().parent
LABELLERS = ("android-a", "android-b")


@dataclass(frozen=True)
class Record:
    """One row of ``data/``: a transition (``after``) or a volatile pair (``second``)."""

    id: str
    kind: str
    source: str
    app: str
    files: tuple[str, ...]
    action: AndroidAction | None
    before: str
    real: str
    second: str = ""


@dataclass
class AndroidPair:
    """One labelled step: the real screen and the simulated (or second real) one."""

    id: str
    kind: str
    source: str
    action: AndroidAction | None
    before: str
    real: Observation
    sim: Observation
    labels: dict[str, Label] = field(default_factory=dict)

    @property
    def label_a(self) -> Label | None:
        return self.labels.get(LABELLERS[0])

    @property
    def label_b(self) -> Label | None:
        return self.labels.get(LABELLERS[1])

    @property
    def label(self) -> str:
        """The agreed label (see :func:`~devsets.wm.load.agreed_label`)."""
        return agreed_label(self.labels)

    def hallucinations(self) -> list[str]:
        """The labellers' hallucinations together, in order, without repeats."""
        return union(lab.hallucinations for lab in self.labels.values())


def _action(row: dict[str, Any], where: str) -> AndroidAction | None:
    raw = row.get("action")
    if raw is None:
        return None
    try:
        return AndroidAction.model_validate({"type": "android", **raw})
    except ValueError as exc:
        raise SystemExit(f"{where}: invalid action ({exc})") from exc


def load_records(root: Path = HERE) -> list[Record]:
    """Every transition, then every volatile pair, in file order."""
    records = []
    for name, kind in (("transitions", "transition"), ("volatile", "volatile")):
        path = root / "data" / f"{name}.jsonl"
        if not path.exists():
            continue
        for number, row in enumerate(read_jsonl(path), start=1):
            where = f"{path}:{number}"
            records.append(
                Record(
                    id=str(row["id"]),
                    kind=kind,
                    source=str(row["source"]),
                    app=str(row["app"]),
                    files=tuple(str(f) for f in row["files"]),  # type: ignore[attr-defined]
                    action=_action(row, where),
                    before=str(row.get("before") or ""),
                    real=str(row["after"] if kind == "transition" else row["real"]),
                    second=str(row.get("second") or ""),
                )
            )
    return records


def load_predictions(root: Path = HERE) -> dict[str, str]:
    """Every prediction's text by task id (a task answered twice keeps its first answer)."""
    answers: dict[str, str] = {}
    for path in sorted((root / "predictions").glob("*.jsonl")):
        for number, row in enumerate(read_jsonl(path), start=1):
            text = row.get("text", row.get("answer"))
            if text is None:
                raise SystemExit(f"{path}:{number}: no 'text' field")
            answers.setdefault(str(row["task"]), str(text))
    return answers


def _parsed(answer: str, action: AndroidAction | None) -> Observation:
    try:
        return parse_prediction(answer, action or AndroidAction(action_type="wait"))
    except MalformedPredictionError as exc:
        return Observation(text="", error=f"malformed prediction: {exc}")


def load_pairs(root: Path = HERE, labelled_only: bool = True) -> list[AndroidPair]:
    """Every predicted transition and every volatile pair, with their labels."""
    answers = load_predictions(root)
    labels = load_labels(root) if (root / "labels").is_dir() else {}
    pairs = []
    for record in load_records(root):
        if record.kind == "transition":
            if record.id not in answers:
                continue
            sim = _parsed(answers[record.id], record.action)
        else:
            sim = Observation(text=record.second)
        pair = AndroidPair(
            id=record.id,
            kind=record.kind,
            source=record.source,
            action=record.action,
            before=record.before,
            real=Observation(text=record.real),
            sim=sim,
            labels=labels.get(record.id, {}),
        )
        if pair.labels or not labelled_only:
            pairs.append(pair)
    return pairs


def steps(root: Path = HERE) -> list[tuple[str, str, str, str, str, Label | None, Label | None]]:
    """Every labelled step as (id, source, action, real text, sim text, label a, label b)."""
    return [
        (
            p.id,
            p.source,
            p.action.render() if p.action is not None else "",
            p.real.text,
            p.sim.text,
            p.label_a,
            p.label_b,
        )
        for p in load_pairs(root)
    ]


def screen(views: list[dict[str, Any]]) -> str:
    """A screen as the JSON element list the android comparator reads, one element a line."""
    return "[\n" + ",\n".join(json.dumps(v, ensure_ascii=False) for v in views) + "\n]"
