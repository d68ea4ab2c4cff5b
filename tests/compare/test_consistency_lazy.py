"""The lazy consistency check gives exactly what extracting every observation gave.

The reference below is the eager algorithm as it shipped (every observation's
entities extracted at every step). Both run on public agent runs
(``../shared/agent-trajectories``) whose simulated side is derived with seeded
edits that exercise every branch: lines dropped (omissions, inconsistencies),
lines borrowed from other steps (inventions, propagation), earlier
observations repeated (stale state), and infrastructure failures.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import pytest

from devsets.calibration.devset_agents import SHARED, load_runs
from fidelity.compare import get_comparator
from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.consistency import (
    EntitySource,
    _flag,
    _propagated,
    check_consistency,
    stateful,
)
from fidelity.compare.entities import extract, extract_among
from fidelity.compare.terminal import entities_held, lines_holding
from fidelity.trajectory import Observation, Trajectory
from tests.conftest import unavailable


def eager_reference(
    source: EntitySource,
    real: Sequence[Observation],
    sim: Sequence[Observation],
    contexts: Sequence[CompareContext],
    comparisons: list[StepComparison],
) -> list[StepComparison]:
    """The consistency check as it shipped before it became lazy."""
    created: dict[str, int] = {}
    invented: dict[str, int] = {}
    seen_in_sim: set[str] = set()
    seen_in_real: set[str] = set()
    result = []
    for depth, (r, s, context, comparison) in enumerate(
        zip(real, sim, contexts, comparisons, strict=True), start=1
    ):
        if comparison.infra_failure:
            result.append(comparison)
            continue
        all_real = source.entities(r, context)
        real_e, sim_e = stateful(all_real), stateful(source.entities(s, context))
        missing = sorted(e for e in real_e - sim_e if e in created)
        for entity in (sim_e & real_e) - seen_in_sim:
            created[entity] = depth
        seen_in_sim |= sim_e
        seen_in_real |= all_real
        flagged = _flag(comparison, missing, created) if missing else comparison
        flagged = _propagated(flagged, invented, seen_in_real)
        for entity in flagged.hallucinations:
            invented.setdefault(entity, depth)
        result.append(flagged)
    return result


def simulated(real: list[Observation], rng: random.Random) -> list[Observation]:
    """A simulated side for *real*: seeded edits of the kinds that move consistency."""
    pool = [line for o in real for line in (o.text or "").splitlines() if line.strip()]
    sim = []
    for depth, observation in enumerate(real):
        lines = (observation.text or "").splitlines()
        roll = rng.random()
        if roll < 0.35 or not lines:
            text = observation.text or ""
        elif roll < 0.55:
            del lines[rng.randrange(len(lines))]
            text = "\n".join(lines)
        elif roll < 0.75 and pool:
            lines.insert(rng.randrange(len(lines) + 1), rng.choice(pool))
            text = "\n".join(lines)
        elif roll < 0.9 and depth:
            text = real[rng.randrange(depth)].text or ""
        elif roll < 0.95:
            sim.append(Observation(error="model unreachable"))
            continue
        else:
            text = "\n".join(line for line in lines if not any(c.isdigit() for c in line))
        sim.append(observation.model_copy(update={"text": text}))
    return sim


def contexts_of(trajectory: Trajectory, sim: list[Observation]) -> list[CompareContext]:
    """What the model was shown: its own earlier observations."""
    steps = [
        s.model_copy(update={"observation": o}) for s, o in zip(trajectory.steps, sim, strict=True)
    ]
    return [
        CompareContext(action=step.action, history=steps[:depth], depth=depth + 1)
        for depth, step in enumerate(trajectory.steps)
    ]


@pytest.fixture(scope="module")
def runs() -> list[Trajectory]:
    if not SHARED.is_dir():
        unavailable(f"{SHARED} is not beside this checkout")
    return [run.trajectory for run in load_runs()[::4]]


@pytest.mark.parametrize("domain", ["terminal", "swe"])
def test_lazy_check_equals_the_eager_reference(runs: list[Trajectory], domain: str) -> None:
    comparator = get_comparator(domain)
    assert isinstance(comparator, EntitySource)
    rng = random.Random(13)
    flagged = propagated = 0
    for trajectory in runs:
        real = [s.observation or Observation(error="missing") for s in trajectory.steps]
        sim = simulated(real, rng)
        contexts = contexts_of(trajectory, sim)
        comparisons = [
            comparator.compare(r, s, c) for r, s, c in zip(real, sim, contexts, strict=True)
        ]
        expected = eager_reference(comparator, real, sim, contexts, comparisons)
        assert check_consistency(comparator, real, sim, contexts, comparisons) == expected
        flagged += sum("inconsistent" in c.metrics for c in expected)
        propagated += sum("propagated" in c.metrics for c in expected)
    # the edits really exercised the check (swe names only tests and changed files)
    assert flagged > (10 if domain == "terminal" else 0)
    assert propagated > 0 or domain == "swe"


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("a\nbkey\nc\nkey key\n", {"key"}),
        ("key", {"key", "ke"}),
        ("x\ny\n", {"z"}),
        ("one\n\ntwo", {""}),
        ("ab\nb\nab", {"a", "b"}),
    ],
)
def test_lines_holding_equals_the_line_by_line_filter(text: str, keys: set[str]) -> None:
    expected = "\n".join(line for line in text.split("\n") if any(k in line for k in keys))
    assert lines_holding(text, keys) == expected


def test_entities_held_equals_extracting_everything(runs: list[Trajectory]) -> None:
    """Line prefilters (numbers only where standalone) and skipped passes lose no candidate."""
    rng = random.Random(5)
    texts = [
        (s.observation.text[:20_000], s.action.render())
        for trajectory in runs
        for s in trajectory.steps
        if s.observation is not None and s.observation.text
    ]
    numbers = held_numbers = 0
    for text, command in texts:
        everything = extract(text, command)
        other = extract(rng.choice(texts)[0], command)  # entities this text may lack
        pool = sorted(everything | other) or ["number:1"]
        candidates = set(rng.sample(pool, min(len(pool), 8)))
        expected = everything & candidates
        assert entities_held(text, candidates, command) == expected
        assert entities_held(text, candidates, command, chunk=64) == expected  # many chunks
        assert extract_among(text, candidates, command) == expected
        numbers += sum(e.startswith("number:") for e in candidates)
        held_numbers += sum(e.startswith("number:") for e in expected)
    assert held_numbers > 50 and numbers > held_numbers  # both outcomes were exercised


@pytest.mark.parametrize(
    ("text", "number", "held"),
    [
        ("a 17 b\nx170\n17.5\n1,17\nv17\n(17)\n17.x\n17_\n-17", "17", "a 17 b\n(17)\n-17"),
        ("4.0K\n14.0K dir\n4.0Ks", "4.0K", "4.0K"),
        ("12%\nx12%", "12%", "12%"),
    ],
)
def test_lines_holding_finds_numbers_only_where_standalone(
    text: str, number: str, held: str
) -> None:
    assert lines_holding(text, set(), {number}) == held
    assert {f"number:{number}"} & extract(text) == ({f"number:{number}"} if held else set())
