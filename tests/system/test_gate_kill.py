"""``fidelity gate DATASET`` stopped in its output phase: SIGKILL, SIGINT or SIGTERM at each
named point (``FIDELITY_GATE_PAUSE``), then the next gate: one gate's complete outputs under
its manifest, and nothing hidden left behind."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.formats.jsonl import write_trajectories
from fidelity.gate_outputs import PAUSE_ENV
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory
from tests.test_cli import fill, tiny_tmpfs  # noqa: F401 (a fixture)

HANG_GUARD = 300  # seconds: a hang guard, not a speed requirement
NAMES = ("admitted", "quarantined", "decisions")


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """Two one-step trajectories: one the real replay matches, one it does not."""
    trajectories = [
        Trajectory(
            id=tid,
            domain="terminal",
            steps=[
                Step(
                    action=CommandAction(command="echo alpha"),
                    observation=Observation(text=text, exit_code=0),
                )
            ],
            source="sim",
            meta={"model": "toy-wm", "mode": "open-loop"},
        )
        for tid, text in (("good", "alpha\n"), ("bad", "ghost.txt: No such file\n"))
    ]
    path = tmp_path / "sim.jsonl"
    write_trajectories(path, trajectories)
    (tmp_path / "gate.toml").write_text("[default]\nmax_drift_rate = 0.9\n")
    return path


class Gate:
    """``python -m fidelity gate`` in a subprocess that stops at every named point of its
    output phase until the test lets it go on."""

    def __init__(self, dataset: Path, run_id: str, layout: str) -> None:
        folder = dataset.parent
        report_r, report_w = os.pipe()
        resume_r, self.resume = os.pipe()
        argv = [sys.executable, "-m", "fidelity", "gate", str(dataset), "--all"]
        argv += ["--policy", str(folder / "gate.toml"), "--db", str(folder / "f.duckdb")]
        argv += ["--run", run_id, "-o", str(folder / "out"), "--layout", layout]
        self.stderr_path = folder / f"{run_id}.stderr"
        with self.stderr_path.open("w") as stderr:
            self.proc = subprocess.Popen(
                argv,
                env={**os.environ, PAUSE_ENV: f"{report_w},{resume_r}"},
                pass_fds=(report_w, resume_r),
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                umask=0o022,
            )
        os.close(report_w)
        os.close(resume_r)
        self.points = os.fdopen(report_r, "r")

    def next_point(self) -> str | None:
        """The point the gate waits at (None: it ended)."""
        ready, _, _ = select.select([self.points], [], [], HANG_GUARD)
        assert ready, "the gate neither reached a point nor ended"
        line = self.points.readline()
        return line.rstrip("\n") or None

    def go_on(self) -> None:
        with contextlib.suppress(BrokenPipeError):  # it is gone
            os.write(self.resume, b"x")

    def run(
        self,
        stop_at: int | None = None,
        sig: int = signal.SIGKILL,
        at_recovered: Callable[[Gate], None] | None = None,
    ) -> tuple[list[str], int]:
        """Let it run, sending *sig* at its point number *stop_at* (0-based) and calling
        *at_recovered* while it waits at ``recovered``; returns the points passed and its
        exit code."""
        passed = []
        while (point := self.next_point()) is not None:
            passed.append(point)
            if point == "recovered" and at_recovered is not None:
                at_recovered(self)
            if len(passed) - 1 == stop_at:
                self.proc.send_signal(sig)
            self.go_on()
        code = self.proc.wait(HANG_GUARD)
        self.points.close()
        os.close(self.resume)
        return passed, code

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()


def one_gates_outputs(out: Path) -> str:
    """Check *out* holds one gate's complete outputs under its manifest and nothing else
    (no hidden entry); returns that gate's run id."""
    manifest = json.loads((out / "manifest.json").read_text())
    run_id = manifest["run_id"]
    joined = manifest["layout"] == "joined"
    paths = {name: Path(manifest[f"{name}_path"]) for name in NAMES}
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["manifest.json", *(p.name for p in paths.values())]
    )
    lines = {}
    for name, path in paths.items():
        assert path.parent == out and path.name == (f"{name}.jsonl" if joined else name)
        files = [path] if joined else sorted(path.iterdir())
        assert joined or [f.name for f in files] == ["part-000000.jsonl"]
        lines[name] = [json.loads(line) for f in files for line in f.read_text().splitlines()]
    counts = manifest["counts"]
    assert len(lines["decisions"]) == counts["trajectories"] == 2
    assert (len(lines["admitted"]), len(lines["quarantined"])) == (1, 1)
    assert counts["admitted"] == counts["quarantined"] == 1
    assert [row["meta"]["gate_run_id"] for row in lines["admitted"]] == [run_id]
    assert lines["quarantined"][0]["id"] == "bad"
    modes = {oct(p.stat().st_mode & 0o777) for p in out.iterdir() if p.is_file()}
    assert modes == {"0o644"}  # the manifest as the outputs (umask 022)
    return str(run_id)


INSTALL = re.compile(r"moved away |renamed (?!manifest)")  # the renames before the commit


def recovered(out: Path, run_id: str, killed_at: str | None) -> Callable[[Gate], None]:
    """What the next gate's recovery must have left: *run_id*'s outputs, and a notice of
    what a gate killed at *killed_at* left (None: nothing to say)."""

    def check(gate: Gate) -> None:
        assert one_gates_outputs(out) == run_id
        notice = [line for line in gate.stderr.splitlines() if "left by a stopped gate" in line]
        if killed_at is None or killed_at == "recovered":
            assert notice == []
        elif INSTALL.match(killed_at):
            assert len(notice) == 1, notice
            assert "restored the previous outputs from .gate-parts." in notice[0]
        else:
            assert len(notice) == 1 and re.search(r"removed \.gate-parts\.\w+$", notice[0])

    return check


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.usefixtures("bwrap")
def test_a_gate_stopped_anywhere_in_its_output_phase_leaves_one_gates_outputs(
    dataset: Path,
) -> None:
    """SIGKILL, SIGINT and SIGTERM at points all through the output phase, the renames
    included; the gates run one after the other, in both layouts, each checking (while it
    waits at ``recovered``) what the one before left."""
    out = dataset.parent / "out"
    points, code = Gate(dataset, "g0", "joined").run()
    assert code == 0 and one_gates_outputs(out) == "g0"
    points, code = Gate(dataset, "g1", "sharded").run()  # every point, outputs to replace
    assert code == 0 and one_gates_outputs(out) == "g1"
    assert points[:5] == ["recovered", "staged", "written", "journal", "moved away manifest.json"]
    assert [INSTALL.match(p) is not None for p in points[4:11]] == [True] * 7  # 4 out, 3 in
    assert points[11:] == ["renamed manifest.json", "installed"]
    commit = points.index("renamed manifest.json")
    kill, interrupt, terminate = signal.SIGKILL, signal.SIGINT, signal.SIGTERM
    plan = [(i, kill) for i in (1, 2, 3, 4, 6, 8, 10, 11, 12)]
    plan += [(1, interrupt), (3, terminate), (5, interrupt), (9, terminate), (11, interrupt)]
    plan += [(12, terminate)]
    last, check = "g1", recovered(out, "g1", None)
    for number, (index, sig) in enumerate(plan, start=2):
        run_id = f"g{number}"
        gate = Gate(dataset, run_id, "joined" if number % 2 else "sharded")
        passed, code = gate.run(index, sig, check)
        assert "Traceback" not in gate.stderr and len(passed) >= index + 1
        last = run_id if index >= commit else last
        if sig == signal.SIGKILL:
            assert code == -signal.SIGKILL and len(passed) == index + 1
            check = recovered(out, last, passed[-1])
            continue
        assert code == 130, gate.stderr
        assert one_gates_outputs(out) == last  # undone or committed: nothing left over
        check = recovered(out, last, None)


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.usefixtures("bwrap")
def test_a_full_disk_names_the_file_being_written(
    dataset: Path,
    tiny_tmpfs: Path,  # noqa: F811 (the fixture imported)
) -> None:
    """The report and the gate's outputs on a full disk: exit 3, one line naming the file
    (a write's ENOSPC names none), and nothing half-written left."""
    folder = dataset.parent
    gate = ["gate", str(dataset), "--all", "--policy", str(folder / "gate.toml")]
    gate += ["--db", str(folder / "f.duckdb")]
    runner = CliRunner()
    first = runner.invoke(app, [*gate, "--run", "g0", "-o", str(folder / "out")])
    assert first.exit_code == 0, first.output
    fill(tiny_tmpfs)
    report = tiny_tmpfs / "report.html"
    result = runner.invoke(app, ["report", "--db", str(folder / "f.duckdb"), "-o", str(report)])
    assert (result.exit_code, result.stderr) == (3, f"error: {report}: No space left on device\n")
    out = tiny_tmpfs / "out"
    result = runner.invoke(app, [*gate, "--run", "g1", "-o", str(out)])
    assert result.exit_code == 3, result.output
    part = r"\.gate-parts\.\w+/(admitted|quarantined|decisions)/part-000000\.jsonl"
    assert re.fullmatch(
        rf"error: {re.escape(str(out))}/{part}: No space left on device\n", result.stderr
    ), result.stderr
    assert sorted(p.name for p in tiny_tmpfs.iterdir()) == ["filler", "out"]
    assert list(out.iterdir()) == []


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.usefixtures("bwrap")
def test_the_gate_stores_the_datasets_observations_capped_as_audit_does(
    tmp_path: Path, db_path: Path
) -> None:
    """A 100,000-character simulated observation is stored cut at the audit's cap and
    flagged truncated; the output line keeps it whole."""
    from fidelity.compare.normalize import TRUNCATE_AT, truncate
    from fidelity.gate import GateOptions, gate_dataset, load_policy
    from fidelity.store import Store

    long = "".join(f"line {i:06d}\n" for i in range(9_000))  # 108,000 characters
    step = Step(action=CommandAction(command="echo alpha"), observation=Observation(text=long))
    path = tmp_path / "sim.jsonl"
    write_trajectories(path, [Trajectory(id="long", domain="terminal", steps=[step])])
    policy = tmp_path / "gate.toml"
    policy.write_text("[default]\nmax_drift_rate = 1.0\n")
    options = GateOptions(
        dataset=path, policy_path=policy, output_dir=tmp_path / "out", db=db_path, run_id="c"
    )
    manifest = gate_dataset(options, load_policy(policy))
    with Store(db_path, read_only=True) as store:
        rows = store.connection.execute(
            "SELECT side, text, truncated FROM observations WHERE run_id = 'c' ORDER BY side"
        ).fetchall()
    assert rows == [("real", "alpha\n", False), ("sim", truncate(long, TRUNCATE_AT)[0], True)]
    assert len(rows[1][1]) < TRUNCATE_AT + 100 < len(long)
    assert manifest.counts.quarantined == 1  # it drifts
    kept = json.loads(Path(manifest.quarantined_path).read_text())
    assert kept["steps"][0]["observation"]["text"] == long


@pytest.mark.parametrize("stopped", ["new ones moving in", "old ones moving out", "committed"])
def test_a_staging_folder_of_the_gate_before_the_journal_is_settled(
    tmp_path: Path, stopped: str
) -> None:
    """What the previous version's gate (no journal) left when killed: its previous outputs
    in ``replaced/`` come back unless its manifest was written; the staging folder goes."""
    from fidelity.gate_outputs import recover

    out = tmp_path / "out"
    replaced = out / ".gate-parts.old1" / "replaced"
    replaced.mkdir(parents=True)
    manifest = json.dumps({f"{n}_path": str(out / f"{n}.jsonl") for n in NAMES})
    old = {"manifest.json": manifest, **{f"{n}.jsonl": f"old {n}\n" for n in NAMES}}
    moved = list(old) if stopped != "old ones moving out" else ["manifest.json", "admitted.jsonl"]
    for name, text in old.items():
        (replaced / name if name in moved else out / name).write_text(text)
    if stopped != "old ones moving out":
        (out / "admitted.jsonl").write_text("new admitted\n")
        (out / "quarantined").mkdir()  # the new gate's other layout
    if stopped == "committed":
        (out / "manifest.json").write_text("new manifest\n")
    before = {p.name for p in out.iterdir() if not p.name.startswith(".")}
    notices: list[str] = []
    recover(out, notices.append)
    if stopped == "committed":
        assert {p.name for p in out.iterdir()} == before
        assert notices == [f"gate: {out}: left by a stopped gate: removed .gate-parts.old1"]
        return
    assert {p.name: p.read_text() for p in out.iterdir()} == old
    assert notices == [
        f"gate: {out}: left by a stopped gate: restored the previous outputs from .gate-parts.old1"
    ]
