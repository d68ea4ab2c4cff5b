"""The retry policy that keeps a few unlucky steps from holding a run's tail (issue 31).

Backoffs are recorded by an injected sleep, never waited out nor timed: the
tests assert on the delays the policy chose.
"""

from __future__ import annotations

import asyncio
import email.utils
import time
from collections.abc import Callable
from typing import Any

import pytest

from fakes.world_model import MODEL, FakeLLM, Reply, echo_prediction
from fidelity.trajectory import Observation, Trajectory
from fidelity.worldmodels.openai_compat import EndpointHealth, OpenAICompatWorldModel, RetryPolicy


def healthy(latency: float, samples: int = 20) -> EndpointHealth:
    """A health record of *samples* successful attempts of *latency* seconds each."""
    health = EndpointHealth()
    for _ in range(samples):
        health.record(True, latency)
    return health


def failing(samples: int = 20) -> EndpointHealth:
    health = EndpointHealth()
    for _ in range(samples):
        health.record(False, 0.01)
    return health


class Recorder:
    """An injected sleep that records each backoff and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)


def predict_last(
    url: str, trajectory: Trajectory, sleep: Callable[[float], Any], **options: Any
) -> Observation:
    async def run() -> Observation:
        async with OpenAICompatWorldModel(url, MODEL, sleep=sleep, **options) as model:
            depth = len(trajectory.steps)
            step = trajectory.steps[-1]
            return await model.predict(trajectory, trajectory.steps[:-1], step.action, depth)

    return asyncio.run(run())


def test_health_bound_needs_enough_samples_and_mostly_successes() -> None:
    health = EndpointHealth(window=10, min_samples=4, healthy_ratio=0.5)
    assert health.backoff_bound() is None  # nothing known yet
    for latency in (0.3, 0.1, 0.2):
        health.record(True, latency)
    assert health.backoff_bound() is None  # 3 < min_samples
    health.record(False, 5.0)
    assert health.backoff_bound() == 0.2  # median of the successes; failures' time ignored
    for _ in range(3):
        health.record(False, 5.0)
    assert health.backoff_bound() is None  # 3 of 7 succeeded: unhealthy, full backoff
    for _ in range(6):
        health.record(True, 0.4)
    assert health.backoff_bound() == 0.4  # the window forgot the old failures and latencies


def test_policy_bound_caps_the_exponential_backoff_but_not_retry_after() -> None:
    policy = RetryPolicy(backoff_base=0.5, backoff_max=30.0, jitter=0.0)
    assert [policy.delay(n, bound=0.2) for n in range(4)] == [0.2, 0.2, 0.2, 0.2]
    assert [policy.delay(n, bound=None) for n in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert policy.delay(0, bound=1.0) == 0.5  # the bound only ever shortens
    assert policy.delay(3, retry_after=7.0, bound=0.2) == 7.0
    jittered = RetryPolicy(backoff_base=0.5, jitter=0.5)
    assert all(0.1 <= jittered.delay(2, bound=0.2) <= 0.2 for _ in range(50))


def test_backoff_is_bounded_by_typical_latency_while_healthy(
    fake_llm: FakeLLM, make_trajectory: Callable[..., Trajectory]
) -> None:
    fake_llm.script(*[Reply.http(500)] * 4)
    sleep = Recorder()
    observation = predict_last(fake_llm.url, make_trajectory(), sleep, health=healthy(0.2))
    assert observation.text == "ran: echo hi\n"
    assert len(sleep.delays) == 4
    # the loopback attempts recorded meanwhile are too few to move the median
    assert all(0.1 <= d <= 0.2 for d in sleep.delays), sleep.delays


@pytest.mark.parametrize("health", [None, "failing"])
def test_backoff_is_exponential_while_unknown_or_unhealthy(
    fake_llm: FakeLLM, make_trajectory: Callable[..., Trajectory], health: str | None
) -> None:
    fake_llm.script(*[Reply.http(503)] * 4)
    sleep = Recorder()
    options = {"health": failing()} if health else {}
    predict_last(fake_llm.url, make_trajectory(), sleep, **options)
    floors = [0.25, 0.5, 1.0, 2.0]  # backoff_base 0.5 * 2**n, jitter at most halves it
    assert [d >= f for d, f in zip(sleep.delays, floors, strict=True)] == [True] * 4, sleep.delays
    assert sleep.delays[-1] <= 4.0


@pytest.mark.parametrize(
    "headers",
    [
        {"Retry-After": "7"},
        {"retry-after-ms": "7000"},
        {"Retry-After": "60", "retry-after-ms": "7000"},  # the finer one wins
    ],
)
def test_retry_after_is_honoured_even_when_the_endpoint_is_fast(
    fake_llm: FakeLLM, make_trajectory: Callable[..., Trajectory], headers: dict[str, str]
) -> None:
    fake_llm.script(Reply.http(429, **headers))
    sleep = Recorder()
    observation = predict_last(fake_llm.url, make_trajectory(), sleep, health=healthy(0.01))
    assert not observation.failed
    assert sleep.delays == [7.0]


def test_retry_after_as_an_http_date(
    fake_llm: FakeLLM, make_trajectory: Callable[..., Trajectory]
) -> None:
    when = email.utils.formatdate(time.time() + 120, usegmt=True)
    fake_llm.script(Reply.http(503, **{"Retry-After": when}))
    sleep = Recorder()
    predict_last(fake_llm.url, make_trajectory(), sleep, health=healthy(0.01), backoff_max=600)
    (delay,) = sleep.delays
    assert 60 < delay <= 121  # two minutes from the date, less what the request took


def test_retry_after_is_capped_by_backoff_max(
    fake_llm: FakeLLM, make_trajectory: Callable[..., Trajectory]
) -> None:
    fake_llm.script(Reply.http(429, **{"Retry-After": "3600"}))
    sleep = Recorder()
    predict_last(fake_llm.url, make_trajectory(), sleep, backoff_max=5.0)
    assert sleep.delays == [5.0]


def test_no_answer_is_lost_under_concurrent_failures(
    fake_llm: FakeLLM, make_trajectory: Callable[..., Trajectory]
) -> None:
    """Steps 0, 5, 10, 15 and 20 of 24 fail their first 4, 3, 2, 1 and 4 attempts (at most
    max_retries), all at once: every answer is in, each failure cost one retry and one
    backoff (bounded: most attempts succeed), and nothing else was asked."""
    commands = tuple(f"echo {i}" for i in range(24))
    trajectory = make_trajectory(commands=commands)
    failures = {c: 0 for c in commands} | {
        "echo 0": 4,
        "echo 5": 3,
        "echo 10": 2,
        "echo 15": 1,
        "echo 20": 4,
    }
    seen: dict[str, int] = {}
    answer = fake_llm.next_reply

    def next_reply(body: dict[str, Any]) -> Reply:
        reply = answer(body)
        command = echo_prediction(body["messages"]).split("\n")[1].removeprefix("ran: ")
        with fake_llm.lock:
            seen[command] = seen.get(command, 0) + 1
            failed = seen[command] <= failures[command]
        return Reply.http(500) if failed else reply

    fake_llm.next_reply = next_reply  # type: ignore[method-assign]
    sleep = Recorder()

    async def run() -> list[Observation]:
        health = healthy(0.2)
        async with OpenAICompatWorldModel(fake_llm.url, MODEL, sleep=sleep, health=health) as m:
            return await asyncio.gather(
                *(
                    m.predict(trajectory, trajectory.steps[: d - 1], step.action, d)
                    for d, step in enumerate(trajectory.steps, start=1)
                )
            )

    observations = asyncio.run(run())
    assert [o.text for o in observations] == [f"ran: {c}\n" for c in commands]
    assert len(sleep.delays) == sum(failures.values()) == len(fake_llm.requests) - 24
    assert max(sleep.delays) <= 0.2


def test_deadline_during_a_backoff_names_the_last_failure(
    fake_llm: FakeLLM, make_trajectory: Callable[..., Trajectory]
) -> None:
    fake_llm.default = Reply.http(502)

    async def forever(seconds: float) -> None:
        await asyncio.Event().wait()  # only the request deadline can end this backoff

    observation = predict_last(fake_llm.url, make_trajectory(), forever, deadline=3.0)
    assert observation.error is not None
    assert observation.error.startswith("DeadlineExceeded: no complete answer from http://")
    assert "; the last attempt failed with InternalServerError: HTTP 502" in observation.error
    assert len(fake_llm.requests) == 1
