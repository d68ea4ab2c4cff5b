"""The shipped mcp and search calibrations and their development-set corruptions."""

from __future__ import annotations

import json
import random

import pytest

from devsets.calibration.devset_tools import MCP_CORRUPTIONS, SEARCH_CORRUPTIONS
from fidelity.compare import get_comparator
from fidelity.compare.base import CompareContext
from fidelity.compare.calibration import load_calibration
from fidelity.trajectory import Observation, Step, ToolAction

RESULTS = "\n\n".join(
    f"[{n}] https://docs.python.org/3.11/library/m{n}.html\nTitle: m{n} — module {n}\n"
    f"Snippet: about module {n}\nDate: 2026-10-07"
    for n in range(1, 11)
)
MCP = json.dumps(
    {
        "content": [
            {"type": "text", "text": "[FILE] README.md\n[DIR] data\n[DIR] notes\n[FILE] stock.json"}
        ]
    }
)


@pytest.mark.parametrize("domain", ["mcp", "search"])
def test_shipped_calibration_never_runs_backwards(domain: str) -> None:
    calibration = load_calibration(domain)
    assert calibration is not None
    assert all(c >= 0 for c in calibration.coef)  # a larger gap never lowers the probability
    assert calibration.fit["split"] == "trajectory" and calibration.fit["held_out_pairs"] > 0


@pytest.mark.parametrize(
    ("domain", "text", "corruptions"),
    [("mcp", MCP, MCP_CORRUPTIONS), ("search", RESULTS, SEARCH_CORRUPTIONS)],
)
def test_identical_is_faithful_and_corruptions_change_the_text(
    domain: str, text: str, corruptions: dict[str, object]
) -> None:
    comparator = get_comparator(domain)
    context = CompareContext(action=ToolAction(tool="x"), history=[], depth=1)
    real = Observation(text=text, exit_code=0)
    assert not comparator.compare(real, real, context).drift
    changed = 0
    for corrupt in corruptions.values():
        seen = [Step(action=ToolAction(tool="x"), observation=real)]  # history ends with this step
        done = corrupt(real, seen, random.Random(3))  # type: ignore[operator]
        if done is not None:
            assert done[0].text != real.text or done[0].exit_code != real.exit_code
            changed += 1
    assert changed >= 3


def test_an_invented_search_result_drifts() -> None:
    comparator = get_comparator("search")
    context = CompareContext(action=ToolAction(tool="web_search"), history=[], depth=1)
    real = Observation(text=RESULTS)
    sim, url = SEARCH_CORRUPTIONS["invented_result"](real, [], random.Random(1))  # type: ignore[misc]
    result = comparator.compare(real, sim, context)
    assert result.drift and f"url:{url}" in result.hallucinations
