"""Copy and retrieval baselines."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from fidelity.errors import UsageError
from fidelity.trajectory import Action, CommandAction, KeystrokesAction, Observation, Trajectory
from fidelity.worldmodels.base import WorldModel
from fidelity.worldmodels.baselines import CopyBaseline, RetrievalBaseline, get_baseline

Make = Callable[..., Trajectory]


def ask(model: WorldModel, trajectory: Trajectory, depth: int, action: Action) -> Observation:
    return asyncio.run(model.predict(trajectory, trajectory.steps[: depth - 1], action, depth))


def test_copy_repeats_previous_observation(make_trajectory: Make) -> None:
    trajectory = make_trajectory()
    observation = ask(CopyBaseline(), trajectory, 3, CommandAction(command="pwd"))
    assert observation == Observation(text="out of cat README.md\n", exit_code=0)


def test_copy_at_depth_one_is_empty_success(make_trajectory: Make) -> None:
    trajectory = make_trajectory()
    assert ask(CopyBaseline(), trajectory, 1, CommandAction(command="ls")) == Observation(
        text="", exit_code=0
    )
    keys = KeystrokesAction(keys="q")
    assert ask(CopyBaseline(), trajectory, 1, keys) == Observation(text="")


def test_copy_skips_failed_observations(make_trajectory: Make) -> None:
    trajectory = make_trajectory()
    failed = trajectory.steps[1].model_copy(update={"observation": Observation(error="X: y")})
    broken = trajectory.model_copy(update={"steps": [trajectory.steps[0], failed]})
    observation = ask(CopyBaseline(), broken, 3, CommandAction(command="pwd"))
    assert observation.text == "out of ls\n"


@pytest.fixture
def corpus(make_trajectory: Make) -> list[Trajectory]:
    return [
        make_trajectory("a", ("ls -la", "git status"), ("a: ls -la\n", "a: git status\n")),
        make_trajectory("b", ("ls -l", "cat setup.py"), ("b: ls -l\n", "b: cat setup.py\n")),
        make_trajectory("c", ("python -m pytest -q",), ("c: pytest\n",)),
    ]


def test_retrieval_finds_most_similar_action(
    corpus: list[Trajectory], make_trajectory: Make
) -> None:
    model = RetrievalBaseline(corpus)
    query = make_trajectory("z", ("pytest -q tests",))
    observation = ask(model, query, 1, CommandAction(command="python -m pytest -q tests"))
    assert observation == Observation(text="c: pytest\n", exit_code=0)


def test_retrieval_is_leave_one_trajectory_out(corpus: list[Trajectory]) -> None:
    model = RetrievalBaseline(corpus)
    own = corpus[0]
    # "ls -la" is recorded verbatim in trajectory a itself: it must come from b.
    observation = ask(model, own, 1, CommandAction(command="ls -la"))
    assert observation.text == "b: ls -l\n"
    scores = model.similarities(CommandAction(command="ls -la"))
    assert scores.max() == pytest.approx(1.0)


def test_retrieval_ties_are_deterministic(make_trajectory: Make) -> None:
    c = make_trajectory("c", ("make",), ("from c\n",))
    b = make_trajectory("b", ("make",), ("from b\n",))
    query = make_trajectory("q", ("make",))
    for corpus in ([c, b], [b, c]):
        model = RetrievalBaseline(corpus)
        assert ask(model, query, 1, CommandAction(command="make")).text == "from b\n"


def test_retrieval_without_other_trajectory_is_an_error(make_trajectory: Make) -> None:
    only = make_trajectory("solo", ("ls",))
    observation = ask(RetrievalBaseline([only]), only, 1, CommandAction(command="ls"))
    assert observation.error is not None
    assert observation.error.startswith("NotFoundError: no terminal step outside trajectory")


def test_retrieval_skips_unobserved_and_failed_steps(make_trajectory: Make) -> None:
    real = make_trajectory("r", ("ls", "ls -a"), ("real ls\n", "real ls -a\n"))
    steps = [
        real.steps[0].model_copy(update={"observation": None}),
        real.steps[1].model_copy(update={"observation": Observation(error="X: died")}),
        real.steps[1],
    ]
    model = RetrievalBaseline([real.model_copy(update={"steps": steps})])
    query = make_trajectory("q", ("ls",))
    assert ask(model, query, 1, CommandAction(command="ls")).text == "real ls -a\n"
    assert model.describe()["corpus_steps"] == "1"


def test_get_baseline(corpus: list[Trajectory]) -> None:
    assert isinstance(get_baseline("copy"), CopyBaseline)
    assert isinstance(get_baseline("retrieval", corpus), RetrievalBaseline)
    with pytest.raises(UsageError, match="valid baselines: copy, retrieval"):
        get_baseline("oracle", corpus)
    with pytest.raises(UsageError, match="needs a corpus"):
        get_baseline("retrieval", [])


def test_retrieval_needs_observed_steps(make_trajectory: Make) -> None:
    bare = make_trajectory("x", ("ls",))
    bare = bare.model_copy(
        update={"steps": [bare.steps[0].model_copy(update={"observation": None})]}
    )
    with pytest.raises(UsageError, match="observed steps"):
        RetrievalBaseline([bare])


def test_retrieval_stays_in_the_domain(make_trajectory: Make) -> None:
    swe = Trajectory.model_validate(
        {**make_trajectory("s", ("make",), ("swe make\n",)).model_dump(), "domain": "swe"}
    )
    terminal = make_trajectory("t", ("make test",), ("terminal make test\n",))
    model = RetrievalBaseline([swe, terminal])
    query = make_trajectory("q", ("make",))
    assert ask(model, query, 1, CommandAction(command="make")).text == "terminal make test\n"


def test_lazy_package_exports() -> None:
    import fidelity.worldmodels as package

    assert package.get_baseline is get_baseline
    assert package.CopyBaseline is CopyBaseline
    with pytest.raises(AttributeError, match="nope"):
        _ = package.nope  # type: ignore[attr-defined]
