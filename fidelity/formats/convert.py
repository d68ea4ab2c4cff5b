"""``fidelity import`` and ``fidelity export``: other formats to and from fidelity JSONL."""

from __future__ import annotations

import json
import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from fidelity.errors import InputFormatError, UsageError
from fidelity.formats.jsonl import distinct_output, write_trajectories
from fidelity.trajectory import Trajectory

IMPORT_FORMATS = (
    "agentworldbench",
    "swe-agent",
    "mini-swe-agent",
    "verl",
    "skyrl",
    "openrlhf",
    "slime",
)
EXPORT_FORMATS = ("agentworldbench", "wm-sft", "wm-dpo")


class ImportResult(BaseModel):
    """What an import wrote."""

    model_config = ConfigDict(extra="forbid")

    format: str
    output: str
    trajectories: int
    steps: int
    domains: dict[str, int]
    duplicates: list[str] = Field(
        default_factory=list, description="repeated samples kept under a suffixed id"
    )


def import_trajectories(
    fmt: str, sources: list[Path], output: str | os.PathLike[str]
) -> ImportResult:
    """Read *sources* in format *fmt* and write them as fidelity JSONL (atomically)."""
    distinct_output(output, sources)
    duplicates: list[str] = []
    if fmt == "agentworldbench":
        from fidelity.formats.agentworldbench import import_agentworldbench

        imported = import_agentworldbench(sources)
        trajectories, duplicates = imported.trajectories, imported.duplicates
    elif fmt in {"swe-agent", "mini-swe-agent"}:
        trajectories = distinct_ids([_read_run(fmt, source) for source in sources])
    elif fmt in {"verl", "skyrl", "openrlhf", "slime"}:
        from fidelity.formats.rl_import import read_rl

        trajectories = distinct_ids(read_rl(fmt, sources))
    else:
        raise UsageError(f"unknown import format {fmt!r}; formats: {', '.join(IMPORT_FORMATS)}")
    seen: set[str] = set()
    for trajectory in trajectories:
        if trajectory.id in seen:
            raise UsageError(f"two imported trajectories have the id {trajectory.id!r}")
        seen.add(trajectory.id)
    write_trajectories(output, trajectories)
    domains: dict[str, int] = {}
    for trajectory in trajectories:
        domains[trajectory.domain.value] = domains.get(trajectory.domain.value, 0) + 1
    return ImportResult(
        format=fmt,
        output=str(output),
        trajectories=len(trajectories),
        steps=sum(len(t.steps) for t in trajectories),
        domains=domains,
        duplicates=duplicates,
    )


def _read_run(fmt: str, source: Path) -> Trajectory:
    """One agent run file in *fmt*; a file in another shape says which one it looks like."""
    looks = sniff_format(source)
    if looks is not None and looks != fmt:
        supported = ", ".join(IMPORT_FORMATS)
        hint = f"; use `fidelity import {looks}`" if looks in IMPORT_FORMATS else ""
        raise InputFormatError(
            str(source), None, None, f"looks like {looks}, not {fmt} (supported: {supported}){hint}"
        )
    if fmt == "mini-swe-agent":
        from fidelity.formats.mini_swe_agent import read_mini_swe_agent

        return read_mini_swe_agent(source)
    from fidelity.formats.swe_agent import read_swe_agent

    return read_swe_agent(source)


def distinct_ids(trajectories: list[Trajectory]) -> list[Trajectory]:
    """*trajectories* with repeated ids (several runs of one instance) made distinct.

    The first run keeps its id; later ones get ``~2``, ``~3``… in input order.
    """
    counts: dict[str, int] = {}
    taken = {t.id for t in trajectories}
    out: list[Trajectory] = []
    for trajectory in trajectories:
        n = counts[trajectory.id] = counts.get(trajectory.id, 0) + 1
        if n == 1:
            out.append(trajectory)
            continue
        new = f"{trajectory.id}~{n}"
        while new in taken:
            n += 1
            new = f"{trajectory.id}~{n}"
        taken.add(new)
        out.append(trajectory.model_copy(update={"id": new}))
    return out


def sniff_format(path: Path) -> str | None:
    """The agent-run format a file looks like, or None when it cannot tell.

    A JSON object with ``trajectory_format`` ``mini-swe-agent…`` or with
    ``messages`` is mini-swe-agent, one with ``trajectory`` or ``history`` is
    SWE-agent; a JSON list of events with ``action``/``observation`` keys is an
    OpenHands event log; JSON lines with ``steps`` are fidelity JSONL already.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        first = text.lstrip().split("\n", 1)[0]
        return "fidelity JSONL" if '"steps"' in first and '"domain"' in first else None
    except RecursionError:  # nested too deep to tell: the reader names the file and why
        return None
    if isinstance(data, list):
        events = [e for e in data[:50] if isinstance(e, dict)]
        if any("observation" in e or "action" in e for e in events):
            return "openhands (event log)"
        return None
    if not isinstance(data, dict):
        return None
    style = data.get("trajectory_format")
    if (isinstance(style, str) and style.startswith("mini-swe-agent")) or (
        "messages" in data and "trajectory" not in data
    ):
        return "mini-swe-agent"
    if "trajectory" in data or "history" in data:
        return "swe-agent"
    return None


def export_trajectories(fmt: str, simulated: Path, output: str | os.PathLike[str]) -> BaseModel:
    """Write the predictions of a simulated JSONL file in format *fmt* (``agentworldbench``;
    ``wm-sft`` and ``wm-dpo`` read a stored run: :mod:`fidelity.formats.wm_export`)."""
    if fmt != "agentworldbench":
        raise UsageError(f"unknown export format {fmt!r}; formats: {', '.join(EXPORT_FORMATS)}")
    from fidelity.formats.agentworldbench import export_predictions

    return export_predictions(simulated, output)
