"""SWE-agent .traj files import as real trajectories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fidelity.errors import InputFormatError
from fidelity.formats.convert import import_trajectories
from fidelity.formats.jsonl import read_trajectories
from fidelity.formats.swe_agent import read_swe_agent
from fidelity.trajectory import CommandAction
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


def test_the_problem_statement_and_the_system_message(tmp_path: Path) -> None:
    """SWE-agent 1.x records its problem statement in ``replay_config``; older files put it in
    the first user message between ``ISSUE:`` and ``INSTRUCTIONS:``; the system message of
    ``history`` is the system prompt."""
    data = json.loads(TRAJ.read_text())
    first_user = (
        "We're currently solving the following issue within our repository. Here's the issue "
        "text:\nISSUE:\nThe parser drops the last row.\n\nINSTRUCTIONS:\nNow, you're going..."
    )
    data["history"] = [
        {"role": "system", "content": "SETTING: You are an autonomous programmer."},
        {"role": "user", "content": "A demonstration.", "is_demo": True},
        {"role": "user", "content": [{"type": "text", "text": first_user}]},
    ]
    old = tmp_path / "old.traj"
    old.write_text(json.dumps(data))
    trajectory = read_swe_agent(old)
    assert trajectory.instruction == "The parser drops the last row."
    assert trajectory.system_prompt == "SETTING: You are an autonomous programmer."
    data["replay_config"] = json.dumps({"problem_statement": {"type": "text", "text": "Fix #12."}})
    new = tmp_path / "new.traj"
    new.write_text(json.dumps(data))
    assert read_swe_agent(new).instruction == "Fix #12."


def test_public_ctf_demonstrations_carry_their_challenge(tmp_path: Path) -> None:
    shared = Path(__file__).resolve().parents[3] / "shared" / "agent-trajectories" / "swe-agent-ctf"
    run = shared / "crypto__BabyEncryption.traj"
    if not run.exists():
        unavailable("../shared/agent-trajectories is not beside this checkout")
    trajectory = read_swe_agent(run)
    assert trajectory.instruction is not None
    assert trajectory.instruction.startswith("We're currently solving the following CTF challenge.")
    assert trajectory.instruction.endswith(
        "Files included in the challenge: ['msg.enc', 'chall.py']"
    )
    assert trajectory.system_prompt is not None
    assert trajectory.system_prompt.startswith("SETTING: You are a skilled cybersecurity")
