"""``fidelity risk`` (and ``fidelity diff --run``): exact lines, one-line errors, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.formats.jsonl import write_trajectories
from fidelity.risk import prior_model, step_features, trajectory_risk
from fidelity.risk_data import fit_on_run
from fidelity.store import Store
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory

runner = CliRunner()


def invoke(*args: str | Path):  # type: ignore[no-untyped-def]
    return runner.invoke(app, [str(a) for a in args])


def terminal(trajectory_id: str, *steps: tuple[str, str], source: str = "sim") -> Trajectory:
    return Trajectory(
        id=trajectory_id,
        domain="terminal",
        source=source,  # type: ignore[arg-type]
        steps=[
            Step(action=CommandAction(command=c), observation=Observation(text=t, exit_code=0))
            for c, t in steps
        ],
    )


SIM = [
    terminal("t-1", ("ls", "README.md\nsrc\n"), ("cat README.md", "# Demo\nversion 1.2\n")),
    terminal("t-2", ("python run.py", "Result: 42 rows\nuser@box:~$ ls\n")),
]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    path = tmp_path / "sim.jsonl"
    write_trajectories(path, SIM)
    return path


def expected_lines(trajectories: list[Trajectory], risks: list[list[float]]) -> str:
    """The JSON lines ``fidelity risk --format jsonl`` prints for these step risks."""
    out = []
    for t, steps in zip(trajectories, risks, strict=True):
        for depth, risk in enumerate(steps, start=1):
            out.append({"trajectory_id": t.id, "step": depth, "risk": round(risk, 6)})
        out.append({"trajectory_id": t.id, "step": None, "risk": round(trajectory_risk(steps), 6)})
    return "".join(json.dumps(line) + "\n" for line in out)


def test_jsonl_lines_with_the_prior(dataset: Path) -> None:
    result = invoke("risk", dataset, "--format", "jsonl")
    assert result.exit_code == 0, result.output
    risks = [prior_model().score(step_features(t)) for t in SIM]
    assert result.stdout == expected_lines(SIM, risks)
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(line["trajectory_id"], line["step"]) for line in lines] == [
        ("t-1", 1),
        ("t-1", 2),
        ("t-1", None),
        ("t-2", 1),
        ("t-2", None),
    ]
    assert all(0 < line["risk"] < 1 for line in lines)
    assert result.stderr.startswith("risk model: the shipped prior (fitted on ")


def test_table_and_its_summary(dataset: Path) -> None:
    result = invoke("risk", dataset)
    assert result.exit_code == 0, result.output
    risks = [prior_model().score(step_features(t)) for t in SIM]
    first, second = (trajectory_risk(r) for r in risks)
    worst = max(range(2), key=lambda i: risks[0][i])
    mean_step = sum(map(sum, risks)) / 3
    assert result.stdout.splitlines() == [
        f"{'trajectory':<40} steps   risk  riskiest step",
        f"{'t-1':<40}     2 {first:>6.3f}  {worst + 1} ({risks[0][worst]:.3f})",
        f"{'t-2':<40}     1 {second:>6.3f}  1 ({risks[1][0]:.3f})",
        f"2 trajectories, 3 steps: mean step risk {mean_step:.3f}, mean trajectory risk "
        f"{(first + second) / 2:.3f}; {(first >= 0.5) + (second >= 0.5)} at risk >= 0.5",
    ]


def test_json_summary(dataset: Path) -> None:
    result = invoke("risk", dataset, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["trajectories"], summary["steps"], summary["model"]["folds"]) == (2, 3, None)
    assert summary["model"]["steps"] == prior_model().fitted.steps


def test_fitted_on_a_stored_diff_run(tmp_path: Path, dataset: Path) -> None:
    real = [
        terminal("t-1", ("ls", "README.md\nsrc\n"), ("cat README.md", "# Demo\nversion 1.3\n")),
        terminal("t-2", ("python run.py", "Result: 41 rows\n")),
        terminal("t-3", ("ls", "a\n"), ("pwd", "/w\n")),
    ]
    sim = [*SIM, terminal("t-3", ("ls", "a\n"), ("pwd", "/w\n"))]
    write_trajectories(tmp_path / "real.jsonl", real)
    write_trajectories(tmp_path / "all.jsonl", sim)
    db = tmp_path / "runs.duckdb"
    stored = invoke(
        "diff", tmp_path / "real.jsonl", tmp_path / "all.jsonl", "--db", db, "--run", "r1"
    )
    assert stored.exit_code == 0, stored.output
    assert "stored as run r1 in" in stored.stderr
    result = invoke("risk", tmp_path / "all.jsonl", "--db", db, "--run", "r1", "--format", "jsonl")
    assert result.exit_code == 0, result.output
    with Store(db, read_only=True) as store:
        crossed = fit_on_run(store, "r1")
    # every dataset trajectory was fitted on: each is scored by the fold that did not see it
    risks = [crossed.model_for(t.id).score(step_features(t)) for t in sim]
    assert all(crossed.model_for(t.id) is not crossed.full for t in sim)
    assert result.stdout == expected_lines(sim, risks)
    assert result.stderr == (
        "risk model: fitted on run r1: 5 compared steps, 2 drifted, 3 trajectories, "
        "cross-fitted in 3 folds\n"
    )


def test_a_run_with_no_comparisons_is_one_line_and_exit_2(tmp_path: Path, dataset: Path) -> None:
    db = tmp_path / "empty.duckdb"
    info = {"domain": "terminal", "sandbox": "local", "world_model": {"backend": "copy"},
            "mode": "open-loop", "suite": "s.jsonl", "suite_digest": "d", "code_version": "v"}  # fmt: skip
    with Store(db) as store:
        store.start_run("empty", info)
    result = invoke("risk", dataset, "--db", db, "--run", "empty")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr == (
        f"error: run 'empty' in {db} has no comparisons to fit the drift risk on (audit, "
        "gate or `fidelity diff --db` a dataset first)\n"
    )
    missing = invoke("risk", dataset, "--db", db, "--run", "nope")
    assert (missing.exit_code, missing.stderr) == (2, f"error: run 'nope' not found in {db}\n")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--format", "jsonl", "--json"), "--json summarizes the table; --format jsonl prints "
         "JSON lines already"),
        (("--format", "csv"), "--format 'csv': choose table or jsonl"),
    ],
)  # fmt: skip
def test_bad_options_are_one_line_and_exit_2(
    dataset: Path, args: tuple[str, ...], message: str
) -> None:
    result = invoke("risk", dataset, *args)
    assert (result.exit_code, result.stdout, result.stderr) == (2, "", f"error: {message}\n")


def test_a_bad_dataset_line_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x", "domain": "terminal", "steps": []}\n', encoding="utf-8")
    result = invoke("risk", bad)
    assert result.exit_code == 2
    assert result.stderr.splitlines()[-1].startswith(f"error: {bad}:1: steps")


def test_an_empty_dataset_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """As the gate says it: scoring nothing is not a dataset at risk 0."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    result = invoke("risk", empty, "--json")
    assert (result.exit_code, result.stdout) == (2, "")
    assert result.stderr.splitlines()[-1] == f"error: {empty}: no trajectories in dataset"


def test_diff_run_needs_db(tmp_path: Path, dataset: Path) -> None:
    result = invoke("diff", dataset, dataset, "--run", "r1")
    assert (result.exit_code, result.stderr) == (
        2,
        "error: --run names the run stored with --db: give --db too\n",
    )
