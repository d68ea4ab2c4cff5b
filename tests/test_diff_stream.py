"""Streaming ``fidelity diff``: the same rows as the whole-file path, errors, any order."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fakes.trajectories import command_trajectory
from fidelity.compare import CompareConfig
from fidelity.diffing import (
    DiffResult,
    DiffStream,
    diff_files,
    diff_trajectories,
    json_chunks,
    jsonl_line,
)
from fidelity.errors import InputFormatError
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.trajectory import Observation, Trajectory
from fidelity.worldmodels.prompting import EVALUATED_TURN

GOLDEN = Path(__file__).parent / "formats" / "data" / "diff_stream_golden.jsonl"


def whole_file_diff(
    real_path: str | os.PathLike[str],
    sim_path: str | os.PathLike[str],
    config: CompareConfig | None = None,
) -> DiffResult:
    """The previous ``diff_files``, verbatim: both files loaded whole, paired by id."""
    real = {t.id: t for t in read_trajectories(real_path)}
    sim = {t.id: t for t in read_trajectories(sim_path)}
    rows = []
    for trajectory_id, real_t in real.items():
        if trajectory_id in sim:
            rows.extend(
                diff_trajectories(real_t, sim[trajectory_id], str(real_path), str(sim_path), config)
            )
    return DiffResult(
        rows=rows, only_real=sorted(set(real) - set(sim)), only_sim=sorted(set(sim) - set(real))
    )


def _listing(n: int, extra: str = "", pid: int = 100) -> str:
    lines = [
        f"-rw-r--r-- 1 agent agent {100 + i * 7} Nov 20 12:0{i % 10} file_{i}.py" for i in range(n)
    ]
    return "\n".join([f"total {n * 4}", *lines, extra, f"worker pid {pid} started"]) + "\n"


def recordings(folder: Path) -> tuple[Path, Path]:
    """Real and simulated files: mixed drift, ids out of order, one-sided ids, an evaluated turn."""
    real: list[Trajectory] = []
    sim: list[Trajectory] = []
    for t in range(12):
        commands = ["ls -la", "cat notes.txt", "touch new.py && ls", "pytest -q"]
        trajectory = command_trajectory(f"t-{t:02d}", *commands)
        real_obs = [
            Observation(text=_listing(6 + t), exit_code=0),
            Observation(text=f"note {t}\nsee config.yaml\n", exit_code=0),
            Observation(text=_listing(7 + t, "new.py"), exit_code=0),
            Observation(text=f"{t + 3} passed in 0.{t}1s\n", exit_code=0),
        ]
        sim_obs = [
            Observation(text=_listing(6 + t, pid=200 + t), exit_code=0),
            Observation(text=f"note {t}\nsee settings.toml\n" if t % 3 == 0 else real_obs[1].text),
            Observation(text=_listing(7 + t, "new.py" if t % 2 else "ghost.py"), exit_code=0),
            Observation(text=f"{t + 3} passed in 0.{t}2s\n", exit_code=1 if t % 4 == 1 else 0),
        ]
        if t % 5 == 4:
            sim_obs[2] = Observation(error="TimeoutError: the world model did not answer")
        real.append(trajectory.with_observations(real_obs, "real"))
        meta = {EVALUATED_TURN: 3} if t == 7 else {}
        sim.append(trajectory.with_observations(sim_obs, "sim", **meta))
    real.append(
        command_trajectory("only-real", "ls").with_observations([Observation(text="a\n")], "real")
    )
    sim.append(
        command_trajectory("only-sim", "ls").with_observations([Observation(text="b\n")], "sim")
    )
    sim = sim[6:] + sim[:6]  # a different order than the real file
    write_trajectories(folder / "real.jsonl", real)
    write_trajectories(folder / "sim.jsonl", sim)
    return folder / "real.jsonl", folder / "sim.jsonl"


def test_streaming_rows_equal_the_whole_file_path(tmp_path: Path) -> None:
    real, sim = recordings(tmp_path)
    expected = whole_file_diff(real, sim)
    streamed = diff_files(real, sim)
    assert streamed == expected
    assert (streamed.only_real, streamed.only_sim) == (["only-real"], ["only-sim"])
    assert any(r.drift for r in streamed.rows) and not all(r.drift for r in streamed.rows)
    assert any(r.infra_failure for r in streamed.rows)


def test_streaming_rows_equal_the_recorded_output(tmp_path: Path) -> None:
    """The jsonl rows, byte for byte, as the whole-file code printed them before streaming."""
    real, sim = recordings(tmp_path)
    lines = [row.model_dump_json() for row in DiffStream(real, sim)]
    assert lines == GOLDEN.read_text().splitlines()


def test_stream_holds_one_trajectory_at_a_time(tmp_path: Path) -> None:
    real, sim = recordings(tmp_path)
    stream = DiffStream(real, sim)
    pairs = stream.pairs()
    first_real, first_sim = next(pairs)
    assert first_real.id == first_sim.id == "t-00"
    assert stream.only_real == []  # known only once the stream is exhausted
    assert [r.id for r, _ in pairs] == [f"t-{t:02d}" for t in range(1, 12)]
    assert (stream.only_real, stream.only_sim) == (["only-real"], ["only-sim"])


def test_bad_lines_fail_with_file_line_and_field(tmp_path: Path) -> None:
    real, sim = recordings(tmp_path)
    lines = sim.read_text().splitlines()
    bad = json.loads(lines[-1])  # only-sim: never paired, still validated
    bad["steps"][0]["action"] = {"type": "command"}
    sim.write_text("\n".join([*lines[:-1], json.dumps(bad)]) + "\n")
    with pytest.raises(InputFormatError, match=r"sim.jsonl:13: steps.0.action.command"):
        diff_files(real, sim)
    sim.write_text("\n".join([*lines, lines[0]]) + "\n")
    with pytest.raises(InputFormatError, match=r"sim.jsonl:14: id: duplicate id 't-06'"):
        list(DiffStream(real, sim))
    sim.write_text("\n".join(lines) + "\n{not json\n")
    with pytest.raises(InputFormatError, match=r"sim.jsonl:14: invalid JSON"):
        list(DiffStream(real, sim))
    real.write_text("// nothing here\n\n")
    sim.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputFormatError, match="no trajectories in file"):
        list(DiffStream(real, sim))


def test_missing_files_are_named_real_first(tmp_path: Path) -> None:
    from fidelity.errors import NotFoundError

    real, sim = tmp_path / "real.jsonl", tmp_path / "sim.jsonl"
    with pytest.raises(NotFoundError, match=r"real.jsonl: no such file"):
        diff_files(real, sim)
    real.write_text(recordings(tmp_path)[0].read_text())
    sim.unlink()
    with pytest.raises(NotFoundError, match=r"sim.jsonl: no such file"):
        list(DiffStream(real, sim))


def test_cli_jsonl_prints_the_recorded_rows(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fidelity.cli import app

    real, sim = recordings(tmp_path)
    result = CliRunner().invoke(app, ["diff", str(real), str(sim), "--format", "jsonl"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == GOLDEN.read_text().splitlines()


def test_cli_diff_imports_only_what_it_uses(tmp_path: Path) -> None:
    """``fidelity diff`` starts lean: no DuckDB, numpy, sandbox registry, prompts or other domains.

    Run in a fresh interpreter (this one has imported everything); the rows must
    still be the recorded ones, so the check cannot pass on a diff that did nothing.
    """
    import subprocess
    import sys

    real, sim = recordings(tmp_path)
    modules = tmp_path / "modules.txt"
    script = (
        "import sys\n"
        "from fidelity.cli import app\n"
        f"app(['diff', {str(real)!r}, {str(sim)!r}, '--format', 'jsonl'], standalone_mode=False)\n"
        f"open({str(modules)!r}, 'w').write('\\n'.join(sorted(sys.modules)))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == GOLDEN.read_text().splitlines()
    loaded = set(modules.read_text().split())
    assert "fidelity.compare.terminal" in loaded
    heavy = {
        "duckdb",
        "numpy",
        "pandas",
        "jinja2",
        "fidelity.store",
        "fidelity.sandboxes",
        "fidelity.worldmodels.prompting",
        "fidelity.compare.osworld",
        "fidelity.compare.search",
    }
    assert sorted(heavy & loaded) == []


def test_unstyled_json_output_is_what_rich_prints(capsys: pytest.CaptureFixture[str]) -> None:
    """``diff --format json`` writes JSON itself when nothing is styled: rich's bytes exactly."""
    import io

    from rich.console import Console

    from fidelity.cli.application import print_json

    data = {
        "rows": [
            {
                "text": 'a\u2028b\x7fc\x85d 😀 漢字 e\u0301 \u200b \u05d0 [bold]x[/] :smile: \\ " \t\n\r\x00\x1b',
                "numbers": [1e-7, 0.1, 1e300, float("nan"), float("inf"), -0.0, 2**100],
                "empty": [[], {}, None, True],
                "long": "x" * 5000 + " y" * 3000,
            }
        ],
        "only_sim": ["z"],
    }
    text = json.dumps(data)
    expected = io.StringIO()
    Console(file=expected, highlight=False, soft_wrap=True).print_json(text)
    print_json(text)
    assert capsys.readouterr().out == expected.getvalue()


def test_cli_diff_db_compares_each_pair_once_and_writes_nothing_on_a_bad_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``diff --db`` stores the run and prints the same rows, comparing every pair once."""
    from typer.testing import CliRunner

    from fidelity import diffing
    from fidelity.cli import app
    from fidelity.store import Store

    real, sim = recordings(tmp_path)
    compared: list[str] = []
    original = diffing.diff_trajectories

    def counted(real_t: Trajectory, *args: object, **kwargs: object) -> list[diffing.DiffRow]:
        compared.append(real_t.id)
        return original(real_t, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(diffing, "diff_trajectories", counted)
    runner = CliRunner()
    db = tmp_path / "f.duckdb"
    result = runner.invoke(app, ["diff", str(real), str(sim), "--db", str(db), "-f", "jsonl"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == GOLDEN.read_text().splitlines()
    assert sorted(compared) == [f"t-{t:02d}" for t in range(12)]  # once each
    with Store(db, read_only=True) as store:
        (run,) = store.list_runs()
        assert run["status"] == "done"
        assert sorted(store.real_observations(run["run_id"])) == sorted(set(compared))
    as_json = runner.invoke(app, ["diff", str(real), str(sim), "--db", str(db), "-f", "json"])
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == json.loads(whole_file_diff(real, sim).model_dump_json())
    plain = runner.invoke(app, ["diff", str(real), str(sim), "-f", "json"])
    assert as_json.stdout == plain.stdout  # streamed row by row, the same bytes
    bad = tmp_path / "bad.jsonl"  # the last line is bad: found before anything is written
    bad.write_text(sim.read_text() + "{not json\n")
    fresh = tmp_path / "new.duckdb"
    for fmt in ("jsonl", "json"):
        refused = runner.invoke(app, ["diff", str(real), str(bad), "--db", str(fresh), "-f", fmt])
        assert refused.exit_code == 2
        assert "bad.jsonl:14: invalid JSON" in refused.stderr
        assert refused.stdout == "" and not fresh.exists()


def test_json_output_streams_the_bytes_of_the_whole_result(tmp_path: Path) -> None:
    """``--format json`` is written row by row, byte for byte the indented whole result."""
    from typer.testing import CliRunner

    from fidelity.cli import app
    from fidelity.diffing import json_chunks

    def whole(real: Path, sim: Path) -> str:
        result = diff_files(real, sim).model_dump_json()
        return json.dumps(json.loads(result), indent=2, ensure_ascii=False)

    real, sim = recordings(tmp_path)
    lines = real.read_text().splitlines()
    cases = {"mixed": (real, sim)}
    for name, kept in (("no-shared-id", lines[-1:]), ("all-shared", lines[:-1])):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(kept) + "\n")
        cases[name] = (path, sim if name == "no-shared-id" else path)
    for name, (a, b) in cases.items():
        assert "".join(json_chunks(DiffStream(a, b))) == whole(a, b), name
    assert json.loads(whole(*cases["no-shared-id"]))["rows"] == []
    assert json.loads(whole(*cases["all-shared"]))["only_real"] == []
    printed = CliRunner().invoke(app, ["diff", str(real), str(sim), "--format", "json"])
    assert printed.exit_code == 0, printed.output
    assert printed.stdout == whole(real, sim) + "\n"


def test_worker_processes_give_the_rows_of_one_process(tmp_path: Path) -> None:
    """``jobs=2``: the same rows, text and one-sided ids as one process, in the same order."""
    real, sim = recordings(tmp_path)
    golden = GOLDEN.read_text().splitlines()
    stream = DiffStream(real, sim, jobs=2)
    assert [row.model_dump_json() for row in stream] == golden
    assert (stream.only_real, stream.only_sim) == (["only-real"], ["only-sim"])
    assert "".join(DiffStream(real, sim, jobs=2).rendered(jsonl_line)).splitlines() == golden
    whole = diff_files(real, sim).model_dump_json()
    expected = json.dumps(json.loads(whole), indent=2, ensure_ascii=False)
    assert "".join(json_chunks(DiffStream(real, sim, jobs=2))) == expected
    assert diff_files(real, sim, jobs=3) == whole_file_diff(real, sim)


def test_worker_processes_raise_the_first_bad_line_after_the_rows_before_it(
    tmp_path: Path,
) -> None:
    real, sim = recordings(tmp_path)
    lines = real.read_text().splitlines()
    bad = json.loads(lines[5])
    bad["steps"][1]["action"] = {"type": "command"}
    duplicate = lines[2]  # a later error of another kind, found first by the reading process
    real.write_text("\n".join([*lines[:5], json.dumps(bad), *lines[6:], duplicate]) + "\n")
    for jobs in (1, 2):
        seen: list[str] = []
        with pytest.raises(InputFormatError, match=r"real.jsonl:6: steps.1.action.command"):
            for row in DiffStream(real, sim, jobs=jobs):
                seen.append(row.trajectory_id)
        assert sorted(set(seen)) == [f"t-{t:02d}" for t in range(5)], jobs


def test_jobs_default_to_one_per_cpu_for_a_big_simulated_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fidelity import diffing
    from fidelity.ordered_pool import available_cpus

    real, sim = recordings(tmp_path)
    assert DiffStream(real, sim, jobs=None)._processes() == 1  # a few KB
    monkeypatch.setattr(diffing, "PARALLEL_BYTES", sim.stat().st_size)
    assert DiffStream(real, sim, jobs=None)._processes() == available_cpus()
    assert DiffStream(real, sim, jobs=1)._processes() == 1
    assert [r.model_dump_json() for r in DiffStream(real, sim, jobs=None)] == (
        GOLDEN.read_text().splitlines()
    )


def test_cli_jobs_print_and_store_the_same_rows(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fidelity.cli import app
    from fidelity.store import Store

    real, sim = recordings(tmp_path)
    runner = CliRunner()
    db = tmp_path / "f.duckdb"
    for extra in ([], ["--db", str(db)]):
        result = runner.invoke(app, ["diff", str(real), str(sim), "-f", "jsonl", "-j", "2", *extra])
        assert result.exit_code == 0, result.output
        assert result.stdout.splitlines() == GOLDEN.read_text().splitlines()
    with Store(db, read_only=True) as store:
        (run,) = store.list_runs()
        assert len(store.real_observations(run["run_id"])) == 12
    refused = runner.invoke(app, ["diff", str(real), str(sim), "--jobs", "0"])
    assert refused.exit_code == 2
    assert "--jobs" in refused.stderr
