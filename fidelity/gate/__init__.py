"""The dataset gate (``fidelity gate DATASET``): one module per pass.

- :mod:`~fidelity.gate.options`: the options, decisions and manifest every pass hands on;
- :mod:`~fidelity.gate.scan`: pass 1, every line validated and checked, the sample drawn;
- :mod:`~fidelity.gate.sample`: the sample, and pass 2 that reads its lines;
- :mod:`~fidelity.gate.verify`: the sample replayed for real, compared, stored;
- :mod:`~fidelity.gate.decide`: what happens to one trajectory;
- :mod:`~fidelity.gate.write`: pass 3, every trajectory decided, written, staged, installed;
- :mod:`~fidelity.gate.dataset`: :func:`gate_dataset`, the flow through them.

Its policy (limits, verdicts) lives in :mod:`fidelity.policy`, the decision of each limit
on its confidence bounds in :mod:`~fidelity.gate.limits` (:func:`evaluate`); their names
are re-exported here for code that imported them from ``fidelity.gate`` before the policy
had a module of its own. The dataset gate's own names load when first used
(``fidelity gate --run`` needs the policy only).
"""

from __future__ import annotations

from typing import Any

from fidelity.gate.limits import evaluate
from fidelity.policy import (
    DEFAULT_MAX_INFRA_FAILURE_RATE,
    DEFAULT_MAX_OUTCOME_UNVERIFIABLE_RATE,
    DEFAULT_MAX_UNVERIFIABLE_RATE,
    Check,
    DomainPolicy,
    Policy,
    Thresholds,
    Verdict,
    false_success_rate,
    horizon_limit,
    infra_failure_rate,
    junit_xml,
    load_policy,
    outcome_unverifiable_rate,
    unverifiable_rate,
)

_DATASET_GATE = {
    "GateOptions": "fidelity.gate.options",
    "Manifest": "fidelity.gate.options",
    "Decision": "fidelity.gate.options",
    "gate_dataset": "fidelity.gate.dataset",
}


def __getattr__(name: str) -> Any:
    """The dataset gate's names, imported on first use."""
    module = _DATASET_GATE.get(name)
    if module is None:
        raise AttributeError(f"module 'fidelity.gate' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "DEFAULT_MAX_INFRA_FAILURE_RATE",
    "DEFAULT_MAX_OUTCOME_UNVERIFIABLE_RATE",
    "DEFAULT_MAX_UNVERIFIABLE_RATE",
    "Check",
    "Decision",
    "DomainPolicy",
    "GateOptions",
    "Manifest",
    "Policy",
    "Thresholds",
    "Verdict",
    "evaluate",
    "false_success_rate",
    "gate_dataset",
    "horizon_limit",
    "infra_failure_rate",
    "junit_xml",
    "load_policy",
    "outcome_unverifiable_rate",
    "unverifiable_rate",
]
