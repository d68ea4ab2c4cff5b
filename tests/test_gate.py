"""Gate policies: TOML, per-domain overrides, verdicts decided on confidence bounds."""

from __future__ import annotations

from pathlib import Path

import pytest

from fidelity.errors import InputFormatError, NotFoundError
from fidelity.policy import load_policy
from tests.runs import judged, tally


def clean(n: int, steps: int = 5, **counts: int) -> list:  # type: ignore[type-arg]
    """*n* trajectories of *steps* steps with the same *counts*."""
    return [tally(i, steps, **counts) for i in range(n)]


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
    # a quarter of 200 trajectories drift at their last step: 5% of steps, the limit
    tallies = clean(150) + [tally(i, 5, drift=1) for i in range(150, 200)]
    verdict = judged(tallies, rules)
    assert verdict.status == "fail" and verdict.exit_code == 1
    assert [(c.name, c.decision, c.passed) for c in verdict.checks] == [
        ("drift_rate <= 0.05", "undecided", False),  # 0.05 itself: no bound can pass it
        ("compared_steps >= 10", None, True),
        ("infra_failure_rate <= 0.05", "pass", True),
        ("unverifiable_rate <= 0.05", "pass", True),
    ]
    assert verdict.checks[0].value == 0.05 and verdict.checks[0].more is None
    assert [c.name for c in verdict.undecided] == ["drift_rate <= 0.05"]
    # 0.15 of the steps drift: its lower bound is over the limit
    worse = clean(50) + [tally(i, 5, drift=1) for i in range(50, 200)]
    failed = judged(worse, rules).checks[0]
    assert failed.decision == "fail" and failed.lower is not None and failed.lower > 0.05


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
    verdict = judged(clean(200), rules)
    assert verdict.status == "pass" and verdict.exit_code == 0
    assert all(c.decision in (None, "pass") for c in verdict.checks)
    assert [c.name for c in verdict.checks] == [
        "drift_rate <= 0.2",
        "hallucination_rate <= 0.1",
        "trust_horizon >= 3",
        "infra_failure_rate <= 0.05",
        "unverifiable_rate <= 0.05",
        "compared_steps >= 1",
    ]


def test_a_total_outage_fails_the_gate(tmp_path: Path) -> None:
    """Every world-model request failed (429): nothing compared, so no figure passes."""
    rules = load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.2\n"))
    verdict = judged(clean(8, 5, infra=5), rules)
    assert verdict.status == "fail" and verdict.exit_code == 1
    assert [(c.name, c.value, c.passed) for c in verdict.checks] == [
        ("drift_rate <= 0.2", None, False),
        ("infra_failure_rate <= 0.05", 1.0, False),
        ("unverifiable_rate <= 0.05", 0.0, False),  # 8 trajectories cannot bound it yet
        ("compared_steps >= 1", 0.0, False),
    ]


def test_three_faithful_trajectories_do_not_pass_a_ten_percent_limit(tmp_path: Path) -> None:
    """Three trajectories cannot tell 0% from 15% drift: the limit stays undecided."""
    rules = load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.10\n"))
    verdict = judged(clean(3), rules)
    drift = verdict.checks[0]
    assert (drift.value, drift.decision, verdict.status) == (0.0, "undecided", "fail")
    assert drift.upper is not None and drift.upper > 0.15
    assert drift.more is not None and drift.more > 3
    assert "about" in drift.sentence() and "more trajectories would decide it" in drift.sentence()
    enough = judged(clean(3 + drift.more), rules).checks[0]
    assert enough.decision == "pass"


def test_confidence_is_a_policy_key_checked_at_the_edge(tmp_path: Path) -> None:
    rules = load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.1\nconfidence = 0.99\n"))
    assert rules.for_domain("terminal").confidence == 0.99
    assert (
        load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.1\n"))
        .for_domain("web")
        .confidence
        == 0.95
    )
    lenient = load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.1\nconfidence = 0.9\n"))
    looser = judged(clean(60), lenient).checks[0]
    stricter = judged(clean(60), rules).checks[0]
    assert looser.upper is not None and stricter.upper is not None
    assert looser.upper < stricter.upper
    for bad in ("0.5", "1", "1.2", "0.3"):
        with pytest.raises(InputFormatError, match=r"gate.toml: default.confidence: Input should"):
            load_policy(policy(tmp_path, f"[default]\nmax_drift_rate = 0.1\nconfidence = {bad}\n"))


def test_infra_failure_limit_is_on_by_default_and_can_be_set(tmp_path: Path) -> None:
    rules = load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.2\n"))
    assert judged(clean(400, 10, infra=1), rules).status == "fail"
    assert judged(clean(400, 100, infra=2), rules).status == "pass"
    lenient = load_policy(
        policy(tmp_path, "[default]\nmax_drift_rate = 0.2\nmax_infra_failure_rate = 0.2\n")
    )
    assert judged(clean(400, 10, infra=1), lenient).status == "pass"
    warned = load_policy(
        policy(
            tmp_path,
            "[default]\nmax_drift_rate = 0.2\n[default.warn]\nmax_infra_failure_rate = 0.01\n",
        )
    )
    verdict = judged(clean(400, 100, infra=2), warned)
    assert verdict.status == "warn" and verdict.exit_code == 0


def test_an_empty_run_fails_even_with_min_steps_zero(tmp_path: Path) -> None:
    rules = load_policy(policy(tmp_path, "[default]\nmax_drift_rate = 0.2\nmin_steps = 0\n"))
    verdict = judged([], rules)
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
    verdict = judged(clean(100), rules)  # a terminal run
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


def test_the_trust_horizon_is_decided_on_per_depth_bounds(tmp_path: Path) -> None:
    rules = load_policy(
        policy(tmp_path, "[default]\nmax_drift_rate = 0.5\nmin_trust_horizon = 3\n")
    )
    # every trajectory derails at its 4th of 5 steps: depths 1-3 clean, 4-5 drift
    late = [tally(i, 5, drift=2) for i in range(200)]
    [horizon] = [c for c in judged(late, rules).checks if c.name.startswith("trust_horizon")]
    assert (horizon.decision, horizon.lower, horizon.upper) == ("pass", 3, 3)
    # they derail at their 2nd: depth 2's lower bound is over the limit
    early = [tally(i, 5, drift=4) for i in range(200)]
    [horizon] = [c for c in judged(early, rules).checks if c.name.startswith("trust_horizon")]
    assert horizon.decision == "fail" and horizon.upper == 1
    # three of them cannot tell
    [horizon] = [c for c in judged(late[:3], rules).checks if c.name.startswith("trust_horizon")]
    assert horizon.decision == "undecided" and horizon.more is not None
