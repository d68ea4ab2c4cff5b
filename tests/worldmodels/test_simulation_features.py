"""Response cache, samples, both modes, control instructions and failure bursts (loopback fake)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from pydantic import ValidationError

from fakes.trajectories import build_trajectory
from fakes.world_model import MODEL, FakeLLM, Reply
from fidelity.batch import simulate_suite
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.pipeline import SimConfig
from fidelity.trajectory import Control, Observation, Step, Trajectory
from fidelity.worldmodels.base import Mode


def _suite(tmp_path: Path, trajectories: list[Trajectory]) -> Path:
    path = tmp_path / "suite.jsonl"
    write_trajectories(path, trajectories)
    return path


def _sim(fake: FakeLLM, tmp_path: Path, **update: object) -> SimConfig:
    """The endpoint's SimConfig with *update* applied (world-model or run options)."""
    own = {k: v for k, v in update.items() if k in ("samples", "concurrency")}
    model = {k: v for k, v in update.items() if k not in own}
    base = SimConfig(url=fake.url, model=MODEL, cache=tmp_path / "cache.duckdb")
    return base.model_copy(update={**own, "world_model": base.world_model.model_copy(update=model)})


def test_cached_rerun_sends_nothing_and_reproduces(tmp_path: Path, fake_llm: FakeLLM) -> None:
    suite = _suite(tmp_path, [build_trajectory("a"), build_trajectory("b")])
    sim = _sim(fake_llm, tmp_path)
    first = simulate_suite(suite, tmp_path / "one.jsonl", sim, Mode.teacher_forced)
    sent = len(fake_llm.requests)
    second = simulate_suite(suite, tmp_path / "two.jsonl", sim, Mode.teacher_forced)
    assert sent == 6
    assert len(fake_llm.requests) == sent
    assert (first.cache, second.cache) == ({"hits": 0, "misses": 6}, {"hits": 6, "misses": 0})
    assert (tmp_path / "one.jsonl").read_text() == (tmp_path / "two.jsonl").read_text()


def test_cache_key_holds_sampling_parameters(tmp_path: Path, fake_llm: FakeLLM) -> None:
    suite = _suite(tmp_path, [build_trajectory("a", commands=("ls",))])
    simulate_suite(suite, tmp_path / "o.jsonl", _sim(fake_llm, tmp_path), Mode.open_loop)
    simulate_suite(
        suite, tmp_path / "o.jsonl", _sim(fake_llm, tmp_path, max_tokens=77), Mode.open_loop
    )
    assert [r["max_tokens"] for r in fake_llm.requests] == [32768, 77]


def test_failures_are_not_cached(tmp_path: Path, fake_llm: FakeLLM) -> None:
    suite = _suite(tmp_path, [build_trajectory("a", commands=("ls",))])
    fake_llm.script(Reply.http(400))
    first = simulate_suite(suite, tmp_path / "o.jsonl", _sim(fake_llm, tmp_path), Mode.open_loop)
    second = simulate_suite(suite, tmp_path / "o.jsonl", _sim(fake_llm, tmp_path), Mode.open_loop)
    assert (first.failed_steps, second.failed_steps) == (1, 0)
    assert len(fake_llm.requests) == 2


def test_samples_and_both_modes_are_written_apart(tmp_path: Path, fake_llm: FakeLLM) -> None:
    suite = _suite(tmp_path, [build_trajectory("a")])
    sim = _sim(fake_llm, tmp_path, samples=3)
    result = simulate_suite(suite, tmp_path / "o.jsonl", sim, [Mode.teacher_forced, Mode.open_loop])
    written = read_trajectories(tmp_path / "o.jsonl")
    keys = sorted((t.meta["mode"], t.meta["sample"]) for t in written)
    assert keys == sorted((m, k) for m in ("teacher-forced", "open-loop") for k in range(3))
    assert {t.id for t in written} >= {"a@teacher-forced#0", "a@open-loop#2"}
    assert len(fake_llm.requests) == 2 * 3 * 3  # the sample index is part of the cache key
    assert result.sampling is not None
    # The fake answers the same for every sample: no spread, a real distance to real.
    assert result.sampling.spread == 0.0
    assert result.sampling.distance_to_real is not None and result.sampling.distance_to_real > 0


def test_control_reaches_the_model_and_obedience_is_measured(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    base = build_trajectory("a", commands=("cat notes.txt", "ls"))
    steps = [
        base.steps[0].model_copy(
            update={
                "control": Control(
                    instruction="notes.txt is missing", expect="No such file", exit_code=1
                )
            }
        ),
        base.steps[1].model_copy(
            update={
                "control": Control(instruction="answer with a permission error", expect="denied")
            }
        ),
    ]
    suite = _suite(tmp_path, [base.model_copy(update={"steps": steps})])
    fake_llm.script(
        Reply.text(
            "<predicted_observation>\ncat: notes.txt: No such file or directory\n"
            "[exit_code: 1]\n</predicted_observation>"
        )
    )
    result = simulate_suite(suite, tmp_path / "o.jsonl", _sim(fake_llm, tmp_path), Mode.open_loop)
    first_prompt = fake_llm.requests[0]["messages"][-1]["content"]
    assert "[Simulation control] notes.txt is missing" in first_prompt
    assert result.controllability is not None
    assert result.controllability.model_dump() == {
        "controlled_steps": 2,
        "judged": 2,
        "obeyed": 1,
        "rate": 0.5,
    }


def test_twenty_percent_errors_never_leave_an_empty_step(tmp_path: Path, fake_llm: FakeLLM) -> None:
    trajectories = [
        build_trajectory(f"t{i}", commands=tuple(f"echo {i}-{d}" for d in range(5)))
        for i in range(20)
    ]
    suite = _suite(tmp_path, trajectories)
    rng = random.Random(7)
    fake_llm.script(
        *[
            Reply.http(rng.choice((429, 500))) if rng.random() < 0.2 else Reply.ok()
            for _ in range(400)
        ]
    )
    sim = _sim(fake_llm, tmp_path, max_retries=1, concurrency=8)
    result = simulate_suite(suite, tmp_path / "o.jsonl", sim, Mode.teacher_forced)
    observations = [s.observation for t in read_trajectories(tmp_path / "o.jsonl") for s in t.steps]
    assert len(observations) == result.steps == 100
    for observation in observations:
        assert observation is not None
        assert observation.failed or observation.text.startswith("ran: echo")
    failed = [o for o in observations if o is not None and o.failed]
    assert result.failed_steps == len(failed)
    assert all(("HTTP 429" in (o.error or "")) or ("HTTP 500" in (o.error or "")) for o in failed)


def test_control_obedience_rules() -> None:
    assert Control(instruction="be slow").obeyed(Observation(text="x")) is None
    control = Control(instruction="fail", expect="denied", exit_code=1)
    assert control.obeyed(Observation(text="Permission denied", exit_code=1)) is True
    assert control.obeyed(Observation(text="Permission denied", exit_code=0)) is False
    assert control.obeyed(Observation(error="WorldModelError: x")) is None
    with pytest.raises(ValidationError, match="not a regular expression"):
        Step.model_validate(
            {
                "action": {"type": "command", "command": "ls"},
                "control": {"instruction": "x", "expect": "a["},
            }
        )
