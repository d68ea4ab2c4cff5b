"""The LLM judge: AgentWorldBench's five dimensions scored on a stored run's steps.

- :mod:`~fidelity.judge.config`: :class:`JudgeConfig`, what a judging task carries
  (light: every trajectory task imports it);
- :mod:`~fidelity.judge.steps`: one step judged (the prompt, the request, the verdict
  parsed), run inside a judging task;
- :mod:`~fidelity.judge.run`: :func:`judge_run`, a stored run judged on an executor, and
  the agreement with the deterministic metrics.

The names below load on first use, so that importing the config loads no judge client.
"""

from __future__ import annotations

import importlib
from typing import Any

from fidelity.judge.config import JudgeConfig

_LAZY = {
    "Agreement": "run",
    "JudgeResult": "run",
    "judge_agreement": "run",
    "judge_run": "run",
    "judge_tasks": "run",
    "domain_means": "run",
    "DIMENSIONS": "steps",
    "JudgmentParseError": "steps",
    "StepToJudge": "steps",
}

__all__ = ["JudgeConfig", *_LAZY]


def __getattr__(name: str) -> Any:
    """The judge's names, imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'fidelity.judge' has no attribute {name!r}")
    return getattr(importlib.import_module(f"fidelity.judge.{module}"), name)
