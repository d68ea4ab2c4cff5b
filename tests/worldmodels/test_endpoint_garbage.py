"""Garbage from the world-model endpoint (issue 30): every kind is a failed step, never a crash.

A real loopback server answers HTTP 200 with bodies that are not chat
completions: not UTF-8, an HTML page, truncated JSON, a body cut before its
Content-Length, JSON of another shape, nothing. Each is retried like a 5xx and
then stored as an infrastructure failure of the sim side naming what came back;
``fidelity audit`` finishes, keeps every real replay and prints no traceback.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import duckdb
import pytest

from fakes.world_model import (
    MODEL,
    FakeLLM,
    Reply,
    echo_prediction,
    make_handler,
    serving,
)
from fidelity.trajectory import Observation, Trajectory
from fidelity.worldmodels.openai_compat import OpenAICompatWorldModel

ROOT = Path(__file__).resolve().parents[2]
_CHOICE = {"index": 0, "message": {"role": "assistant", "content": "ok"}}
_HEAD = {"id": "chatcmpl-garbage", "object": "chat.completion", "created": 0, "model": MODEL}
_COMPLETION = json.dumps({**_HEAD, "choices": [_CHOICE]}).encode()
#: kind -> (content type, body, bytes announced in Content-Length; None: the body's length)
GARBAGE: dict[str, tuple[str, bytes, int | None]] = {
    "not-utf8": ("application/json", _COMPLETION.replace(b'"ok"', b'"\xff\xfe\xfd"'), None),
    "html": (
        "text/html; charset=utf-8",
        b"<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head></html>",
        None,
    ),
    "truncated-json": ("application/json", _COMPLETION[:40], None),
    "cut-mid-stream": ("application/json", _COMPLETION[:40], len(_COMPLETION)),
    "not-a-completion": ("application/json", b'{"result": "queued", "ticket": 7}', None),
    "empty": ("application/json", b"", None),
    "no-choices": ("application/json", json.dumps({**_HEAD, "choices": []}).encode(), None),
    "lone-surrogate": ("application/json", _COMPLETION.replace(b'"ok"', b'"a\\ud800b"'), None),
}
#: what the step's error says came back, per kind
SAYS = {
    "not-utf8": "answered a body that is not valid UTF-8 (byte 0xff at offset",
    "html": "answered an HTML page, not an OpenAI chat completion: '<!DOCTYPE html>",
    "truncated-json": "answered a body that is not JSON (Unterminated string",
    "cut-mid-stream": "RemoteProtocolError: peer closed connection without sending complete",
    "not-a-completion": "answered JSON (keys: result, ticket), not an OpenAI chat completion",
    "empty": "answered an empty body (0 bytes), not an OpenAI chat completion",
    "no-choices": "answered JSON with no choices (keys: id, object, created, model, choices",
    "lone-surrogate": "answered JSON whose content holds a lone surrogate escape, not an OpenAI",
}


class GarbageLLM(FakeLLM):
    """The fake endpoint, answering garbage of a kind for every request about a command."""

    def __init__(self) -> None:
        super().__init__()
        self.garbage: dict[str, str] = {}  # command -> kind (every attempt)
        self.always: str | None = None  # kind for every request

    def kind_for(self, body: dict[str, Any]) -> str | None:
        """The garbage kind this request gets, or None for a normal answer."""
        predicted = echo_prediction(body.get("messages", []))
        command = predicted.split("\n")[1].removeprefix("ran: ")
        return self.always or self.garbage.get(command)


def garbage_handler(fake: GarbageLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(make_handler(fake)):  # type: ignore[misc]
        def _answer(self, reply: Reply, body: dict[str, Any]) -> None:
            kind = fake.kind_for(body)
            if kind is None:
                super()._answer(reply, body)
                return
            content_type, payload, length = GARBAGE[kind]
            self.close_connection = kind == "cut-mid-stream"
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(payload) if length is None else length))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()

    return Handler


@pytest.fixture
def garbage_llm() -> Iterator[GarbageLLM]:
    """A real loopback endpoint that answers chosen requests with garbage."""
    with serving(GarbageLLM(), garbage_handler) as fake:
        yield fake


def predict(url: str, trajectory: Trajectory, **options: Any) -> Observation:
    """The prediction of the trajectory's last step, backoffs recorded, not waited out."""
    delays: list[float] = []

    async def no_wait(seconds: float) -> None:
        delays.append(seconds)

    async def run() -> Observation:
        async with OpenAICompatWorldModel(url, MODEL, sleep=no_wait, **options) as model:
            depth = len(trajectory.steps)
            step = trajectory.steps[-1]
            return await model.predict(trajectory, trajectory.steps[:-1], step.action, depth)

    return asyncio.run(run())


@pytest.mark.parametrize("kind", sorted(GARBAGE))
def test_garbage_is_retried_then_a_failed_step_naming_it(
    garbage_llm: GarbageLLM, make_trajectory: Callable[..., Trajectory], kind: str
) -> None:
    garbage_llm.always = kind
    observation = predict(garbage_llm.url, make_trajectory(), max_retries=2)
    assert observation.failed and observation.text == ""
    error = str(observation.error)
    assert "\n" not in error and len(error) < 400, error
    prefix = "APIConnectionError:" if kind == "cut-mid-stream" else "NotACompletionError:"
    assert error.startswith(f"{prefix} {garbage_llm.url}"), error
    assert SAYS[kind] in error, error
    assert error.endswith("(after 3 attempts)"), error
    assert len(garbage_llm.requests) == 3  # retried like a 5xx


@pytest.mark.parametrize("kind", ["not-utf8", "html", "cut-mid-stream"])
def test_garbage_once_is_recovered_by_a_retry(
    garbage_llm: GarbageLLM, make_trajectory: Callable[..., Trajectory], kind: str
) -> None:
    answers = iter([kind])
    garbage_llm.kind_for = lambda body: next(answers, None)  # type: ignore[method-assign]
    observation = predict(garbage_llm.url, make_trajectory())
    assert observation == Observation(text="ran: echo hi\n", exit_code=0)
    assert len(garbage_llm.requests) == 2


#: one step of each kind of garbage in the first three trajectories of the bundled suite
AUDIT_GARBAGE = {
    "ls -la": "not-utf8",  # term-001, depth 3
    "cd src": "html",  # term-001, depth 4
    "ls -R": "truncated-json",  # term-002, depth 1
    "ls -d */": "cut-mid-stream",  # term-002, depth 4
    "cat Makefile": "not-a-completion",  # term-003, depth 2
    "cat data/config.json": "empty",  # term-003, depth 3
}


def _audit(tmp_path: Path, url: str, run_id: str) -> subprocess.CompletedProcess[str]:
    argv = [
        *(sys.executable, "-m", "fidelity", "audit", "--domain", "terminal", "--limit", "3"),
        *("--db", str(tmp_path / "f.duckdb"), "--run-id", run_id, "--timeout", "120"),
        *("--report", str(tmp_path / f"{run_id}.html")),
        *("--sim-url", url, "--sim-model", MODEL, "--no-sim-cache"),
    ]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _stored(db: Path, run_id: str) -> dict[str, Any]:
    with duckdb.connect(str(db), read_only=True) as con:

        def one(sql: str) -> Any:
            return con.execute(sql, [run_id]).fetchall()

        return {
            "status": one("SELECT status FROM runs WHERE run_id = ?")[0][0],
            "trajectories": one("SELECT count(*) FROM trajectories WHERE run_id = ?")[0][0],
            "real": one(
                "SELECT count(*) FROM observations WHERE run_id = ? AND side = 'real' "
                "AND error IS NULL"
            )[0][0],
            "sim": one("SELECT count(*) FROM observations WHERE run_id = ? AND side = 'sim'")[0][0],
            "sim_errors": dict(
                one(
                    "SELECT trajectory_id || '@' || depth, error FROM observations "
                    "WHERE run_id = ? AND side = 'sim' AND error IS NOT NULL"
                )
            ),
            "infra": sorted(
                f"{t}@{d}"
                for t, d in one(
                    "SELECT trajectory_id, depth FROM comparisons "
                    "WHERE run_id = ? AND infra_failure"
                )
            ),
        }


@pytest.mark.bwrap
def test_audit_survives_endpoint_garbage(
    tmp_path: Path, garbage_llm: GarbageLLM, bwrap: None
) -> None:
    clean = _audit(tmp_path, garbage_llm.url, "clean")
    assert clean.returncode == 0, clean.stderr
    garbage_llm.garbage = AUDIT_GARBAGE
    dirty = _audit(tmp_path, garbage_llm.url, "garbage")

    assert dirty.returncode == 0, dirty.stderr  # no policy given: the audit itself succeeded
    assert "Traceback" not in dirty.stderr + dirty.stdout
    assert len(dirty.stderr.splitlines()) <= 3, dirty.stderr
    assert "(+6 infrastructure failures)" in dirty.stdout
    before, after = (
        _stored(tmp_path / "f.duckdb", "clean"),
        _stored(tmp_path / "f.duckdb", "garbage"),
    )
    assert before["sim_errors"] == {} and before["infra"] == []
    assert (after["status"], after["trajectories"]) == ("done", 3)
    assert after["real"] == before["real"] == after["sim"] == before["sim"] == 23
    expected = {
        "term-001-nav-basics@3": "not-utf8",
        "term-001-nav-basics@4": "html",
        "term-002-nav-recursive@1": "truncated-json",
        "term-002-nav-recursive@4": "cut-mid-stream",
        "term-003-read-docs@2": "not-a-completion",
        "term-003-read-docs@3": "empty",
    }
    assert after["infra"] == sorted(expected)
    assert sorted(after["sim_errors"]) == sorted(expected)
    for step, kind in expected.items():
        assert SAYS[kind] in after["sim_errors"][step], after["sim_errors"][step]
