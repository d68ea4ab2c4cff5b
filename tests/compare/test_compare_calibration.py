"""The development set's corruptions and the shipped calibration."""

from __future__ import annotations

import random

from devsets.calibration.devset import CORRUPTIONS, build_pairs
from devsets.calibration.fit import choose_cutoff, split
from fidelity.compare import CompareContext, TerminalComparator
from fidelity.compare.calibration import FEATURES, load_calibration
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory

LS = (
    "total 12\n-rw-r--r-- 1 agent agent 229 Nov 21 00:00 Makefile\n"
    "-rw-r--r-- 1 agent agent 610 Nov 21 00:00 report.py\n"
)
NEW = "-rw-r--r-- 1 agent agent 0 Nov 21 00:01 new.py\n"


def _trajectory(text: str, tid: str = "t-1") -> Trajectory:
    steps = [
        Step(
            action=CommandAction(command="ls -l"), observation=Observation(text=text, exit_code=0)
        ),
        Step(action=CommandAction(command="touch new.py"), observation=Observation(exit_code=0)),
        Step(
            action=CommandAction(command="ls -l"),
            observation=Observation(
                text=text + "-rw-r--r-- 1 agent agent 0 Nov 21 00:01 new.py\n", exit_code=0
            ),
        ),
    ]
    return Trajectory(id=tid, domain="terminal", steps=steps)


def test_every_corruption_is_seeded_and_changes_the_observation() -> None:
    obs = Observation(text=LS + "cat: x: No such file or directory\n", exit_code=1)
    history = [Step(action=CommandAction(command="ls -l"), observation=obs)]
    for kind, corrupt in CORRUPTIONS.items():
        if kind == "stale_state":
            continue
        first = corrupt(obs, history, random.Random(3))
        again = corrupt(obs, history, random.Random(3))
        assert first is not None and first == again, kind
        assert first[0] != obs, kind


def test_pairs_are_reproducible_and_labeled() -> None:
    first, second = [_trajectory(LS)], [_trajectory(LS.replace("00:00", "00:07"))]
    pairs = list(build_pairs(first, second, seed=1))
    assert pairs == list(build_pairs(first, second, seed=1))
    kinds = {p.kind for p in pairs}
    assert {"faithful", "stale_state", "invented_entry", "changed_number"} <= kinds
    comparator = TerminalComparator()
    for pair in pairs:
        result = comparator.compare(pair.real, pair.sim, pair.context)
        assert result.drift == pair.drift, pair.kind


def test_split_keeps_trajectories_whole() -> None:
    trajectories = [_trajectory(LS, f"t-{i}") for i in range(20)]
    train, test = split(list(build_pairs(trajectories, trajectories, seed=5)), seed=5)
    assert train and test
    assert not {p.trajectory_id for p in train} & {p.trajectory_id for p in test}


def test_cutoff_respects_false_alarms() -> None:
    assert 0.2 < choose_cutoff([0.1, 0.3, 0.9, 0.95], [0, 0, 1, 1]) < 0.9


def test_shipped_calibration_loads() -> None:
    calibration = load_calibration("terminal")
    assert calibration is not None and calibration.features == list(FEATURES)
    assert load_calibration("android") is None
    context = CompareContext(action=CommandAction(command="ls"))
    assert calibration.probability([0.0] * len(FEATURES)) < calibration.cutoff
    assert (
        TerminalComparator()
        .compare(Observation(text="a\n"), Observation(text="b\n"), context)
        .drift
    )
