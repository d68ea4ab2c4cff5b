"""``fidelity import`` of JSON nested 10,000 deep: one line naming the file, exit 2, in every
reader (issue 40, item 11: a RecursionError traceback and exit 1 in all five)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.formats.jsonl import MAX_DEPTH, nested_json
from tests.conftest import require_module
from tests.formats.test_rl_import import _trajectories, _written

DEPTH = 10_000
DEEP = "[" * DEPTH + "]" * DEPTH
TOO_DEEP = f"invalid JSON (nested deeper than {MAX_DEPTH} levels)"


def _swe_agent(folder: Path) -> tuple[Path, str]:
    path = folder / "run.traj"
    entry = '{"action": "ls", "observation": "a.txt"}'
    path.write_text(f'{{"trajectory": [{entry}], "info": {{"deep": {DEEP}}}}}')
    return path, f"{path}: {TOO_DEEP}"


def _mini_swe_agent(folder: Path) -> tuple[Path, str]:
    path = folder / "run.traj.json"
    path.write_text(f'{{"trajectory_format": "mini-swe-agent-1", "messages": [], "info": {DEEP}}}')
    return path, f"{path}: {TOO_DEEP}"


def _agentworldbench(folder: Path) -> tuple[Path, str]:
    path = folder / "terminal_test.jsonl"
    path.write_text(f'{{"task": "terminal", "id": "a", "prompt": {DEEP}}}\n')
    return path, f"{path}:1: {TOO_DEEP}"


def _verl(folder: Path) -> tuple[Path, str]:
    """A row as ``fidelity gate --to verl`` writes it, its environment (a JSON string) deep."""
    pa = require_module("pyarrow", "pip install 'fidelity[rl]'")
    pq = require_module("pyarrow.parquet", "pip install 'fidelity[rl]'")
    path = _written("verl", folder, _trajectories()[:1])
    rows = pq.read_table(str(path)).to_pylist()  # type: ignore[attr-defined]
    rows[0]["extra_info"]["env"] = DEEP
    pq.write_table(pa.Table.from_pylist(rows), str(path))  # type: ignore[attr-defined]
    return path, f"{path}:1: extra_info.env: {TOO_DEEP}"


def _slime(folder: Path) -> tuple[Path, str]:
    """A row as ``fidelity gate --to slime`` writes it, a turn's state (a JSON string) deep."""
    path = _written("slime", folder, _trajectories()[:1])
    row = json.loads(path.read_text(encoding="utf-8"))
    row["metadata"]["turns"][0]["state"] = DEEP
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    return path, f"{path}:1: metadata.turns[0].state: {TOO_DEEP}"


READERS = {
    "swe-agent": _swe_agent,
    "mini-swe-agent": _mini_swe_agent,
    "agentworldbench": _agentworldbench,
    "verl": _verl,
    "slime": _slime,
}


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_ten_thousand_levels_are_one_line_naming_the_file(fmt: str, tmp_path: Path) -> None:
    source, expected = READERS[fmt](tmp_path)
    output = tmp_path / "out.jsonl"
    result = CliRunner().invoke(app, ["import", fmt, str(source), "-o", str(output)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert (result.exit_code, result.stderr) == (2, f"error: {expected}\n")
    assert not output.exists()


def test_a_whole_file_nested_deep_is_named_by_the_reader_not_the_format_sniffer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deep.traj"
    path.write_text(DEEP)
    for fmt in ("swe-agent", "mini-swe-agent"):
        result = CliRunner().invoke(app, ["import", fmt, str(path), "-o", str(tmp_path / "o")])
        assert (result.exit_code, result.stderr) == (2, f"error: {path}: {TOO_DEEP}\n")


def test_the_limit_is_the_jsonl_readers(tmp_path: Path) -> None:
    """As deep as a JSONL line may be (below its top-level object), and one level more."""
    fits = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert nested_json(f'{{"a": {fits}}}', "f.json", None) is not None
    for text in (f'{{"a": [{fits}]}}', DEEP):
        with pytest.raises(ValueError, match=r"^f\.json:3: x: invalid JSON \(nested deeper"):
            nested_json(text, "f.json", 3, "x")
