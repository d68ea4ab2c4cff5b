"""Gate v1: TOML policies, per-domain overrides, verdicts."""

from __future__ import annotations

from pathlib import Path

import pytest

from fidelity.analysis.models import RunInfo, RunSummary, Totals
from fidelity.errors import InputFormatError, NotFoundError
from fidelity.gate import evaluate, load_policy


def summary(
    drift: float, hallucination: float, horizon: int, steps: int, infra: int = 0
) -> RunSummary:
    run = RunInfo(
        run_id="r",
        started_at="2026-11-20T00:00:00",
        status="done",
        domain="terminal",
        sandbox="local",
        mode="teacher-forced",
        suite="s",
        code_version="v",
    )
    totals = Totals(
        trajectories=1,
        steps=steps + infra,
        compared_steps=steps,
        infra_failures=infra,
        drift_rate=drift,
        hallucination_rate=hallucination,
        mean_score=0.9,
        trust_horizon=horizon,
        horizon_limit=0.1,
    )
    return RunSummary(run=run, totals=totals, by_depth=[], by_action=[], worst=[])


def policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    return path


def test_domain_overrides_win(tmp_path: Path) -> None:
    rules = load_policy(
        policy(
            tmp_path,
            """
[default]
max_drift_rate = 0.5
min_steps = 10
[domains.terminal]
max_drift_rate = 0.05
""",
        )
    )
    verdict = evaluate(summary(0.1, 0.0, 5, 100), rules)
    assert verdict.status == "fail" and verdict.exit_code == 1
    assert [(c.name, c.passed) for c in verdict.checks] == [
        ("drift_rate <= 0.05", False),
        ("compared_steps >= 10", True),
        ("infra_failure_rate <= 0.05", True),
        ("unverifiable_rate <= 0.05", True),
    ]


def test_passing_run(tmp_path: Path) -> None:
    rules = load_policy(
        policy(
            tmp_path,
            """
[default]
max_drift_rate = 0.2
max_hallucination_rate = 0.1
min_trust_horizon = 3
""",
        )
    )
    verdict = evaluate(summary(0.1, 0.05, 3, 100), rules)
    assert verdict.status == "pass" and verdict.exit_code == 0
    assert [c.name for c in verdict.checks] == [
        "drift_rate <= 0.2",
        "hallucination_rate <= 0.1",
        "trust_horizon >= 3",
        "infra_failure_rate <= 0.05",
        "unverifiable_rate <= 0.05",
        "compared_steps >= 1",
    ]


def test_a_total_outage_fails_the_gate(tmp_path: Path) -> None:
    """Every world-model request failed (429): no compared step, drift 0, horizon "full"."""
    rules = load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.2\n"))
    verdict = evaluate(summary(0.0, 0.0, 4, steps=0, infra=40), rules)
    assert verdict.status == "fail" and verdict.exit_code == 1
    assert [(c.name, c.value, c.passed) for c in verdict.checks] == [
        ("drift_rate <= 0.2", 0.0, True),
        ("infra_failure_rate <= 0.05", 1.0, False),
        ("unverifiable_rate <= 0.05", 0.0, True),
        ("compared_steps >= 1", 0.0, False),
    ]


def test_infra_failure_limit_is_on_by_default_and_can_be_set(tmp_path: Path) -> None:
    rules = load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.2\n"))
    assert evaluate(summary(0.0, 0.0, 4, steps=90, infra=10), rules).status == "fail"
    assert evaluate(summary(0.0, 0.0, 4, steps=96, infra=4), rules).status == "pass"
    lenient = load_policy(
        policy(tmp_path, "[default]\nmax_drift_rate = 0.2\nmax_infra_failure_rate = 0.2\n")
    )
    assert evaluate(summary(0.0, 0.0, 4, steps=90, infra=10), lenient).status == "pass"
    warned = load_policy(
        policy(
            tmp_path,
            "[default]\nmax_drift_rate = 0.2\n[default.warn]\nmax_infra_failure_rate = 0.01\n",
        )
    )
    verdict = evaluate(summary(0.0, 0.0, 4, steps=96, infra=4), warned)
    assert verdict.status == "warn" and verdict.exit_code == 0


def test_an_empty_run_fails_even_with_min_steps_zero(tmp_path: Path) -> None:
    rules = load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.2\nmin_steps = 0\n"))
    verdict = evaluate(summary(0.0, 0.0, 0, steps=0), rules)
    assert verdict.status == "fail"
    assert ("compared_steps >= 1", False) in [(c.name, c.passed) for c in verdict.checks]


@pytest.mark.parametrize(
    "text",
    ["", "[default]\n", "[default]\nmin_steps = 5\n", "[default.warn]\nmax_drift_rate = 0.1\n"],
)
def test_a_policy_with_no_quality_limit_is_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(InputFormatError, match=r"gate.toml: the policy sets no limit on drift"):
        load_policy(policy(tmp_path, text))


def test_a_domain_the_policy_does_not_limit_fails(tmp_path: Path) -> None:
    rules = load_policy(policy(tmp_path, "[domains.web]\nmax_drift_rate = 0.2\n"))
    verdict = evaluate(summary(0.0, 0.0, 4, 100), rules)  # a terminal run
    assert verdict.status == "fail"
    assert [(c.name, c.passed) for c in verdict.checks][-1] == (
        "policy limits drift, hallucination or horizon",
        False,
    )


def test_bad_policies_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match=r"gate.toml: default.max_drift: Extra inputs"):
        load_policy(policy(tmp_path, "[default]\nmax_drift = 0.1\n"))
    with pytest.raises(
        InputFormatError, match=r"default.max_drift_rate: Input should be less than or equal to 1"
    ):
        load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 5\n"))
    with pytest.raises(InputFormatError, match=r"domains.kitchen"):
        load_policy(policy(tmp_path, "[domains.kitchen]\nmax_drift_rate = 0.1\n"))
    with pytest.raises(InputFormatError, match="invalid TOML"):
        load_policy(policy(tmp_path, "[default\n"))
    with pytest.raises(NotFoundError):
        load_policy(tmp_path / "none.toml")
