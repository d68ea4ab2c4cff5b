"""Chromium's HOME: a per-browser temp folder, gone with the browser (issue 30)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from fidelity.batch import replay_suite
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.trajectory import BrowserAction, EnvSpec, Step, Trajectory

pytestmark = pytest.mark.browser


def test_a_replay_leaves_nothing_in_tmpdir(
    chromium: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chromium and dconf wrote ``.config/chromium`` and ``.cache/dconf`` into ``$TMPDIR``
    (their HOME) and left them there after every web audit."""
    temp = tmp_path / "tmpdir"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads $TMPDIR again
    suite = tmp_path / "web.jsonl"
    trajectory = Trajectory(
        id="web-home",
        domain="web",
        env=EnvSpec(backend="browser", project="library"),
        steps=[Step(action=BrowserAction(action="goto('/books?page=2')"))],
    )
    write_trajectories(suite, [trajectory])
    result = replay_suite(suite, tmp_path / "real.jsonl")
    assert (result.trajectories, result.failed_steps) == (1, 0), result
    (real,) = read_trajectories(tmp_path / "real.jsonl")
    observation = real.steps[0].observation
    assert observation is not None and observation.state is not None
    assert observation.state["url"] == "http://localhost:8000/books?page=2"  # Chromium ran
    assert sorted(p.name for p in temp.iterdir()) == []
