"""Unverifiable trajectories end to end: counted, stored, reported, decided, bounded by policy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fidelity.analysis.summary import summarize
from fidelity.cli import app
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.gate import Policy
from fidelity.sandboxes.images import ensure_image
from fidelity.sandboxes.pool import close_pools
from fidelity.store import Store
from fidelity.trajectory import CommandAction, EnvSpec, Observation, Step, Trajectory
from tests.runs import judged, tally

MISSING = "fidelity-no-such-image:never"
WORDS = ["alpha", "beta", "gamma"]


def _failed(policy: Policy, trajectories: int, unverifiable: int) -> list[str]:
    """The failed checks of a run of *trajectories* faithful ones, *unverifiable* of them."""
    tallies = [tally(i, 3, unverifiable=i < unverifiable) for i in range(trajectories)]
    return [c.name for c in judged(tallies, policy).checks if not c.passed]


def test_the_unverifiable_rate_is_bounded_by_default() -> None:
    policy = Policy.model_validate({"default": {"max_drift_rate": 0.1}})
    assert _failed(policy, 1000, 20) == []  # 2%: its upper bound under 5%
    assert _failed(policy, 1000, 100) == ["unverifiable_rate <= 0.05"]  # 10%: over


def test_the_unverifiable_limit_is_per_domain_and_kept_out_of_the_infra_rate() -> None:
    policy = Policy.model_validate(
        {
            "default": {"max_drift_rate": 0.1},
            "domains": {"terminal": {"max_unverifiable_rate": 0.5}},
        }
    )
    # a tenth of the trajectories lost: their steps do not count as infrastructure failures
    assert _failed(policy, 400, 40) == []
    assert _failed(policy, 400, 300) == ["unverifiable_rate <= 0.5"]
    assert Policy().for_domain("web").max_unverifiable_rate == 0.05


def _dataset(tmp_path: Path) -> Path:
    """Three trajectories on the --image default, one on its own image that cannot be had."""
    trajectories = [
        Trajectory(
            id=tid,
            domain="terminal",
            env=EnvSpec(backend="docker", image=image),
            steps=[
                Step(
                    action=CommandAction(command=f"echo {word}"),
                    observation=Observation(text=f"{word}\n", exit_code=0),
                )
                for word in WORDS
            ],
            source="sim",
            meta={"model": "toy-wm", "mode": "teacher-forced"},
        )
        for tid, image in [("ok-1", None), ("lost", MISSING), ("ok-2", None), ("ok-3", None)]
    ]
    path = tmp_path / "sim.jsonl"
    write_trajectories(path, trajectories)
    return path


def _gate(tmp_path: Path, dataset: Path, policy: str, run: str, image: str) -> tuple[int, str]:
    (tmp_path / f"{run}.toml").write_text(policy)
    result = CliRunner().invoke(
        app,
        [
            "gate", str(dataset), "--policy", str(tmp_path / f"{run}.toml"), "--all",
            "--sandbox", "docker", "--image", image, "--db", str(tmp_path / "f.duckdb"),
            "--run", run, "-o", str(tmp_path / run),
        ],
    )  # fmt: skip
    close_pools()
    return result.exit_code, result.output


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.docker
def test_a_dataset_gate_decides_an_unverifiable_trajectory(docker: None, tmp_path: Path) -> None:
    dataset, image = _dataset(tmp_path), ensure_image("terminal")
    code, output = _gate(tmp_path, dataset, "[default]\nmax_drift_rate = 0.1\n", "over", image)
    assert code == 1, output
    assert "✗ unverifiable_rate <= 0.05: 0.25" in output
    assert "quarantined 1 (1 unverifiable)" in output
    out = tmp_path / "over"
    decisions = {d["trajectory_id"]: d for d in _lines(out / "decisions.jsonl")}
    lost = decisions["lost"]
    assert lost["outcome"] == "unverifiable" and lost["cause"] == "unverifiable"
    assert not lost["verified"] and lost["steps_kept"] == 0
    assert MISSING in str(lost["reason"]) and "--pull pulls it" in str(lost["reason"])
    assert [decisions[t]["outcome"] for t in ("ok-1", "ok-2", "ok-3")] == ["admitted"] * 3
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"]["unverifiable"] == 1
    assert manifest["counts"]["quarantined"] == 1 and manifest["counts"]["sampled"] == 4
    assert "lost" not in {t.id for t in read_trajectories(out / "admitted.jsonl")}
    quarantined = {t.id: t.meta for t in read_trajectories(out / "quarantined.jsonl")}
    assert quarantined["lost"]["quarantine_reason"] == "unverifiable"

    code, output = _gate(
        tmp_path, dataset, "[default]\nmax_drift_rate = 0.1\nmax_unverifiable_rate = 0.3\n",
        "under", image,
    )  # fmt: skip
    assert code == 0, output
    admitted = [t.id for t in read_trajectories(tmp_path / "under" / "admitted.jsonl")]
    assert admitted == ["ok-1", "ok-2", "ok-3"]  # the unverifiable one is never admitted
    decided = {d["trajectory_id"]: d["outcome"] for d in _lines(tmp_path / "under/decisions.jsonl")}
    assert decided["lost"] == "unverifiable"

    with Store(tmp_path / "f.duckdb", read_only=True) as store:
        summary = summarize(store, "under")
    assert summary.totals.unverifiable == 1 and summary.totals.unverifiable_steps == 3
    assert [(u.trajectory_id, MISSING in u.reason) for u in summary.unverifiable] == [
        ("lost", True)
    ]
    report = tmp_path / "report.html"
    result = CliRunner().invoke(
        app, ["report", "--db", str(tmp_path / "f.duckdb"), "--run", "under", "-o", str(report)]
    )
    assert result.exit_code == 0, result.output
    html = report.read_text()
    assert 'id="unverifiable"' in html and "<code>lost</code>" in html
    assert MISSING in html and "--pull pulls it" in html


@pytest.mark.docker
def test_audit_and_replay_json_count_unverifiable_trajectories(
    docker: None, tmp_path: Path
) -> None:
    suite, image = _dataset(tmp_path), ensure_image("terminal")
    db = tmp_path / "a.duckdb"
    runner = CliRunner()
    audited = runner.invoke(
        app,
        [
            "audit", str(suite), "--sandbox", "docker", "--image", image, "--db", str(db),
            "--sim-baseline", "copy", "--report", str(tmp_path / "r.html"), "--json",
        ],
    )  # fmt: skip
    close_pools()
    assert audited.exit_code == 0, audited.output
    summary = json.loads(audited.stdout)["summary"]
    assert summary["totals"]["unverifiable"] == 1
    assert [u["trajectory_id"] for u in summary["unverifiable"]] == ["lost"]
    replayed = runner.invoke(
        app,
        [
            "replay", str(suite), "-o", str(tmp_path / "real.jsonl"), "--sandbox", "docker",
            "--image", image, "--json",
        ],
    )  # fmt: skip
    close_pools()
    assert replayed.exit_code == 0, replayed.output
    result = json.loads(replayed.stdout)
    assert list(result["unverifiable"]) == ["lost"] and MISSING in result["unverifiable"]["lost"]
    own = {t.id: t.env.image for t in read_trajectories(tmp_path / "real.jsonl")}
    assert own == {"ok-1": image, "lost": MISSING, "ok-2": image, "ok-3": image}


def test_a_malformed_image_option_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["replay", str(_dataset(tmp_path)), "-o", str(tmp_path / "o.jsonl"), "--image", "-x"]
    )
    assert result.exit_code == 2
    assert "--image '-x' is not an image reference" in result.output
