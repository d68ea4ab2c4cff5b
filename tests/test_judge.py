"""The optional LLM judge against the loopback fake OpenAI server: scores, failures, agreement."""

from __future__ import annotations

import json
import os
import random
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pytest
from scipy.stats import spearmanr
from typer.testing import CliRunner

from fakes.trajectories import command_trajectory
from fakes.world_model import MODEL, FakeLLM, Reply
from fidelity.cli import app
from fidelity.compare.base import StepComparison
from fidelity.executors import ExecutorConfig
from fidelity.judge import DIMENSIONS, JudgeConfig, JudgmentParseError, judge_run
from fidelity.judge.run import spearman
from fidelity.judge.steps import normalized, overall_score, parse_scores, parse_verdict
from fidelity.store import JudgmentRecord, Store, TimedObservation, TrajectoryRecord
from fidelity.trajectory import Observation
from tests import test_executors
from tests.test_store import INFO

ray_cluster = test_executors.ray_cluster  # the real two-raylet cluster (module fixture)

METRIC = [1.0, 0.8, 0.55, 0.3]
"""Deterministic scores of the four stored steps (trajectory t1: depths 1-2, t2: 1-2)."""


def answer(level: int, total: object = None, **override: object) -> str:
    """A judge answer ending in AgentWorldBench's JSON verdict."""
    scores: dict[str, object] = dict.fromkeys(DIMENSIONS, level)
    scores.update(override)
    verdict = {"scores": scores, "total_score": level if total is None else total}
    return f'<think>compare {{"scores": 1}}</think>\nFine.\n```json\n{json.dumps(verdict)}\n```'


def store_run(db: Path) -> None:
    """A run with two trajectories of two steps and known deterministic scores."""
    with Store(db) as store:
        store.start_run("r1", INFO)
        for index, tid in enumerate(("t1", "t2")):
            trajectory = command_trajectory(tid, "ls", "cat notes.txt")
            real = [TimedObservation(Observation(text=f"notes.txt\n{tid}\n", exit_code=0))] * 2
            sim = [TimedObservation(Observation(text="notes.txt\nother\n", exit_code=0))] * 2
            comparisons = [
                StepComparison(score=METRIC[2 * index + d], drift=METRIC[2 * index + d] < 0.6)
                for d in (0, 1)
            ]
            record = TrajectoryRecord(
                trajectory, real, sim, comparisons, "teacher-forced", 0.1, 0.1
            )
            store.write_trajectory("r1", record)
        store.finish_run("r1", "done")


def config(url: str, tmp_path: Path, **update: object) -> JudgeConfig:
    values: dict[str, object] = {
        "url": url,
        "model": MODEL,
        "concurrency": 1,
        "backoff_base": 0.01,
        "max_retries": 2,
        "cache": tmp_path / "judge-cache.duckdb",
    }
    values.update(update)
    return JudgeConfig.model_validate(values)


def judgments(db: Path) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "SELECT trajectory_id, depth, scores, overall, error FROM judgments "
            "ORDER BY trajectory_id, depth"
        ).fetchall()


def test_good_scores_are_stored_and_agree_with_the_metrics(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path
) -> None:
    store_run(db_path)
    fake_llm.script(*(Reply.text(answer(level)) for level in (5, 4, 3, 1)))
    result = judge_run(db_path, None, config(fake_llm.url, tmp_path))
    assert (result.run_id, result.steps, result.judged, result.failed) == ("r1", 4, 4, 0)
    rows = judgments(db_path)
    assert [row[3] for row in rows] == [100.0, 75.0, 50.0, 0.0]
    assert json.loads(str(rows[1][2])) == dict.fromkeys(DIMENSIONS, 4.0)
    assert result.agreement.n == 4
    assert result.agreement.overall == pytest.approx(1.0)
    assert result.agreement.dimensions["factuality"] == pytest.approx(1.0)
    assert result.mean_scores["overall"] == pytest.approx(56.25)
    # the run's summary and report carry the judge beside the metrics
    from fidelity.analysis.summary import summarize
    from fidelity.report.html import write_report

    with Store(db_path, read_only=True) as store:
        summary = summarize(store, "r1")
    assert summary.judge is not None and summary.judge.spearman == pytest.approx(1.0)
    html = write_report(summary, tmp_path / "judged.html").read_text()
    assert 'id="judge-table"' in html and "56.250" in html
    # the request shows the action, both observations and the real history
    user = fake_llm.requests[1]["messages"][1]["content"]
    assert "t1" in user and "other" in user and "## Step 1" in user
    assert fake_llm.requests[1]["temperature"] == 0.6  # the reference judge's
    assert fake_llm.requests[1]["max_tokens"] == 32768
    assert "top_p" not in fake_llm.requests[1] and "top_k" not in fake_llm.requests[1]
    # AgentWorldBench's table: per-domain normalized scores beside the deterministic ones
    assert result.domain_scores == {"terminal": 56.25, "overall": 56.25}
    assert result.deterministic["terminal"] == pytest.approx(66.25)
    assert result.agreement.domains == {"terminal": pytest.approx(1.0)}


def test_cached_answers_cost_nothing_on_a_rerun(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path
) -> None:
    store_run(db_path)
    fake_llm.script(*(Reply.text(answer(level)) for level in (5, 4, 3, 1)))
    judge_run(db_path, "r1", config(fake_llm.url, tmp_path))
    again = judge_run(db_path, "r1", config(fake_llm.url, tmp_path))
    assert len(fake_llm.requests) == 4
    assert again.judged == 4 and len(judgments(db_path)) == 4


def test_garbage_answers_are_judge_failures_never_scores(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path
) -> None:
    store_run(db_path)
    fake_llm.script(
        Reply.text("Looks faithful to me, 5/5."),
        Reply.text(answer(4, realism=9)),
        Reply.garbage(),
        Reply.text(answer(2)),
    )
    result = judge_run(db_path, "r1", config(fake_llm.url, tmp_path, max_retries=0))
    assert (result.judged, result.failed) == (1, 3)
    assert result.failures == {"JudgmentParseError": 2, "NotACompletionError": 1}
    rows = judgments(db_path)
    assert [row[2] is None and row[3] is None for row in rows] == [True, True, True, False]
    assert "no JSON verdict" in str(rows[0][4]) and "realism=9" in str(rows[1][4])
    assert result.agreement.n == 1 and result.agreement.overall is None
    # failures were not cached: a rerun asks again
    fake_llm.script(*(Reply.text(answer(level)) for level in (5, 4, 3)))
    assert judge_run(db_path, "r1", config(fake_llm.url, tmp_path)).judged == 4


def test_server_errors_are_retried_then_recorded(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path
) -> None:
    store_run(db_path)
    fake_llm.script(
        Reply.http(500),
        Reply.http(503),
        Reply.text(answer(5)),
        *([Reply.http(500)] * 3),
        Reply.text(answer(3)),
    )
    result = judge_run(db_path, "r1", config(fake_llm.url, tmp_path, limit=3))
    assert (result.steps, result.judged, result.failed) == (3, 2, 1)
    assert len(fake_llm.requests) == 7
    error = str(judgments(db_path)[1][4])
    assert error.startswith("InternalServerError: HTTP 500") and "after 3 attempts" in error


def test_unreachable_endpoint_is_one_line_exit_2_and_keeps_what_is_stored(
    closed_port_url: str, db_path: Path
) -> None:
    store_run(db_path)
    with Store(db_path) as store:
        store.write_judgments(
            "r1", {"model": "earlier"}, [JudgmentRecord("t1", 1, "teacher-forced", 0, None, None)]
        )
    args = ["judge", "--db", db_path, "--judge-url", closed_port_url, "--judge-model", MODEL]
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 2
    message = result.output.strip()
    assert "\n" not in message and closed_port_url in message and "--judge-url" in message
    assert len(judgments(db_path)) == 1
    with duckdb.connect(str(db_path), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM comparisons").fetchone() == (4,)


def test_cli_json_reports_the_agreement(fake_llm: FakeLLM, db_path: Path) -> None:
    store_run(db_path)
    fake_llm.script(*(Reply.text(answer(level)) for level in (5, 4, 3, 1)))
    args = ["judge", "--db", db_path, "--judge-url", fake_llm.url, "--judge-model", MODEL]
    result = CliRunner().invoke(app, [str(a) for a in [*args, "--concurrency", "1", "--json"]])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["agreement"]["n"] == 4 and data["agreement"]["overall"] == pytest.approx(1.0)
    assert set(data["agreement"]["dimensions"]) == set(DIMENSIONS)


def test_parse_verdict_is_strict() -> None:
    assert parse_scores(answer(3)) == dict.fromkeys(DIMENSIONS, 3.0)
    assert parse_verdict(answer(3, total=4)) == (dict.fromkeys(DIMENSIONS, 3.0), 4.0)
    assert overall_score(dict.fromkeys(DIMENSIONS, 3.0)) == 50.0
    assert normalized(4.0) == 75.0
    last = '{"scores": {}} then ' + answer(2, rationale="ok")
    assert parse_scores(last)["quality"] == 2.0
    bare = json.dumps({"scores": dict.fromkeys(DIMENSIONS, 5)})  # no total: mean of the scores
    assert parse_verdict("verdict: " + bare) == (dict.fromkeys(DIMENSIONS, 5.0), 5.0)
    for bad in (
        None,
        "no json at all",
        "[1, 2, 3, 4, 5]",
        answer(3, format=0),
        answer(3, quality="x"),
        answer(3, quality=True),
        answer(3, total=7),
        json.dumps({"scores": {"format": 3}}),
    ):
        with pytest.raises(JudgmentParseError):
            parse_scores(bad) if bad is None or "total_score" not in bad else parse_verdict(bad)


def test_official_judge_prompts_are_used_per_domain(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path
) -> None:
    official = Path(__file__).parent / "formats" / "data" / "official_prompts"
    store_run(db_path)
    fake_llm.script(*(Reply.text(answer(level)) for level in (5, 4, 3, 1)))
    result = judge_run(db_path, "r1", config(fake_llm.url, tmp_path, prompts_dir=official))
    assert result.judged == 4
    system = fake_llm.requests[0]["messages"][0]["content"]
    assert system == (official / "terminal" / "judge_system_prompt.txt").read_text()
    assert result.judge["prompts"] == str(official)


def test_spearman_on_known_cases() -> None:
    assert spearman([1, 2, 3, 4, 5], [5, 6, 7, 8, 7]) == pytest.approx(0.8208, abs=1e-4)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2], [1, 2]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    rng = random.Random(3)
    x = [rng.randint(1, 5) for _ in range(50)]
    y = [rng.random() for _ in range(50)]
    assert spearman(x, y) == pytest.approx(spearmanr(x, y).statistic, abs=1e-6)


def test_a_rerun_resumes_asking_only_for_steps_without_a_valid_judgment(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path
) -> None:
    store_run(db_path)
    fake_llm.script(Reply.text(answer(5)), Reply.text("no verdict"))
    first = judge_run(db_path, "r1", config(fake_llm.url, tmp_path, limit=2, cache=None))
    assert (first.steps, first.judged, first.resumed, first.failed) == (2, 1, 0, 1)
    fake_llm.script(*(Reply.text(answer(level)) for level in (4, 3, 1)))
    again = judge_run(db_path, "r1", config(fake_llm.url, tmp_path, cache=None))
    # no cache: the kept judgment is not asked again, the failed one and the rest are
    assert (again.steps, again.judged, again.resumed, again.failed) == (4, 4, 1, 0)
    assert len(fake_llm.requests) == 5
    assert [row[3] for row in judgments(db_path)] == [100.0, 75.0, 50.0, 0.0]
    # another judge (another temperature) judges every step again
    other = judge_run(db_path, "r1", config(fake_llm.url, tmp_path, cache=None, temperature=0))
    assert (other.resumed, len(fake_llm.requests)) == (0, 9)


def store_one_trajectory(db: Path, *commands: str) -> None:
    """A run holding one trajectory "t1" with a compared step per command."""
    with Store(db) as store:
        store.start_run("r1", INFO)
        n = len(commands)
        real = [TimedObservation(Observation(text="notes.txt\n", exit_code=0))] * n
        sim = [TimedObservation(Observation(text="other\n", exit_code=0))] * n
        comparisons = [StepComparison(score=0.5, drift=True)] * n
        trajectory = command_trajectory("t1", *commands)
        record = TrajectoryRecord(trajectory, real, sim, comparisons, "teacher-forced", 0.1, 0.1)
        store.write_trajectory("r1", record)
        store.finish_run("r1", "done")


@pytest.mark.parametrize("stop", ["ctrl-c", "error"])
def test_a_stopped_judge_keeps_every_answered_step_of_an_unfinished_trajectory(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path, stop: str
) -> None:
    """Two of t1's three steps are answered, the third blocks (or the driver fails after
    the second): those two are stored although t1's record never comes back."""
    stop_the_judge_mid_trajectory(fake_llm, db_path, tmp_path, stop, None)


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["ctrl-c", "error"])
def test_a_stopped_judge_on_ray_keeps_what_its_workers_answered(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path, stop: str, ray_cluster: str
) -> None:
    """The same on the two-raylet cluster: the worker posts each answer to the mailbox,
    which the driver empties on its way out; the worker itself is cancelled."""
    executor = ExecutorConfig(type="ray", sim_concurrency=1, ray_address=ray_cluster)
    stop_the_judge_mid_trajectory(fake_llm, db_path, tmp_path, stop, executor)


def stop_the_judge_mid_trajectory(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path, stop: str, executor: ExecutorConfig | None
) -> None:
    """Judge t1's three steps, stopping as the third is asked; rerun; each is asked once."""
    store_one_trajectory(db_path, "ls", "cat notes.txt", "pwd")
    fake_llm.script(Reply.text(answer(5)), Reply.text(answer(4)), Reply.hang())
    answered: list[str] = []

    def progress(phase: str, n: int) -> None:
        answered.extend([phase] * n if phase == "judge" else [])
        if stop == "error" and len(answered) == 2:
            raise RuntimeError("the driver fails")

    if stop == "ctrl-c":  # Ctrl-C comes as the third request hangs (sent by the server)
        fake_llm.on_hang = lambda: os.kill(os.getpid(), signal.SIGINT)
    judge = config(fake_llm.url, tmp_path, cache=None)  # nothing kept but the store
    with pytest.raises(KeyboardInterrupt if stop == "ctrl-c" else RuntimeError):
        judge_run(db_path, "r1", judge, progress, executor)
    assert [row[:2] + row[3:] for row in judgments(db_path)] == [
        ("t1", 1, 100.0, None),
        ("t1", 2, 75.0, None),
    ]
    asked = len(fake_llm.requests)
    fake_llm.script(Reply.text(answer(3)))
    again = judge_run(db_path, "r1", judge, None, executor)
    assert (again.steps, again.judged, again.resumed, again.failed) == (3, 3, 2, 0)
    assert len(fake_llm.requests) == asked + 1  # only the step left unanswered is asked
    assert [row[3] for row in judgments(db_path)] == [100.0, 75.0, 50.0]


def test_each_judgment_is_written_once(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Handed over as answered, a judgment is not written again with its trajectory's record."""
    written: list[tuple[str, int]] = []
    write = Store.write_judgments

    def counted(
        store: Store, run_id: str, judge: dict[str, str], records: Sequence[JudgmentRecord]
    ) -> None:
        written.extend((r.trajectory_id, r.depth) for r in records)
        write(store, run_id, judge, records)

    monkeypatch.setattr(Store, "write_judgments", counted)
    store_run(db_path)
    fake_llm.script(*(Reply.text(answer(level)) for level in (5, 4, 3, 1)))
    assert judge_run(db_path, "r1", config(fake_llm.url, tmp_path)).judged == 4
    assert sorted(written) == [("t1", 1), ("t1", 2), ("t2", 1), ("t2", 2)]


def test_a_step_judged_twice_is_stored_and_counted_once(
    fake_llm: FakeLLM, db_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ray task retried after its worker was lost posts its judgments again."""
    import fidelity.executors
    from fidelity.executors.local import LocalExecutor

    class Retrying(LocalExecutor):
        async def run(self, *args: Any, on_judgment: Any = None, **kwargs: Any) -> None:
            def twice(judgment: JudgmentRecord) -> None:
                on_judgment(judgment)
                on_judgment(judgment)

            await super().run(*args, on_judgment=twice, **kwargs)

    monkeypatch.setattr(fidelity.executors, "get_executor", lambda c, p: Retrying(1, 1, p))
    store_run(db_path)
    fake_llm.default = Reply.text(answer(4))
    result = judge_run(db_path, "r1", config(fake_llm.url, tmp_path, cache=None))
    assert (result.steps, result.judged) == (4, 4)
    assert [row[:2] for row in judgments(db_path)] == [("t1", 1), ("t1", 2), ("t2", 1), ("t2", 2)]


def test_judge_tasks_are_plain_data_one_per_trajectory(db_path: Path, tmp_path: Path) -> None:
    from fidelity.judge.run import judge_tasks, task_steps
    from fidelity.task import TrajectoryTask

    store_run(db_path)
    with Store(db_path, read_only=True) as store:
        tasks, selected, resumed = judge_tasks(store, "r1", config("http://x/v1", tmp_path))
    assert (selected, resumed) == (4, 0)
    assert [t.trajectory.id for t in tasks] == ["t1", "t2"]
    shipped = TrajectoryTask.model_validate_json(tasks[1].model_dump_json())
    assert shipped == tasks[1]
    steps = task_steps(shipped)
    assert [(s.trajectory_id, s.depth, s.mode) for s in steps] == [
        ("t2", 1, "teacher-forced"),
        ("t2", 2, "teacher-forced"),
    ]
    second = steps[1].variables
    assert second["real"]["text"] == "notes.txt\nt2\n" and second["sim"]["text"].endswith("other\n")
    assert [h["text"] for h in second["history"]] == ["notes.txt\nt2\n"]
    assert json.loads(second["action"])["command"] == "cat notes.txt"


@pytest.mark.slow
def test_the_judge_on_ray_stores_what_the_local_executor_stores(
    fake_llm: FakeLLM, tmp_path: Path, ray_cluster: str
) -> None:
    fake_llm.default = Reply.text(answer(4))
    stored = {}
    for where in ("local", "ray"):
        db = tmp_path / f"{where}.duckdb"
        store_run(db)
        executor = ExecutorConfig(type=where, sim_concurrency=2, ray_address=ray_cluster)
        result = judge_run(db, "r1", config(fake_llm.url, tmp_path, cache=None), None, executor)
        assert (result.steps, result.judged, result.failed) == (4, 4, 0)
        stored[where] = judgments(db)
    assert stored["ray"] == stored["local"] and len(fake_llm.requests) == 8
