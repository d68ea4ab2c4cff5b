"""Drift risk without replay: a risk for every step and trajectory of a simulated dataset.

Read from the simulated data alone (:mod:`.features`), fitted on labelled steps
(replayed and compared, or a dev set's labels) as a monotone, cross-fitted logistic
regression (:mod:`.model`), applied to a stream of trajectories (:mod:`.score`). No I/O:
callers read datasets and the store (:mod:`fidelity.risk_runs`). See ``docs/risk.md``.

Public API:

- :func:`step_features` (:class:`StepFeatures`, :data:`FEATURES`, :func:`sample_groups`)
- :class:`RiskModel` (``fit``, ``score``), :func:`cross_fit` (:class:`CrossFit`),
  :func:`trajectory_risk`, :func:`prior_model`
- :func:`score_trajectories` (:class:`TrajectoryScore`)
"""

from __future__ import annotations

from fidelity.risk.features import FEATURES, StepFeatures, action_key, sample_groups, step_features
from fidelity.risk.model import (
    ActionRates,
    CrossFit,
    RiskModel,
    cross_fit,
    fold_assignment,
    prior_model,
    trajectory_risk,
)
from fidelity.risk.score import TrajectoryScore, score_trajectories

__all__ = [
    "FEATURES",
    "ActionRates",
    "CrossFit",
    "RiskModel",
    "StepFeatures",
    "TrajectoryScore",
    "action_key",
    "cross_fit",
    "fold_assignment",
    "prior_model",
    "sample_groups",
    "score_trajectories",
    "step_features",
    "trajectory_risk",
]
