"""Against a real OpenAI-compatible server: ``transformers serve`` with a tiny random Qwen3.

The model is built by the test (tokenizer trained locally, random weights from
a config): nothing is downloaded. Its answers are noise, which is the point:
whatever a real server returns, every step ends as an observation or an
explicit failure, the cache reproduces the run, and the AgentWorldBench round
trip holds.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fidelity.batch import simulate_suite
from fidelity.formats.agentworldbench import export_predictions
from fidelity.formats.convert import import_trajectories
from fidelity.formats.jsonl import read_trajectories
from fidelity.pipeline import SimConfig
from fidelity.worldmodels.base import Mode
from tests.conftest import require_module

pytestmark = pytest.mark.slow
AWB = Path(__file__).parent.parent / "formats" / "data" / "agentworldbench"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """``(base_url, model)`` of a running ``transformers serve`` on loopback."""
    require_module("torch", "pip install -e '.[test]' (torch==2.13.0 CPU)")
    require_module("transformers", "pip install -e '.[test]'")
    from tests.worldmodels.tiny_qwen import build_tiny_qwen

    root = tmp_path_factory.mktemp("tiny")
    model_dir = build_tiny_qwen(root / "model")
    port = _free_port()
    exe = shutil.which("transformers", path=os.path.dirname(sys.executable))
    assert exe is not None, "the transformers CLI is not installed next to this Python"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(root / "hf")}
    log = (root / "serve.log").open("wb")
    proc = subprocess.Popen(
        [exe, "serve", str(model_dir), "--host", "127.0.0.1", "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(
                        "transformers serve did not start: "
                        + (root / "serve.log").read_text()[-2000:]
                    )
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/v1", str(model_dir)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_awb_import_simulate_export_against_a_real_server(
    tiny_server: tuple[str, str], tmp_path: Path
) -> None:
    url, model = tiny_server
    suite = tmp_path / "awb.jsonl"
    import_trajectories("agentworldbench", [AWB], suite)
    # transformers serve rejects top_k in the body: it is not sent (top_k=None).
    sim = SimConfig(
        url=url, model=model, top_k=None, max_tokens=12, cache=tmp_path / "c.duckdb", concurrency=4
    )
    first = simulate_suite(suite, tmp_path / "sim.jsonl", sim, Mode.teacher_forced)
    samples = len(read_trajectories(suite))
    assert first.steps == sum(len(t.steps) for t in read_trajectories(suite))
    # Random weights rarely stop by themselves: an answer cut at max_tokens is a recorded
    # infrastructure failure (TruncatedAnswerError), any other answer a prediction with text.
    predicted = 0
    for trajectory in read_trajectories(tmp_path / "sim.jsonl"):
        for step in trajectory.steps:
            observation = step.observation
            assert observation is not None
            if observation.failed:
                assert str(observation.error).startswith("TruncatedAnswerError:"), observation
            else:
                predicted += 1
                assert observation.text.strip()
    assert predicted + first.failed_steps == first.steps
    again = simulate_suite(suite, tmp_path / "again.jsonl", sim, Mode.teacher_forced)
    assert again.cache is not None and again.cache["hits"] == predicted  # failures not cached
    exported = export_predictions(tmp_path / "sim.jsonl", tmp_path / "preds.jsonl")
    assert exported.samples == samples
    rows = [json.loads(line) for line in (tmp_path / "preds.jsonl").read_text().splitlines()]
    assert all(r["gen"].startswith("<predicted_observation>\n") or r["gen_error"] for r in rows)


def test_terminal_open_loop_with_samples_against_a_real_server(
    tiny_server: tuple[str, str], tmp_path: Path
) -> None:
    from fakes.trajectories import build_trajectory
    from fidelity.formats.jsonl import write_trajectories

    url, model = tiny_server
    suite = tmp_path / "suite.jsonl"
    write_trajectories(suite, [build_trajectory("a", commands=("ls", "pwd"))])
    sim = SimConfig(url=url, model=model, top_k=None, max_tokens=8, samples=2, cache=None)
    result = simulate_suite(
        suite, tmp_path / "sim.jsonl", sim, [Mode.teacher_forced, Mode.open_loop]
    )
    assert result.trajectories == 4 and result.steps == 8
    for trajectory in read_trajectories(tmp_path / "sim.jsonl"):
        for step in trajectory.steps:
            observation = step.observation
            assert observation is not None
            # Random weights may emit nothing usable: then it is a recorded failure, never blank.
            assert (
                observation.failed or observation.text.strip() or observation.exit_code is not None
            )
    assert result.sampling is not None and result.sampling.samples == 2
