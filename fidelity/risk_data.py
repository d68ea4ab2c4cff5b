"""What the drift risk reads: a simulated dataset to score, a stored run to fit on.

``fidelity risk DATASET [--db DB --run RUN]`` calls :func:`risk_model` and
:func:`score_dataset`; the statistics are :mod:`fidelity.risk`'s (no I/O there).

**Fitted on a run.** Any run that compared real and simulated observations will do (an
audit, a dataset gate, ``fidelity diff --db``). Each simulation of a trajectory (mode, sample) is rebuilt
from the store as the simulated trajectory it was (the actions and the simulated
observations, in depth order); its compared steps are labelled by the comparator's drift
verdict, infrastructure failures left out of the fit (they stay in the history). The
store is read through the named query ``risk_labelled_steps`` of
:mod:`fidelity.store_queries`.

A run's stored observations carry no token log-probabilities, so a model fitted on a run
gives those features no weight; several samples per step (``--samples``) are read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fidelity import store_queries as queries
from fidelity.defaults import DEFAULT_DB
from fidelity.errors import InputFormatError, NotFoundError, UsageError
from fidelity.risk.features import StepFeatures, sample_groups, step_features
from fidelity.risk.model import FOLDS, CrossFit, RiskModel, cross_fit, prior_model
from fidelity.risk.score import TrajectoryScore, score_trajectories
from fidelity.trajectory import Domain, Observation, Step, Trajectory

if TYPE_CHECKING:
    from fidelity.store import Store


@dataclass
class LabelledSteps:
    """Labelled simulated steps: ``features[i]`` drifted when ``labels[i]``; ``groups[i]``
    is its trajectory's id (the cross-fitting unit)."""

    features: list[StepFeatures] = field(default_factory=list)
    labels: list[bool] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)

    @property
    def drifted(self) -> int:
        return sum(self.labels)


def run_trajectories(store: Store, run_id: str) -> Iterator[tuple[Trajectory, list[bool | None]]]:
    """Each simulated trajectory of run *run_id* (a trajectory per mode and sample, ``meta``
    naming its ``source_id``, ``mode`` and ``sample``) with each step's label: drifted,
    not, or None (an infrastructure failure)."""
    from fidelity.store import action_adapter

    adapter = action_adapter()
    for (trajectory_id, mode, sample), rows in queries.grouped(
        store, "risk_labelled_steps", run_id
    ):
        steps = []
        labels: list[bool | None] = []
        for row in rows:
            _, _, _, _, _, action_json, text, exit_code, error, state, drift, infra = row
            observation = Observation(
                text=text or "", exit_code=exit_code, error=error, state=_state(state)
            )
            steps.append(Step(action=adapter.validate_json(action_json), observation=observation))
            labels.append(None if infra else bool(drift))
        trajectory = Trajectory(
            id=trajectory_id,
            domain=Domain(rows[0][4]),
            steps=steps,
            source="sim",
            meta={"source_id": trajectory_id, "mode": mode, "sample": sample},
        )
        yield trajectory, labels


def _state(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    decoded = json.loads(value) if isinstance(value, str) else value
    return decoded if isinstance(decoded, dict) else None


def labelled_steps(store: Store, run_id: str) -> LabelledSteps:
    """Every compared step of run *run_id* with its features and drift label.

    Raises :class:`~fidelity.errors.NotFoundError` for an unknown run and
    :class:`~fidelity.errors.UsageError` for a run with no compared step.
    """
    if queries.row(store, "summary_run", [run_id]) is None:
        raise NotFoundError(f"run {run_id!r} not found in {store.path}")
    found = LabelledSteps()
    labels_of: dict[int, list[bool | None]] = {}

    def trajectories() -> Iterator[Trajectory]:
        for trajectory, labels in run_trajectories(store, run_id):
            labels_of[id(trajectory)] = labels
            yield trajectory

    for group in sample_groups(trajectories()):  # streamed: one group of samples at a time
        for trajectory in group:
            features = step_features(trajectory, group if len(group) > 1 else ())
            for step, label in zip(features, labels_of.pop(id(trajectory)), strict=True):
                if label is not None:
                    found.features.append(step)
                    found.labels.append(label)
                    found.groups.append(trajectory.id)
    if not found.features:
        raise UsageError(
            f"run {run_id!r} in {store.path} has no comparisons to fit the drift risk on "
            "(audit, gate or `fidelity diff --db` a dataset first)"
        )
    return found


def fit_on_run(store: Store, run_id: str, folds: int = FOLDS, seed: int = 0) -> CrossFit:
    """The risk cross-fitted on run *run_id*'s compared steps (pulled toward the shipped
    prior, :func:`~fidelity.risk.model.prior_model`); folds group steps by trajectory."""
    data = labelled_steps(store, run_id)
    return cross_fit(
        data.features,
        data.labels,
        data.groups,
        folds=folds,
        seed=seed,
        prior=prior_model(),
        source=f"run {run_id}",
    )


@dataclass(frozen=True)
class ChosenModel:
    """The model that scores a dataset and a one-line account of it."""

    model: RiskModel | CrossFit
    description: str
    folds: int | None = None
    """cross-fitting folds (None: the prior)"""

    @property
    def fitted(self) -> RiskModel:
        """The model fitted on every labelled step (the prior itself without a run)."""
        return self.model.full if isinstance(self.model, CrossFit) else self.model


def risk_model(db: str | Path | None = None, run: str | None = None) -> ChosenModel:
    """The shipped prior without *run*; with it, the risk cross-fitted on that run of *db*
    (a dataset trajectory the run compared is scored by the fold that did not see it)."""
    if run is None:
        prior = prior_model()
        fit = prior.fitted
        return ChosenModel(
            prior,
            f"the shipped prior (fitted on {fit.steps} labelled steps, {fit.drifted} drifted, "
            f"of {fit.source})",
        )
    from fidelity.store import Store

    with Store(db or DEFAULT_DB, read_only=True) as store:
        crossed = fit_on_run(store, run)
    fit = crossed.full.fitted
    folds = len(crossed.folds)
    return ChosenModel(
        crossed,
        f"fitted on run {run}: {fit.steps} compared steps, {fit.drifted} drifted, "
        f"{fit.trajectories} trajectories, cross-fitted in {folds} folds",
        folds,
    )


def score_dataset(dataset: str | Path, model: RiskModel | CrossFit) -> Iterator[TrajectoryScore]:
    """Each trajectory of *dataset* (any dataset form: JSONL, compressed, Parquet, shards)
    with its risks, streamed in dataset order."""
    from fidelity.formats.dataset import trajectories

    scored = 0
    for score in score_trajectories(trajectories(dataset), model):
        scored += 1
        yield score
    if not scored:  # as the gate says it: a score of nothing is an input error, not a 0
        raise InputFormatError(str(dataset), None, None, "no trajectories in dataset")
