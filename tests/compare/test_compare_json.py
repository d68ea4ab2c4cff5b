"""JsonComparator (mcp): key paths, types, values, array lengths; volatile values normalized."""

from __future__ import annotations

import json
from typing import Any

from fidelity.compare import JsonComparator, get_comparator
from fidelity.compare.base import CompareContext
from fidelity.compare.jsondata import parse_json
from fidelity.trajectory import Observation, TextAction

CONTEXT = CompareContext(
    action=TextAction(
        text='{"tool": "list_issues", "arguments": {"repo": "acme/shop", "state": "open"}}'
    )
)


def issues(run: int, **change: Any) -> dict[str, Any]:
    """An MCP tool result as a GitHub-like server returns it (ids and times vary per run)."""
    items = [
        {
            "id": f"{run:08x}-1b2c-4d3e-8f90-a1b2c3d4e5f6",
            "number": 41,
            "title": "Cart total wrong",
            "labels": ["bug"],
            "created_at": f"2026-11-{10 + run}T09:12:00Z",
            "comments": 3,
        },
        {
            "id": f"{run:08x}-9e8d-4c7b-8a69-5f4e3d2c1b0a",
            "number": 42,
            "title": "Add dark mode",
            "labels": ["feature", "ui"],
            "created_at": f"2026-11-{11 + run}T17:40:21Z",
            "comments": 0,
        },
    ]
    result = {"total_count": 2, "items": items, "fetched_at": 1763600000 + run}
    result.update(change)
    return result


def text(value: dict[str, Any]) -> str:
    return json.dumps({"content": [{"type": "json", "json": value}], "isError": False}, indent=2)


def compare(real: str, sim: str):  # type: ignore[no-untyped-def]
    return get_comparator("mcp").compare(Observation(text=real), Observation(text=sim), CONTEXT)


def test_two_real_calls_differ_only_in_volatile_values() -> None:
    result = compare(text(issues(1)), text(issues(2)))
    assert (result.score, result.drift, result.reasons) == (1.0, False, [])
    assert result.normalizations["uuid"] == 4
    assert result.normalizations["timestamp"] + result.normalizations.get("epoch", 0) >= 5


def test_changed_count_is_a_value_mismatch() -> None:
    sim = issues(1)
    sim["items"][0]["comments"] = 7
    result = compare(text(issues(1)), text(sim))
    assert result.drift
    assert "value $.content[0].json.items[0].comments: 3 != 7" in result.reasons
    assert "value:7" in result.hallucinations


def test_extra_array_entry_and_invented_key() -> None:
    sim = issues(1)
    sim["items"].append(
        {
            "id": "x",
            "number": 43,
            "title": "Refund flow",
            "labels": [],
            "created_at": "2026-11-12T00:00:00Z",
            "comments": 0,
            "assignee": "bob",
        }
    )
    result = compare(text(issues(1)), text(sim))
    assert result.drift
    assert "key:$.content[].json.items[].assignee" in result.hallucinations
    assert "value:Refund flow" in result.hallucinations
    assert result.metrics["length_agreement"] < 1.0
    assert any(r.startswith("length $.content[0].json.items: 2 != 3") for r in result.reasons)


def test_type_change_and_missing_key() -> None:
    sim = issues(1)
    sim["total_count"] = "2"
    del sim["fetched_at"]
    result = compare(text(issues(1)), text(sim))
    assert result.drift
    assert "type $.content[0].json.total_count: number != string" in result.reasons
    assert "key:$.content[].json.fetched_at" in result.omissions


def test_flipped_error_flag() -> None:
    real = text(issues(1))
    result = compare(real, real.replace('"isError": false', '"isError": true'))
    assert result.drift
    assert "value $.isError: false != true" in result.reasons


def test_prefixed_json_parses_and_plain_text_falls_back() -> None:
    assert parse_json('Tool result:\n{"ok": true}\n') == (True, {"ok": True})
    assert parse_json("Error: repository not found") == (False, None)
    result = compare("Error: repository not found", "Error: permission denied")
    assert result.drift and result.metrics["json"] == 0.0


def test_value_seen_in_action_is_stale() -> None:
    real, sim = issues(1), issues(1)
    sim["items"][0]["title"] = "acme/shop"
    result = JsonComparator().compare(
        Observation(text=text(real)), Observation(text=text(sim)), CONTEXT
    )
    assert result.stale == ["value:acme/shop"]
    assert result.hallucinations == []


def test_mcp_text_wrapper_compares_like_the_raw_text() -> None:
    raw = text(issues(1))
    wrapped = json.dumps([{"type": "text", "text": raw}])
    result_wrapper = json.dumps({"content": [{"type": "text", "text": raw}], "isError": False})
    for shape in (wrapped, json.dumps({"type": "text", "text": raw}), result_wrapper):
        result = compare(raw, shape)
        assert (result.score, result.drift) == (1.0, False), shape
    plain = json.dumps({"type": "text", "text": "Error: no such issue"})
    assert compare("Error: no such issue", plain).score == 1.0
    assert compare("Error: no such issue", text(issues(1))).drift
