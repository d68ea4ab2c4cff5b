"""RecordedWorldModel: a simulated dataset played back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from fidelity.errors import UsageError
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory
from fidelity.worldmodels.recorded import RecordedWorldModel

PATH = "data/sim.jsonl"


@pytest.fixture
def model(make_trajectory: Callable[..., Trajectory]) -> RecordedWorldModel:
    sim = make_trajectory("t-1", texts=("sim ls\n", "sim cat\n", "sim echo\n"))
    bare = make_trajectory("t-2").model_copy(
        update={"steps": [Step(action=CommandAction(command="ls"))]}
    )
    return RecordedWorldModel([sim, bare], PATH)


def ask(model: RecordedWorldModel, trajectory: Trajectory, depth: int, command: str) -> Observation:
    action = CommandAction(command=command)
    return asyncio.run(model.predict(trajectory, trajectory.steps[: depth - 1], action, depth))


def test_returns_recorded_observation_by_id_and_depth(
    model: RecordedWorldModel, make_trajectory: Callable[..., Trajectory]
) -> None:
    real = make_trajectory("t-1")
    assert ask(model, real, 1, "ls") == Observation(text="sim ls\n", exit_code=0)
    assert ask(model, real, 3, "echo hi") == Observation(text="sim echo\n", exit_code=0)


def test_action_mismatch_is_an_error(
    model: RecordedWorldModel, make_trajectory: Callable[..., Trajectory]
) -> None:
    observation = ask(model, make_trajectory("t-1"), 2, "cat OTHER.md")
    assert observation.error == (
        f"RecordingMismatchError: {PATH}: trajectory 't-1' step 2: recorded action "
        "'cat README.md' differs from the replayed action 'cat OTHER.md'"
    )


@pytest.mark.parametrize(
    ("tid", "depth", "command", "expected"),
    [
        ("t-9", 1, "ls", f"NotFoundError: {PATH}: trajectory 't-9' is not in the recorded dataset"),
        ("t-1", 4, "ls", f"NotFoundError: {PATH}: trajectory 't-1' has 3 steps, no step 4"),
        (
            "t-2",
            1,
            "ls",
            f"NotFoundError: {PATH}: trajectory 't-2' step 1 has no recorded observation",
        ),
    ],
)
def test_missing_data_is_an_error_naming_file_and_id(
    model: RecordedWorldModel,
    make_trajectory: Callable[..., Trajectory],
    tid: str,
    depth: int,
    command: str,
    expected: str,
) -> None:
    observation = ask(model, make_trajectory(tid), depth, command)
    assert observation.error == expected
    assert observation.text == ""


def test_duplicate_ids_are_refused(make_trajectory: Callable[..., Trajectory]) -> None:
    with pytest.raises(UsageError, match="'t-1' appears twice"):
        RecordedWorldModel([make_trajectory("t-1"), make_trajectory("t-1")], PATH)


def test_describe_names_the_dataset(model: RecordedWorldModel) -> None:
    info = model.describe()
    assert info["backend"] == "recorded"
    assert info["path"] == PATH
    assert info["trajectories"] == "2"
    assert len(info["dataset_hash"]) == 16
