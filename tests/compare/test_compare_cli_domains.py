"""``fidelity diff`` on domains other than terminal (web, mcp, and an unknown one)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.formats.jsonl import write_trajectories
from fidelity.trajectory import Domain, Observation, Step, TextAction, Trajectory

runner = CliRunner()
CONTRACT = {"trajectory_id", "step", "domain", "score", "drift", "hallucinations", "omissions"}


def write_pair(
    tmp_path: Path, domain: Domain, actions: list[str], real: list[str], sim: list[str]
) -> tuple[Path, Path]:
    trajectory = Trajectory(
        id="t-1", domain=domain, steps=[Step(action=TextAction(text=a)) for a in actions]
    )
    for name, texts in (("real", real), ("sim", sim)):
        observations = [Observation(text=t) for t in texts]
        write_trajectories(
            tmp_path / f"{name}.jsonl", [trajectory.with_observations(observations, name)]
        )  # type: ignore[arg-type]
    return tmp_path / "real.jsonl", tmp_path / "sim.jsonl"


def diff(real: Path, sim: Path) -> list[dict[str, object]]:
    result = runner.invoke(app, ["diff", str(real), str(sim), "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert all(set(row) >= CONTRACT for row in rows)
    return rows


def test_diff_web_pair(tmp_path: Path) -> None:
    real = [
        "[3] main ''\n\t[7] button 'Sign in', clickable\n",
        "[3] main ''\n\t[9] heading 'Welcome, Ada'\n",
    ]
    sim = [
        "[5] main ''\n\t[12] button 'Sign in', clickable\n",
        "[3] main ''\n\t[9] heading 'Welcome, Ada'\n\t[10] link 'Admin panel'\n",
    ]
    rows = diff(*write_pair(tmp_path, Domain.web, ["goto('/login')", "click('7')"], real, sim))
    assert [(r["domain"], r["step"], r["drift"]) for r in rows] == [
        ("web", 1, False),
        ("web", 2, True),
    ]
    assert rows[0]["normalizations"] == {"web_bid": 4}
    assert rows[1]["hallucinations"] == ["ui:link:Admin panel"]
    assert "node_f1" in rows[1]["metrics"]  # type: ignore[operator]


def test_diff_mcp_pair(tmp_path: Path) -> None:
    real = [
        json.dumps({"id": "9f1c2d3e-0a1b-4c2d-8e3f-4a5b6c7d8e9f", "status": "open", "count": 2})
    ]
    sim = [
        json.dumps({"id": "1a2b3c4d-5e6f-4a1b-8c2d-3e4f5a6b7c8d", "status": "closed", "count": 2})
    ]
    rows = diff(
        *write_pair(
            tmp_path, Domain.mcp, ['{"tool": "get_issue", "arguments": {"n": 41}}'], real, sim
        )
    )
    (row,) = rows
    assert (row["domain"], row["drift"]) == ("mcp", True)
    assert row["hallucinations"] == ["value:closed"] and row["omissions"] == ["value:open"]
    assert "value $.status: open != closed" in row["reasons"]  # type: ignore[operator]
    assert row["normalizations"] == {"uuid": 2}


def test_diff_table_on_android(tmp_path: Path) -> None:
    line = (
        "UI element 0: UIElement(text='Wi-Fi', class_name='android.widget.TextView', "
        "resource_name='android:id/title')"
    )
    paths = write_pair(tmp_path, Domain.android, ['{"action_type": "wait"}'], [line], [line])
    result = runner.invoke(app, ["diff", *map(str, paths)])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "0 of 1 steps drifted (0.0%)"
