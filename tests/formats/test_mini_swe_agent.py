"""mini-swe-agent .traj.json files import as real trajectories; formats are told apart."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fidelity.errors import InputFormatError
from fidelity.formats.convert import import_trajectories, sniff_format
from fidelity.formats.jsonl import read_trajectories
from fidelity.formats.mini_swe_agent import read_mini_swe_agent
from fidelity.trajectory import CommandAction
from tests.conftest import unavailable

DATA = Path(__file__).parent / "data"
TRAJ = DATA / "mini_swe_agent" / "astropy__astropy-14182.traj.json"
SWE_AGENT = DATA / "swe_agent" / "astropy__astropy-12907.traj"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "agent-trajectories"


def test_commands_and_outputs_become_steps() -> None:
    trajectory = read_mini_swe_agent(TRAJ)
    assert trajectory.id == "astropy__astropy-14182"
    assert trajectory.source == "real"
    actions = [s.action for s in trajectory.steps]
    # the answer to two fenced blocks was a format error: nothing ran, no step
    assert actions == [
        CommandAction(command='grep -n "class RST" astropy/io/ascii/rst.py'),
        CommandAction(command="python reproduce.py"),
        CommandAction(command="python serve.py"),
        CommandAction(
            command="echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached"
        ),
    ]
    first, failed, timeout, submit = [s.observation for s in trajectory.steps]
    assert first is not None and (first.text, first.exit_code) == ("35:class RST(FixedWidth):\n", 0)
    assert failed is not None and failed.exit_code == 1
    assert failed.text.endswith("unexpected keyword argument 'header_rows'\n")
    assert timeout is not None and (timeout.timed_out, timeout.text) == (True, "serving\n")
    assert submit is not None and submit.exit_code is None
    assert submit.text.startswith("diff --git a/astropy/io/ascii/rst.py")
    assert trajectory.meta["mini_swe_agent"] == {
        "exit_status": "Submitted",
        "submission": "diff --git a/x b/x\n",
    }


def test_two_runs_of_one_instance_get_distinct_ids(tmp_path: Path) -> None:
    again = tmp_path / "run2" / TRAJ.name
    again.parent.mkdir()
    shutil.copy(TRAJ, again)
    result = import_trajectories("mini-swe-agent", [TRAJ, again], tmp_path / "out.jsonl")
    assert result.trajectories == 2
    ids = [t.id for t in read_trajectories(tmp_path / "out.jsonl")]
    assert ids == ["astropy__astropy-14182", "astropy__astropy-14182~2"]


def test_a_file_of_the_other_format_says_what_it_looks_like(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match=r"looks like swe-agent, not mini-swe-agent"):
        import_trajectories("mini-swe-agent", [SWE_AGENT], tmp_path / "out.jsonl")
    with pytest.raises(InputFormatError, match=r"looks like mini-swe-agent.*supported: "):
        import_trajectories("swe-agent", [TRAJ], tmp_path / "out.jsonl")
    events = tmp_path / "events.json"
    events.write_text(json.dumps([{"id": 1, "source": "agent", "action": "run"}]))
    with pytest.raises(InputFormatError, match=r"looks like openhands \(event log\)"):
        import_trajectories("swe-agent", [events], tmp_path / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()


def test_sniffing_reads_each_shape() -> None:
    assert sniff_format(TRAJ) == "mini-swe-agent"
    assert sniff_format(SWE_AGENT) == "swe-agent"


def test_messages_that_are_not_a_list_are_rejected(tmp_path: Path) -> None:
    bad = tmp_path / "bad.traj.json"
    bad.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1", "messages": {}}))
    with pytest.raises(InputFormatError, match=r"bad.traj.json: messages: missing or not a list"):
        read_mini_swe_agent(bad)


def test_every_shared_public_run_imports(tmp_path: Path) -> None:
    """The 122 public mini-swe-agent runs beside the checkout import without error."""
    runs = sorted((SHARED / "mini-swe-agent").glob("*.traj.json"))
    if not runs:
        unavailable("../shared/agent-trajectories is not beside this checkout")
    result = import_trajectories("mini-swe-agent", runs, tmp_path / "out.jsonl")
    assert result.trajectories == len(runs)
    assert result.steps > 20 * len(runs)
    exits = {
        s.observation.exit_code
        for t in read_trajectories(tmp_path / "out.jsonl")
        for s in t.steps
        if s.observation is not None
    }
    assert {0, 1} <= exits


def test_the_task_and_the_system_message_are_the_trajectorys() -> None:
    """The problem statement between the instance template's markers is the instruction (the
    fixture's run records no template: the ``<pr_description>`` markers tell); the system
    message is the system prompt."""
    trajectory = read_mini_swe_agent(TRAJ)
    assert trajectory.instruction == "RST writer ignores header_rows."
    assert trajectory.system_prompt is not None
    assert trajectory.system_prompt.startswith("You are a helpful assistant that can interact")


def test_public_runs_give_their_problem_statements(tmp_path: Path) -> None:
    """The shared runs record their instance template (``info.config.agent``): the instruction
    is exactly what it put in ``{{task}}``, never the template's own instructions."""
    runs = sorted((SHARED / "mini-swe-agent").glob("*.traj.json"))
    if not runs:
        unavailable("../shared/agent-trajectories is not beside this checkout")
    first = read_mini_swe_agent(SHARED / "mini-swe-agent" / "astropy__astropy-13033.traj.json")
    assert first.instruction is not None
    assert first.instruction.startswith(
        "TimeSeries: misleading exception when required column check fails."
    )
    assert first.instruction.endswith("Matplotlib 3.5.1\r\n```")
    for run in runs:
        trajectory = read_mini_swe_agent(run)
        assert trajectory.instruction and trajectory.system_prompt
        assert "<instructions>" not in trajectory.instruction
        assert "</pr_description>" not in trajectory.instruction
