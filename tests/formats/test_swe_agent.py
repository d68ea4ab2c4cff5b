"""SWE-agent .traj files import as real trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fidelity.errors import InputFormatError
from fidelity.formats.convert import import_trajectories
from fidelity.formats.jsonl import read_trajectories
from fidelity.formats.swe_agent import read_swe_agent
from fidelity.model import CommandAction
from tests.conftest import unavailable

TRAJ = Path(__file__).parent / "data" / "swe_agent" / "astropy__astropy-12907.traj"


def test_traj_imports_as_a_real_swe_trajectory(tmp_path: Path) -> None:
    result = import_trajectories("swe-agent", [TRAJ], tmp_path / "out.jsonl")
    assert (result.trajectories, result.steps, result.domains) == (1, 3, {"swe": 1})
    (trajectory,) = read_trajectories(tmp_path / "out.jsonl")
    assert trajectory.id == "astropy__astropy-12907"
    assert trajectory.source == "real"
    assert trajectory.steps[0].action == CommandAction(command='find_file "parser.py"')
    assert trajectory.steps[2].action == CommandAction(
        command="python -m pytest astropy/io/tests/test_parser.py -q"
    )
    assert trajectory.steps[2].observation is not None
    assert trajectory.steps[2].observation.text == "..F\n1 failed, 2 passed in 0.31s"
    assert trajectory.meta["swe_agent"] == {
        "exit_status": "submitted",
        "submission": "diff --git a/x b/x\n",
    }


def test_traj_without_trajectory_or_history_is_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "bad.traj"
    bad.write_text(json.dumps({"environment": "swe_main"}))
    with pytest.raises(InputFormatError, match=r"bad.traj: trajectory: missing or not a list"):
        read_swe_agent(bad)
    bad.write_text(json.dumps({"history": []}))
    with pytest.raises(InputFormatError, match=r"bad.traj: history: no entry with an action"):
        read_swe_agent(bad)


def test_history_only_traj_reads_actions_and_answers(tmp_path: Path) -> None:
    """Older SWE-agent files keep only ``history``: assistant actions, user answers."""
    data = json.loads(TRAJ.read_text())
    history = [
        {"role": "system", "content": "SETTING: ...", "agent": "primary"},
        {"role": "user", "content": "We're currently solving ...", "agent": "primary"},
        {"role": "assistant", "content": "Check.\n```\nls\n```", "action": "ls\n"},
        {"role": "user", "content": "setup.py\nsrc\n(Open file: n/a)\nbash-$"},
        {"role": "assistant", "content": "Run it.\n```\npython -m pytest -q\n```"},
        {"role": "user", "content": "1 passed in 0.01s"},
    ]
    only = tmp_path / "old.traj"
    only.write_text(
        json.dumps({"environment": "swe_main", "history": history, "info": data["info"]})
    )
    trajectory = read_swe_agent(only)
    assert [s.action for s in trajectory.steps] == [
        CommandAction(command="ls"),
        CommandAction(command="python -m pytest -q"),
    ]
    assert [s.observation.text for s in trajectory.steps if s.observation] == [
        "setup.py\nsrc\n(Open file: n/a)\nbash-$",
        "1 passed in 0.01s",
    ]


def test_public_swe_agent_demonstrations_import(tmp_path: Path) -> None:
    """The shared SWE-agent CTF demonstrations import, and only as swe-agent."""
    shared = Path(__file__).resolve().parents[3] / "shared" / "agent-trajectories" / "swe-agent-ctf"
    runs = sorted(shared.glob("*.traj"))
    if not runs:
        unavailable("../shared/agent-trajectories is not beside this checkout")
    result = import_trajectories("swe-agent", runs, tmp_path / "out.jsonl")
    assert result.trajectories == len(runs) and result.steps >= len(runs)
