"""A labeled development set for the os comparator (OSWorld trees), from two real desktop replays.

Faithful pairs: the first replay's observation (real, with its XML tree) against
the second's (sim), given as the linearised table only (what a world model
writes) or as the XML tree; plus volatile-only variations of the second
(coordinates moved by at most 3 pixels, the unsaved-changes marker, trailing
spaces, file-chooser times). Drifted pairs apply one seeded corruption to the
second replay's table: a changed text (a digit, a word, an extra line), an
invented node, a dropped node, a renamed node, a node moved by 20–80 pixels,
or the previous step's observation (stale).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator

from devsets.calibration.devset import Pair
from fidelity.compare.base import CompareContext
from fidelity.sandboxes.desktop_tree import HEADER
from fidelity.trajectory import Observation, Step, Trajectory

Corrupt = Callable[[list[str], list[Step], random.Random], list[str] | None]

INVENTED = (
    'push-button\tApply\t""\t\t\t(812, 640)\t(80, 30)',
    "label\tDocument saved\tDocument saved\t\t\t(700, 900)\t(140, 17)",
    'menu-item\tExport as PDF\t""\t\t\t(660, 420)\t(180, 25)',
    'check-box\tShow hidden files\t""\t\t\t(420, 700)\t(160, 20)',
)
_POS = re.compile(r"\((-?\d+), (-?\d+)\)\t\((\d+), (\d+)\)$")
_WORDS = {"alpha": "alfa", "bread": "butter", "apples": "pears", "File": "Files", "Edit": "Edits"}


def _rows(text: str) -> list[str] | None:
    """The row lines of a table (multi-line cells kept with their row), without the header."""
    lines = text.rstrip("\n").split("\n")
    if not lines or lines[0] != HEADER:
        return None
    rows: list[str] = []
    pending: list[str] = []
    for line in lines[1:]:
        pending.append(line)
        if "\n".join(pending).count("\t") >= 6:
            rows.append("\n".join(pending))
            pending = []
    return rows


def _table(rows: list[str]) -> str:
    return "\n".join([HEADER, *rows]) + "\n"


def changed_text(rows: list[str], history: list[Step], rng: random.Random) -> list[str] | None:
    """A digit changed, a word swapped or a line added in one node's text."""
    candidates = [i for i, r in enumerate(rows) if r.split("\t")[2] not in ('""', "")]
    if not candidates:
        return None
    index = rng.choice(candidates)
    cells = rows[index].split("\t")
    text = "\t".join(cells[2:-4])
    digits = [m.start() for m in re.finditer(r"\d", text)]
    words = [w for w in _WORDS if w in text]
    if digits:
        at = rng.choice(digits)
        text = text[:at] + str((int(text[at]) + rng.randint(1, 8)) % 10) + text[at + 1 :]
    elif words:
        word = rng.choice(words)
        text = text.replace(word, _WORDS[word], 1)
    else:
        text = text.rstrip() + "\nerror: operation failed"
    rows = list(rows)
    rows[index] = "\t".join([*cells[:2], text, *cells[-4:]])
    return rows


def invented_node(rows: list[str], history: list[Step], rng: random.Random) -> list[str] | None:
    """A node that the real screen does not have."""
    rows = list(rows)
    rows.insert(rng.randint(0, len(rows)), rng.choice(INVENTED))
    return rows


def dropped_node(rows: list[str], history: list[Step], rng: random.Random) -> list[str] | None:
    """One node left out."""
    if len(rows) < 2:
        return None
    rows = list(rows)
    del rows[rng.randrange(len(rows))]
    return rows


def renamed_node(rows: list[str], history: list[Step], rng: random.Random) -> list[str] | None:
    """One node's name changed."""
    named = [i for i, r in enumerate(rows) if r.split("\t")[1].strip()]
    if not named:
        return None
    index = rng.choice(named)
    cells = rows[index].split("\t")
    cells[1] = rng.choice(("Save", "Open…", "Cancel", "Options", cells[1] + " 2"))
    rows = list(rows)
    rows[index] = "\t".join(cells)
    return rows


def moved_node(rows: list[str], history: list[Step], rng: random.Random) -> list[str] | None:
    """One node 20–80 pixels away from where it is."""
    placed = [i for i, r in enumerate(rows) if _POS.search(r)]
    if not placed:
        return None
    index = rng.choice(placed)
    found = _POS.search(rows[index])
    assert found is not None
    x, y, w, h = (int(g) for g in found.groups())
    dx, dy = rng.choice((1, -1)) * rng.randint(20, 80), rng.choice((0, 1)) * rng.randint(20, 80)
    rows = list(rows)
    rows[index] = rows[index][: found.start()] + f"({x + dx}, {max(0, y + dy)})\t({w}, {h})"
    return rows


CORRUPTIONS: dict[str, Corrupt] = {
    "changed_text": changed_text,
    "invented_node": invented_node,
    "dropped_node": dropped_node,
    "renamed_node": renamed_node,
    "moved_node": moved_node,
}


def jittered(rows: list[str], rng: random.Random) -> list[str]:
    """Volatile only: every position moved by at most 3 pixels, trailing spaces on names."""
    out = []
    for row in rows:
        found = _POS.search(row)
        if found:
            x, y, w, h = (int(g) for g in found.groups())
            x, y = x + rng.randint(-3, 3), max(0, y + rng.randint(-3, 3))
            row = row[: found.start()] + f"({x}, {y})\t({w}, {h})"
        cells = row.split("\t")
        if cells[1] and rng.random() < 0.3:
            cells[1] += "   "
        out.append("\t".join(cells))
    return out


def marked_tree(xml: str, rng: random.Random) -> str:
    """Volatile only: the unsaved-changes marker on frame names, a file-chooser time changed."""
    xml = re.sub(r'(<frame name=")(?!\*)', r"\1*", xml, count=1)
    return re.sub(r"\b\d{1,2}:\d{2}\b", f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}", xml)


def build_os_pairs(first: list[Trajectory], second: list[Trajectory], seed: int) -> Iterator[Pair]:
    """Faithful, volatile and corrupted pairs of every step both replays observed."""
    by_id = {t.id: t for t in second}
    for trajectory in first:
        other = by_id.get(trajectory.id)
        if other is None:
            continue
        rng = random.Random(f"{seed}:{trajectory.id}")
        previous: Observation | None = None
        for depth, (a, b) in enumerate(zip(trajectory.steps, other.steps, strict=True), 1):
            real, twin = a.observation, b.observation
            if real is None or twin is None or real.failed or twin.failed:
                continue
            context = CompareContext(
                action=a.action, history=trajectory.steps[: depth - 1], depth=depth
            )
            yield from _step_pairs(trajectory.id, depth, real, twin, previous, context, rng)
            previous = twin


def _step_pairs(
    trajectory_id: str,
    depth: int,
    real: Observation,
    twin: Observation,
    previous: Observation | None,
    context: CompareContext,
    rng: random.Random,
) -> Iterator[Pair]:
    rows = _rows(twin.text)
    if rows is None:
        return

    def pair(sim_text: str, drift: bool, kind: str) -> Pair:
        sim = Observation(text=sim_text, exit_code=twin.exit_code)
        return Pair(trajectory_id, depth, real, sim, context, drift, kind)

    yield pair(twin.text, False, "faithful_table")
    tree = (twin.state or {}).get("tree")
    if isinstance(tree, str):
        yield pair(tree, False, "faithful_tree")
        yield pair(marked_tree(tree, rng), False, "volatile_tree")
    yield pair(_table(jittered(rows, rng)), False, "volatile_table")
    for kind, corrupt in CORRUPTIONS.items():
        changed = corrupt(rows, context.history, rng)
        if changed is not None and changed != rows:
            yield pair(_table(changed), True, kind)
    if previous is not None and previous.text != twin.text:
        yield pair(previous.text, True, "stale")
