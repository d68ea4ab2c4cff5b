"""Datasets of any size: JSONL, .jsonl.gz, .jsonl.zst, Parquet, folders and globs of shards."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import duckdb
import pytest
import zstandard

from fidelity.errors import InputFormatError, NotFoundError
from fidelity.formats.dataset import lines, shards, trajectories
from fidelity.formats.jsonl import dump_line
from fidelity.gate import GateOptions, gate_dataset, load_policy
from fidelity.gate.sample import design_of, plan
from fidelity.gate.scan import scan_dataset
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory


def _trajectory(tid: str, steps: int = 2) -> Trajectory:
    return Trajectory(
        id=tid,
        domain="terminal",
        source="sim",
        steps=[
            Step(action=CommandAction(command=f"echo {tid}"), observation=Observation(text="x\n"))
            for _ in range(steps)
        ],
        meta={"model": "toy", "mode": "open-loop"},
    )


def _text(ids: range) -> str:
    return "".join(dump_line(_trajectory(f"t{i}")) + "\n" for i in ids)


def test_every_shard_format_reads_the_same_trajectories(tmp_path: Path) -> None:
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "a.jsonl").write_text(_text(range(0, 3)))
    with gzip.open(folder / "b.jsonl.gz", "wt") as handle:
        handle.write(_text(range(3, 6)))
    (folder / "c.jsonl.zst").write_bytes(
        zstandard.ZstdCompressor().compress(_text(range(6, 9)).encode())
    )
    source = tmp_path / "d.jsonl"
    source.write_text(_text(range(9, 12)))
    with duckdb.connect() as con:  # Parquet with the trajectory's fields as columns
        con.execute(
            f"COPY (SELECT * FROM read_json('{source}', format='newline_delimited')) "
            f"TO '{folder / 'd.parquet'}' (FORMAT parquet)"
        )
    assert [p.name for p in shards(folder)] == ["a.jsonl", "b.jsonl.gz", "c.jsonl.zst", "d.parquet"]
    read = list(trajectories(folder))
    assert [t.id for t in read] == [f"t{i}" for i in range(12)]
    assert read[-1] == _trajectory("t11")
    assert [p.name for p in shards(str(folder / "*.jsonl*"))] == [
        "a.jsonl",
        "b.jsonl.gz",
        "c.jsonl.zst",
    ]
    assert [line.shard for line in lines(folder)][::3] == [0, 1, 2, 3]


def test_a_malformed_line_names_its_shard_line_and_field(tmp_path: Path) -> None:
    good = tmp_path / "a.jsonl"
    good.write_text(_text(range(2)))
    bad = tmp_path / "b.jsonl.gz"
    broken = json.loads(dump_line(_trajectory("t9")))
    broken["steps"][1]["action"] = {"type": "command"}
    with gzip.open(bad, "wt") as handle:
        handle.write(_text(range(2, 4)) + json.dumps(broken) + "\n")
    with pytest.raises(InputFormatError) as caught:
        list(trajectories(str(tmp_path / "*")))
    assert str(caught.value).startswith(f"{bad}:3: steps.1.action.command: Field required")
    with pytest.raises(NotFoundError, match="no dataset shards match"):
        shards(str(tmp_path / "*.parquet"))


def test_the_gate_streams_shards_and_writes_nothing_before_a_bad_line(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "a.jsonl").write_text(_text(range(3)))
    (folder / "b.jsonl").write_text(_text(range(3, 5)) + '{"id": "t5", "domain": "terminal"\n')
    policy_path = tmp_path / "policy.toml"
    policy_path.write_text("[default]\nmax_drift_rate = 0.5\n")
    options = GateOptions(
        dataset=folder, policy_path=policy_path, output_dir=tmp_path / "out", db=tmp_path / "f.db"
    )
    with pytest.raises(InputFormatError, match=r"b\.jsonl:3: invalid JSON"):
        gate_dataset(options, load_policy(policy_path))
    assert not (tmp_path / "out").exists() and not (tmp_path / "f.db").exists()


def test_duplicate_ids_across_shards_are_named(tmp_path: Path) -> None:
    (tmp_path / "a.jsonl").write_text(_text(range(3)))
    (tmp_path / "b.jsonl").write_text(_text(range(2, 4)))
    with pytest.raises(
        InputFormatError, match=r"b\.jsonl:1: id: duplicate id 't2' \(first at .*a\.jsonl:3\)"
    ):
        scan_dataset(tmp_path)


def test_the_sample_draws_the_same_positions_however_the_data_is_sharded(
    tmp_path: Path,
) -> None:
    whole = tmp_path / "whole.jsonl"
    whole.write_text(_text(range(40)))
    parts = tmp_path / "parts"
    parts.mkdir()
    for shard in range(4):
        (parts / f"{shard}.jsonl").write_text(_text(range(shard * 10, shard * 10 + 10)))
    one, many = scan_dataset(whole), scan_dataset(parts)
    assert list(one.lengths) == list(many.lengths)
    drawn = plan(design_of(one), 3, 7, 1000), plan(design_of(many), 3, 7, 1000)
    assert drawn[0].tolist() == drawn[1].tolist() and len(drawn[0]) == 7
    assert (one.trajectories, one.domain, one.modes) == (40, "terminal", ["open-loop"])


def test_hidden_entries_and_excluded_paths_are_not_shards(tmp_path: Path) -> None:
    """A gate's staging folder (hidden) and its outputs (excluded) inside the dataset folder."""
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    (data / "out" / "admitted").mkdir(parents=True)
    (data / ".gate-parts.x").mkdir()
    for name in (
        "a.jsonl",
        "sub/b.jsonl",
        ".c.jsonl",
        ".gate-parts.x/d.jsonl",
        "out/admitted.jsonl",
        "out/admitted/part-000000.jsonl",
        "out/other.jsonl",
    ):
        (data / name).write_text(_text(range(1)))
    everything = [p.relative_to(data).as_posix() for p in shards(data)]
    assert everything == [
        "a.jsonl",
        "out/admitted/part-000000.jsonl",
        "out/admitted.jsonl",
        "out/other.jsonl",
        "sub/b.jsonl",
    ]
    excluded = [data / "out" / "admitted.jsonl", data / "out" / "admitted"]
    kept = [p.relative_to(data).as_posix() for p in shards(data, excluded)]
    assert kept == ["a.jsonl", "out/other.jsonl", "sub/b.jsonl"]
    assert [p.name for p in shards(str(data / "out" / "*.jsonl"), excluded)] == ["other.jsonl"]
