"""Written files get the mode the umask gives any new file (issue 40, item 13: RL outputs and
``replay -o`` files were 0600, staged by ``tempfile.mkstemp``, while the gate's other
outputs were 0644)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fakes.trajectories import command_trajectory
from fidelity.cli import app
from fidelity.formats.jsonl import write_trajectories
from fidelity.formats.rl_export import FORMATS, ExportOptions, RLWriter, join_parts, suffix
from tests.conftest import require_module
from tests.formats.test_rl_import import _fidelity, _trajectories

UMASKS = (0o022, 0o027, 0o002)


@pytest.fixture(params=UMASKS, ids=[f"umask-{u:03o}" for u in UMASKS])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    mask: int = request.param
    before = os.umask(mask)
    try:
        yield mask
    finally:
        os.umask(before)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_jsonl_outputs_follow_the_umask(umask: int, tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    write_trajectories(out, [command_trajectory("t", "ls")])
    assert _mode(out) == 0o666 & ~umask
    write_trajectories(out, [command_trajectory("t", "pwd")])  # replaced: a new file again
    assert _mode(out) == 0o666 & ~umask


@pytest.mark.parametrize("fmt", FORMATS)
def test_rl_outputs_follow_the_umask(fmt: str, umask: int, tmp_path: Path) -> None:
    if fmt in ("verl", "skyrl"):
        require_module("pyarrow", "pip install 'fidelity[rl]'")
    parts = []
    for number, trajectory in enumerate(_trajectories()[:2]):
        part = tmp_path / f"part-{number}{suffix(fmt)}"  # type: ignore[arg-type]
        with RLWriter(part, ExportOptions(format=fmt)) as writer:  # type: ignore[arg-type]
            writer.write(trajectory, _fidelity(trajectory), trajectory.outcome)
        assert _mode(part) == 0o666 & ~umask
        parts.append(part)
    joined = tmp_path / f"admitted.{fmt}{suffix(fmt)}"  # type: ignore[arg-type]
    assert join_parts(fmt, parts, joined) == 2  # type: ignore[arg-type]
    assert _mode(joined) == 0o666 & ~umask


@pytest.mark.bwrap
def test_replay_output_follows_the_umask(bwrap: None, tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    write_trajectories(suite, [command_trajectory("t-1", "echo hi")])
    out = tmp_path / "real.jsonl"
    before = os.umask(0o002)  # (under 0o027 bubblewrap cannot join its cgroup: another bug)
    try:
        result = CliRunner().invoke(app, ["replay", str(suite), "-o", str(out)])
    finally:
        os.umask(before)
    assert result.exit_code == 0, result.output
    assert out.read_text().count("\n") == 1 and "hi" in out.read_text()
    assert _mode(out) == 0o664
