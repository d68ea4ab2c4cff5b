"""The CLI edge: exit codes, one-line errors, JSON outputs, the diff contract."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fakes.trajectories import command_trajectory
from fakes.world_model import MODEL, FakeLLM, Reply
from fidelity.cli import app
from fidelity.formats.jsonl import write_trajectories
from fidelity.trajectory import Observation
from tests.conftest import unavailable

runner = CliRunner()


def invoke(*args: str | Path):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture
def recordings(tmp_path: Path) -> tuple[Path, Path]:
    """A real recording and a simulated one of the same two steps."""
    trajectory = command_trajectory("t-1", "ls", "wc -l data.csv")
    real = trajectory.with_observations(
        [
            Observation(text="README.md\ndata.csv\n", exit_code=0),
            Observation(text="48 data.csv\n", exit_code=0),
        ],
        "real",
    )
    sim = trajectory.with_observations(
        [
            Observation(text="README.md\ndata.csv\nsecrets.env\n", exit_code=0),
            Observation(text="48 data.csv\n", exit_code=0),
        ],
        "sim",
    )
    write_trajectories(tmp_path / "real.jsonl", [real])
    write_trajectories(tmp_path / "sim.jsonl", [sim])
    return tmp_path / "real.jsonl", tmp_path / "sim.jsonl"


def test_diff_jsonl_contract(recordings: tuple[Path, Path]) -> None:
    result = invoke("diff", *recordings, "--format", "jsonl")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(lines) == 2
    contract = {"trajectory_id", "step", "domain", "score", "drift", "hallucinations", "omissions"}
    assert all(contract <= set(line) for line in lines)
    first, second = lines
    assert (first["trajectory_id"], first["step"], first["domain"], first["drift"]) == (
        "t-1",
        1,
        "terminal",
        True,
    )
    assert "file:secrets.env" in first["hallucinations"]
    assert (second["step"], second["drift"], second["score"], second["hallucinations"]) == (
        2,
        False,
        1.0,
        [],
    )


def test_diff_table_summary(recordings: tuple[Path, Path]) -> None:
    result = invoke("diff", *recordings)
    assert result.exit_code == 0
    assert result.stdout.splitlines()[-1] == "1 of 2 steps drifted (50.0%)"


def test_malformed_jsonl_is_a_one_line_error_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"id": "a", "domain": "terminal", "steps": [{"action": {"type": "command", "command": "ls"}}]}\n'
        '{"id": "b", "domain": "terminal", "steps": [{"action": {"type": "command"}}]}\n'
    )
    db = tmp_path / "f.duckdb"
    result = invoke("audit", bad, "--db", db)
    assert result.exit_code == 2
    assert result.stderr == f"error: {bad}:2: steps.0.action.command: Field required\n"
    assert not db.exists()


def test_unknown_domain_and_bad_options(tmp_path: Path) -> None:
    result = invoke("audit", "--domain", "kitchen", "--db", tmp_path / "f.duckdb")
    assert result.exit_code == 2
    assert result.stderr.startswith(
        "error: unknown domain 'kitchen'; the domains are: terminal, swe, web"
    )
    result = invoke("audit", "--sim-url", "http://127.0.0.1:1/v1")
    assert (result.exit_code, result.stderr) == (
        2,
        "error: --sim-url needs --sim-model (the served model's name)\n",
    )
    result = invoke("diff", "a.jsonl", "b.jsonl", "--format", "xml")
    assert result.exit_code == 2 and "choose table, jsonl or json" in result.stderr
    result = invoke("report", "--db", tmp_path / "missing.duckdb")
    assert result.exit_code == 2 and "no such database" in result.stderr


def test_audit_takes_the_suites_domain(tmp_path: Path) -> None:
    step = '"steps": [{"action": {"type": "text", "text": "tap Settings"}}]'
    android = tmp_path / "android.jsonl"
    android.write_text(f'{{"id": "a", "domain": "android", {step}}}\n')
    result = invoke("audit", android, "--db", tmp_path / "f.duckdb")
    assert (result.exit_code, result.stderr) == (
        2,
        "error: domain 'android' needs --sandbox adb\n",
    )
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text(
        f'{{"id": "a", "domain": "android", {step}}}\n{{"id": "b", "domain": "web", {step}}}\n'
    )
    result = invoke("audit", mixed, "--db", tmp_path / "f.duckdb")
    assert (result.exit_code, result.stderr) == (
        2,
        f"error: {mixed}: mixed domains (android, web); use one domain per file\n",
    )
    assert not (tmp_path / "f.duckdb").exists()


def test_unreachable_endpoint_exit_2(tmp_path: Path, closed_port_url: str) -> None:
    result = invoke(
        "audit", "--sim-url", closed_port_url, "--sim-model", "m", "--db", tmp_path / "f.duckdb"
    )
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "does not answer" in result.stderr


@pytest.mark.bwrap
@pytest.mark.usefixtures("bwrap")
def test_audit_gate_report_runs(tmp_path: Path) -> None:
    db, html = tmp_path / "f.duckdb", tmp_path / "r.html"
    strict, lenient = tmp_path / "strict.toml", tmp_path / "lenient.toml"
    strict.write_text("[default]\nmax_drift_rate = 0.0\n")
    # two trajectories decide no 5% limit: the lenient policy turns those off explicitly
    lenient.write_text(
        "[default]\nmax_drift_rate = 1.0\nmin_steps = 1\nmax_infra_failure_rate = 1.0\n"
        "max_unverifiable_rate = 1.0\n"
    )

    audited = invoke(
        "audit",
        "--limit",
        "2",
        "--sim-baseline",
        "copy",
        "--db",
        db,
        "--report",
        html,
        "--run-id",
        "r1",
        "--json",
    )
    assert audited.exit_code == 0, audited.output
    payload = json.loads(audited.stdout)
    assert payload["run_id"] == "r1" and payload["summary"]["totals"]["trajectories"] == 2
    assert "'copy' baseline" in payload["world_model_notice"]

    failed = invoke("gate", "--policy", strict, "--db", db, "--json")
    assert failed.exit_code == 1
    assert json.loads(failed.stdout)["status"] == "fail"
    passed = invoke("gate", "--policy", lenient, "--db", db, "--run", "r1")
    assert passed.exit_code == 0, passed.output
    assert passed.stdout.startswith(
        "gate: PASS (run r1, terminal; bounds at 95% confidence over 2 trajectories)"
    )

    gated = invoke(
        "audit",
        "--limit",
        "1",
        "--sim-baseline",
        "copy",
        "--db",
        db,
        "--report",
        html,
        "--policy",
        strict,
    )
    assert gated.exit_code == 1 and "gate: FAIL" in gated.stdout

    listed = json.loads(invoke("runs", "--db", db, "--json").stdout)
    assert [run["status"] for run in listed] == ["done", "done"]
    reported = invoke("report", "--db", db, "--run", "r1", "-o", tmp_path / "again.html")
    assert reported.exit_code == 0 and (tmp_path / "again.html").stat().st_size > 10_000
    missing = invoke("gate", "--policy", lenient, "--db", db, "--run", "nope")
    assert missing.exit_code == 2 and "no run 'nope'" in missing.stderr


# -- clean errors: one line, the right exit code ---------------------------------------


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs mounted for the test (a disk that fills up); needs root."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        unavailable(f"cannot mount a tmpfs ({done.stderr.strip()}): needs root")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


def fill(folder: Path, leave: int = 0) -> None:
    """Fill the file system of *folder* until at most *leave* bytes are free."""
    with (folder / "filler").open("wb") as handle:
        while True:
            free = shutil.disk_usage(folder).free
            if free <= leave:
                return
            try:
                handle.write(b"\0" * min(65536, free - leave))
                handle.flush()
            except OSError:
                return


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("-3", "Invalid value for '--limit': -3 is not in the range x>=1."),
        ("x", "Invalid value for '--limit': 'x' is not a valid int range."),
    ],
)
def test_bad_limit_is_one_line(tmp_path: Path, value: str, message: str) -> None:
    result = invoke("audit", "--limit", value, "--db", tmp_path / "f.duckdb")
    assert result.exit_code == 2
    assert result.stderr == f"error: root audit: {message}\n"
    assert not (tmp_path / "f.duckdb").exists()


def test_unknown_option_is_one_line() -> None:
    result = invoke("runs", "--colour")
    assert result.exit_code == 2
    assert result.stderr == "error: root runs: No such option: --colour\n"


def test_a_file_that_is_not_a_database_is_a_usage_error(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database at all\n" * 100)
    for command in (["runs"], ["report", "-o", str(tmp_path / "r.html")]):
        result = invoke(*command, "--db", notes)
        assert result.exit_code == 2, result.output
        assert result.stderr == (
            f"error: {notes}: not a DuckDB database (pass --db with a fidelity database, "
            "or a new file name)\n"
        )
    assert notes.read_text() == "not a database at all\n" * 100  # nothing overwritten


def test_a_locked_database_is_an_infrastructure_error(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_DB, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "holding\n"
        result = invoke("runs", "--db", db)
    finally:
        holder.communicate("")
    assert result.exit_code == 3
    assert result.stderr == (
        f"error: {db}: in use by another process (PID {holder.pid}), which holds its lock: "
        "wait for it to end, or pass another --db\n"
    )


HOLD_DB = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])
con.execute("CREATE TABLE t (x INTEGER)")
print("holding", flush=True)
sys.stdin.read()
"""


@pytest.mark.bwrap
def test_an_unwritable_report_is_one_line_and_keeps_the_run(
    tmp_path: Path, tiny_tmpfs: Path, bwrap: None
) -> None:
    db = tmp_path / "f.duckdb"
    audited = invoke(
        "audit",
        "--limit",
        "1",
        "--sim-baseline",
        "copy",
        "--db",
        db,
        "--report",
        tmp_path / "a.html",
    )
    assert audited.exit_code == 0, audited.output
    fill(tiny_tmpfs)
    report = tiny_tmpfs / "report.html"
    result = invoke("report", "--db", db, "-o", report)
    assert result.exit_code == 3
    assert result.stderr.startswith("error: ") and result.stderr.endswith(
        ": No space left on device\n"
    )
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    assert not report.exists() and sorted(p.name for p in tiny_tmpfs.iterdir()) == ["filler"]
    denied = invoke("report", "--db", db, "-o", tmp_path / "a.html" / "r.html")
    assert denied.exit_code == 2
    assert denied.stderr == f"error: {tmp_path / 'a.html'}: File exists\n"  # a file, not a folder
    assert json.loads(invoke("runs", "--db", db, "--json").stdout)[0]["status"] == "done"


@pytest.mark.bwrap
def test_disk_full_mid_run_is_one_line_and_keeps_what_was_stored(
    tmp_path: Path, tiny_tmpfs: Path, bwrap: None
) -> None:
    db = tiny_tmpfs / "f.duckdb"
    big = "head -c 60000 /dev/zero | tr '\\0' a; echo"
    suite = tmp_path / "big.jsonl"
    write_trajectories(suite, [command_trajectory(f"t{i}", big) for i in range(3)])
    common = ["--sim-baseline", "copy", "--db", db, "--report", tmp_path / "a.html"]
    first = invoke("audit", suite, "--limit", "1", "--run-id", "r1", *common)
    assert first.exit_code == 0, first.output
    fill(tiny_tmpfs, leave=32 * 1024)  # room for the run's row, not for a 120 KB trajectory
    result = invoke("audit", suite, "--run-id", "r2", *common)
    assert result.exit_code == 3, result.output
    assert result.stderr.startswith(f"error: {db}: cannot write to the database (")
    assert "No space left on device" in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.output
    (tiny_tmpfs / "filler").unlink()
    runs = {r["run_id"]: r for r in json.loads(invoke("runs", "--db", db, "--json").stdout)}
    assert runs["r1"]["status"] == "done" and runs["r1"]["steps"] == 1
    # The disk filled up at r2's start or at its first trajectory (where exactly depends on
    # how many pages DuckDB writes for the run's row): either way no partial trajectory.
    assert "r2" not in runs or (
        runs["r2"]["steps"] == 0 and runs["r2"]["status"] in {"interrupted", "running"}
    )


def test_a_run_whose_owner_was_killed_shows_as_dead(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    killed = subprocess.run([sys.executable, "-c", START_AND_DIE, str(db)], check=False)
    assert killed.returncode == -signal.SIGKILL
    result = invoke("runs", "--db", db, "--json")
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)
    assert (run["run_id"], run["status"]) == ("killed", "dead")
    assert run["owner_host"] == socket.gethostname() and isinstance(run["owner_pid"], int)
    table = invoke("runs", "--db", db)
    assert table.exit_code == 0 and " dead " in table.stdout


START_AND_DIE = """
import os, signal, sys
from fidelity.store import Store
info = {"domain": "terminal", "sandbox": "local", "world_model": {"backend": "copy"},
        "mode": "teacher-forced", "suite": "s.jsonl", "suite_digest": "d", "code_version": "v"}
with Store(sys.argv[1]) as store:
    store.start_run("killed", info)
    store.connection.execute("CHECKPOINT")
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.bwrap
def test_a_world_model_outage_fails_the_gate(
    tmp_path: Path, fake_llm: FakeLLM, bwrap: None
) -> None:
    """Every request answered 429: 0% drift and a "full" horizon must not pass."""
    fake_llm.default = Reply.http(429)
    db, policy = tmp_path / "f.duckdb", tmp_path / "gate.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.5\n")
    audited = invoke(
        "audit",
        "--limit",
        "1",
        "--db",
        db,
        "--report",
        tmp_path / "r.html",
        "--policy",
        policy,
        "--sim-url",
        fake_llm.url,
        "--sim-model",
        MODEL,
        "--no-sim-cache",
        "--sim-timeout",
        "0.5",  # each request gives up after 0.5 s of 429s and backoff
    )
    assert audited.exit_code == 1, audited.output
    assert "gate: FAIL" in audited.stdout
    # one trajectory bounds nothing: its limits stay undecided, which fails the gate too
    assert "? infra_failure_rate <= 0.05: 1 [0, 1] undecided" in audited.stdout
    assert "? drift_rate <= 0.5: none (nothing compared) [0, 1] undecided (" in audited.stdout
    assert "✗ compared_steps >= 1: 0" in audited.stdout
    gated = invoke("gate", "--policy", policy, "--db", db, "--json")
    assert gated.exit_code == 1
    verdict = json.loads(gated.stdout)
    assert verdict["status"] == "fail"
    failed = {c["name"] for c in verdict["checks"] if not c["passed"]}
    # nothing was compared: the drift limit has no figure to pass on either
    assert failed == {
        "drift_rate <= 0.5",
        "infra_failure_rate <= 0.05",
        "unverifiable_rate <= 0.05",
        "compared_steps >= 1",
    }


def test_ray_results_need_the_ray_executor(tmp_path: Path) -> None:
    db = tmp_path / "f.duckdb"
    for args, message in (
        (("--ray-results", "parquet"), "--ray-results needs --executor ray"),
        (("--ray-results", "json", "--executor", "ray"), "choose driver or parquet"),
        (("--ray-results-dir", tmp_path, "--executor", "ray"), "needs --ray-results parquet"),
    ):
        result = invoke("audit", "--db", db, *args)
        assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
        assert message in result.stderr
    assert not db.exists()


def _float_options() -> list[tuple[list[str], str]]:
    """Every float option of every command: (the command's words, the option's name).

    Read from the command tree Typer builds (its own vendored Click: matched by name)."""
    import typer.main

    found: list[tuple[list[str], str]] = []

    def walk(command: Any, words: list[str]) -> None:
        if hasattr(command, "list_commands"):  # a group, its commands loaded lazily too
            context = type(command).context_class(command)
            for name in command.list_commands(context):
                walk(command.get_command(context, name), [*words, name])
            return
        for param in command.params:
            kinds = {kind.__name__ for kind in type(param.type).__mro__}
            if param.param_type_name == "option" and "FloatParamType" in kinds:
                found.append((words, param.opts[0]))

    walk(typer.main.get_command(app), [])
    return found


FLOAT_OPTIONS = _float_options()


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
@pytest.mark.parametrize(("words", "option"), FLOAT_OPTIONS, ids=lambda x: str(x))
def test_no_float_option_takes_nan_or_infinity(words: list[str], option: str, value: str) -> None:
    """``nan`` passes every range check: each float option refuses it (and the
    infinities) itself, naming the option, before anything else is read."""
    result = invoke(*words, option, value)
    assert result.exit_code == 2, (result.stdout, result.stderr)
    last = result.stderr.strip().splitlines()[-1]
    assert f"Invalid value for '{option}'" in last, last
    assert "not a finite number" in last or "not in the range" in last, last


def test_the_float_options_are_found() -> None:
    assert len(FLOAT_OPTIONS) >= 7, FLOAT_OPTIONS  # the walk reaches every command


@pytest.mark.parametrize(
    "command",
    [["replay"], ["simulate", "--sim-baseline", "copy"], ["import", "verl"]],
    ids=["replay", "simulate", "import"],
)
def test_an_output_that_is_the_input_is_refused_and_the_input_kept(
    tmp_path: Path, command: list[str]
) -> None:
    """``simulate real.jsonl -o real.jsonl`` would have replaced every real observation."""
    data = tmp_path / "real.jsonl"
    write_trajectories(data, [command_trajectory("t1", "echo hi")])
    before = data.read_bytes()
    same = tmp_path / "link.jsonl"  # the same file by another path
    same.symlink_to(data)
    result = invoke(*command, data, "-o", same)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"error: -o {same} is the input {data}: write to another file (the input would be "
        "replaced)\n"
    )
    assert data.read_bytes() == before


@pytest.mark.bwrap
def test_no_output_replaces_the_database(tmp_path: Path, bwrap: None) -> None:
    """``report -o fidelity.duckdb`` replaced every stored run with a page; ``audit --report``
    the same as ``--db`` would have done it after the audit. Each is refused in one line."""
    db = tmp_path / "f.duckdb"
    audited = invoke("audit", "--limit", "1", "--sim-baseline", "copy", "--db", db)
    assert audited.exit_code == 0, audited.output
    stored = db.read_bytes()
    refused = {
        ("report", "--db", db, "-o", db): f"error: {db} is a DuckDB database: write to "
        "another file (it would be replaced)\n",
        ("audit", "--limit", "1", "--sim-baseline", "copy", "--db", tmp_path / "new.duckdb",
         "--report", tmp_path / "new.duckdb"): f"error: --report {tmp_path / 'new.duckdb'} is "
        "the database --db: write the report to another file\n",
    }  # fmt: skip
    for args, line in refused.items():
        result = invoke(*args)
        assert (result.exit_code, result.stderr) == (2, line), args
    assert db.read_bytes() == stored
    assert not (tmp_path / "new.duckdb").exists()  # refused before anything was stored
