"""Every invented and omitted item, in rank order, in machine outputs: a step names the first
ten (the verdict, the reasons and what people read use them), ``more_hallucinations`` and
``more_omissions`` hold the rest, ``every_hallucination`` all of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from compare_samples import context, obs

from fidelity.compare import TerminalComparator
from fidelity.compare.entities import MAX_ENTITIES
from fidelity.compare.swe import SweComparator
from fidelity.diffing import diff_files
from fidelity.formats.jsonl import write_trajectories
from fidelity.trajectory import CommandAction, Domain, Observation, Step, Trajectory

REAL = "".join(f"module_{i:02d}.py\n" for i in range(5))
INVENTED = "".join(f"invented_{i:02d}.py\n" for i in range(45))


def test_an_invented_listing_is_named_whole_beyond_the_first_ten() -> None:
    result = TerminalComparator().compare(obs(REAL), obs(REAL + INVENTED), context("ls"))
    assert result.drift
    assert len(result.hallucinations) == MAX_ENTITIES
    every = result.every_hallucination
    assert every[:MAX_ENTITIES] == result.hallucinations  # the named ones first, same order
    names = {e.partition(":")[2] for e in every}
    assert {f"invented_{i:02d}.py" for i in range(45)} <= names
    assert len(every) == len(set(every))


def test_a_listing_dropped_whole_is_omitted_whole() -> None:
    result = TerminalComparator().compare(obs(REAL + INVENTED), obs(REAL), context("ls"))
    assert len(result.omissions) == MAX_ENTITIES
    names = {e.partition(":")[2] for e in result.every_omission}
    assert {f"invented_{i:02d}.py" for i in range(45)} <= names


def test_what_the_model_was_shown_stays_stale_beyond_the_cap_too() -> None:
    shown = "invented_44.py"
    history = [Step(action=CommandAction(command="ls old"), observation=obs(shown + "\n"))]
    ctx = context("ls").model_copy(update={"history": history})
    result = TerminalComparator().compare(obs(REAL), obs(REAL + INVENTED), ctx)
    assert "file:invented_44.py" not in result.every_hallucination


def test_a_small_difference_has_nothing_beyond_the_cap() -> None:
    result = TerminalComparator().compare(obs(REAL), obs(REAL + "extra.py\n"), context("ls"))
    assert result.more_hallucinations == [] and result.more_omissions == []
    same = TerminalComparator().compare(obs(REAL), obs(REAL), context("ls"))
    assert same.every_hallucination == [] and same.every_omission == []


def test_swe_keeps_the_terminal_ranking_and_the_rest() -> None:
    result = SweComparator().compare(obs(REAL), obs(REAL + INVENTED), context("ls"))
    assert len(result.hallucinations) == MAX_ENTITIES
    assert {f"file:invented_{i:02d}.py" for i in range(45)} <= set(result.every_hallucination)


def _trajectory(text: str, source: str) -> Trajectory:
    step = Step(action=CommandAction(command="ls"), observation=Observation(text=text))
    kind: Literal["real", "sim"] = "real" if source == "real" else "sim"
    return Trajectory(id="t1", domain=Domain.terminal, steps=[step], source=kind)


def test_diff_rows_list_every_item_with_their_counts(tmp_path: Path) -> None:
    real, sim = tmp_path / "real.jsonl", tmp_path / "sim.jsonl"
    write_trajectories(real, [_trajectory(REAL, "real")])
    write_trajectories(sim, [_trajectory(REAL + INVENTED, "sim")])
    (row,) = diff_files(real, sim).rows
    assert row.hallucination_count == len(row.hallucinations) >= 45
    assert row.omission_count == len(row.omissions) == 0
    dumped = json.loads(row.model_dump_json())
    assert dumped["hallucination_count"] == len(dumped["hallucinations"])
    # what people read stays short: the reasons name five and count the rest of the ten
    assert sum(r.startswith("hallucinated ") for r in row.reasons) <= 6
