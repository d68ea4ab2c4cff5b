"""``fidelity gate DATASET.jsonl``: real replays, per-trajectory horizons, outputs that add up."""

from __future__ import annotations

import json
import os
from pathlib import Path
from xml.etree import ElementTree

import numpy as np
import pytest
from typer.testing import CliRunner, Result

from fidelity.cli import app
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.gate.design import MixtureDesign
from fidelity.gate.sample import plan
from fidelity.store import Store
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory

COMMANDS = ["echo alpha", "echo beta", "echo gamma", "echo delta"]


def _dataset(tmp_path: Path, drift_from: dict[str, int | None]) -> Path:
    """A simulated dataset: correct observations until ``drift_from[id]`` (1-based), then wrong."""
    trajectories = []
    for tid, first_bad in drift_from.items():
        steps = []
        for depth, command in enumerate(COMMANDS, start=1):
            word = command.split()[1]
            wrong = first_bad is not None and depth >= first_bad
            text = f"ghost_{word}.txt: No such file or directory\n" if wrong else f"{word}\n"
            steps.append(
                Step(
                    action=CommandAction(command=command),
                    observation=Observation(text=text, exit_code=1 if wrong else 0),
                )
            )
        trajectories.append(
            Trajectory(
                id=tid,
                domain="terminal",
                instruction="Echo the four words.",
                steps=steps,
                source="sim",
                meta={"model": "toy-wm", "mode": "open-loop", "prompts_hash": "abc123"},
            )
        )
    path = tmp_path / "sim.jsonl"
    write_trajectories(path, trajectories)
    return path


def _policy(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gate.toml"
    path.write_text(text)
    return path


@pytest.mark.bwrap
def test_gate_cuts_drifting_trajectories_at_their_horizon(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    dataset = _dataset(tmp_path, {"clean": None, "late": 3, "early": 1, "mid": 2})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.9\nmin_trust_horizon = 1\n")
    out = tmp_path / "out"
    junit = tmp_path / "gate.xml"
    result = CliRunner().invoke(
        app,
        [
            "gate",
            str(dataset),
            "--policy",
            str(policy),
            "--all",
            "--cut-at-horizon",
            "--db",
            str(db_path),
            "--run",
            "g1",
            "-o",
            str(out),
            "--junit",
            str(junit),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["trajectories"] == counts["admitted"] + counts["quarantined"] == 4
    assert (counts["admitted"], counts["admitted_cut"], counts["quarantined"]) == (3, 2, 1)
    admitted = {t.id: t for t in read_trajectories(out / "admitted.jsonl")}
    assert {tid: len(t.steps) for tid, t in admitted.items()} == {"clean": 4, "late": 2, "mid": 1}
    assert admitted["late"].meta["cut_at"] == 2 and admitted["late"].meta["gate_run_id"] == "g1"
    quarantined = read_trajectories(out / "quarantined.jsonl")
    assert [t.id for t in quarantined] == ["early"] and len(quarantined[0].steps) == 4
    assert counts["steps_admitted"] == 4 + 2 + 1
    assert manifest["world_models"] == [{"model": "toy-wm", "mode": "open-loop"}]
    assert manifest["prompts_hashes"] == ["abc123"] and manifest["run_id"] == "g1"
    assert manifest["thresholds"]["max_drift_rate"] == 0.9
    with Store(db_path, read_only=True) as store:
        stored = store.connection.execute(
            "SELECT count(*), sum(drift::INT) FROM comparisons WHERE run_id = 'g1'"
        ).fetchone()
    assert stored == (16, 3 + 2 + 4)
    suite = ElementTree.parse(junit).getroot()
    # the policy's two limits, the default infrastructure limit, "some compared step"
    assert suite.get("failures") == "0" and len(suite.findall("testcase")) == 5


@pytest.mark.bwrap
def test_gate_fails_quarantines_unverified_and_writes_junit_failure(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    drift = {f"t{i}": (1 if i % 2 else None) for i in range(6)}
    dataset = _dataset(tmp_path, drift)
    policy = _policy(
        tmp_path, "[default]\nmax_drift_rate = 0.1\n[default.warn]\nmin_steps = 1000\n"
    )
    out, junit = tmp_path / "out", tmp_path / "junit.xml"
    args = ["gate", str(dataset), "--policy", str(policy), "--sample", "2", "--db", str(db_path)]
    result = CliRunner().invoke(app, [*args, "-o", str(out), "--junit", str(junit)])
    assert result.exit_code == 1, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    counts = manifest["counts"]
    assert counts["sampled"] == manifest["replayed_trajectories"] <= 2  # two draws
    assert counts["admitted_unverified"] == 0
    assert counts["admitted"] + counts["quarantined"] == 6
    assert manifest["verdict"]["status"] == "fail"
    severities = {c["severity"] for c in manifest["verdict"]["checks"]}
    assert severities == {"critical", "warning"}
    failures = ElementTree.parse(junit).getroot().findall("testcase/failure")
    # two draws decide nothing: every bounded limit is undecided, which fails it
    assert {f.get("type") for f in failures} == {"critical"}
    assert any("drift_rate <= 0.1" in str(f.get("message")) for f in failures)


def test_gate_usage_errors(tmp_path: Path, db_path: Path) -> None:
    dataset = _dataset(tmp_path, {"a": None})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.1\n")
    runner = CliRunner()
    both = runner.invoke(
        app, ["gate", str(dataset), "--policy", str(policy), "--all", "--sample", "3"]
    )
    assert both.exit_code == 2 and "exclusive" in both.output
    no_dataset = runner.invoke(
        app, ["gate", "--policy", str(policy), "--all", "--db", str(db_path)]
    )
    assert no_dataset.exit_code == 2 and "DATASET" in no_dataset.output
    no_policy = runner.invoke(app, ["gate", str(dataset)])
    assert no_policy.exit_code == 2 and "--policy" in no_policy.output
    actions_only = tmp_path / "suite.jsonl"
    actions_only.write_text(
        json.dumps(
            {
                "id": "x",
                "domain": "terminal",
                "steps": [{"action": {"type": "command", "command": "ls"}}],
            }
        )
        + "\n"
    )
    missing = runner.invoke(
        app, ["gate", str(actions_only), "--policy", str(policy), "--db", str(db_path)]
    )
    assert missing.exit_code == 2 and "x.steps.1.observation" in missing.output
    assert not db_path.exists()


def test_the_plan_draws_by_seed_and_stops_at_the_replay_budget() -> None:
    """Draws are i.i.d. from the design, the same however they are split; a sequential plan
    ends once it reaches max_replays distinct trajectories (or all of a small dataset)."""
    lengths = np.array([2] * 90 + [30] * 10)
    design = MixtureDesign(lengths)
    fixed = plan(design, seed=1, draws=40, max_replays=1000)
    assert len(fixed) == 40 and fixed.tolist() == plan(design, 1, 40, 1000).tolist()
    assert fixed.tolist() != plan(design, 2, 40, 1000).tolist()
    # the long trajectories hold 62% of the steps: they are drawn far more than 10% of the time
    long_share = float((plan(design, 3, 4000, 1000) >= 90).mean())
    assert 0.30 < long_share < 0.42  # q = 0.5 * 0.625 + 0.5 * 0.1 = 0.3625
    sequential = plan(design, seed=1, draws=None, max_replays=25)
    assert len(set(sequential.tolist())) == 25 and sequential[-1] not in sequential[:-1]
    assert len(set(plan(design, seed=1, draws=None, max_replays=1000).tolist())) == 100


# -- a dataset is untrusted input: its paths stay inside the allowed roots ---------------


SECRET = "TOPSECRET-7f3a"


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A root-only host folder holding a secret, beside the dataset's folder."""
    secret = tmp_path / "host" / "secret"
    secret.mkdir(parents=True)
    (secret / "shadow").write_text(f"{SECRET}\n")
    (secret / "shadow").chmod(0o600)
    secret.chmod(0o700)
    return secret


def _hostile_dataset(tmp_path: Path, env: dict[str, object]) -> Path:
    folder = tmp_path / "data"
    folder.mkdir(exist_ok=True)
    dataset = _dataset(tmp_path, {"t1": None})
    line = json.loads(dataset.read_text())
    line["env"] = env
    path = folder / "sim.jsonl"
    path.write_text("// an untrusted dataset\n" + json.dumps(line) + "\n")
    return path


@pytest.mark.parametrize(
    ("env", "field", "raw"),
    [
        ({"workdir": "../host/secret"}, "env.workdir", "../host/secret"),
        ({"workdir": "{secret}"}, "env.workdir", "{secret}"),
        ({"setup": ["true", "@../host/secret/shadow"]}, "env.setup[1]", "../host/secret/shadow"),
        ({"setup": ["@{secret}/shadow"]}, "env.setup[0]", "{secret}/shadow"),
        ({"setup": ["@link/shadow"]}, "env.setup[0]", "link/shadow"),
    ],
)
def test_paths_outside_the_dataset_folder_are_refused(
    tmp_path: Path, planted: Path, env: dict[str, object], field: str, raw: str
) -> None:
    env = json.loads(json.dumps(env).replace("{secret}", str(planted)))
    raw = raw.replace("{secret}", str(planted))
    dataset = _hostile_dataset(tmp_path, env)
    (dataset.parent / "link").symlink_to(planted)  # a link inside that points outside
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.5\n")
    out, db = tmp_path / "out", tmp_path / "f.duckdb"
    result = CliRunner().invoke(
        app, ["gate", str(dataset), "--policy", str(policy), "--db", str(db), "-o", str(out)]
    )
    assert result.exit_code == 2
    resolved = planted / "shadow" if "setup" in field else planted
    assert result.stderr == (
        f"error: {dataset}:2: {field}: {raw!r} resolves to {resolved}, outside the allowed "
        f"roots ({dataset.parent}); pass --allow-root DIR to allow another folder\n"
    )
    assert SECRET not in result.output
    assert not db.exists() and not out.exists()  # refused before anything was written


def test_allow_root_admits_a_named_folder(tmp_path: Path, planted: Path) -> None:
    from fidelity.pipeline import load_suite

    dataset = _hostile_dataset(
        tmp_path, {"workdir": str(planted), "setup": ["@../host/secret/shadow"]}
    )
    (trajectory,) = load_suite(dataset, allowed_roots=[planted])
    assert trajectory.env.workdir == str(planted)
    assert trajectory.env.setup == [f"@{planted / 'shadow'}"]
    missing = _hostile_dataset(tmp_path, {"setup": ["@nothing.sh"]})
    result = CliRunner().invoke(
        app, ["replay", str(missing), "-o", str(tmp_path / "r.jsonl"), "--allow-root", str(planted)]
    )
    assert result.exit_code == 2
    assert result.stderr == f"error: {missing}:2: env.setup[0]: 'nothing.sh': no such file\n"


@pytest.mark.bwrap
def test_a_failing_setup_file_is_not_echoed(tmp_path: Path, db_path: Path, bwrap: None) -> None:
    dataset = _hostile_dataset(tmp_path, {"setup": ["@notes.txt"]})
    (dataset.parent / "notes.txt").write_text(f"{SECRET} line one\n{SECRET} line two\n")
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.5\n")
    out = tmp_path / "out"
    args = ["gate", str(dataset), "--policy", str(policy), "--db", str(db_path), "-o", str(out)]
    result = CliRunner().invoke(app, [*args, "--all", "--json"])
    assert result.exit_code == 1, result.output  # nothing replayed: the gate fails
    assert SECRET not in result.output
    stored = Store(db_path, read_only=True)
    with stored:
        errors = stored.connection.execute("SELECT error FROM trajectories").fetchall()
        texts = stored.connection.execute("SELECT text, error FROM observations").fetchall()
    assert errors == [
        (
            f"SetupFailedError: setup command 1 ('@{dataset.parent / 'notes.txt'}') failed "
            "with exit code 127 (its output is not shown)",
        )
    ]
    assert SECRET not in json.dumps(texts)
    for path in out.iterdir():
        assert SECRET not in path.read_text()


@pytest.mark.bwrap
def test_gate_applies_the_compare_config(tmp_path: Path, db_path: Path, bwrap: None) -> None:
    """A ghost file the simulator invents stops drifting once a user rule normalizes it away."""
    dataset = _dataset(tmp_path, {"a": 2})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.9\n")
    rules = tmp_path / "compare.toml"
    rules.write_text(
        '[[normalize.rules]]\nname = "ghost"\n'
        'pattern = "ghost_(\\\\w+)\\\\.txt: No such file or directory"\nreplacement = "\\\\1"\n'
    )
    base = ["gate", str(dataset), "--policy", str(policy), "--all", "--db", str(db_path)]
    for run, extra in (("plain", []), ("ruled", ["--compare-config", str(rules)])):
        out = tmp_path / run
        result = CliRunner().invoke(app, [*base, "--run", run, "-o", str(out), *extra])
        assert result.exit_code == 0, result.output
    with Store(db_path, read_only=True) as store:
        rows = store.connection.execute(
            "SELECT run_id, sum(normalizations LIKE '%ghost%'::VARCHAR)::INT FROM comparisons "
            "GROUP BY run_id ORDER BY run_id"
        ).fetchall()
    assert rows == [("plain", 0), ("ruled", 3)]


@pytest.mark.bwrap
def test_the_gate_reports_the_progress_of_each_pass(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    """Three bars: trajectories read (total unknown), sampled ones replayed, all decided."""
    from fidelity.gate import GateOptions, gate_dataset, load_policy

    dataset = _dataset(tmp_path, {f"t{i}": None for i in range(5)})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.5\n")
    options = GateOptions(
        dataset=dataset, policy_path=policy, output_dir=tmp_path / "out", db=db_path, sample=2
    )
    heard: list[tuple[str, int]] = []
    gate_dataset(options, load_policy(policy), lambda phase, n: heard.append((phase, n)))
    opened = [(phase, n) for phase, n in heard if phase.startswith("total:")]
    replayed = dict(opened)["total:real"]
    assert 1 <= replayed <= 2  # two draws, with replacement
    assert opened == [("total:scan", 0), ("total:real", replayed), ("total:write", 5)]
    advanced: dict[str, int] = {}
    for phase, n in heard:
        if not phase.startswith("total:"):
            advanced[phase] = advanced.get(phase, 0) + n
    assert advanced == {"scan": 5, "real": replayed, "write": 5}


# -- the sharded layout: one file per input shard, renamed into place once all are written ------


def _shard_folder(tmp_path: Path) -> Path:
    """Six trajectories in three shards (one in a subfolder) of a folder ``data``."""
    lines = _dataset(tmp_path, {f"t{i}": (2 if i % 2 else None) for i in range(6)}).read_text()
    rows = lines.splitlines(keepends=True)
    data = tmp_path / "data"
    (data / "more").mkdir(parents=True)
    for name, part in (("a.jsonl", rows[:3]), ("b.jsonl", rows[3:4]), ("more/c.jsonl", rows[4:])):
        (data / name).write_text("".join(part))
    return data


def _outputs(out: Path) -> dict[str, bytes]:
    """Every file under *out* (relative name: bytes)."""
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}


@pytest.mark.bwrap
def test_the_sharded_layout_is_the_joined_files_cut_per_shard(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    """Into DATA/out, three times: joined, sharded, joined; nothing of a run is read back."""
    data = _shard_folder(tmp_path)
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.9\n")
    out = data / "out"
    args = ["gate", str(data), "--policy", str(policy), "--all"]
    args += ["--db", str(db_path), "--run", "g1", "-o", str(out), "--json"]
    manifests, files = [], []
    for layout in ("joined", "sharded", "joined"):
        result = CliRunner().invoke(app, [*args, "--layout", layout])
        assert result.exit_code == 0, result.output
        manifests.append(json.loads((out / "manifest.json").read_text()))
        files.append(_outputs(out))
    joined, sharded, again = files
    assert again == {**joined, "manifest.json": again["manifest.json"]}
    names = ("admitted", "quarantined", "decisions")
    assert sorted(joined) == sorted([f"{n}.jsonl" for n in names] + ["manifest.json"])
    parts = [f"part-{i:06d}.jsonl" for i in range(3)]
    assert sorted(sharded) == sorted([f"{n}/{p}" for n in names for p in parts] + ["manifest.json"])
    for name in names:
        cut = b"".join(sharded[f"{name}/{part}"] for part in parts)
        assert cut == joined[f"{name}.jsonl"] and cut.count(b"\n") > 0
    counts = [m["counts"] for m in manifests]
    assert counts[0] == counts[1] == counts[2] and counts[0]["trajectories"] == 6
    assert [m["layout"] for m in manifests] == ["joined", "sharded", "joined"]
    assert manifests[1]["admitted_path"] == str(out / "admitted")
    assert manifests[2]["decisions_path"] == str(out / "decisions.jsonl")


@pytest.mark.bwrap
@pytest.mark.parametrize("layout", ["joined", "sharded"])
def test_a_shard_failing_in_the_last_pass_leaves_the_previous_outputs(
    tmp_path: Path, db_path: Path, bwrap: None, layout: str
) -> None:
    """A shard that vanishes before pass 3 reads it: no new output, no staging folder left."""
    from fidelity.errors import NotFoundError
    from fidelity.gate import GateOptions, gate_dataset, load_policy

    data = _shard_folder(tmp_path)
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.9\n")
    options = GateOptions(
        dataset=data,
        policy_path=policy,
        output_dir=tmp_path / "out",
        db=db_path,
        run_id="g1",
        sample=2,
        layout=layout,
    )
    earlier = options.model_copy(update={"layout": "joined", "run_id": "g0"})  # other lines
    gate_dataset(earlier, load_policy(policy))
    before = _outputs(options.output_dir)

    def vanish(phase: str, n: int) -> None:
        if phase == "total:write":
            (data / "more" / "c.jsonl").unlink()

    with pytest.raises(NotFoundError, match=r"c\.jsonl: no such file"):
        gate_dataset(options, load_policy(policy), vanish)
    assert _outputs(options.output_dir) == before
    assert sorted(p.name for p in options.output_dir.iterdir()) == sorted(before)


@pytest.mark.bwrap
@pytest.mark.parametrize("renames", [0, 1, 3, 6])
def test_a_gate_stopped_between_its_renames_leaves_the_previous_outputs(
    tmp_path: Path, db_path: Path, bwrap: None, monkeypatch: pytest.MonkeyPatch, renames: int
) -> None:
    """A Ctrl-C while the outputs move into place (old ones out, new ones in): the renames
    done are undone, so the previous gate's outputs and manifest are there, as they were."""
    import fidelity.gate.write
    from fidelity.gate import GateOptions, gate_dataset, load_policy

    data = _shard_folder(tmp_path)
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.9\n")
    out = tmp_path / "out"
    options = GateOptions(
        dataset=data, policy_path=policy, output_dir=out, db=db_path, run_id="g1", sample=2
    )
    gate_dataset(options, load_policy(policy))
    before = _outputs(out)
    assert "manifest.json" in before
    done: list[str] = []
    replace = os.replace

    def stopped(source: str | Path, target: str | Path) -> None:
        into_or_out_of = out in (Path(source).parent, Path(target).parent)
        if into_or_out_of and len(done) == renames:
            done.append("stopped")
            raise KeyboardInterrupt  # once: the undo's renames go through
        if into_or_out_of:
            done.append(Path(target).name)
        replace(source, target)

    monkeypatch.setattr(fidelity.gate.write.os, "replace", stopped)
    sharded = options.model_copy(update={"layout": "sharded", "run_id": "g2"})
    with pytest.raises(KeyboardInterrupt):
        gate_dataset(sharded, load_policy(policy))
    assert "stopped" in done
    assert _outputs(out) == before
    assert sorted(p.name for p in out.iterdir()) == sorted(before)  # no staging folder left


def test_layout_needs_a_dataset_and_a_known_name(tmp_path: Path, db_path: Path) -> None:
    dataset = _dataset(tmp_path, {"a": None})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.1\n")
    base = ["gate", "--policy", str(policy), "--db", str(db_path)]
    no_dataset = CliRunner().invoke(app, [*base, "--layout", "sharded"])
    assert no_dataset.exit_code == 2 and "--layout needs a DATASET" in no_dataset.output
    unknown = CliRunner().invoke(app, [*base, str(dataset), "--layout", "split"])
    assert unknown.exit_code == 2 and "choose joined or sharded" in unknown.output
    assert not db_path.exists()


@pytest.mark.bwrap
def test_gate_to_writes_the_rl_formats_beside_the_jsonl(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    dataset = _dataset(tmp_path, {"clean": None, "late": 3})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.9\n")
    out = tmp_path / "out"
    base = ["gate", str(dataset), "--policy", str(policy), "--all", "--db", str(db_path)]
    result = CliRunner().invoke(
        app, [*base, "-o", str(out), "--to", "verl", "--to", "openrlhf", "--to", "verl", "--json"]
    )
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert sorted(manifest["rl_paths"]) == ["openrlhf", "verl"]
    admitted = [json.loads(line) for line in (out / "admitted.jsonl").read_text().splitlines()]
    rows = [
        json.loads(line) for line in Path(manifest["rl_paths"]["openrlhf"]).read_text().splitlines()
    ]
    assert len(rows) == len(admitted) > 0
    assert Path(manifest["rl_paths"]["verl"]).stat().st_size > 0


def test_gate_to_refuses_an_unknown_format_and_a_stored_run(tmp_path: Path, db_path: Path) -> None:
    dataset = _dataset(tmp_path, {"a": None})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.1\n")
    runner = CliRunner()
    unknown = runner.invoke(
        app, ["gate", str(dataset), "--policy", str(policy), "--to", "tfrecord"]
    )
    assert unknown.exit_code == 2
    assert "--to 'tfrecord': choose verl, skyrl, openrlhf, slime" in unknown.output
    stored = runner.invoke(
        app, ["gate", "--policy", str(policy), "--to", "verl", "--db", str(db_path)]
    )
    assert stored.exit_code == 2 and "--to needs a DATASET" in stored.output


# -- the drift risk of every line, and the trajectories never replayed above --max-risk -----


@pytest.mark.bwrap
def test_every_line_carries_its_risk_and_max_risk_quarantines_unreplayed_ones(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    drift = {f"t{i}": (2 if i % 3 == 0 else None) for i in range(12)}
    dataset = _dataset(tmp_path, drift)
    lenient = "max_infra_failure_rate = 1.0\nmax_unverifiable_rate = 1.0\n"
    policy = _policy(tmp_path, f"[default]\nmax_drift_rate = 1.0\n{lenient}")
    args = ["gate", str(dataset), "--policy", str(policy), "--sample", "4", "--db", str(db_path)]
    plain = CliRunner().invoke(app, [*args, "-o", str(tmp_path / "plain"), "--run", "plain"])
    assert plain.exit_code == 0, plain.output
    lines = [
        json.loads(line)
        for name in ("admitted.jsonl", "quarantined.jsonl")
        for line in (tmp_path / "plain" / name).read_text().splitlines()
    ]
    assert len(lines) == 12
    for line in lines:
        risk, steps = line["meta"]["risk"], line["meta"]["step_risks"]
        assert 0 < risk < 1 and len(steps) == len(COMMANDS)
        assert risk == pytest.approx(1 - np.prod([1 - r for r in steps]), abs=1e-5)
    decisions = [
        json.loads(line)
        for line in (tmp_path / "plain" / "decisions.jsonl").read_text().splitlines()
    ]
    assert all(d["risk"] is not None for d in decisions)
    # a threshold under every risk: what was never replayed is quarantined, cause "risk"
    strict = CliRunner().invoke(
        app, [*args, "-o", str(tmp_path / "strict"), "--run", "strict", "--max-risk", "0"]
    )
    assert strict.exit_code == 0, strict.output
    quarantined = read_trajectories(tmp_path / "strict" / "quarantined.jsonl")
    unreplayed = [t for t in quarantined if t.meta["quarantine_reason"] == "risk"]
    manifest = json.loads((tmp_path / "strict" / "manifest.json").read_text())
    assert len(unreplayed) == 12 - manifest["replayed_trajectories"] > 0
    assert manifest["counts"]["admitted_unverified"] == 0
    assert all("over --max-risk 0" in t.meta["quarantine_detail"] for t in unreplayed)


@pytest.mark.bwrap
def test_a_rerun_with_the_same_run_goes_on_from_the_stored_replays(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    """Draws depend only on the seed: a gate stopped after its first draws (here: a fixed
    sample of them) and run again with the same --run replays only the draws after them."""
    from fidelity.gate import GateOptions, gate_dataset, load_policy

    dataset = _dataset(tmp_path, {f"t{i}": None for i in range(30)})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.2\n")
    first = GateOptions(
        dataset=dataset, policy_path=policy, output_dir=tmp_path / "a", db=db_path,
        run_id="r", sample=5,
    )  # fmt: skip
    stopped = gate_dataset(first, load_policy(policy))
    heard: list[int] = []
    again = first.model_copy(update={"sample": "auto", "output_dir": tmp_path / "b"})
    resumed = gate_dataset(
        again, load_policy(policy), lambda phase, n: heard.append(n) if phase == "real" else None
    )
    assert resumed.replayed_trajectories > stopped.replayed_trajectories
    assert sum(heard) == resumed.replayed_trajectories - stopped.replayed_trajectories


def test_the_sampling_options_refuse_what_cannot_be_done_in_one_line(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path, {"a": None})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.1\n")
    gate = ["gate", str(dataset), "--policy", str(policy)]
    cases = {
        ("--sample", "auto", "--all"): (
            "error: --sample auto and --all are exclusive: --all replays every trajectory\n"
        ),
        ("--max-replays", "0"): "error: --max-replays 0: give at least 1\n",
        ("--sample", "many"): (
            "error: --sample 'many': give auto or a number of draws (at least 1)\n"
        ),
        ("--sample", "5", "--max-replays", "9"): (
            "error: --max-replays goes with --sample auto, not a fixed --sample N\n"
        ),
    }
    for args, line in cases.items():
        result = CliRunner().invoke(app, [*gate, *args])
        assert (result.exit_code, result.stderr) == (2, line), args
    bad = _policy(tmp_path, "[default]\nmax_drift_rate = 0.1\nconfidence = 1.0\n")
    refused = CliRunner().invoke(app, ["gate", str(dataset), "--policy", str(bad)])
    assert refused.exit_code == 2
    assert refused.stderr.startswith(f"error: {bad}: default.confidence: Input should be less")


@pytest.mark.bwrap
def test_the_gate_never_replaces_what_no_gate_wrote(
    tmp_path: Path, db_path: Path, bwrap: None
) -> None:
    """Its own outputs it replaces; a dataset gated into its own folder under an output's
    name, or a folder holding such names with no gate manifest, is refused before any
    replay, and every file there is as it was."""
    dataset = _dataset(tmp_path, {"a": None, "b": None})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.5\n")
    runner = CliRunner()

    def gate(data: Path, out: Path) -> Result:
        args = ["gate", str(data), "--policy", str(policy), "-o", str(out), "--all"]
        return runner.invoke(app, [*args, "--db", str(db_path)])

    own = tmp_path / "admitted.jsonl"  # a previous gate's admitted data, gated again
    own.write_bytes(dataset.read_bytes())
    again = gate(own, tmp_path)
    assert again.exit_code == 2, again.output
    assert again.stderr == (
        f"error: -o {tmp_path}: the gate would replace the dataset {own} with its own output "
        "admitted.jsonl; pass another -o\n"
    )
    assert own.read_bytes() == dataset.read_bytes()

    project = tmp_path / "project"
    project.mkdir()
    (project / "manifest.json").write_text('{"name": "my-project"}\n')
    foreign = gate(dataset, project)
    assert foreign.exit_code == 2
    assert foreign.stderr.startswith(f"error: -o {project} holds manifest.json, which no")
    assert (project / "manifest.json").read_text() == '{"name": "my-project"}\n'
    assert not db_path.exists()  # refused before anything was replayed or stored

    out = tmp_path / "gate-out"
    assert gate(dataset, out).exit_code == 0
    assert gate(dataset, out).exit_code == 0  # a gate's own outputs: replaced
    assert len(read_trajectories(out / "admitted.jsonl")) == 2
