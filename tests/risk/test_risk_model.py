"""The risk model: monotone in every feature, cross-fitted by trajectory, serialisable, the prior."""

from __future__ import annotations

import itertools
import json
import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from fidelity.errors import UsageError
from fidelity.risk import (
    FEATURES,
    RiskModel,
    StepFeatures,
    cross_fit,
    fold_assignment,
    prior_model,
    trajectory_risk,
)
from fidelity.risk.features import SHAPES
from fidelity.risk.model import dump_model

ACTIONS = ("ls", "cat", "python", "grep", "edit")


def random_step(rng: random.Random, depth: int = 1) -> StepFeatures:
    """Features of one step, each feature missing now and then."""

    def maybe(value: float) -> float | None:
        return None if rng.random() < 0.15 else value

    return StepFeatures(
        depth=depth,
        domain=rng.choice(("terminal", "swe")),
        action=rng.choice(ACTIONS),
        shape=rng.choice(SHAPES),
        novel_entities=maybe(rng.randint(0, 30)),  # type: ignore[arg-type]
        novel_numbers=maybe(rng.randint(0, 10)),  # type: ignore[arg-type]
        novel_words=maybe(rng.randint(0, 200)),  # type: ignore[arg-type]
        novel_chars=maybe(rng.randint(0, 5000)),  # type: ignore[arg-type]
        format_lines=maybe(rng.randint(0, 3)),  # type: ignore[arg-type]
        contradictions=maybe(rng.randint(0, 2)),  # type: ignore[arg-type]
        size=maybe(rng.randint(0, 8000)),  # type: ignore[arg-type]
        mean_surprisal=maybe(rng.uniform(0, 3)),
        max_surprisal=maybe(rng.uniform(0, 12)),
        sample_spread=maybe(rng.uniform(0, 1)),
    )


def labelled(seed: int, trajectories: int = 40) -> tuple[list[StepFeatures], list[bool], list[str]]:
    """Random labelled steps whose drift depends on some features (one of them negatively)."""
    rng = random.Random(seed)
    steps, labels, groups = [], [], []
    for t in range(trajectories):
        for depth in range(1, rng.randint(2, 6)):
            step = random_step(rng, depth)
            z = -1.0 + 0.6 * math.log1p(step.novel_words or 0) - 0.8 * math.log1p(step.size or 0)
            z += 1.5 * (step.action == "python")
            steps.append(step)
            labels.append(rng.random() < 1 / (1 + math.exp(-z)))
            groups.append(f"traj-{t}")
    return steps, labels, groups


@pytest.fixture(scope="module")
def fitted() -> RiskModel:
    return RiskModel.fit(*labelled(1))


def test_fitted_weights_are_non_negative_even_where_the_data_says_otherwise(
    fitted: RiskModel,
) -> None:
    assert all(w >= 0 for w in fitted.coef) and fitted.action_coef >= 0
    weights = dict(zip(FEATURES, fitted.coef, strict=True))
    assert weights["novel_words"] > 0  # drift grows with it
    assert weights["size"] == 0  # drift falls with it: no negative weight, none at all


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    feature=st.sampled_from(FEATURES),
    bump=st.floats(0.0, 1000.0, allow_nan=False),
    model_seed=st.integers(0, 3),
)
def test_a_larger_feature_never_lowers_the_risk(
    seed: int, feature: str, bump: float, model_seed: int
) -> None:
    model = _models()[model_seed]
    step = random_step(random.Random(seed), depth=random.Random(seed).randint(1, 40))
    value = dict(zip(FEATURES, step.values(), strict=True))[feature]
    base = 0.0 if value is None else value
    larger = base + bump
    lower = step.with_values(**{feature: base if feature != "depth" else int(base)})
    higher = step.with_values(**{feature: larger if feature != "depth" else int(larger)})
    assert model.score([higher])[0] >= model.score([lower])[0]


def test_a_riskier_action_type_never_lowers_the_risk(fitted: RiskModel) -> None:
    rng = random.Random(5)
    for _ in range(200):
        step = _fields(random_step(rng))
        variants = {a: StepFeatures(**{**step, "action": a}) for a in ACTIONS}  # type: ignore[arg-type]
        ordered = sorted(ACTIONS, key=lambda a: fitted.actions.rate(variants[a]))
        risks = [fitted.score([variants[a]])[0] for a in ordered]
        assert all(x <= y + 1e-12 for x, y in itertools.pairwise(risks))


def _fields(step: StepFeatures) -> dict[str, object]:
    return {name: getattr(step, name) for name in step.__slots__}  # type: ignore[attr-defined]


_MODELS: list[RiskModel] = []


def _models() -> list[RiskModel]:
    """A few fitted models (and the prior) to check monotonicity on."""
    if not _MODELS:
        _MODELS.extend(RiskModel.fit(*labelled(seed)) for seed in (2, 3, 4))
        _MODELS.append(prior_model())
    return _MODELS


def test_a_missing_feature_takes_its_fitted_mean(fitted: RiskModel) -> None:
    step = StepFeatures(depth=1, domain="terminal", action="ls", shape="short")
    j = FEATURES.index("novel_words")
    filled = math.expm1(fitted.impute[j])  # the raw value whose log1p is the imputed one
    assert fitted.score([step])[0] == pytest.approx(
        fitted.score([step.with_values(novel_words=filled)])[0]
    )


def test_a_feature_never_measured_gets_no_weight() -> None:
    steps, labels, groups = labelled(6)
    blank = [s.with_values(sample_spread=None) for s in steps]
    model = RiskModel.fit(blank, labels, groups)
    assert dict(zip(FEATURES, model.coef, strict=True))["sample_spread"] == 0.0


def test_cross_fitting_never_scores_a_trajectory_with_a_model_that_saw_it() -> None:
    steps, labels, groups = labelled(7, trajectories=23)
    crossed = cross_fit(steps, labels, groups, folds=4, seed=3)
    assert sorted(set(crossed.fold_of.values())) == [0, 1, 2, 3]
    for fold, model in enumerate(crossed.folds):
        kept = [i for i, g in enumerate(groups) if crossed.fold_of[g] != fold]
        assert model.fitted.steps == len(kept)
        refit = RiskModel.fit(
            [steps[i] for i in kept],
            [labels[i] for i in kept],
            [groups[i] for i in kept],
            source=model.fitted.source,
        )
        assert refit == model  # exactly the model of the other folds' steps
    for i, group in enumerate(groups):
        model = crossed.folds[crossed.fold_of[group]]
        assert crossed.held_out[i] == model.score([steps[i]])[0]
        assert crossed.model_for(group) is model
    assert crossed.model_for("never-fitted") is crossed.full


def test_a_trajectory_alone_in_its_category_is_not_scored_by_its_own_label() -> None:
    # one trajectory has an action no other has, and every step of it drifts: a model that
    # saw it would give that action a high rate; held out, the action falls back to its domain
    steps, labels, groups = labelled(8, trajectories=20)
    unique = [
        StepFeatures(depth=d, domain="terminal", action="leaky", shape="short") for d in (1, 2, 3)
    ]
    steps += unique
    labels += [True] * 3
    groups += ["leaky-trajectory"] * 3
    crossed = cross_fit(steps, labels, groups, folds=5)
    held = crossed.folds[crossed.fold_of["leaky-trajectory"]]
    assert "leaky" not in held.actions.actions.get("terminal", {})
    assert crossed.full.actions.actions["terminal"]["leaky"].drifted == 3


def test_folds_are_balanced_whatever_the_ids() -> None:
    folds = fold_assignment([f"t{i}" for i in range(23)] * 2, folds=5)
    sizes = sorted(list(folds.values()).count(k) for k in range(5))
    assert sizes == [4, 4, 5, 5, 5]
    assert fold_assignment(["a"], folds=5) == {"a": 0}


def test_one_trajectory_needs_a_prior() -> None:
    steps = [StepFeatures(depth=1, domain="terminal", action="ls", shape="short", size=3)]
    with pytest.raises(UsageError, match="two trajectories, or a prior"):
        cross_fit(steps, [True], ["only"])
    crossed = cross_fit(steps, [True], ["only"], prior=prior_model())
    assert crossed.model_for("only") is prior_model()


def test_a_prior_keeps_weights_finite_when_nothing_drifts() -> None:
    steps, _, groups = labelled(9)
    model = RiskModel.fit(steps, [False] * len(steps), groups, prior=prior_model())
    risks = model.score(steps)
    assert all(0 < r < 0.5 for r in risks)
    assert model.fitted.prior


def test_fit_refuses_nothing_and_mismatched_lengths() -> None:
    with pytest.raises(UsageError, match="no labelled steps"):
        RiskModel.fit([], [], [])
    steps, labels, groups = labelled(10)
    with pytest.raises(UsageError, match="differ"):
        RiskModel.fit(steps, labels[:-1], groups)


def test_the_model_round_trips_and_refuses_a_negative_weight(fitted: RiskModel) -> None:
    text = dump_model(fitted)
    assert RiskModel.model_validate_json(text) == fitted
    data = json.loads(text)
    data["coef"][0] = -0.1
    with pytest.raises(ValidationError, match="weights must be >= 0"):
        RiskModel.model_validate(data)
    data = json.loads(text)
    data["surprise"] = 1
    with pytest.raises(ValidationError, match="Extra inputs"):
        RiskModel.model_validate(data)


def test_the_prior_loads_and_says_what_it_was_fitted_on() -> None:
    prior = prior_model()
    assert prior.features == list(FEATURES)
    assert prior.fitted.steps == prior.actions.total.steps > 0
    assert 0 < prior.fitted.drifted < prior.fitted.steps
    assert {"auroc", "naive_auroc", "split"} <= set(prior.fitted.held_out)
    assert {"swe", "terminal"} <= set(prior.actions.domains)
    step = StepFeatures(depth=2, domain="web", action="click", shape="long", novel_words=5)
    assert 0 < prior.score([step])[0] < 1  # a domain it never saw falls back to all steps


@pytest.mark.parametrize(
    ("risks", "how", "expected"),
    [
        ([0.5, 0.5], "any", 0.75),
        ([0.1, 0.3], "max", 0.3),
        ([0.1, 0.3], "mean", 0.2),
        ([], "any", 0.0),
        ([1.0, 0.2], "any", 1.0),
    ],
)
def test_trajectory_risk(risks: list[float], how: str, expected: float) -> None:
    assert trajectory_risk(risks, how) == pytest.approx(expected)  # type: ignore[arg-type]
