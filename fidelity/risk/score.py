"""Score a stream of simulated trajectories: a drift risk per step and per trajectory.

One pass, one group of samples in memory at a time (:func:`~fidelity.risk.features.sample_groups`),
so a dataset of any size streams. The caller reads the dataset and writes the results.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from fidelity.risk.features import sample_groups, step_features
from fidelity.risk.model import CrossFit, RiskModel, trajectory_risk
from fidelity.trajectory import Trajectory

ROUND = 6
"""Decimals of a risk in the JSON lines."""


@dataclass(frozen=True)
class TrajectoryScore:
    """The drift risks of one trajectory's steps (in depth order) and of the trajectory
    (:func:`~fidelity.risk.model.trajectory_risk`, ``1 - Π(1 - r)``)."""

    trajectory_id: str
    steps: list[float]
    risk: float


def model_for(model: RiskModel | CrossFit, trajectory: Trajectory) -> RiskModel:
    """The model that scores *trajectory*: with a cross-fit, the fold's that did not see
    it (looked up by its id, then by ``meta.source_id``), else the full model."""
    if isinstance(model, RiskModel):
        return model
    if trajectory.id in model.fold_of:
        return model.model_for(trajectory.id)
    source = trajectory.meta.get("source_id")
    return model.model_for(source) if isinstance(source, str) else model.full


def score_trajectories(
    trajectories: Iterable[Trajectory], model: RiskModel | CrossFit
) -> Iterator[TrajectoryScore]:
    """Each trajectory's risks, in the order given (samples of one step sequence, adjacent,
    also give each other's ``sample_spread``)."""
    for group in sample_groups(trajectories):
        for trajectory in group:
            features = step_features(trajectory, group if len(group) > 1 else ())
            risks = model_for(model, trajectory).score(features)
            yield TrajectoryScore(trajectory.id, risks, trajectory_risk(risks))


def jsonl_lines(score: TrajectoryScore) -> list[str]:
    """One JSON line per step ``{"trajectory_id", "step", "risk"}``, then the trajectory's
    (``"step": null``)."""
    lines = [
        json.dumps(
            {"trajectory_id": score.trajectory_id, "step": depth, "risk": round(risk, ROUND)},
            ensure_ascii=False,
        )
        + "\n"
        for depth, risk in enumerate(score.steps, start=1)
    ]
    lines.append(
        json.dumps(
            {"trajectory_id": score.trajectory_id, "step": None, "risk": round(score.risk, ROUND)},
            ensure_ascii=False,
        )
        + "\n"
    )
    return lines


AT_RISK = 0.5
"""A trajectory at or above this risk is counted *at risk* in the summary."""

_ID_WIDTH = 40


def table_header() -> str:
    """The header line of the table (``fidelity risk --format table``)."""
    return f"{'trajectory':<{_ID_WIDTH}} {'steps':>5} {'risk':>6}  riskiest step\n"


def table_row(score: TrajectoryScore) -> str:
    """One trajectory's line of the table: its id, steps, risk and riskiest step."""
    if score.steps:
        worst = max(range(len(score.steps)), key=lambda i: score.steps[i])
        riskiest = f"{worst + 1} ({score.steps[worst]:.3f})"
    else:
        riskiest = "-"
    return (
        f"{score.trajectory_id:<{_ID_WIDTH}} {len(score.steps):>5} {score.risk:>6.3f}  {riskiest}\n"
    )


@dataclass
class RiskSummary:
    """Running totals of a scored dataset (constant memory)."""

    trajectories: int = 0
    steps: int = 0
    step_risk: float = 0.0
    trajectory_risk: float = 0.0
    at_risk: int = 0

    def add(self, score: TrajectoryScore) -> None:
        self.trajectories += 1
        self.steps += len(score.steps)
        self.step_risk += sum(score.steps)
        self.trajectory_risk += score.risk
        self.at_risk += score.risk >= AT_RISK

    def means(self) -> tuple[float, float]:
        """(mean step risk, mean trajectory risk); 0 for an empty dataset."""
        return (
            self.step_risk / self.steps if self.steps else 0.0,
            self.trajectory_risk / self.trajectories if self.trajectories else 0.0,
        )

    def line(self) -> str:
        """The table's last line."""
        step, trajectory = self.means()
        return (
            f"{self.trajectories} trajectories, {self.steps} steps: mean step risk {step:.3f}, "
            f"mean trajectory risk {trajectory:.3f}; {self.at_risk} at risk >= {AT_RISK}"
        )

    def as_json(self, fitted: RiskModel, description: str, folds: int | None) -> str:
        """The summary and the model's provenance as one JSON object."""
        step, trajectory = self.means()
        info = fitted.fitted
        return json.dumps(
            {
                "model": {
                    "description": description,
                    "source": info.source,
                    "steps": info.steps,
                    "drifted": info.drifted,
                    "trajectories": info.trajectories,
                    "folds": folds,
                    "held_out": info.held_out,
                },
                "trajectories": self.trajectories,
                "steps": self.steps,
                "mean_step_risk": round(step, ROUND),
                "mean_trajectory_risk": round(trajectory, ROUND),
                "at_risk": self.at_risk,
                "at_risk_threshold": AT_RISK,
            },
            ensure_ascii=False,
        )
