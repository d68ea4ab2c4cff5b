"""The AndroidWorld dev set: real screens with a status bar, read where they lie.

The screens come from the step logs of a public fork of android_world (M3A agent runs on
an AndroidWorld emulator, ``../shared/android-screens/raw/androidworld-lyx/data_history``,
see that folder's README for the provenance); nothing of them is copied here. Each step
log holds, per agent step, the element list of the screen before the action with each
element's pixel box (``ui_description``), the action, and the list of the screen after it
as the summary prompt showed it (no boxes).

Three kinds of pairs (``real`` is always a recording; ``sim`` what is judged against it):

- ``predicted``: a transition (screen before, action, screen after: the next step's
  screen) predicted by a world model from fidelity's own prompt (:mod:`.build_tasks`);
  ``predictions/*.jsonl`` hold the answers, once predictors have written them;
- ``unchanged``: the same transition with the screen before as ``sim``: what a world model
  predicts when it predicts that nothing happens (the right answer when the action had no
  effect, and then the two recordings differ by the status bar only);
- ``recapture``: the screen after an action recorded twice, by the summary prompt right
  after the action and as the next step's screen: two real recordings of one state, in
  M3A's own element list (no boxes, no classes). Only the pairs whose texts differ.

Screens with boxes are written in AndroidWorld's element form, one ``UI element i:
UIElement(...)`` line per element of M3A's list, with the fields the log holds (text,
description, hint, tooltip, the flags M3A writes, ``bbox_pixels``) and ``None`` for what it
does not hold (class, resource id, package: M3A's list has none of them). The indices are
M3A's, so an action's ``index`` names the element the agent saw.

Labels: ``labels/androidworld-a.jsonl`` and ``-b.jsonl``, two independent labellers against
``../shared/RUBRIC.md``; a pair counts when both gave it the same label (:attr:`Pair.agreed`),
the others are left out of the figures and named by :func:`disagreements`.

The hold-out unit is the app (``group``): ``calendar`` (Simple Calendar Pro, two runs,
the only screens whose status bar has text: clock, signal bars, battery, a notification
icon), ``audio`` (Audio Recorder) and ``chrome`` (home screen, then Chrome's first run).
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from devsets.wm.load import Label, agreed_label, load_labels, read_jsonl, union
from fidelity.errors import MalformedPredictionError
from fidelity.trajectory import AndroidAction, Observation
from fidelity.worldmodels.prompting import parse_prediction

HERE = Path(__file__).resolve().parent
SHARED = Path(__file__).resolve().parents[3] / "shared" / "android-screens"
"""Where the recordings lie beside a checkout (``../shared/android-screens``)."""
LOGS = Path("raw") / "androidworld-lyx" / "data_history"
REPOSITORY = "LYXFOREVER/my_android_world@33227453903bc3adf394ee17dee26c75767a7e3a"
"""The public repository and commit the step logs were copied from (see the shared README)."""

RUNS = {
    "2025_01_08_17_09_50": "calendar",
    "2025_01_08_17_21_07": "calendar",
    "2025_04_19_23_20_05": "audio",
    "2025_04_20_01_00_30": "chrome",
}
"""The step logs used, by run folder, and the app each is held out with."""

KINDS = ("predicted", "unchanged", "recapture")
REAL_TWICE = ("unchanged", "recapture")
"""The kinds whose two sides are both real recordings: labelled identical or volatile, such a
pair is one state recorded twice (the action had no effect, or the same screen read again),
what a second real run gives."""
TUNING = ("calendar",)
"""The app the system-UI rules were written on, named before labelling: tune only here."""
HELD_OUT = ("audio", "chrome")
"""The apps nothing was written or tuned on (see the README)."""
LABELLERS = ("androidworld-a", "androidworld-b")

_BEFORE = "\nAlso here is the list of detailed information for some UI elements in the before screenshot:\n"
_AFTER = "\nHere is the list for the after screenshot:\n"
_AFTER_END = "\nThis is the action you picked"
_SELECTED = re.compile(r"Action selected: (\{.*?\})")
_TARS = re.compile(r"(\w+)\((.*)\)\s*$")
_M3A_LINE = re.compile(r"^UI element (\d+): \{", re.MULTILINE)
_M3A_KEY = re.compile(r"(?:^|, )\"(\w+)\": ")
_FLAGS = (
    "is_checked",
    "is_clickable",
    "is_editable",
    "is_focusable",
    "is_long_clickable",
    "is_scrollable",
    "is_selected",
)


@dataclass(frozen=True)
class Step:
    """One agent step of a log: the screen before (with boxes), the action, the screen after."""

    run: str
    number: int
    goal: str
    action: AndroidAction | None
    before: str
    """The screen before the action, in AndroidWorld's element form (with boxes)."""
    before_m3a: str
    """The same screen as M3A's list (verbatim: the log's element descriptions)."""
    after_m3a: str
    """The screen after the action as the summary prompt showed it (M3A's list; may be empty)."""


@dataclass
class Pair:
    """One step to label: a real screen and the one judged against it."""

    id: str
    kind: str
    group: str
    run: str
    step: int
    goal: str
    action: AndroidAction | None
    before: str
    real: Observation
    sim: Observation
    files: tuple[str, ...]
    labels: dict[str, Label] = field(default_factory=dict)

    @property
    def agreed(self) -> bool:
        """Whether both labellers labelled the pair and gave it the same label."""
        found = [self.labels.get(name) for name in LABELLERS]
        return all(found) and len({lab.label for lab in found if lab is not None}) == 1

    @property
    def label(self) -> str:
        """The labellers' common label; "" when they disagree or one has not labelled it.

        A pair the two labellers disagree on has no truth to measure against: the figures
        leave it out (:func:`load_pairs`) and report how many there are."""
        return agreed_label(self.labels) if self.agreed else ""

    @property
    def label_a(self) -> Label | None:
        return self.labels.get(LABELLERS[0])

    @property
    def label_b(self) -> Label | None:
        return self.labels.get(LABELLERS[1])

    def hallucinations(self) -> list[str]:
        """The labellers' hallucinations together, in order, without repeats."""
        return union(lab.hallucinations for lab in self.labels.values())

    def omissions(self) -> list[str]:
        return union(lab.omissions for lab in self.labels.values())


def m3a_fields(line: str) -> dict[str, str]:
    """The fields of one M3A element description (values as written: M3A does not escape)."""
    body = line[line.index("{") + 1 : line.rindex("}")] if "}" in line else line
    keys = list(_M3A_KEY.finditer(body))
    values = {}
    for key, following in zip(keys, [*keys[1:], None], strict=False):  # no keys: no field
        raw = body[key.end() : following.start() if following else len(body)].strip()
        values[key[1]] = raw[1:-1] if len(raw) >= 2 and raw[0] == raw[-1] == '"' else raw
    return values


def element_line(index: int, fields: dict[str, str], box: list[int]) -> str:
    """One element in AndroidWorld's ``UIElement`` form (``None`` where the log holds nothing)."""

    def text(name: str) -> str:
        return repr(fields[name]) if name in fields else "None"

    def flag(name: str) -> str:
        # M3A writes is_scrollable and is_focusable only when true
        return "True" if fields.get(name) == "True" else "False"

    x_min, x_max, y_min, y_max = box
    flags = ", ".join(f"{name}={flag(name)}" for name in _FLAGS)
    return (
        f"UI element {index}: UIElement(text={text('text')}, "
        f"content_description={text('content_description')}, class_name=None, "
        f"bbox_pixels=BoundingBox(x_min={x_min}, x_max={x_max}, y_min={y_min}, y_max={y_max}), "
        f"hint_text={text('hint_text')}, tooltip={text('tooltip')}, {flags}, "
        f"package_name=None, resource_name=None)"
    )


def screen(descriptions: list[dict[str, Any]]) -> str:
    """A step's ``ui_description`` list in AndroidWorld's element form."""
    lines = []
    for entry in descriptions:
        line = str(entry["ui_description"])
        index = int(line.split(":", 1)[0].removeprefix("UI element "))
        lines.append(element_line(index, m3a_fields(line), list(entry["ui_bbox"])))
    return "\n".join(lines)


def _action(step: dict[str, Any]) -> AndroidAction | None:
    """The action as AndroidWorld ran it: the JSON the agent's summary quotes, else the
    ``Action:`` the model wrote (M3A's JSON, or ``click(start_box='(x,y)')``)."""
    selected = _SELECTED.search(str(step.get("summary") or ""))
    written = str(step.get("action_output") or "").rsplit("Action:", 1)[-1].strip()
    raw: dict[str, Any] | None = None
    for candidate in (selected[1] if selected else None, written):
        if candidate and candidate.startswith("{"):
            try:
                raw = json.loads(candidate)
                break
            except json.JSONDecodeError:
                continue
    if raw is None:
        call = _TARS.match(written)
        if call is None:
            return None
        args = dict(re.findall(r"(\w+)='([^']*)'", call[2]))
        raw = {"action_type": call[1]}
        if "start_box" in args:
            x, y = (int(float(n)) for n in re.findall(r"-?\d+(?:\.\d+)?", args["start_box"])[:2])
            raw.update(x=x, y=y)
        if "app_name" in args:
            raw["app_name"] = args["app_name"]
    try:
        return AndroidAction.model_validate({"type": "android", **raw})
    except ValueError:
        return AndroidAction(action_type="unknown")


def _after(step: dict[str, Any]) -> str:
    prompt = step.get("summary_prompt")
    if not isinstance(prompt, str) or _AFTER not in prompt:
        return ""
    return prompt.split(_AFTER, 1)[1].split(_AFTER_END, 1)[0].strip()


def load_steps(root: Path = SHARED) -> dict[str, list[Step]]:
    """Every step of every log used, by run (a clear error when the data is not there)."""
    runs: dict[str, list[Step]] = {}
    for run in RUNS:
        path = root / LOGS / run / "history.json"
        if not path.is_file():
            raise SystemExit(
                f"{path}: missing (the AndroidWorld step logs, see devsets/android_world)"
            )
        logged = json.loads(path.read_text(encoding="utf-8"))
        runs[run] = [
            Step(
                run=run,
                number=number,
                goal=str(step.get("task_goal") or ""),
                action=_action(step),
                before=screen(step["ui_description"]),
                before_m3a="\n".join(str(e["ui_description"]) for e in step["ui_description"]),
                after_m3a=_after(step),
            )
            for number, step in enumerate(logged)
        ]
    return runs


def _pair(step: Step, number: int, kind: str, real: str, sim: str) -> Pair:
    """The pair of *kind* of *step*'s transition (its id ends in *number*)."""
    group = RUNS[step.run]
    return Pair(
        id=f"{group}-{step.run[-8:].replace('_', '')}-{step.number:02d}-{number}",
        kind=kind,
        group=group,
        run=step.run,
        step=step.number,
        goal=step.goal,
        action=step.action,
        before=step.before,
        real=Observation(text=real),
        sim=Observation(text=sim),
        files=_cited(step.run),
    )


def _cited(run: str) -> tuple[str, ...]:
    return (f"{REPOSITORY}:data_history/{run}/history.json",)


def load_records(root: Path = SHARED) -> list[Pair]:
    """Every pair of the set without its prediction or labels: ``unchanged`` and
    ``recapture`` pairs, and each transition as a ``predicted`` pair whose ``sim`` is empty.

    Ids are ``<app>-<run>-<step>-<n>``, ``n`` 1 (predicted), 2 (unchanged) or 3
    (recapture): a digit, so that a labelling sheet does not name its kind."""
    pairs: list[Pair] = []
    for steps in load_steps(root).values():
        for step, following in itertools.pairwise(steps):
            pairs.append(_pair(step, 1, "predicted", following.before, ""))
            if step.before != following.before:
                pairs.append(_pair(step, 2, "unchanged", following.before, step.before))
            if step.after_m3a and step.after_m3a != following.before_m3a:
                pairs.append(_pair(step, 3, "recapture", following.before_m3a, step.after_m3a))
    return pairs


def load_predictions(root: Path = HERE) -> dict[str, str]:
    """Every prediction's text by task id (a task answered twice keeps its first answer)."""
    answers: dict[str, str] = {}
    folder = root / "predictions"
    if not folder.is_dir():
        return answers
    for path in sorted(folder.glob("*.jsonl")):
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


def load_pairs(
    root: Path = HERE, shared: Path = SHARED, labelled_only: bool = True, agreed_only: bool = True
) -> list[Pair]:
    """Every pair with a second side (a ``predicted`` one once its prediction exists), with
    its labels.

    By default only the pairs both labellers labelled alike (:attr:`Pair.agreed`): a pair
    they disagree on is left out of every figure. With *agreed_only* False every labelled
    pair (:func:`disagreements` names those left out); with *labelled_only* False every
    pair, labelled or not."""
    answers = load_predictions(root)
    labels = load_labels(root) if (root / "labels").is_dir() else {}
    pairs = []
    for pair in load_records(shared):
        if pair.kind == "predicted":
            if pair.id not in answers:
                continue
            pair.sim = _parsed(answers[pair.id], pair.action)
        pair.labels = labels.get(pair.id, {})
        if agreed_only and labelled_only and not pair.agreed:
            continue
        if pair.labels or not labelled_only:
            pairs.append(pair)
    return pairs


def disagreements(pairs: list[Pair]) -> list[Pair]:
    """The pairs both labellers labelled but not alike (left out of the figures)."""
    return [p for p in pairs if p.label_a is not None and p.label_b is not None and not p.agreed]
