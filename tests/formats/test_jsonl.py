"""The JSONL interchange format: validation errors name file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fakes.trajectories import command_trajectory
from fidelity.errors import InputFormatError, NotFoundError, UsageError
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.trajectory import Observation

GOOD = {
    "id": "t1",
    "domain": "terminal",
    "steps": [{"action": {"type": "command", "command": "ls"}}],
}


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_round_trip_keeps_everything(tmp_path: Path) -> None:
    trajectory = command_trajectory("t-1", "ls -la", "cat README.md").with_observations(
        [
            Observation(text="a\nb\n", exit_code=0, cwd="/workspace"),
            Observation(text="", exit_code=1),
        ],
        "real",
    )
    path = tmp_path / "real.jsonl"
    assert write_trajectories(path, [trajectory]) == 1
    assert read_trajectories(path) == [trajectory]
    assert json.loads(path.read_text())["version"] == 1


def test_invalid_json_names_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", json.dumps(GOOD), "", "{not json")
    with pytest.raises(InputFormatError) as info:
        read_trajectories(path)
    assert (
        str(info.value)
        == f"{path}:3: invalid JSON (Expecting property name enclosed in double quotes at column 2)"
    )
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2


def test_invalid_field_names_the_field(tmp_path: Path) -> None:
    bad = {**GOOD, "id": "t2", "steps": [{"action": {"type": "command", "comand": "ls"}}]}
    path = _write(tmp_path / "bad.jsonl", json.dumps(GOOD), json.dumps(bad))
    with pytest.raises(InputFormatError) as info:
        read_trajectories(path)
    assert info.value.line == 2
    assert info.value.field == "steps.0.action.command"
    assert str(info.value).startswith(f"{path}:2: steps.0.action.command: Field required")


def test_unknown_domain_and_action_type(tmp_path: Path) -> None:
    path = _write(tmp_path / "bad.jsonl", json.dumps({**GOOD, "domain": "kitchen"}))
    with pytest.raises(InputFormatError, match=r":1: domain: Input should be 'terminal'"):
        read_trajectories(path)
    bad_action = {**GOOD, "steps": [{"action": {"type": "teleport"}}]}
    path = _write(tmp_path / "bad2.jsonl", json.dumps(bad_action))
    with pytest.raises(InputFormatError, match=r":1: steps.0.action: Input tag 'teleport'"):
        read_trajectories(path)


def test_unknown_version_and_extra_fields_are_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path / "v.jsonl", json.dumps({**GOOD, "version": 2}))
    with pytest.raises(InputFormatError, match=":1: version: Input should be 1"):
        read_trajectories(path)
    path = _write(tmp_path / "x.jsonl", json.dumps({**GOOD, "colour": "red"}))
    with pytest.raises(InputFormatError, match=":1: colour: Extra inputs are not permitted"):
        read_trajectories(path)


def test_duplicate_ids_and_empty_files(tmp_path: Path) -> None:
    path = _write(tmp_path / "dup.jsonl", json.dumps(GOOD), json.dumps(GOOD))
    with pytest.raises(InputFormatError, match=r":2: id: duplicate id 't1' \(first on line 1\)"):
        read_trajectories(path)
    with pytest.raises(InputFormatError, match="no trajectories"):
        read_trajectories(_write(tmp_path / "empty.jsonl", ""))
    with pytest.raises(NotFoundError, match="no such file"):
        read_trajectories(tmp_path / "missing.jsonl")


def test_not_an_object_and_not_utf8(tmp_path: Path) -> None:
    with pytest.raises(InputFormatError, match=":1: expected a JSON object, got list"):
        read_trajectories(_write(tmp_path / "list.jsonl", "[1, 2]"))
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputFormatError, match="not UTF-8"):
        read_trajectories(binary)


def test_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_text("previous\n")

    def broken():  # type: ignore[no-untyped-def]
        yield command_trajectory("t", "ls")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        write_trajectories(path, broken())
    assert path.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.jsonl"]


def test_line_separators_inside_strings_round_trip_escaped(tmp_path: Path) -> None:
    text = "a\u2028b\u2029c\x85d\x0ce"
    trajectory = command_trajectory("t1", "ls")
    trajectory = trajectory.with_observations([Observation(text=text)], "real")
    path = tmp_path / "t.jsonl"
    write_trajectories(path, [trajectory, trajectory.model_copy(update={"id": "t2"})])
    raw = path.read_text(encoding="utf-8")
    assert "\u2028" not in raw and "\u2029" not in raw and "\x85" not in raw
    assert raw.count("\n") == 2  # one line per trajectory
    back = read_trajectories(path)
    assert [t.steps[0].observation.text for t in back] == [text, text]  # type: ignore[union-attr]


def test_raw_line_separators_written_by_others_are_read(tmp_path: Path) -> None:
    trajectory = command_trajectory("t1", "ls").with_observations(
        [Observation(text="x\u2028y")], "real"
    )
    line = json.dumps(trajectory.model_dump(mode="json", exclude_none=True), ensure_ascii=False)
    assert "\u2028" in line
    path = tmp_path / "t.jsonl"
    path.write_text(line + "\n", encoding="utf-8")
    assert read_trajectories(path)[0].steps[0].observation.text == "x\u2028y"  # type: ignore[union-attr]


def test_path_confiner_resolves_each_path_once_and_leaves_pathless_trajectories_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fidelity.formats import jsonl
    from fidelity.trajectory import EnvSpec

    (tmp_path / "work").mkdir()
    (tmp_path / "setup.sh").write_text("true\n")
    dataset = tmp_path / "d.jsonl"
    calls: list[str] = []
    resolve = jsonl._confined

    def counted(raw: str, *args: object, **kwargs: object) -> Path:
        calls.append(raw)
        return resolve(raw, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(jsonl, "_confined", counted)
    confiner = jsonl.PathConfiner(dataset)
    env = EnvSpec(workdir="work", setup=["@setup.sh", "echo hi"])
    one = command_trajectory("t", "ls")
    with_paths = [one.model_copy(update={"id": f"t{i}", "env": env}) for i in range(3)]
    confined = [confiner.confine(t, i + 1) for i, t in enumerate(with_paths)]
    assert sorted(calls) == ["setup.sh", "work"]  # once each, not once per trajectory
    assert {c.env.workdir for c in confined} == {str(tmp_path / "work")}
    assert {tuple(c.env.setup) for c in confined} == {(f"@{tmp_path / 'setup.sh'}", "echo hi")}
    plain = one.model_copy(update={"env": EnvSpec(setup=["ls"])})
    assert confiner.confine(plain, 9) is plain
    # a refused path is refused every time, naming its own line
    hostile = one.model_copy(update={"env": EnvSpec(workdir="/etc")})
    for line in (4, 5):
        with pytest.raises(InputFormatError, match=rf"d.jsonl:{line}: env.workdir: '/etc'"):
            confiner.confine(hostile, line)
