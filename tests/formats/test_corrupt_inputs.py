"""Untrusted inputs: a damaged shard or a hostile line is a one-line input error, never less data."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest
import zstandard

from fidelity.errors import InputFormatError
from fidelity.formats.dataset import lines
from fidelity.formats.jsonl import MAX_DEPTH, dump_line, parse_line
from fidelity.pipeline import load_suite
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory


def _trajectory(tid: str) -> Trajectory:
    return Trajectory(
        id=tid,
        domain="terminal",
        steps=[
            Step(action=CommandAction(command=f"echo {tid}"), observation=Observation(text="x"))
        ],
    )


def _text(ids: range) -> bytes:
    return "".join(dump_line(_trajectory(f"t{i}")) + "\n" for i in ids).encode()


def _read(path: Path) -> int:
    return sum(1 for line in lines(path) if line.parse())


def _flipped(blob: bytes, at: int, count: int = 16) -> bytes:
    damaged = bytearray(blob)
    for index in range(at, min(at + count, len(damaged))):
        damaged[index] ^= 0xA5
    return bytes(damaged)


def test_a_zstd_shard_is_read_across_frames_and_refused_when_cut_short(tmp_path: Path) -> None:
    compressor = zstandard.ZstdCompressor()
    first, second = (
        compressor.compress(_text(range(50))),
        compressor.compress(_text(range(50, 100))),
    )
    whole = tmp_path / "whole.jsonl.zst"
    whole.write_bytes(first + second)
    assert _read(whole) == 100  # the second frame is read, not dropped
    for name, blob in {
        "second.jsonl.zst": first + second[:12],  # issue 30: read as the first frame's 50
        "single.jsonl.zst": first[: len(first) // 2],  # issue 30: read as no trajectories
    }.items():
        (tmp_path / name).write_bytes(blob)
        with pytest.raises(InputFormatError) as caught:
            _read(tmp_path / name)
        assert str(caught.value) == (
            f"{tmp_path / name}: cannot read (zstd: the file ends inside a frame, it was cut short)"
        )
    corrupt = tmp_path / "corrupt.jsonl.zst"
    corrupt.write_bytes(_flipped(first, 0, 4))
    with pytest.raises(InputFormatError, match=r"corrupt\.jsonl\.zst: cannot read \(zstd: "):
        _read(corrupt)


def test_a_corrupt_or_cut_gzip_shard_is_an_input_error(tmp_path: Path) -> None:
    blob = gzip.compress(_text(range(100)))
    cases = {
        "inflate.jsonl.gz": (_flipped(blob, len(blob) // 2), "Error -3 while decompressing"),
        "cut.jsonl.gz": (blob[: len(blob) // 2], "Compressed file ended"),
        "crc.jsonl.gz": (_flipped(blob, len(blob) - 8, 4), "CRC check failed"),
    }
    for name, (damaged, reason) in cases.items():
        (tmp_path / name).write_bytes(damaged)
        with pytest.raises(InputFormatError) as caught:
            _read(tmp_path / name)
        assert str(caught.value).startswith(f"{tmp_path / name}: cannot read ({reason}")


def _parquet(path: Path, rows: int, prefix: str = "t") -> bytes:
    with duckdb.connect() as connection:
        connection.execute(
            "COPY (SELECT ? || i AS id, 'terminal' AS domain, "
            "[{'action': {'type': 'text', 'text': 'step ' || i}}] AS steps FROM range(?) t(i)) "
            f"TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE 2048)",
            [prefix, rows],
        )
    return path.read_bytes()


def test_a_damaged_parquet_shard_is_refused_at_open_and_mid_read(tmp_path: Path) -> None:
    blob = _parquet(tmp_path / "good.parquet", 40_000)
    assert sum(1 for _ in lines(tmp_path / "good.parquet")) == 40_000
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(blob[: len(blob) // 2])
    with pytest.raises(InputFormatError, match=r"cut\.parquet: not a readable Parquet file \("):
        _read(cut)
    late = tmp_path / "late.parquet"  # a later row group's page: the footer reads, a fetch fails
    late.write_bytes(_flipped(blob, int(len(blob) * 0.8), 300))
    read = 0
    with pytest.raises(InputFormatError) as caught:
        for _ in lines(late):
            read += 1
    assert str(caught.value).startswith(f"{late}: cannot read Parquet after row {read} (")


def _line(**observation: object) -> str:
    data = json.loads(dump_line(_trajectory("t")))
    data["steps"][0]["observation"] = observation
    return json.dumps(data)


def test_deep_nesting_is_refused_past_the_limit_without_recursion() -> None:
    def nested(depth: int) -> str:  # meta (level 1) holds "deep": *depth* nested arrays
        return (
            dump_line(_trajectory("t"))[:-1]
            + ', "meta": {"deep": '
            + "[" * depth
            + "]" * depth
            + "}}"
        )

    assert parse_line(nested(MAX_DEPTH - 1), "s.jsonl", 1).meta["deep"]
    for depth in (MAX_DEPTH, 100_000):  # issue 30: RecursionError, 79 lines, exit 1
        with pytest.raises(InputFormatError) as caught:
            parse_line(nested(depth), "s.jsonl", 7)
        assert str(caught.value) == "s.jsonl:7: invalid JSON (nested deeper than 200 levels)"


def test_a_lone_surrogate_is_refused_naming_its_field() -> None:
    reason = "not valid text: a lone surrogate escape (\\ud800-\\udfff without its pair)"
    cases = {
        _line(text="a\\ud800b").replace("\\\\", "\\"): "steps.0.observation.text",
        dump_line(_trajectory("t")).replace("echo t", "echo \\udc00"): "steps.0.action.command",
        _line(text="x", state={"k": ["ok", "\\udfff"]}).replace("\\\\", "\\"): (
            "steps.0.observation.state.k.1"
        ),
    }
    for line, field in cases.items():
        with pytest.raises(InputFormatError) as caught:
            parse_line(line, "s.jsonl", 3)
        assert str(caught.value).startswith(f"s.jsonl:3: {field}: {reason}"), line
    paired = _line(text="\\ud83d\\ude00").replace("\\\\", "\\")  # a pair is one character
    assert parse_line(paired, "s.jsonl", 1).steps[0].observation == Observation(text="\U0001f600")


def test_a_nul_is_refused_where_the_os_gets_it_and_kept_in_output() -> None:
    kept = _line(text="a\x00b", state={"raw": "\x00"})
    assert parse_line(kept, "s.jsonl", 1).steps[0].observation == Observation(
        text="a\x00b", state={"raw": "\x00"}
    )
    keys = '{"id": "k", "domain": "terminal", "steps": [{"action": ' + json.dumps(
        {"type": "keystrokes", "keys": "\x00x\n"}
    )
    assert parse_line(keys + "}]}", "s.jsonl", 1).steps[0].action.render() == "\x00x\n"
    base = json.loads(dump_line(_trajectory("t")))
    refused = {
        "steps.0.action.command": ("steps", 0, "action", "command"),
        "env.workdir": ("env", "workdir"),
        "env.setup.0": ("env", "setup"),
        "env.env.PATH": ("env", "env"),
        "env.mcp_servers.fs.args.0": ("env", "mcp_servers"),
    }
    values: dict[str, object] = {
        "env.workdir": "a\x00b",
        "env.setup.0": ["echo \x00"],
        "env.env.PATH": {"PATH": "/bin\x00"},
        "env.mcp_servers.fs.args.0": {"fs": {"command": "server", "args": ["\x00"]}},
    }
    for field, where in refused.items():
        data = json.loads(json.dumps(base))
        holder = data
        for key in where[:-1]:
            holder = holder.setdefault(key, {}) if isinstance(key, str) else holder[key]
        holder[where[-1]] = values.get(field, "echo a\x00b")
        with pytest.raises(InputFormatError) as caught:
            parse_line(json.dumps(data), "s.jsonl", 2)
        assert str(caught.value) == (
            f"s.jsonl:2: {field}: Value error, contains a NUL character (\\u0000), "
            "which a command line, path or environment variable cannot carry"
        )


def test_a_suite_reads_from_every_dataset_form_its_paths_confined_per_shard(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "suite"
    (folder / "part" / "work").mkdir(parents=True)
    (folder / "a.jsonl.gz").write_bytes(gzip.compress(_text(range(2))))
    (folder / "b.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(_text(range(2, 4))))
    _parquet(folder / "d.parquet", 2, prefix="p")
    inner = json.loads(dump_line(_trajectory("w")))
    (folder / "part" / "c.jsonl").write_text(json.dumps({**inner, "env": {"workdir": "work"}}))
    read = load_suite(folder)
    assert [t.id for t in read] == ["t0", "t1", "t2", "t3", "p0", "p1", "w"]
    assert read[-1].env.workdir == str((folder / "part" / "work").resolve())  # its shard's folder
    assert load_suite(folder / "b.jsonl.zst") == read[2:4]

    (folder / "part" / "c.jsonl").write_text(json.dumps({**inner, "env": {"workdir": "../part"}}))
    (folder / "part" / "e.jsonl").write_text(
        json.dumps({**inner, "id": "x", "env": {"workdir": "../.."}})
    )
    with pytest.raises(InputFormatError) as caught:
        load_suite(folder)
    assert str(caught.value).startswith(f"{folder / 'part' / 'e.jsonl'}:1: env.workdir: '../..'")
    (folder / "part" / "e.jsonl").write_text(dump_line(_trajectory("t1")))
    with pytest.raises(InputFormatError) as caught:
        load_suite(folder)
    assert str(caught.value) == (
        f"{folder / 'part' / 'e.jsonl'}:1: id: duplicate id 't1' (first at {folder / 'a.jsonl.gz'}:2)"
    )


BOM = "\ufeff".encode()


def test_a_leading_byte_order_mark_is_dropped_by_every_reader(tmp_path: Path) -> None:
    """Windows tools start UTF-8 files with a BOM: the first line is still a trajectory, in
    plain, gzip and zstd shards, the suite reader and ``fidelity diff``'s reader."""
    from fidelity.diffing import diff_files
    from fidelity.formats.jsonl import read_trajectories

    text = BOM + _text(range(3))
    plain = tmp_path / "plain.jsonl"
    plain.write_bytes(text)
    (tmp_path / "packed.jsonl.gz").write_bytes(gzip.compress(text))
    (tmp_path / "packed.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(text))
    for name in ("plain.jsonl", "packed.jsonl.gz", "packed.jsonl.zst"):
        assert [line.parse().id for line in lines(tmp_path / name)] == ["t0", "t1", "t2"]
    assert [t.id for t in read_trajectories(plain)] == ["t0", "t1", "t2"]
    rows = diff_files(plain, plain).rows
    assert [row.trajectory_id for row in rows] == ["t0", "t1", "t2"]
    assert not any(row.drift for row in rows)


def test_a_byte_order_mark_inside_a_file_is_still_an_error(tmp_path: Path) -> None:
    path = tmp_path / "inside.jsonl"
    path.write_bytes(_text(range(1)) + BOM + _text(range(1, 2)))
    with pytest.raises(InputFormatError, match=r"inside\.jsonl:2: invalid JSON"):
        [line.parse() for line in lines(path)]
