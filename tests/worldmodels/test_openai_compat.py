"""OpenAICompatWorldModel against a real loopback HTTP server."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fakes.world_model import MODEL, FakeLLM, Reply
from fidelity.errors import EndpointUnreachableError, UsageError
from fidelity.trajectory import CommandAction, Observation, Trajectory
from fidelity.worldmodels.openai_compat import OpenAICompatWorldModel, RetryPolicy
from fidelity.worldmodels.prompting import prompt_hash

FAST = {"backoff_base": 0.01, "backoff_max": 0.05}


def predict(url: str, trajectory: Trajectory, depth: int = 3, **options: Any) -> Observation:
    """Run one prediction at *depth* with the real history before it."""

    async def run() -> Observation:
        async with OpenAICompatWorldModel(url, MODEL, **{**FAST, **options}) as model:
            step = trajectory.steps[depth - 1]
            return await model.predict(
                trajectory, trajectory.steps[: depth - 1], step.action, depth
            )

    return asyncio.run(run())


@pytest.fixture
def trajectory(make_trajectory: Callable[..., Trajectory]) -> Trajectory:
    return make_trajectory()


def test_request_carries_history_and_sampling(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    observation = predict(fake_llm.url, trajectory)

    assert observation == Observation(text="ran: echo hi\n", exit_code=0)
    (body,) = fake_llm.requests
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert "A Python project" in body["messages"][0]["content"]
    assert '"keystrokes": "ls\\n"' in body["messages"][1]["content"]
    assert "$ ls\nout of ls\n" in body["messages"][2]["content"]
    assert body["messages"][-1]["content"].startswith("### Turn 3")
    assert '"keystrokes": "echo hi\\n"' in body["messages"][-1]["content"]
    assert body["model"] == MODEL
    assert body["top_k"] == 20
    assert body["temperature"] == 0.6
    assert body["top_p"] == 0.95
    assert body["max_tokens"] == 32768  # the model card's: long reasoning comes first


def test_agentworldbench_sampling_sends_what_the_reference_sends(
    fake_llm: FakeLLM, trajectory: Trajectory
) -> None:
    predict(fake_llm.url, trajectory, sampling="agentworldbench")
    (body,) = fake_llm.requests
    assert {k: v for k, v in body.items() if k != "messages"} == {
        "model": MODEL,
        "temperature": 0.6,
        "max_tokens": 32768,
    }


def test_answer_cut_by_the_length_limit_is_an_infrastructure_failure(
    fake_llm: FakeLLM, trajectory: Trajectory
) -> None:
    fake_llm.script(Reply.cut("<think>long reasoning</think><predicted_observation>\npart"))
    observation = predict(fake_llm.url, trajectory)
    assert observation.failed and observation.text == ""
    assert str(observation.error).startswith("TruncatedAnswerError:")
    assert "finish_reason=length" in str(observation.error)


def test_sampling_overrides_and_omissions(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    predict(fake_llm.url, trajectory, temperature=0.0, top_p=None, top_k=None, max_tokens=64)
    (body,) = fake_llm.requests
    assert body["temperature"] == 0.0
    assert body["max_tokens"] == 64
    assert "top_p" not in body
    assert "top_k" not in body


@pytest.mark.parametrize("status", [429, 500, 503])
def test_transient_status_is_retried(
    fake_llm: FakeLLM, trajectory: Trajectory, status: int
) -> None:
    fake_llm.script(Reply.http(status), Reply.http(status))
    assert predict(fake_llm.url, trajectory).text == "ran: echo hi\n"
    assert len(fake_llm.requests) == 3


def test_each_retry_is_logged_with_why(
    fake_llm: FakeLLM, trajectory: Trajectory, caplog: pytest.LogCaptureFixture
) -> None:
    fake_llm.script(Reply.http(503), Reply.http(400))
    with caplog.at_level(logging.DEBUG, logger="fidelity.worldmodels.openai_compat"):
        predict(fake_llm.url, trajectory, max_retries=2)
    first, last = caplog.messages
    assert first.startswith(f"{fake_llm.url}: attempt 1 failed, retried in ")
    assert first.endswith(
        f"(2 retries left): InternalServerError: HTTP 503 from {fake_llm.url}: "
        "Error code: 503 - scripted 503"
    )
    assert last.startswith(
        f"{fake_llm.url}: attempt 2 failed, not retried: BadRequestError: HTTP 400"
    )


def test_dropped_connection_and_timeout_recover(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    # The hanging attempt can only end by the per-attempt timeout, whatever the speed.
    fake_llm.script(Reply.drop(), Reply.hang())
    observation = predict(fake_llm.url, trajectory, timeout=2)
    assert observation == Observation(text="ran: echo hi\n", exit_code=0)
    assert len(fake_llm.requests) == 3


def test_always_500_gives_error_observation(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    fake_llm.script(*[Reply.http(500)] * 5)
    observation = predict(fake_llm.url, trajectory, max_retries=2)
    assert observation.failed
    assert observation.text == ""
    assert observation.error is not None
    assert observation.error.startswith("InternalServerError: HTTP 500 from http://127.0.0.1:")
    assert "after 3 attempts" in observation.error
    assert len(fake_llm.requests) == 3


def test_client_error_is_not_retried(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    fake_llm.script(Reply.http(400))
    observation = predict(fake_llm.url, trajectory)
    assert observation.error is not None
    assert observation.error.startswith("BadRequestError: HTTP 400")
    assert len(fake_llm.requests) == 1


def test_timeouts_give_error_observation(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    fake_llm.script(Reply.hang(), Reply.hang())
    observation = predict(fake_llm.url, trajectory, timeout=0.2, max_retries=1)
    assert observation.error is not None
    assert observation.error.startswith("APITimeoutError: no answer from")
    assert "within 0.2 s" in observation.error


def test_dripping_server_is_cut_by_the_request_deadline(
    fake_llm: FakeLLM, trajectory: Trajectory
) -> None:
    # A byte every 50 ms never trips the 60 s per-read timeout and never completes: only
    # the total deadline can end the request, on any machine.
    fake_llm.script(*[Reply.drip(0.05)] * 5)
    observation = predict(fake_llm.url, trajectory, timeout=60, max_retries=4, deadline=1.0)
    assert observation.failed and observation.text == ""
    assert observation.error is not None
    assert observation.error.startswith("DeadlineExceeded: no complete answer from http://")
    assert "within the request deadline of 1 s (--sim-timeout" in observation.error
    assert len(fake_llm.requests) == 1  # the deadline ended the one dripping attempt


def test_deadline_bounds_retries_of_a_hanging_server(
    fake_llm: FakeLLM, trajectory: Trajectory
) -> None:
    fake_llm.script(*[Reply.hang()] * 5)
    observation = predict(fake_llm.url, trajectory, timeout=60, deadline=0.5)
    assert observation.error is not None and observation.error.startswith("DeadlineExceeded")


def test_a_dripping_server_cannot_hold_the_start_check(fake_llm: FakeLLM) -> None:
    fake_llm.models_reply = Reply.drip(0.05)

    async def check() -> None:
        async with OpenAICompatWorldModel(fake_llm.url, MODEL, timeout=60, deadline=0.5) as model:
            await model.check()

    with pytest.raises(EndpointUnreachableError, match=r"within the request deadline of 0.5 s"):
        asyncio.run(check())


def test_deadline_must_be_positive(fake_llm: FakeLLM) -> None:
    with pytest.raises(UsageError, match=r"--sim-timeout 0: the request deadline must be > 0"):
        OpenAICompatWorldModel(fake_llm.url, MODEL, deadline=0)


def test_dropped_every_time_is_a_failure_not_unreachable(
    fake_llm: FakeLLM, trajectory: Trajectory
) -> None:
    fake_llm.script(*[Reply.drop()] * 3)
    observation = predict(fake_llm.url, trajectory, max_retries=2)
    assert observation.error is not None
    assert observation.error.startswith("APIConnectionError")
    assert "RemoteProtocolError" in observation.error


def test_retry_after_header_is_honoured(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    fake_llm.script(Reply.http(429, **{"Retry-After": "0.3"}))
    started = time.monotonic()
    assert not predict(fake_llm.url, trajectory, backoff_max=1.0).failed
    assert time.monotonic() - started >= 0.28


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply.text(""), "MalformedPredictionError: the model returned empty content"),
        (Reply.text(None), "MalformedPredictionError: the model returned empty content"),
        (Reply.text("<think>only thinking"), "MalformedPredictionError: the answer holds only"),
    ],
)
def test_malformed_output_is_an_error_observation(
    fake_llm: FakeLLM, trajectory: Trajectory, reply: Reply, expected: str
) -> None:
    fake_llm.script(reply)
    observation = predict(fake_llm.url, trajectory)
    assert observation.error is not None
    assert observation.error.startswith(expected)
    assert len(fake_llm.requests) == 1


def test_thinking_and_several_blocks(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    fake_llm.script(
        Reply.text(
            "<think>maybe <predicted_observation>\nno\n</predicted_observation></think>"
            "<predicted_observation>\nold\n[exit_code: 1]\n</predicted_observation>"
            "<predicted_observation>\nhi\n[exit_code: 0]\n</predicted_observation>"
        )
    )
    assert predict(fake_llm.url, trajectory) == Observation(text="hi\n", exit_code=0)


def test_missing_tags_use_whole_text(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    fake_llm.script(Reply.text("hi\n[exit_code: 0]"))
    assert predict(fake_llm.url, trajectory) == Observation(text="hi\n", exit_code=0)


def test_failed_history_step_is_an_error_not_a_request(
    fake_llm: FakeLLM, trajectory: Trajectory
) -> None:
    failed = trajectory.steps[0].model_copy(update={"observation": Observation(error="X: boom")})
    broken = trajectory.model_copy(update={"steps": [failed, *trajectory.steps[1:]]})
    observation = predict(fake_llm.url, broken)
    assert observation.error == "WorldModelError: history step 1 failed earlier (X: boom)"
    assert fake_llm.requests == []


def test_unreachable_endpoint_raises(closed_port_url: str, trajectory: Trajectory) -> None:
    # How fast is a benchmark's business; here: refused attempts end the request at once
    # (no per-attempt timeout is waited out), so the error names every refused attempt.
    with pytest.raises(EndpointUnreachableError) as caught:
        predict(closed_port_url, trajectory, timeout=600, deadline=600)
    message = str(caught.value)
    assert closed_port_url in message
    assert "refused all 5 connection attempts" in message
    assert "--sim-url" in message
    assert "\n" not in message


def test_concurrent_predictions(fake_llm: FakeLLM, trajectory: Trajectory) -> None:
    fake_llm.script(Reply.http(429), Reply.http(503))

    async def run() -> list[Observation]:
        async with OpenAICompatWorldModel(fake_llm.url, MODEL, **FAST) as model:
            return await asyncio.gather(
                *(
                    model.predict(trajectory, trajectory.steps[: d - 1], step.action, d)
                    for d, step in enumerate(trajectory.steps, start=1)
                )
            )

    texts = [o.text for o in asyncio.run(run())]
    assert texts == ["ran: ls\n", "ran: cat README.md\n", "ran: echo hi\n"]


def test_check_verifies_model(fake_llm: FakeLLM, closed_port_url: str) -> None:
    async def check(url: str, model: str) -> None:
        async with OpenAICompatWorldModel(url, model, **FAST) as world_model:
            await world_model.check()

    asyncio.run(check(fake_llm.url, MODEL))
    with pytest.raises(UsageError, match=r"does not serve model 'other'.*" + MODEL):
        asyncio.run(check(fake_llm.url, "other"))
    with pytest.raises(EndpointUnreachableError, match="--sim-url"):
        asyncio.run(check(closed_port_url, MODEL))


def test_describe_reports_provenance() -> None:
    model = OpenAICompatWorldModel("http://127.0.0.1:9/v1/", MODEL)
    info = model.describe()
    asyncio.run(model.aclose())
    assert info["backend"] == "openai-compat"
    assert info["base_url"] == "http://127.0.0.1:9/v1"
    assert info["model"] == MODEL
    assert (info["temperature"], info["top_p"], info["top_k"]) == ("0.6", "0.95", "20")
    assert info["prompt_hash"] == prompt_hash()


def test_backoff_grows_and_is_capped() -> None:
    policy = RetryPolicy(backoff_base=1.0, backoff_max=5.0, jitter=0.0)
    assert [policy.delay(n) for n in range(5)] == [1.0, 2.0, 4.0, 5.0, 5.0]
    assert policy.delay(0, retry_after=3.0) == 3.0
    assert policy.delay(0, retry_after=60.0) == 5.0
    jittered = RetryPolicy(backoff_base=1.0, jitter=0.5)
    assert all(0.5 <= jittered.delay(0) <= 1.0 for _ in range(50))


def test_invalid_options_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        OpenAICompatWorldModel("http://127.0.0.1:9/v1", MODEL, max_retries=-1)


def test_request_is_not_sent_for_unknown_domain(
    fake_llm: FakeLLM, make_trajectory: Callable[..., Trajectory], tmp_path: Path
) -> None:
    (tmp_path / "terminal").mkdir()  # a prompt set without android prompts
    for name in ("system.md.j2", "action.md.j2"):
        (tmp_path / "terminal" / name).write_text("x")
    data = make_trajectory().model_dump()
    android = Trajectory.model_validate({**data, "domain": "android"})
    with pytest.raises(UsageError, match="no world-model prompt"):
        predict(fake_llm.url, android, depth=1, prompts_dir=tmp_path)
    assert fake_llm.requests == []
    assert isinstance(android.steps[0].action, CommandAction)
