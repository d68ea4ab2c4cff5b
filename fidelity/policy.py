"""Gate policies: a TOML policy turns a run's figures into pass/fail.

A policy file::

    [default]                 # applies to every domain
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
from fidelity.model import Domain

DEFAULT_MAX_INFRA_FAILURE_RATE = 0.05
"""Infrastructure-failure limit in force when a policy sets none: 5% of all steps."""

DEFAULT_MAX_UNVERIFIABLE_RATE = 0.05
"""Unverifiable-trajectory limit in force when a policy sets none: 5% of the trajectories."""

DEFAULT_MAX_OUTCOME_UNVERIFIABLE_RATE = 0.05
"""Limit on claims whose real check could not run, in force when a policy sets none."""

_QUALITY_LIMITS = ("max_drift_rate", "max_hallucination_rate", "min_trust_horizon")


class Thresholds(BaseModel):
    """Limits for one domain; a missing limit is not checked."""

    model_config = ConfigDict(extra="forbid")

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
        return Thresholds(**merged)

    def warnings_for(self, domain: str) -> Thresholds:
        """The warning-only thresholds in force for *domain*."""
        override = self.domains.get(Domain(domain))
        base = self.default.warn.model_dump()
        if override is None:
            return Thresholds(**base)
        return Thresholds(**(base | override.warn.model_dump(exclude_none=True)))


class Check(BaseModel):
    """One policy check and its outcome."""

    name: str
    value: float | None = Field(description="None: nothing to measure (no step compared)")
    limit: float
    passed: bool
    severity: Literal["critical", "warning"] = "critical"


class Verdict(BaseModel):
    """The gate's decision on one run: fail when a critical check fails, warn for warnings."""

    status: Literal["pass", "warn", "fail"]
    run_id: str
    domain: str
    checks: list[Check]

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


def evaluate(summary: RunSummary, policy: Policy) -> Verdict:
    """Apply *policy* to a run summary (computed with horizon limit = max drift rate).

    Besides the policy's own limits, the infrastructure-failure limit and "at least
    one compared step" always apply, and a domain with no quality limit fails.
    """
    domain = summary.run.domain
    limits = policy.for_domain(domain)
    checks = _checks(summary, limits, "critical") + _guard_checks(summary.totals, limits)
    checks += _checks(summary, policy.warnings_for(domain), "warning")
    status: Literal["pass", "warn", "fail"] = "pass"
    if any(not c.passed and c.severity == "critical" for c in checks):
        status = "fail"
    elif any(not c.passed for c in checks):
        status = "warn"
    return Verdict(status=status, run_id=summary.run.run_id, domain=domain, checks=checks)


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
        value = "none (nothing compared)" if check.value is None else f"{check.value:.6g}"
        message = f"{check.name}: value {value} (limit {check.limit:g})"
        if check.passed:
            continue
        if check.severity == "critical":
            failure = ElementTree.SubElement(case, "failure", message=message, type="critical")
            failure.text = message
        else:
            ElementTree.SubElement(case, "system-out").text = f"WARNING {message}"
    return ElementTree.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def _checks(summary: RunSummary, limits: Thresholds, severity: str) -> list[Check]:
    totals = summary.totals
    checks: list[Check] = []
    if limits.max_drift_rate is not None:
        checks.append(_at_most("drift_rate", totals.drift_rate, limits.max_drift_rate))
    if limits.max_hallucination_rate is not None:
        checks.append(
            _at_most("hallucination_rate", totals.hallucination_rate, limits.max_hallucination_rate)
        )
    if limits.min_trust_horizon is not None:
        checks.append(_at_least("trust_horizon", totals.trust_horizon, limits.min_trust_horizon))
    if limits.min_steps is not None:
        checks.append(_at_least("compared_steps", totals.compared_steps, limits.min_steps))
    if limits.max_infra_failure_rate is not None:
        checks.append(
            _at_most(
                "infra_failure_rate", infra_failure_rate(totals), limits.max_infra_failure_rate
            )
        )
    if limits.max_unverifiable_rate is not None:
        checks.append(
            _at_most("unverifiable_rate", unverifiable_rate(totals), limits.max_unverifiable_rate)
        )
    rate = false_success_rate(summary)
    if limits.max_false_success_rate is not None and rate is not None:
        checks.append(_at_most("false_success_rate", rate, limits.max_false_success_rate))
    uncheckable = outcome_unverifiable_rate(summary)
    if limits.max_outcome_unverifiable_rate is not None and uncheckable is not None:
        checks.append(
            _at_most("outcome_unverifiable_rate", uncheckable, limits.max_outcome_unverifiable_rate)
        )
    return [c.model_copy(update={"severity": severity}) for c in checks]


def _guard_checks(totals: Totals, limits: Thresholds) -> list[Check]:
    """The critical checks no policy can leave out: some compared step, some quality limit."""
    checks: list[Check] = []
    if limits.min_steps is None or limits.min_steps < 1:
        checks.append(_at_least("compared_steps", totals.compared_steps, 1))
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


def _at_most(name: str, value: float | None, limit: float) -> Check:
    passed = value is not None and value <= limit
    return Check(name=f"{name} <= {limit:g}", value=value, limit=limit, passed=passed)


def _at_least(name: str, value: float | None, limit: float) -> Check:
    passed = value is not None and value >= limit
    return Check(name=f"{name} >= {limit:g}", value=value, limit=limit, passed=passed)
