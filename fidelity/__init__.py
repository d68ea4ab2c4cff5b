"""fidelity: audit how faithfully a language world model simulates real agent environments.

The supported Python API is the names in :data:`__all__` (documented in
``docs/python-api.md``): running an audit, replaying and simulating suites, gating a
dataset, deciding a policy, reading the store, the trajectory model, sandbox and
world-model configs, comparing a pair, the drift risk, and the error root. Each loads on
first use, so ``import fidelity`` stays cheap; the command line is a thin layer over them.
Other modules' names are internal and may change between versions.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from fidelity.version import __version__

_API: dict[str, str] = {
    # running an audit, replaying, simulating
    "AuditConfig": "fidelity.audit",
    "AuditResult": "fidelity.audit",
    "run_audit": "fidelity.audit",
    "replay_suite": "fidelity.batch",
    "simulate_suite": "fidelity.batch",
    "load_suite": "fidelity.pipeline",
    # gating a dataset, deciding a policy
    "GateOptions": "fidelity.gate.options",
    "Manifest": "fidelity.gate.options",
    "gate_dataset": "fidelity.gate.dataset",
    "Policy": "fidelity.policy",
    "Verdict": "fidelity.policy",
    "Check": "fidelity.policy",
    "load_policy": "fidelity.policy",
    "evaluate": "fidelity.gate.limits",
    # reading the store
    "Store": "fidelity.store",
    "DEFAULT_DB": "fidelity.store",
    "RunSummary": "fidelity.analysis.models",
    "summarize": "fidelity.analysis.summary",
    # the trajectory model and its files
    "Trajectory": "fidelity.trajectory",
    "Step": "fidelity.trajectory",
    "Observation": "fidelity.trajectory",
    "EnvSpec": "fidelity.trajectory",
    "Outcome": "fidelity.trajectory",
    "Domain": "fidelity.trajectory",
    "read_trajectories": "fidelity.formats.jsonl",
    "write_trajectories": "fidelity.formats.jsonl",
    # sandbox and world-model configs
    "SandboxConfig": "fidelity.sandboxes",
    "sandbox_config": "fidelity.sandboxes",
    "LocalConfig": "fidelity.sandboxes.local",
    "DockerConfig": "fidelity.sandboxes.docker.config",
    "BrowserConfig": "fidelity.sandboxes.browser",
    "McpConfig": "fidelity.sandboxes.mcp",
    "SearchConfig": "fidelity.sandboxes.search",
    "DesktopConfig": "fidelity.sandboxes.desktop",
    "AdbConfig": "fidelity.sandboxes.adb",
    "SimConfig": "fidelity.pipeline",
    "EndpointConfig": "fidelity.worldmodels.config",
    "RecordedConfig": "fidelity.worldmodels.config",
    "BaselineConfig": "fidelity.worldmodels.config",
    # comparing a pair
    "CompareConfig": "fidelity.compare.config",
    "StepComparison": "fidelity.compare.base",
    "get_comparator": "fidelity.compare",
    "diff_files": "fidelity.diffing",
    "diff_trajectories": "fidelity.diffing",
    "DiffRow": "fidelity.diffing",
    # the drift risk without replay
    "risk_model": "fidelity.risk_data",
    "score_dataset": "fidelity.risk_data",
    # errors
    "FidelityError": "fidelity.errors",
    "UsageError": "fidelity.errors",
    "InputFormatError": "fidelity.errors",
    "SandboxError": "fidelity.errors",
    "WorldModelError": "fidelity.errors",
}

__all__ = [
    "DEFAULT_DB",
    "AdbConfig",
    "AuditConfig",
    "AuditResult",
    "BaselineConfig",
    "BrowserConfig",
    "Check",
    "CompareConfig",
    "DesktopConfig",
    "DiffRow",
    "DockerConfig",
    "Domain",
    "EndpointConfig",
    "EnvSpec",
    "FidelityError",
    "GateOptions",
    "InputFormatError",
    "LocalConfig",
    "Manifest",
    "McpConfig",
    "Observation",
    "Outcome",
    "Policy",
    "RecordedConfig",
    "RunSummary",
    "SandboxConfig",
    "SandboxError",
    "SearchConfig",
    "SimConfig",
    "Step",
    "StepComparison",
    "Store",
    "Trajectory",
    "UsageError",
    "Verdict",
    "WorldModelError",
    "__version__",
    "diff_files",
    "diff_trajectories",
    "evaluate",
    "gate_dataset",
    "get_comparator",
    "load_policy",
    "load_suite",
    "read_trajectories",
    "replay_suite",
    "risk_model",
    "run_audit",
    "sandbox_config",
    "score_dataset",
    "simulate_suite",
    "summarize",
    "write_trajectories",
]

if TYPE_CHECKING:  # the names as a type checker and an IDE see them
    from fidelity.analysis.models import RunSummary
    from fidelity.analysis.summary import summarize
    from fidelity.audit import AuditConfig, AuditResult, run_audit
    from fidelity.batch import replay_suite, simulate_suite
    from fidelity.compare import get_comparator
    from fidelity.compare.base import StepComparison
    from fidelity.compare.config import CompareConfig
    from fidelity.diffing import DiffRow, diff_files, diff_trajectories
    from fidelity.errors import (
        FidelityError,
        InputFormatError,
        SandboxError,
        UsageError,
        WorldModelError,
    )
    from fidelity.formats.jsonl import read_trajectories, write_trajectories
    from fidelity.gate.dataset import gate_dataset
    from fidelity.gate.limits import evaluate
    from fidelity.gate.options import GateOptions, Manifest
    from fidelity.pipeline import SimConfig, load_suite
    from fidelity.policy import Check, Policy, Verdict, load_policy
    from fidelity.risk_data import risk_model, score_dataset
    from fidelity.sandboxes import SandboxConfig, sandbox_config
    from fidelity.sandboxes.adb import AdbConfig
    from fidelity.sandboxes.browser import BrowserConfig
    from fidelity.sandboxes.desktop import DesktopConfig
    from fidelity.sandboxes.docker.config import DockerConfig
    from fidelity.sandboxes.local import LocalConfig
    from fidelity.sandboxes.mcp import McpConfig
    from fidelity.sandboxes.search import SearchConfig
    from fidelity.store import DEFAULT_DB, Store
    from fidelity.trajectory import Domain, EnvSpec, Observation, Outcome, Step, Trajectory
    from fidelity.worldmodels.config import BaselineConfig, EndpointConfig, RecordedConfig


def __getattr__(name: str) -> Any:
    """A name of the supported API, imported from its module on first use."""
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'fidelity' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
