"""Run summaries: rates per depth and action type, trust horizon, worst steps."""

from __future__ import annotations

from pathlib import Path

from fakes.trajectories import command_trajectory
from fidelity.analysis.models import DepthRow
from fidelity.analysis.summary import summarize, trust_horizon
from fidelity.compare.base import StepComparison
from fidelity.store import Store, TimedObservation, TrajectoryRecord
from fidelity.trajectory import Observation
from tests.test_store import INFO


def _record(
    trajectory_id: str, drifts: list[bool], infra_at: int | None = None
) -> TrajectoryRecord:
    commands = ["ls", "git log", "cat a.txt", "wc -l a.txt"][: len(drifts)]
    trajectory = command_trajectory(trajectory_id, *commands)
    real = [
        TimedObservation(Observation(text=f"real {i}\n", exit_code=0)) for i in range(len(drifts))
    ]
    sim = [
        TimedObservation(Observation(text=f"sim {i}\n", exit_code=0)) for i in range(len(drifts))
    ]
    comparisons = []
    for depth, drift in enumerate(drifts, start=1):
        infra = depth == infra_at
        comparisons.append(
            StepComparison(
                score=0.0 if infra else (0.4 if drift else 1.0),
                drift=drift and not infra,
                infra_failure=infra,
                hallucinations=["file:ghost.txt"] if drift and depth == 3 else [],
                reasons=["score 0.40 < 0.90"] if drift else [],
            )
        )
    return TrajectoryRecord(trajectory, real, sim, comparisons, "teacher-forced", 0.0, 0.0)


def test_summary_figures(db_path: Path) -> None:
    with Store(db_path) as store:
        store.start_run("r", INFO)
        store.write_trajectory("r", _record("a", [False, False, True, True]))
        store.write_trajectory("r", _record("b", [False, True, True, True]))
        store.write_trajectory("r", _record("c", [False, False, False, True], infra_at=2))
        summary = summarize(store, "r", horizon_limit=0.4)
    totals = summary.totals
    assert (totals.trajectories, totals.steps, totals.compared_steps, totals.infra_failures) == (
        3,
        12,
        11,
        1,
    )
    assert totals.drift_rate == 6 / 11
    assert totals.hallucination_rate == 2 / 11
    assert [(r.depth, r.steps, round(r.drift_rate, 3)) for r in summary.by_depth] == [
        (1, 3, 0.0),
        (2, 3, 0.5),
        (3, 3, 0.667),
        (4, 3, 1.0),
    ]
    assert totals.trust_horizon == 1  # depth 2 drifts at 50% > 40%
    names = [r.action_name for r in summary.by_action]
    assert names[0] == "wc" and set(names) == {"ls", "git log", "cat", "wc"}
    assert summary.worst[0].drift and summary.worst[0].score == 0.4
    assert all(not w.real_text.startswith("sim") for w in summary.worst)


def test_trust_horizon_rules() -> None:
    def rows(*rates: float) -> list[DepthRow]:
        return [
            DepthRow(depth=i, steps=10, drift_rate=r, hallucination_rate=0, mean_score=1)
            for i, r in enumerate(rates, start=1)
        ]

    assert trust_horizon(rows(0.0, 0.05, 0.2, 0.0), 0.1) == 2
    assert trust_horizon(rows(0.5), 0.1) == 0
    assert trust_horizon(rows(0.0, 0.0, 0.0), 0.1) == 3
    assert trust_horizon([], 0.1) == 0
