"""Issue acceptance: two real replays agree; a doctored copy is caught step by step."""

from __future__ import annotations

from pathlib import Path

import pytest

from fidelity.batch import replay_suite
from fidelity.diffing import diff_files
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.resources import default_suite
from fidelity.trajectory import Observation, Trajectory

pytestmark = [pytest.mark.slow, pytest.mark.bwrap, pytest.mark.usefixtures("bwrap")]

INVENTED_TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "/workspace/src/logstats/quantum.py", line 12, in <module>\n'
    "    import flux_capacitor\n"
    "ModuleNotFoundError: No module named 'flux_capacitor'\n"
)


@pytest.fixture(scope="module")
def replays(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The whole bundled suite replayed twice (other times, PIDs, temp names, commit ids)."""
    folder = tmp_path_factory.mktemp("replays")
    first, second = folder / "real1.jsonl", folder / "real2.jsonl"
    replay_suite(default_suite("terminal"), first)
    replay_suite(default_suite("terminal"), second)
    return first, second


def test_two_real_replays_drift_on_under_two_percent(replays: tuple[Path, Path]) -> None:
    result = diff_files(*replays)
    assert len(result.rows) >= 300 and not result.only_real and not result.only_sim
    assert result.drift_rate < 0.02, [r.reasons for r in result.rows if r.drift][:5]
    assert not any(r.hallucinations for r in result.rows)


def _find(trajectories: list[Trajectory], predicate) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    for t_index, trajectory in enumerate(trajectories):
        for s_index, step in enumerate(trajectory.steps):
            if step.observation is not None and predicate(step.action.render(), step.observation):
                return t_index, s_index
    raise AssertionError("no step of the suite matches")


def _alter(
    trajectories: list[Trajectory], where: tuple[int, int], observation: Observation
) -> None:
    t_index, s_index = where
    steps = list(trajectories[t_index].steps)
    steps[s_index] = steps[s_index].model_copy(update={"observation": observation})
    trajectories[t_index] = trajectories[t_index].model_copy(update={"steps": steps})


def test_every_doctored_step_is_flagged(replays: tuple[Path, Path], tmp_path: Path) -> None:
    real, copy = replays
    doctored = read_trajectories(copy)

    def pick(predicate) -> tuple[int, int]:  # type: ignore[no-untyped-def]
        return _find(doctored, predicate)  # the four predicates below never pick the same step

    ls_step = pick(lambda cmd, obs: cmd.startswith("ls") and obs.exit_code == 0 and obs.text)
    wc_step = pick(lambda cmd, obs: cmd.startswith("wc -l") and obs.exit_code == 0)
    exit_step = pick(lambda cmd, obs: cmd.startswith("cat ") and obs.exit_code == 0)
    python_step = pick(lambda cmd, obs: cmd.startswith("python3 ") and obs.exit_code == 0)

    ls_obs = _at(doctored, ls_step)[1]
    _alter(doctored, ls_step, ls_obs.model_copy(update={"text": ls_obs.text + "deploy_keys.pem\n"}))
    wc_obs = _at(doctored, wc_step)[1]
    count = wc_obs.text.split()[0]
    _alter(
        doctored, wc_step, wc_obs.model_copy(update={"text": wc_obs.text.replace(count, "9173", 1)})
    )
    exit_obs = _at(doctored, exit_step)[1]
    _alter(doctored, exit_step, exit_obs.model_copy(update={"exit_code": 1}))
    py_obs = _at(doctored, python_step)[1]
    _alter(
        doctored,
        python_step,
        py_obs.model_copy(update={"text": py_obs.text + INVENTED_TRACEBACK, "exit_code": 1}),
    )

    path = tmp_path / "doctored.jsonl"
    write_trajectories(path, doctored)
    rows = {(r.trajectory_id, r.step): r for r in diff_files(real, path).rows}

    def row(where: tuple[int, int]):  # type: ignore[no-untyped-def]
        return rows[(doctored[where[0]].id, where[1] + 1)]

    assert row(ls_step).drift and "file:deploy_keys.pem" in row(ls_step).hallucinations
    assert row(wc_step).drift and "number:9173" in row(wc_step).hallucinations
    assert row(exit_step).drift and row(exit_step).exit_match is False
    traceback = row(python_step)
    assert traceback.drift and traceback.exit_match is False
    assert "error:ModuleNotFoundError" in traceback.hallucinations
    assert any("quantum.py" in entity for entity in traceback.hallucinations)
    flagged = {key for key, r in rows.items() if r.drift}
    altered = {(doctored[t].id, s + 1) for t, s in (ls_step, wc_step, exit_step, python_step)}
    assert altered <= flagged
    assert len(flagged - altered) <= 0.02 * len(rows)  # nothing else newly flagged beyond noise


def _at(trajectories: list[Trajectory], where: tuple[int, int]) -> tuple[str, Observation]:
    step = trajectories[where[0]].steps[where[1]]
    assert step.observation is not None
    return step.action.render(), step.observation
