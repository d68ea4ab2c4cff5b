"""Gate policies: a TOML policy turns a run's figures into pass/fail.

A policy file::

    [default]                 # applies to every domain
    confidence = 0.95         # every limit is decided on a one-sided confidence bound
    max_drift_rate = 0.10     # share of compared steps flagged as drift
    max_hallucination_rate = 0.05
    min_trust_horizon = 3     # depth up to which drift stays <= max_drift_rate
    min_steps = 20            # fewer compared steps cannot pass
    max_false_success_rate = 0.1  # claimed successes whose real check failed
    max_unverifiable_rate = 0.05  # trajectories whose environment could not be had
    max_outcome_unverifiable_rate = 0.05  # claimed outcomes whose real check could not run

    [domains.terminal]        # overrides for one domain
    max_drift_rate = 0.05

    [domains.terminal.warn]   # the same limits as warnings: reported, exit 0
    max_hallucination_rate = 0.01

Every rate limit is decided on a one-sided confidence bound at ``confidence`` (default
0.95), the trajectory being the sampling unit (:mod:`fidelity.gate.bounds`): a limit
passes when its bound is on the right side, fails when the opposite bound is over it, and
is otherwise **undecided**, which fails the gate and says about how many more
trajectories would decide it.

Limits at the top of a table are **critical** (a failure fails the gate, exit 1);
limits under ``warn`` only turn a pass into ``warn``. ``[default.warn]`` applies
to every domain; ``[domains.X.warn]`` overrides it key by key.

A gate cannot pass an outage or an empty run, whatever the policy says:

* ``max_infra_failure_rate`` (share of all steps whose real or simulated side failed
  for infrastructure reasons: world-model errors, sandbox failures) is always checked,
  ``DEFAULT_MAX_INFRA_FAILURE_RATE`` when the policy does not set it (``1.0`` turns
  it off explicitly);
* ``max_unverifiable_rate`` (share of the run's trajectories that are *unverifiable*: their
  environment, e.g. their image, could not be had) is always checked,
  ``DEFAULT_MAX_UNVERIFIABLE_RATE`` when the policy does not set it; their steps count
  here, not in the infrastructure-failure rate;
* ``max_outcome_unverifiable_rate`` (share of the claimed outcomes whose real check could
  not run: a test script that needs the network, a SWE-bench record without its eval
  script) is always checked where the domain has claims,
  ``DEFAULT_MAX_OUTCOME_UNVERIFIABLE_RATE`` when the policy does not set it;
* ``max_false_success_rate`` is checked where the domain has claimed successes with a
  verified real outcome (:mod:`fidelity.outcomes`); with none there is nothing to bound;
* a run with no compared step fails (``compared_steps >= 1`` when ``min_steps`` is
  not set);
* a policy must set at least one limit on drift, hallucination or the trust horizon
  (else :func:`load_policy` refuses it), and a domain it sets none for fails.
"""

from __future__ import annotations

import os
from typing import Literal
from xml.etree import ElementTree

from pydantic import BaseModel, ConfigDict, Field

from fidelity.analysis.models import RunSummary, Totals
from fidelity.errors import InputFormatError
from fidelity.formats.toml import load_toml_model
from fidelity.trajectory import Domain

DEFAULT_MAX_INFRA_FAILURE_RATE = 0.05
"""Infrastructure-failure limit in force when a policy sets none: 5% of all steps."""

DEFAULT_MAX_UNVERIFIABLE_RATE = 0.05
"""Unverifiable-trajectory limit in force when a policy sets none: 5% of the trajectories."""

DEFAULT_CONFIDENCE = 0.95
"""The confidence of every limit's bound when a policy sets none."""

DEFAULT_MAX_OUTCOME_UNVERIFIABLE_RATE = 0.05
"""Limit on claims whose real check could not run, in force when a policy sets none."""

_QUALITY_LIMITS = ("max_drift_rate", "max_hallucination_rate", "min_trust_horizon")


class Thresholds(BaseModel):
    """Limits for one domain; a missing limit is not checked."""

    model_config = ConfigDict(extra="forbid")

    confidence: float | None = Field(
        default=None,
        gt=0.5,
        lt=1,
        description="confidence of the one-sided bound every limit is decided on (0.95 when unset)",
    )
    max_drift_rate: float | None = Field(default=None, ge=0, le=1)
    max_hallucination_rate: float | None = Field(default=None, ge=0, le=1)
    min_trust_horizon: int | None = Field(default=None, ge=0)
    min_steps: int | None = Field(default=None, ge=0)
    max_infra_failure_rate: float | None = Field(default=None, ge=0, le=1)
    max_false_success_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="claimed successes (simulated or labelled) whose real check failed, over "
        "the claimed successes with a verified real outcome",
    )
    max_unverifiable_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="trajectories whose environment could not be had (image missing and not "
        "pullable, site down, build failure), over the run's trajectories",
    )
    max_outcome_unverifiable_rate: float | None = Field(
        default=None,
        ge=0,
        le=1,
        description="claimed outcomes whose real check could not run (unverifiable), over the "
        "claimed outcomes",
    )

    def checks_quality(self) -> bool:
        """Whether these limits bound drift, hallucination or the trust horizon."""
        return any(getattr(self, name) is not None for name in _QUALITY_LIMITS)


class DomainPolicy(Thresholds):
    """Critical limits of one domain plus a ``warn`` table of warning-only limits."""

    warn: Thresholds = Field(default_factory=Thresholds)


class Policy(BaseModel):
    """A gate policy: defaults plus per-domain overrides."""

    model_config = ConfigDict(extra="forbid")

    default: DomainPolicy = Field(default_factory=DomainPolicy)
    domains: dict[Domain, DomainPolicy] = Field(default_factory=dict)

    def for_domain(self, domain: str) -> Thresholds:
        """The critical thresholds in force for *domain* (overrides win over defaults).

        ``max_infra_failure_rate`` and ``max_unverifiable_rate`` are never None here: the
        default limits fill them.
        """
        override = self.domains.get(Domain(domain))
        merged = self.default.model_dump(exclude={"warn"})
        if override is not None:
            merged |= override.model_dump(exclude_none=True, exclude={"warn"})
        if merged["max_infra_failure_rate"] is None:
            merged["max_infra_failure_rate"] = DEFAULT_MAX_INFRA_FAILURE_RATE
        if merged["max_unverifiable_rate"] is None:
            merged["max_unverifiable_rate"] = DEFAULT_MAX_UNVERIFIABLE_RATE
        if merged["max_outcome_unverifiable_rate"] is None:
            merged["max_outcome_unverifiable_rate"] = DEFAULT_MAX_OUTCOME_UNVERIFIABLE_RATE
        if merged["confidence"] is None:
            merged["confidence"] = DEFAULT_CONFIDENCE
        return Thresholds(**merged)

    def warnings_for(self, domain: str) -> Thresholds:
        """The warning-only thresholds in force for *domain* (at the critical limits'
        confidence unless the ``warn`` table sets its own)."""
        override = self.domains.get(Domain(domain))
        merged = self.default.warn.model_dump()
        if override is not None:
            merged |= override.warn.model_dump(exclude_none=True)
        if merged["confidence"] is None:
            merged["confidence"] = self.for_domain(domain).confidence
        return Thresholds(**merged)


class Check(BaseModel):
    """One policy check and its outcome."""

    name: str
    value: float | None = Field(description="the estimate (None: nothing to measure)")
    limit: float
    passed: bool
    severity: Literal["critical", "warning"] = "critical"
    lower: float | None = Field(default=None, description="one-sided lower confidence bound")
    upper: float | None = Field(default=None, description="one-sided upper confidence bound")
    decision: Literal["pass", "fail", "undecided"] | None = Field(
        default=None,
        description="pass: the bound is on the right side of the limit; fail: the opposite "
        "bound is over it; undecided: neither (the gate fails). None: a count, not a bound",
    )
    more: int | None = Field(
        default=None,
        description="undecided: about how many more trajectories would decide it, if they "
        "look like those seen",
    )

    def sentence(self) -> str:
        """The check in one line: its estimate, bounds and decision."""
        value = "none (nothing compared)" if self.value is None else f"{self.value:.4g}"
        if self.decision is None:
            return f"{self.name}: {value}"
        bounds = f"[{_fmt(self.lower)}, {_fmt(self.upper)}]"
        text = f"{self.name}: {value} {bounds} {self.decision}"
        if self.decision == "undecided":
            more = "" if self.more is None else f"about {self.more:,} more trajectories"
            text += f" ({more or 'more trajectories'} would decide it)"
        return text


class Verdict(BaseModel):
    """The gate's decision on one run: fail when a critical check fails, warn for warnings."""

    status: Literal["pass", "warn", "fail"]
    run_id: str
    domain: str
    checks: list[Check]
    confidence: float = Field(
        default=DEFAULT_CONFIDENCE, description="the critical limits' bounds' confidence"
    )
    replayed_trajectories: int = Field(
        default=0, description="distinct trajectories replayed for real (the sample)"
    )
    draws: int = Field(default=0, description="draws of the sample (a trajectory drawn twice: 2)")

    @property
    def undecided(self) -> list[Check]:
        """The critical checks neither passed nor failed (each fails the gate)."""
        return [c for c in self.checks if c.decision == "undecided" and c.severity == "critical"]

    @property
    def exit_code(self) -> int:
        """0 on pass or warn, 1 on fail."""
        return 1 if self.status == "fail" else 0


def load_policy(path: str | os.PathLike[str]) -> Policy:
    """Parse and validate a TOML policy; errors name the file and the field.

    A policy with no critical limit on drift, hallucination or the trust horizon is
    refused: a gate with nothing to check would pass anything.
    """
    policy = load_toml_model(path, Policy, "policy")
    if not policy.default.checks_quality() and not any(
        rules.checks_quality() for rules in policy.domains.values()
    ):
        raise InputFormatError(
            str(path),
            None,
            None,
            "the policy sets no limit on drift, hallucination or the trust horizon "
            f"(set one of {', '.join(_QUALITY_LIMITS)}); a gate with no checks would pass anything",
        )
    return policy


def junit_xml(verdict: Verdict, suite: str = "fidelity gate") -> str:
    """The verdict as JUnit XML: one test case per check; a failed critical check fails.

    Failed warnings pass, with the warning in ``system-out`` (CI shows them
    without turning red).
    """
    failures = sum(not c.passed and c.severity == "critical" for c in verdict.checks)
    root = ElementTree.Element(
        "testsuite",
        name=suite,
        tests=str(len(verdict.checks)),
        failures=str(failures),
        errors="0",
        skipped="0",
    )
    properties = ElementTree.SubElement(root, "properties")
    for name, value in (("run_id", verdict.run_id), ("domain", verdict.domain)):
        ElementTree.SubElement(properties, "property", name=name, value=value)
    ElementTree.SubElement(properties, "property", name="status", value=verdict.status)
    for check in verdict.checks:
        case = ElementTree.SubElement(
            root, "testcase", classname=f"fidelity.gate.{verdict.domain}", name=check.name
        )
        message = f"{check.sentence()} (limit {check.limit:g})"
        if check.passed:
            continue
        if check.severity == "critical":
            failure = ElementTree.SubElement(case, "failure", message=message, type="critical")
            failure.text = message
        else:
            ElementTree.SubElement(case, "system-out").text = f"WARNING {message}"
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def guard_checks(totals: Totals, limits: Thresholds) -> list[Check]:
    """The critical checks no policy can leave out: some compared step, some quality limit."""
    checks: list[Check] = []
    if limits.min_steps is None or limits.min_steps < 1:
        checks.append(at_least("compared_steps", totals.compared_steps, 1))
    if not limits.checks_quality():
        checks.append(
            Check(
                name="policy limits drift, hallucination or horizon", value=0, limit=1, passed=False
            )
        )
    return checks


def false_success_rate(summary: RunSummary) -> float | None:
    """The run's domain's false-success rate (None: no claimed success was verified)."""
    for outcomes in summary.outcomes:
        if outcomes.domain == summary.run.domain and outcomes.false_success_rate is not None:
            return outcomes.false_success_rate.value
    return None


def outcome_unverifiable_rate(summary: RunSummary) -> float | None:
    """The share of the domain's claimed outcomes whose real check could not run (None: no
    claim)."""
    for outcomes in summary.outcomes:
        if outcomes.domain == summary.run.domain and outcomes.claimed:
            return outcomes.claimed_unverifiable / outcomes.claimed
    return None


def infra_failure_rate(totals: Totals) -> float:
    """Share of the steps of verifiable trajectories that failed for infrastructure reasons
    (1.0 for a run with no step: nothing was compared, which must not look like a clean run).

    The steps of unverifiable trajectories are bounded by :func:`unverifiable_rate` instead.
    """
    steps = totals.steps - totals.unverifiable_steps
    if steps > 0:
        return (totals.infra_failures - totals.unverifiable_steps) / steps
    return 0.0 if totals.unverifiable else 1.0


def unverifiable_rate(totals: Totals) -> float:
    """Share of the run's trajectories whose environment could not be had (0.0 with none)."""
    return totals.unverifiable / totals.trajectories if totals.trajectories else 0.0


def horizon_limit(policy: Policy, domain: str, fallback: float) -> float:
    """The drift rate that bounds the trust horizon under *policy*."""
    limit = policy.for_domain(domain).max_drift_rate
    return fallback if limit is None else limit


def at_least(name: str, value: float | None, limit: float) -> Check:
    """A count check: *value* at least *limit* (no bound: a count is known)."""
    passed = value is not None and value >= limit
    return Check(name=f"{name} >= {limit:g}", value=value, limit=limit, passed=passed)


def _fmt(value: float | None) -> str:
    return "?" if value is None else f"{value:.4g}"
