"""Fault injection at the CLI (issue 30): damaged datasets and hostile suites end in one line.

Every case is exit code 2 with one ``error: ...`` line on stderr naming the shard (or the
suite's line and field), no traceback, and a database that holds what it held before.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import duckdb
import pytest
import zstandard
from typer.testing import CliRunner, Result

from fakes.trajectories import command_trajectory
from fidelity.cli import app
from fidelity.formats.jsonl import dump_line, write_trajectories
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory

SHARDS = 3
PER_SHARD = 4


def _sim(tid: str) -> Trajectory:
    step = Step(action=CommandAction(command="echo hi"), observation=Observation(text="hi\n"))
    return Trajectory(
        id=tid, domain="terminal", steps=[step], source="sim", meta={"mode": "open-loop"}
    )


def _jsonl(shard: int) -> bytes:
    ids = range(shard * PER_SHARD, (shard + 1) * PER_SHARD)
    return "".join(dump_line(_sim(f"t{i}")) + "\n" for i in ids).encode()


def _two_frames(text: bytes) -> bytes:
    compressor = zstandard.ZstdCompressor()
    half = text.index(b"\n", len(text) // 2) + 1
    return compressor.compress(text[:half]) + compressor.compress(text[half:])


def _parquet(text: bytes, path: Path) -> bytes:
    source = path.with_suffix(".src.json")
    source.write_bytes(text)
    with duckdb.connect() as connection:
        connection.execute(
            f"COPY (SELECT * FROM read_json('{source}', format='newline_delimited')) "
            f"TO '{path}' (FORMAT parquet)"
        )
    source.unlink()
    return path.read_bytes()


def _flipped(blob: bytes, at: int, count: int = 16) -> bytes:
    damaged = bytearray(blob)
    for index in range(at, min(at + count, len(damaged))):
        damaged[index] ^= 0xA5
    return bytes(damaged)


Damage = Callable[[bytes], bytes]
FORMATS: dict[str, Callable[[bytes, Path], bytes]] = {
    ".jsonl.gz": lambda text, _: gzip.compress(text),
    ".jsonl.zst": lambda text, _: _two_frames(text),
    ".parquet": _parquet,
}
DAMAGES: dict[str, Damage] = {
    "truncated": lambda blob: blob[: len(blob) // 2 + 12],
    "corrupted": lambda blob: _flipped(blob, len(blob) // 2),
}


def _dataset(folder: Path, suffix: str) -> list[Path]:
    folder.mkdir()
    paths = [folder / f"part-{shard}{suffix}" for shard in range(SHARDS)]
    for shard, path in enumerate(paths):
        path.write_bytes(FORMATS[suffix](_jsonl(shard), path))
    return paths


def _counts(db: Path) -> tuple[int, int]:
    with duckdb.connect(str(db), read_only=True) as connection:
        runs = connection.execute("SELECT count(*) FROM runs").fetchone()
        trajectories = connection.execute("SELECT count(*) FROM trajectories").fetchone()
    assert runs is not None and trajectories is not None
    return runs[0], trajectories[0]


def _one_line_usage_error(result: Result, names: str) -> None:
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # not an exception escaping the CLI
    assert result.stderr.startswith(f"error: {names}"), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output


@pytest.fixture(scope="module")
def stored_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database that already holds one audited run (real bubblewrap replays)."""
    from tests.conftest import require_binary

    require_binary("bwrap", "apt-get install bubblewrap")
    folder = tmp_path_factory.mktemp("stored")
    suite = folder / "suite.jsonl"
    write_trajectories(suite, [command_trajectory("kept-1", "echo one", "echo two")])
    db = folder / "fidelity.duckdb"
    argv = ["audit", suite, "--db", db, "--sim-baseline", "copy", "--report", folder / "r.html"]
    result = CliRunner().invoke(app, [str(a) for a in argv])
    assert result.exit_code == 0, result.output
    assert _counts(db) == (1, 1)
    return db


@pytest.mark.bwrap
@pytest.mark.parametrize("suffix", list(FORMATS))
def test_a_damaged_shard_at_any_position_fails_the_gate_in_one_line(
    tmp_path: Path, stored_db: Path, suffix: str
) -> None:
    policy = tmp_path / "gate.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.5\n")
    before = _counts(stored_db)
    for damage, damaged in DAMAGES.items():
        for position in range(SHARDS):
            name = f"{damage}-{position}"
            paths = _dataset(tmp_path / name, suffix)
            paths[position].write_bytes(damaged(paths[position].read_bytes()))
            out = tmp_path / f"out-{name}"
            args = ["gate", tmp_path / name, "--policy", policy, "--all", "--db", stored_db]
            result = CliRunner().invoke(app, [str(a) for a in [*args, "-o", out]])
            _one_line_usage_error(result, str(paths[position]))
            assert not out.exists()
            assert _counts(stored_db) == before


def test_a_zstd_dataset_cut_in_its_second_frame_is_no_smaller_dataset(tmp_path: Path) -> None:
    """Issue 30's report: gated as complete (PASS, exit 0) with the first frame's trajectories."""
    text = b"".join(_jsonl(shard) for shard in range(SHARDS))
    cut = tmp_path / "sim.jsonl.zst"
    blob = _two_frames(text)
    cut.write_bytes(blob[: blob.index(zstandard.FRAME_HEADER, 4) + 12])
    policy = tmp_path / "gate.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.5\n")
    db = tmp_path / "f.duckdb"
    argv = [sys.executable, "-m", "fidelity", "gate", str(cut), "--policy", str(policy)]
    done = subprocess.run(
        [*argv, "--db", str(db), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (
        2,
        f"error: {cut}: cannot read (zstd: the file ends inside a frame, it was cut short)\n",
    )
    assert not db.exists() and not (tmp_path / "out").exists()


def _hostile_suites() -> dict[str, tuple[str, str]]:
    """``name: (line, the field the error names)``."""
    base = json.loads(dump_line(command_trajectory("h", "echo hi")))

    def with_(path: tuple[str | int, ...], value: object) -> str:
        data = json.loads(json.dumps(base))
        holder = data
        for key in path[:-1]:
            holder = holder.setdefault(key, {}) if isinstance(key, str) else holder[key]
        holder[path[-1]] = value
        return json.dumps(data)

    deep = dump_line(command_trajectory("h", "echo hi"))[:-1]
    lone = with_(("steps", 0, "observation"), {"text": "SURROGATE"}).replace("SURROGATE", "\\ud800")
    return {
        "nested": (deep + ', "meta": {"x": ' + "[" * 50_000 + "]" * 50_000 + "}}", "invalid JSON"),
        "surrogate": (lone, "steps.0.observation.text: not valid text"),
        "surrogate-command": (
            with_(("steps", 0, "action", "command"), "SURROGATE").replace("SURROGATE", "\\udc00"),
            "steps.0.action.command: not valid text",
        ),
        "nul-command": (
            with_(("steps", 0, "action", "command"), "echo a\x00b"),
            "steps.0.action.command: Value error",
        ),
        "nul-setup": (with_(("env", "setup"), ["touch \x00"]), "env.setup.0: Value error"),
        "nul-env": (with_(("env", "env"), {"A": "\x00"}), "env.env.A: Value error"),
        "nul-workdir": (with_(("env", "workdir"), "a\x00b"), "env.workdir: Value error"),
    }


@pytest.mark.bwrap
def test_a_hostile_suite_is_refused_in_one_line_before_any_database_is_touched(
    tmp_path: Path, stored_db: Path
) -> None:
    before = _counts(stored_db)
    for name, (line, names) in _hostile_suites().items():
        suite = tmp_path / f"{name}.jsonl"
        suite.write_text(line + "\n")
        for db in (stored_db, tmp_path / f"{name}.duckdb"):
            argv = ["audit", suite, "--db", db, "--report", tmp_path / "r.html"]
            result = CliRunner().invoke(app, [str(a) for a in argv])
            _one_line_usage_error(result, f"{suite}:1: {names}")
        assert not (tmp_path / f"{name}.duckdb").exists()  # not created, not left empty
        assert _counts(stored_db) == before


@pytest.mark.bwrap
def test_audit_replay_and_simulate_read_every_dataset_form(tmp_path: Path) -> None:
    trajectories = [command_trajectory(f"s{i}", f"echo {i}") for i in range(3)]
    text = "".join(dump_line(t) + "\n" for t in trajectories).encode()
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.jsonl.gz").write_bytes(gzip.compress(text))
    suites = {
        "gz": folder / "a.jsonl.gz",
        "zst": tmp_path / "s.jsonl.zst",
        "parquet": tmp_path / "s.parquet",
        "folder": folder,
    }
    suites["zst"].write_bytes(_two_frames(text))
    _parquet(text, suites["parquet"])
    runner = CliRunner()
    for name, suite in suites.items():
        out = tmp_path / f"{name}-sim.jsonl"
        simulated = runner.invoke(app, ["simulate", str(suite), "-o", str(out), "--json"])
        assert simulated.exit_code == 0, simulated.output
        assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [
            "s0",
            "s1",
            "s2",
        ]
    replayed = runner.invoke(app, ["replay", str(suites["zst"]), "-o", str(tmp_path / "r.jsonl")])
    assert replayed.exit_code == 0, replayed.output
    real = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert [t["steps"][0]["observation"]["text"] for t in real] == ["0\n", "1\n", "2\n"]
    db = tmp_path / "f.duckdb"
    report = tmp_path / "r.html"
    argv = [
        "audit",
        str(folder),
        "--db",
        str(db),
        "--sim-baseline",
        "copy",
        "--report",
        str(report),
    ]
    audited = runner.invoke(app, argv)
    assert audited.exit_code == 0, audited.output
    assert _counts(db) == (1, 3)
