"""End-to-end audits: real bubblewrap replays, a real DuckDB file, a real loopback endpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest

from fakes.trajectories import command_trajectory
from fakes.world_model import FakeLLM, Reply
from fidelity.audit import AuditConfig, run_audit
from fidelity.batch import replay_suite
from fidelity.errors import (
    EndpointUnreachableError,
    InputFormatError,
    UnknownDomainError,
    UsageError,
)
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.pipeline import SimConfig
from fidelity.resources import default_suite
from fidelity.trajectory import CommandAction
from fidelity.worldmodels.base import Mode

pytestmark = [pytest.mark.bwrap, pytest.mark.usefixtures("bwrap")]


def rows(db: Path, sql: str) -> list[tuple[object, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchall()


def small_suite(tmp_path: Path, count: int = 3) -> Path:
    """The first *count* bundled trajectories, copied with their fixtures (a suite's paths
    must stay inside its own folder)."""
    bundled = default_suite("terminal")
    shutil.copytree(bundled.parent / "fixtures", tmp_path / "fixtures", dirs_exist_ok=True)
    path = tmp_path / "suite.jsonl"
    write_trajectories(path, read_trajectories(bundled)[:count])
    return path


def test_audit_bundled_suite_with_baseline(tmp_path: Path, db_path: Path) -> None:
    report = tmp_path / "report.html"
    result = run_audit(
        AuditConfig(db=db_path, report=report, limit=4, sim=SimConfig(baseline="copy"))
    )
    totals = result.summary.totals
    assert result.world_model_notice and "'copy' baseline" in result.world_model_notice
    assert totals.trajectories == 4 and totals.compared_steps == totals.steps > 20
    assert 0 < totals.drift_rate <= 1 and result.failed_trajectories == []
    assert report.read_text().lower().startswith("<!doctype html>")
    assert rows(db_path, "SELECT count(*) FROM observations WHERE side = 'real'") == [
        (totals.steps,)
    ]
    assert rows(db_path, "SELECT status FROM runs") == [("done",)]
    # the real side really ran: the fixture's git history and the planted failing test
    texts = " ".join(
        str(r[0]) for r in rows(db_path, "SELECT text FROM observations WHERE side='real'")
    )
    assert "logstats" in texts


def test_recorded_replay_as_simulation_barely_drifts(tmp_path: Path, db_path: Path) -> None:
    """A second real replay used as the 'simulation' differs only in volatile content."""
    suite = small_suite(tmp_path, 5)
    recorded = tmp_path / "recorded.jsonl"
    replay_suite(suite, recorded)
    result = run_audit(AuditConfig(suite=suite, db=db_path, sim=SimConfig(data=recorded)))
    assert result.summary.totals.drift_rate <= 0.05
    assert result.summary.totals.hallucination_rate == 0


def test_interrupted_audit_resumes_without_duplicates(tmp_path: Path, db_path: Path) -> None:
    suite = small_suite(tmp_path, 3)
    config = AuditConfig(
        suite=suite, db=db_path, run_id="nightly", sim=SimConfig(baseline="copy"), concurrency=1
    )
    seen = []

    def interrupt_after_first(phase: str, n: int) -> None:
        seen.append(phase)
        if phase == "compare":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_audit(config, interrupt_after_first)
    assert rows(db_path, "SELECT status FROM runs") == [("interrupted",)]
    stored = rows(db_path, "SELECT count(*) FROM trajectories WHERE status = 'done'")[0][0]
    assert stored == 1

    result = run_audit(config)
    assert result.resumed and result.skipped == 1 and result.audited == 2
    steps = sum(len(t.steps) for t in read_trajectories(suite))
    for table in ("steps", "comparisons"):
        assert rows(
            db_path, f"SELECT count(*), count(DISTINCT (trajectory_id, depth)) FROM {table}"
        ) == [(steps, steps)]
    assert rows(db_path, "SELECT status FROM runs") == [("done",)]


def test_hostile_actions_are_contained_and_the_audit_goes_on(tmp_path: Path, db_path: Path) -> None:
    hostile = command_trajectory(
        "hostile",
        ":(){ :|:& };:",
        "rm -rf --no-preserve-root / 2>/dev/null; echo done",
        "python3 -c \"import urllib.request; urllib.request.urlopen('http://example.com', timeout=3)\"",
        "sleep 100000",
        "echo still-here",
    )
    # Independent of speed: every step that must finish gets the run's generous timeout
    # (rm -rf of a large /usr takes long on a big machine); only the step that never ends
    # has a short one of its own, and it times out whatever the machine's speed.
    never_ends = hostile.steps[3].model_copy(
        update={"action": CommandAction(command="sleep 100000", timeout=2)}
    )
    hostile.steps[3] = never_ends
    calm = command_trajectory("calm", "echo hello", "pwd")
    suite = tmp_path / "hostile.jsonl"
    write_trajectories(suite, [hostile, calm])
    result = run_audit(
        AuditConfig(suite=suite, db=db_path, step_timeout=600, sim=SimConfig(baseline="copy"))
    )
    assert result.summary.totals.trajectories == 2 and result.failed_trajectories == []
    real = dict(
        ((r[0], r[1]), r[2:])
        for r in rows(
            db_path,
            "SELECT trajectory_id, depth, text, exit_code, timed_out, error FROM observations WHERE side='real'",
        )
    )
    assert "process limit" in str(real[("hostile", 1)][3])
    assert real[("hostile", 2)][0] == "done\n"
    assert real[("hostile", 3)][1] == 1 and "URLError" in str(real[("hostile", 3)][0])
    assert real[("hostile", 4)][2] is True  # timed out, killed
    assert real[("hostile", 5)][0] == "still-here\n"
    assert real[("calm", 1)][0] == "hello\n"


def test_endpoint_with_failures_never_stores_empty_observations(
    tmp_path: Path, db_path: Path, fake_llm: FakeLLM
) -> None:
    suite = small_suite(tmp_path, 2)
    steps = sum(len(t.steps) for t in read_trajectories(suite))
    # Every fifth request fails once (429 or 500), and one request fails for good.
    fake_llm.script(*[Reply.http(429) if i % 2 else Reply.http(500) for i in range(steps // 5)])
    sim = SimConfig(url=fake_llm.url, model="fake/agentworld-tiny", max_retries=2)
    result = run_audit(AuditConfig(suite=suite, db=db_path, sim=sim, mode=Mode.teacher_forced))
    assert result.summary.totals.steps == steps
    empty = rows(
        db_path,
        "SELECT count(*) FROM observations WHERE side = 'sim' AND text = '' AND error IS NULL",
    )
    assert empty == [(0,)]
    sims = rows(
        db_path, "SELECT text FROM observations WHERE side='sim' ORDER BY trajectory_id, depth"
    )
    assert all(str(text).startswith("ran: ") for (text,) in sims)
    system = fake_llm.requests[-1]["messages"][0]
    assert system["role"] == "system" and "<predicted_observation>" in system["content"]
    model = json.loads(str(rows(db_path, "SELECT world_model FROM runs")[0][0]))
    assert model["model"] == "fake/agentworld-tiny"


def test_garbage_answers_are_recorded_failures(
    tmp_path: Path, db_path: Path, fake_llm: FakeLLM
) -> None:
    suite = small_suite(tmp_path, 1)
    fake_llm.script(Reply.text(""), Reply.garbage(), Reply.text("no tags at all"))
    sim = SimConfig(url=fake_llm.url, model="fake/agentworld-tiny", max_retries=0, concurrency=1)
    result = run_audit(AuditConfig(suite=suite, db=db_path, sim=sim, mode=Mode.teacher_forced))
    failures = rows(
        db_path, "SELECT depth, error FROM observations WHERE side='sim' AND error IS NOT NULL"
    )
    assert [depth for depth, _ in failures] == [1, 2]
    assert "MalformedPredictionError" in str(failures[0][1])
    assert result.summary.totals.infra_failures == 2
    third = rows(db_path, "SELECT trim(text) FROM observations WHERE side='sim' AND depth = 3")
    assert third == [("no tags at all",)]  # no tags: the whole text is the prediction


def test_open_loop_stops_predicting_after_its_own_failure(
    tmp_path: Path, db_path: Path, fake_llm: FakeLLM
) -> None:
    suite = small_suite(tmp_path, 1)
    fake_llm.script(Reply.ok(), Reply.text(""))
    sim = SimConfig(url=fake_llm.url, model="fake/agentworld-tiny", max_retries=0)
    run_audit(AuditConfig(suite=suite, db=db_path, sim=sim, mode=Mode.open_loop))
    errors = rows(db_path, "SELECT depth, error FROM observations WHERE side='sim' ORDER BY depth")
    assert errors[0][1] is None and "MalformedPredictionError" in str(errors[1][1])
    assert all("failed earlier" in str(error) for _, error in errors[2:])
    assert len(fake_llm.requests) == 2  # no request is built on a failed history


def test_unreachable_endpoint_writes_nothing(
    tmp_path: Path, db_path: Path, closed_port_url: str
) -> None:
    sim = SimConfig(url=closed_port_url, model="m")
    with pytest.raises(EndpointUnreachableError, match="does not answer"):
        run_audit(AuditConfig(suite=small_suite(tmp_path, 1), db=db_path, sim=sim))
    assert not db_path.exists()


def test_bad_input_writes_nothing(tmp_path: Path, db_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "domain": "terminal", "steps": []}\n')
    with pytest.raises(
        InputFormatError, match=r"bad.jsonl:1: steps: List should have at least 1 item"
    ):
        run_audit(AuditConfig(suite=bad, db=db_path))
    with pytest.raises(UnknownDomainError, match="'android' needs --sandbox adb"):
        run_audit(AuditConfig(domain="android", db=db_path))
    with pytest.raises(UsageError, match="sandbox 'local' cannot replay domain 'mcp'"):
        run_audit(AuditConfig(domain="mcp", sandbox="local", db=db_path))
    assert not db_path.exists()


def test_both_modes_and_samples_are_stored_apart(
    tmp_path: Path, db_path: Path, fake_llm: FakeLLM
) -> None:
    from fidelity.trajectory import Control, Step

    (trajectory,) = read_trajectories(small_suite(tmp_path, 1))
    controlled = Control(instruction="answer as if it ran", expect=r"^ran: ")
    steps = [
        Step(action=s.action, control=controlled if depth == 2 else None)
        for depth, s in enumerate(trajectory.steps, start=1)
    ]
    suite = tmp_path / "controlled.jsonl"
    write_trajectories(suite, [trajectory.model_copy(update={"steps": steps})])
    n = len(steps)
    sim = SimConfig(url=fake_llm.url, model="fake/agentworld-tiny", samples=2)
    report = tmp_path / "both.html"
    result = run_audit(AuditConfig(suite=suite, db=db_path, sim=sim, mode="both", report=report))

    counts = rows(
        db_path,
        "SELECT mode, sample, count(*) FROM comparisons GROUP BY ALL ORDER BY mode, sample",
    )
    assert counts == [
        ("open-loop", 0, n),
        ("open-loop", 1, n),
        ("teacher-forced", 0, n),
        ("teacher-forced", 1, n),
    ]
    assert rows(db_path, "SELECT count(*) FROM observations WHERE side = 'sim'") == [(4 * n,)]
    assert rows(db_path, "SELECT mode FROM runs") == [("teacher-forced+open-loop",)]
    summary = result.summary
    # The headline is about the first mode (both samples); cells show both modes side by side.
    assert summary.totals.mode == "teacher-forced" and summary.totals.steps == 2 * n
    assert {cell.mode for cell in summary.cells} == {"teacher-forced", "open-loop"}
    figures = {f.mode: f for f in summary.simulation}
    assert set(figures) == {"teacher-forced", "open-loop"}
    for figure in figures.values():
        assert figure.sampling is not None and figure.sampling.samples == 2
        assert figure.sampling.spread == 0.0  # the fake answers every draw alike
        assert figure.sampling.distance_to_real is not None
        assert figure.sampling.distance_to_real > 0
        assert figure.controllability is not None
        assert (figure.controllability.judged, figure.controllability.obeyed) == (2, 2)
    html = report.read_text()
    assert "open-loop" in html and "Controllability" in html

    # Resuming the same run id with the same modes is allowed and adds nothing.
    again = run_audit(
        AuditConfig(suite=suite, db=db_path, sim=sim, mode="both", run_id=result.run_id)
    )
    assert again.resumed and again.skipped == 1
    with pytest.raises(Exception, match="another suite, domain or mode"):
        run_audit(AuditConfig(suite=suite, db=db_path, sim=sim, run_id=result.run_id))


def test_huge_observations_are_capped_alike_on_both_sides(
    tmp_path: Path, db_path: Path, fake_llm: FakeLLM
) -> None:
    """A 2 MB answer and a 300 KB real output are stored (and printed) cut to the cap by
    the comparator's own truncation rule, flagged truncated on both sides."""
    trajectory = command_trajectory("big", "head -c 300000 /dev/zero | tr '\\0' a; echo", "echo ok")
    suite = tmp_path / "big.jsonl"
    write_trajectories(suite, [trajectory])
    fake_llm.script(Reply.text("b" * 2_000_000))
    sim = SimConfig(url=fake_llm.url, model="fake/agentworld-tiny", max_retries=0, concurrency=1)
    config = AuditConfig(
        suite=suite, db=db_path, sim=sim, mode=Mode.teacher_forced, observation_cap=4096
    )
    result = run_audit(config)
    stored = rows(
        db_path,
        "SELECT side, depth, length(text), truncated, text LIKE '%<TRUNCATED>' FROM observations "
        "ORDER BY side, depth",
    )
    assert stored == [
        ("real", 1, 4096 + len("<TRUNCATED>") + 1, True, True),
        ("real", 2, 3, False, False),
        ("sim", 1, 4096 + len("<TRUNCATED>") + 1, True, True),
        ("sim", 2, len("ran: echo ok\n"), False, False),
    ]
    assert len(result.model_dump_json()) < 100_000  # what `audit --json` prints
