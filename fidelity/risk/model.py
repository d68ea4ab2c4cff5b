"""The drift-risk model: a monotone logistic regression over a step's features, cross-fitted.

``P(drift) = sigmoid(intercept + Σ coef_i · t_i(x_i) + action_coef · logit(action rate))``

- ``x_i`` are the numeric features of :data:`~fidelity.risk.features.FEATURES`,
  transformed by ``t_i`` (:data:`TRANSFORMS`: ``log1p`` for counts, sizes and the depth,
  as is for surprisal and sample spread, all non-decreasing); a feature not measured on
  a step (``None``) takes the mean it had where it was measured in the fit (``impute``);
  a feature never measured in the fit gets no weight;
- the *action rate* is the drift rate of the step's category, shrunk level by level
  toward its parent's (:class:`ActionRates`): all steps → the domain → the action type
  (``ls``, ``python -m pytest``, ``click``…) → the action type with the observation's
  shape (empty, short, long). Fitting it, a step's own trajectory is left out of the
  rates it sees, so its weight is not learnt from its own label;
- every weight is constrained to be non-negative (L-BFGS-B bounds, on standardized
  features with an L2 penalty), so a larger risk feature never lowers the predicted
  drift probability; a model with a negative weight is refused when loaded.

A model fitted with a *prior* (:func:`prior_model`) is pulled toward the prior's weights
instead of toward zero: with few labelled steps it stays near the prior, with many it
follows its own data, and one whose steps all drift (or none does) still has finite
weights.

**Cross-fitting** (:func:`cross_fit`): trajectories are dealt into K folds (by a hash of
their id, balanced); each fold's steps are scored by a model fitted on the other folds,
so a trajectory's risk never comes from a model that saw it. Trajectories that were not
fitted on at all are scored by the model fitted on every labelled step.

**Trajectory risk** (:func:`trajectory_risk`): the probability that at least one step
drifts, ``1 - Π(1 - r)`` (steps taken as independent), by default; the largest step risk
and the expected share of drifting steps are the other summaries.

No I/O here; numpy and scipy are imported only to fit.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from fidelity.errors import UsageError
from fidelity.risk.features import FEATURES, StepFeatures

TRANSFORMS: dict[str, Literal["log1p", "identity"]] = {
    "novel_entities": "log1p",
    "novel_numbers": "log1p",
    "novel_words": "log1p",
    "novel_chars": "log1p",
    "format_lines": "log1p",
    "contradictions": "log1p",
    "depth": "log1p",
    "size": "log1p",
    "mean_surprisal": "identity",
    "max_surprisal": "identity",
    "sample_spread": "identity",
}
"""How each feature enters the regression (every transform is non-decreasing)."""

PENALTY = 1.0
"""L2 penalty on the standardized weights (toward zero, or toward a prior's weights)."""

STRENGTH = 5.0
"""Pseudo-steps with which a category's drift rate is shrunk toward its parent's."""

FOLDS = 5
"""Cross-fitting folds (fewer when there are fewer trajectories)."""

PRIOR_FILE = "prior.json"
"""The prior model's file in ``fidelity/_data/risk/``."""

_RATE_EPS = 1e-4


class Counts(BaseModel):
    """Labelled steps of one category and how many of them drifted."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(ge=0)
    drifted: int = Field(ge=0)

    @model_validator(mode="after")
    def _at_most_steps(self) -> Counts:
        if self.drifted > self.steps:
            raise ValueError(f"drifted ({self.drifted}) exceeds steps ({self.steps})")
        return self


class ActionRates(BaseModel):
    """Drift rates per category, each shrunk toward its parent's (see the module doc).

    Keys: ``domains[domain]``, ``actions[domain][action]``,
    ``shapes[domain][action][shape]`` (``action`` is
    :func:`~fidelity.risk.features.action_key`, ``shape`` one of
    :data:`~fidelity.risk.features.SHAPES`).
    """

    model_config = ConfigDict(extra="forbid")

    strength: float = Field(default=STRENGTH, gt=0)
    total: Counts
    domains: dict[str, Counts] = Field(default_factory=dict)
    actions: dict[str, dict[str, Counts]] = Field(default_factory=dict)
    shapes: dict[str, dict[str, dict[str, Counts]]] = Field(default_factory=dict)

    def rate(self, step: StepFeatures, without: Counter[tuple[str, ...]] | None = None) -> float:
        """The step's category rate; *without* subtracts counts (a trajectory's own steps:
        ``(level, …keys)`` → drifted and ``("n", level, …keys)`` → steps)."""
        keys = (
            ("total",),
            ("domain", step.domain),
            ("action", step.domain, step.action),
            ("shape", step.domain, step.action, step.shape),
        )
        rate = 0.5
        for key in keys:
            counts = self._counts(key)
            steps, drifted = (counts.steps, counts.drifted) if counts is not None else (0, 0)
            if without is not None:
                steps -= without[("n", *key)]
                drifted -= without[key]
            prior_steps = 2.0 if key == ("total",) else self.strength
            rate = (drifted + prior_steps * rate) / (steps + prior_steps)
        return min(max(rate, _RATE_EPS), 1 - _RATE_EPS)

    def _counts(self, key: tuple[str, ...]) -> Counts | None:
        level = key[0]
        if level == "total":
            return self.total
        if level == "domain":
            return self.domains.get(key[1])
        if level == "action":
            return self.actions.get(key[1], {}).get(key[2])
        return self.shapes.get(key[1], {}).get(key[2], {}).get(key[3])

    @classmethod
    def count(
        cls, steps: Sequence[StepFeatures], labels: Sequence[bool], strength: float = STRENGTH
    ) -> ActionRates:
        """The counts of labelled *steps*."""
        tally = _tally(steps, labels)

        def counts(key: tuple[str, ...]) -> Counts:
            return Counts(steps=tally[("n", *key)], drifted=tally[key])

        domains: dict[str, Counts] = {}
        actions: dict[str, dict[str, Counts]] = defaultdict(dict)
        shapes: dict[str, dict[str, dict[str, Counts]]] = defaultdict(lambda: defaultdict(dict))
        for step in steps:
            d, a, s = step.domain, step.action, step.shape
            domains[d] = counts(("domain", d))
            actions[d][a] = counts(("action", d, a))
            shapes[d][a][s] = counts(("shape", d, a, s))
        return cls(
            strength=strength,
            total=counts(("total",)),
            domains=dict(sorted(domains.items())),
            actions={d: dict(sorted(v.items())) for d, v in sorted(actions.items())},
            shapes={
                d: {a: dict(sorted(s.items())) for a, s in sorted(v.items())}
                for d, v in sorted(shapes.items())
            },
        )


def _tally(steps: Sequence[StepFeatures], labels: Sequence[bool]) -> Counter[tuple[str, ...]]:
    """Drifted (``key``) and step (``("n", *key)``) counts per category key."""
    tally: Counter[tuple[str, ...]] = Counter()
    for step, label in zip(steps, labels, strict=True):
        for key in (
            ("total",),
            ("domain", step.domain),
            ("action", step.domain, step.action),
            ("shape", step.domain, step.action, step.shape),
        ):
            tally[("n", *key)] += 1
            tally[key] += int(label)
    return tally


class FitInfo(BaseModel):
    """What a model was fitted on (provenance, not used to score)."""

    model_config = ConfigDict(extra="forbid")

    source: str = Field(description="the labelled data: a dev set, a stored run")
    steps: int = Field(ge=0)
    drifted: int = Field(ge=0)
    trajectories: int = Field(ge=0)
    penalty: float = Field(ge=0)
    prior: bool = Field(description="pulled toward the prior's weights (else toward zero)")
    held_out: dict[str, float | int | str] = Field(
        default_factory=dict, description="held-out figures measured when it was made"
    )


class RiskModel(BaseModel):
    """A fitted, monotone drift-risk model (see the module doc); JSON-serialisable."""

    model_config = ConfigDict(extra="forbid")

    features: list[str] = Field(description="the numeric features, in FEATURES order")
    coef: list[float] = Field(description="one non-negative weight per transformed feature")
    impute: list[float] = Field(description="the transformed value of a feature not measured")
    action_coef: float = Field(ge=0, description="weight of the logit of the action rate")
    intercept: float
    actions: ActionRates
    fitted: FitInfo

    @model_validator(mode="after")
    def _monotone(self) -> RiskModel:
        if list(self.features) != list(FEATURES):
            raise ValueError(f"features must be {list(FEATURES)}, got {self.features}")
        if len(self.coef) != len(FEATURES) or len(self.impute) != len(FEATURES):
            raise ValueError(f"coef and impute need {len(FEATURES)} entries each")
        negative = [n for n, w in zip(FEATURES, self.coef, strict=True) if not w >= 0]
        if negative:
            raise ValueError(f"weights must be >= 0 (monotone risk); negative: {negative}")
        if not all(math.isfinite(x) for x in (*self.coef, *self.impute, self.intercept)):
            raise ValueError("weights, imputed values and intercept must be finite")
        return self

    def logit(self, step: StepFeatures) -> float:
        """The linear score of one step (its risk is ``sigmoid`` of this)."""
        z = self.intercept + self.action_coef * _logit(self.actions.rate(step))
        for weight, fill, name, value in zip(
            self.coef, self.impute, FEATURES, step.values(), strict=True
        ):
            if weight:
                z += weight * (fill if value is None else _transform(name, value))
        return z

    def score(self, steps: Sequence[StepFeatures]) -> list[float]:
        """The drift risk (probability in (0, 1)) of each step."""
        return [_sigmoid(self.logit(step)) for step in steps]

    @classmethod
    def fit(
        cls,
        steps: Sequence[StepFeatures],
        labels: Sequence[bool],
        groups: Sequence[str],
        *,
        prior: RiskModel | None = None,
        penalty: float = PENALTY,
        strength: float = STRENGTH,
        source: str = "labelled steps",
    ) -> RiskModel:
        """Fit on labelled *steps* (``labels[i]``: step i drifted), grouped by trajectory
        (``groups[i]``: its trajectory id; a step's own trajectory is left out of the
        action rates it is fitted with). With *prior*, weights are pulled toward the
        prior's (see the module doc). Raises :class:`~fidelity.errors.UsageError` on no
        steps or mismatched lengths."""
        if not steps:
            raise UsageError("no labelled steps to fit the drift risk on")
        if not len(steps) == len(labels) == len(groups):
            raise UsageError(
                f"{len(steps)} steps, {len(labels)} labels and {len(groups)} groups differ"
            )
        import numpy as np
        from scipy.optimize import minimize

        rates = ActionRates.count(steps, labels, strength)
        members: dict[str, list[int]] = defaultdict(list)
        for i, group in enumerate(groups):
            members[group].append(i)
        own = {
            group: _tally([steps[i] for i in at], [labels[i] for i in at])
            for group, at in members.items()
        }
        raw = [list(step.values()) for step in steps]
        present = [[v is not None for v in row] for row in raw]
        impute: list[float] = []
        for j, name in enumerate(FEATURES):
            seen = [_transform(name, row[j]) for row in raw if row[j] is not None]  # type: ignore[arg-type]
            impute.append(sum(seen) / len(seen) if seen else 0.0)
        X = np.array(
            [
                [
                    _transform(name, value) if value is not None else impute[j]
                    for j, (name, value) in enumerate(zip(FEATURES, row, strict=True))
                ]
                + [_logit(rates.rate(step, own[group]))]
                for row, step, group in zip(raw, steps, groups, strict=True)
            ]
        )
        y = np.array([float(label) for label in labels])
        used = [any(p[j] for p in present) for j in range(len(FEATURES))] + [True]
        mu = X.mean(axis=0)
        sd = X.std(axis=0)
        usable = np.array(used) & (sd > 1e-12)
        sd = np.where(usable, sd, 1.0)
        Z = (X - mu) / sd
        d = Z.shape[1]
        centre = np.zeros(d + 1)
        if prior is not None:
            prior_raw = np.array([*prior.coef, prior.action_coef])
            centre[:d] = np.where(usable, prior_raw * sd, 0.0)
            # standardized columns have mean 0: the intercept is the mean linear score
            centre[d] = sum(prior.logit(step) for step in steps) / len(steps)
        intercept_penalty = penalty if prior is not None else 0.0

        def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
            z = Z @ w[:d] + w[d]
            # log(1 + e^z) - y z, stably
            nll = float(np.sum(np.logaddexp(0.0, z) - y * z))
            p = 1.0 / (1.0 + np.exp(-z))
            gap = w - centre
            value = nll + 0.5 * penalty * float(gap[:d] @ gap[:d])
            value += 0.5 * intercept_penalty * float(gap[d] ** 2)
            grad = np.empty(d + 1)
            grad[:d] = Z.T @ (p - y) + penalty * gap[:d]
            grad[d] = float(np.sum(p - y)) + intercept_penalty * gap[d]
            return value, grad

        bounds = [(0.0, None) if ok else (0.0, 0.0) for ok in usable] + [(None, None)]
        start = np.clip(centre, 0.0, None)
        start[d] = centre[d]
        result = minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds)
        w = np.where(usable, result.x[:d], 0.0) / sd
        w = np.clip(w, 0.0, None)
        intercept = float(result.x[d] - w @ mu)
        drifted = int(sum(bool(label) for label in labels))
        return cls(
            features=list(FEATURES),
            coef=[round(float(x), 6) for x in w[: len(FEATURES)]],
            impute=[round(x, 6) for x in impute],
            action_coef=round(float(w[len(FEATURES)]), 6),
            intercept=round(intercept, 6),
            actions=rates,
            fitted=FitInfo(
                source=source,
                steps=len(steps),
                drifted=drifted,
                trajectories=len(own),
                penalty=penalty,
                prior=prior is not None,
            ),
        )


def _transform(name: str, value: float) -> float:
    if TRANSFORMS[name] == "log1p":
        return math.log1p(max(value, 0.0))
    return value


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def trajectory_risk(
    step_risks: Sequence[float], how: Literal["any", "max", "mean"] = "any"
) -> float:
    """One trajectory's risk from its steps' risks.

    ``any`` (the default): the probability that at least one step drifts,
    ``1 - Π(1 - r)``, steps taken as independent (correlated steps make it an upper
    estimate); ``max``: the riskiest step; ``mean``: the expected share of drifting steps.
    A trajectory with no step has risk 0.
    """
    if not step_risks:
        return 0.0
    if how == "max":
        return max(step_risks)
    if how == "mean":
        return sum(step_risks) / len(step_risks)
    log_keep = sum(math.log1p(-min(r, 1.0 - 1e-15)) for r in step_risks)
    return -math.expm1(log_keep)


@dataclass
class CrossFit:
    """Models fitted with each fold held out, and one fitted on everything.

    ``fold_of[trajectory id]`` is the fold whose model did not see that trajectory;
    ``held_out[i]`` is the risk of the i-th labelled step from that model.
    """

    folds: list[RiskModel]
    full: RiskModel
    fold_of: dict[str, int]
    held_out: list[float]

    def model_for(self, trajectory_id: str) -> RiskModel:
        """The model to score *trajectory_id* with: its fold's when it was fitted on,
        else the one fitted on every labelled step."""
        fold = self.fold_of.get(trajectory_id)
        return self.full if fold is None else self.folds[fold]


def fold_assignment(groups: Sequence[str], folds: int = FOLDS, seed: int = 0) -> dict[str, int]:
    """Trajectory id → fold: ids ordered by a hash of ``seed:id``, dealt round-robin (so
    folds differ in size by at most one trajectory, whatever the ids)."""
    unique = sorted(set(groups), key=lambda g: hashlib.sha256(f"{seed}:{g}".encode()).hexdigest())
    k = max(1, min(folds, len(unique)))
    return {g: i % k for i, g in enumerate(unique)}


def cross_fit(
    steps: Sequence[StepFeatures],
    labels: Sequence[bool],
    groups: Sequence[str],
    *,
    folds: int = FOLDS,
    seed: int = 0,
    prior: RiskModel | None = None,
    penalty: float = PENALTY,
    strength: float = STRENGTH,
    source: str = "labelled steps",
) -> CrossFit:
    """Fit K models, each without one fold of trajectories (:func:`fold_assignment`), and
    one on everything. With a single trajectory there is nothing to hold it out from:
    its fold's model is *prior* (required then)."""
    fold_of = fold_assignment(groups, folds, seed)
    k = max(fold_of.values(), default=0) + 1

    def fit(indices: list[int], label: str) -> RiskModel:
        return RiskModel.fit(
            [steps[i] for i in indices],
            [labels[i] for i in indices],
            [groups[i] for i in indices],
            prior=prior,
            penalty=penalty,
            strength=strength,
            source=label,
        )

    full = fit(list(range(len(steps))), source)
    models: list[RiskModel] = []
    for fold in range(k):
        rest = [i for i, g in enumerate(groups) if fold_of[g] != fold]
        if rest:
            models.append(fit(rest, f"{source} without fold {fold + 1} of {k}"))
        elif prior is not None:
            models.append(prior)
        else:
            raise UsageError("cross-fitting needs two trajectories, or a prior model")
    held_out = [models[fold_of[g]].score([step])[0] for step, g in zip(steps, groups, strict=True)]
    return CrossFit(folds=models, full=full, fold_of=fold_of, held_out=held_out)


@lru_cache(maxsize=1)
def prior_model() -> RiskModel:
    """The shipped prior (``fidelity/_data/risk/prior.json``): fitted on the world-model
    dev set's labelled predictions (``devsets/wm``, by ``python benchmarks/risk_auroc.py
    --write``); used when no run is given."""
    text = (resources.files("fidelity") / "_data" / "risk" / PRIOR_FILE).read_text("utf-8")
    return RiskModel.model_validate_json(text)


def dump_model(model: RiskModel) -> str:
    """The model as indented JSON (the shipped file's form)."""
    return json.dumps(model.model_dump(mode="json"), indent=1, sort_keys=False) + "\n"
