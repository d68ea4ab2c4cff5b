"""A dataset is data, never orders: no host command, no site or backend but the operator's,
no claim without a check (issue 40). Each case reproduces a finding on the earlier code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from fakes.trajectories import command_trajectory
from fakes.world_model import FakeLLM, Reply
from fidelity.cli import app
from fidelity.errors import UsageError
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.sandboxes.registry import trajectory_backend
from fidelity.trajectory import EnvSpec, Observation, Outcome, Trajectory, WebSite
from fidelity.trust import REDACTED, host_commands, redact, scrubbed_environment

runner = CliRunner()
SECRET = "AKIAFIDELITYTESTSECRET0123456789"


def _web_line(tmp_path: Path, sites: dict[str, object]) -> Path:
    """A one-line web dataset whose env.sites is *sites* (its observation simulated)."""
    trajectory = Trajectory.model_validate(
        {
            "id": "w1",
            "domain": "web",
            "source": "sim",
            "env": {"backend": "browser", "sites": sites},
            "steps": [{"action": {"type": "browser", "action": "noop()"}, "observation": {}}],
        }
    )
    path = tmp_path / "data.jsonl"
    write_trajectories(path, [trajectory])
    return path


def _policy(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "policy.toml"
    path.write_text(f"[default]\nmax_drift_rate = 0.5\n{extra}")
    return path


# -- host commands -------------------------------------------------------------------


@pytest.mark.parametrize("command", ["gate", "replay", "audit"])
def test_a_dataset_reset_is_refused_in_one_line_and_never_runs(
    tmp_path: Path, command: str
) -> None:
    marker = tmp_path / "marker"
    data = _web_line(
        tmp_path, {"shop": {"url": "http://shop.test:7770", "reset": f"touch {marker}"}}
    )
    argv = {
        "gate": ["gate", str(data), "--policy", str(_policy(tmp_path)), "-o", str(tmp_path / "o")],
        "replay": ["replay", str(data), "-o", str(tmp_path / "out.jsonl")],
        "audit": ["audit", str(data), "--db", str(tmp_path / "a.duckdb")],
    }[command]
    result = runner.invoke(app, [*argv, "--site", "shop=http://shop.test:7770"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "w1.env.sites.shop.reset" in lines[0], result.stderr
    assert "--trust-dataset-commands" in lines[0]
    assert not marker.exists()
    assert not (tmp_path / "o").exists() and not (tmp_path / "a.duckdb").exists()


def test_a_dataset_mcp_command_is_refused_in_one_line(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    trajectory = Trajectory.model_validate(
        {
            "id": "m1",
            "domain": "mcp",
            "env": {"backend": "mcp", "mcp_servers": {"evil": {"command": f"touch {marker}"}}},
            "steps": [
                {"action": {"type": "tool", "tool": "x", "args": {}}, "observation": {"text": ""}}
            ],
        }
    )
    data = tmp_path / "data.jsonl"
    write_trajectories(data, [trajectory])
    result = runner.invoke(app, ["gate", str(data), "--policy", str(_policy(tmp_path))])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {data}:1: m1.env.mcp_servers.evil.command: a dataset's command is not run on "
        "this host; pass --trust-dataset-commands to run it contained, or drop it from the "
        "dataset\n"
    )
    assert not marker.exists()


def test_host_commands_are_every_reset_and_server_command() -> None:
    env = EnvSpec.model_validate(
        {
            "sites": {"a": {"reset": "r1"}, "b": "http://b.test"},
            "mcp_servers": {"s": {"command": "c1"}, "t": {"bundled": "memory"}},
        }
    )
    trajectory = command_trajectory("t", "ls").model_copy(update={"env": env})
    assert host_commands(trajectory) == [
        ("env.sites.a.reset", "r1"),
        ("env.mcp_servers.s.command", "c1"),
    ]


def test_a_trusted_command_gets_no_secret_and_its_output_is_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("MY_API_TOKEN", "tok-9f8e7d6c5b4a")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    env = scrubbed_environment({"FIDELITY_SITE": "shop"})
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "TZ", "FIDELITY_SITE"}
    assert SECRET not in json.dumps(env)
    text = f"LEAK={SECRET} and tok-9f8e7d6c5b4a, not PATH"
    assert redact(text) == f"LEAK={REDACTED} and {REDACTED}, not PATH"
    assert redact("nothing secret here") == "nothing secret here"


# -- sites ---------------------------------------------------------------------------


def test_a_dataset_site_must_be_one_of_the_operators(tmp_path: Path) -> None:
    data = _web_line(tmp_path, {"shop": {"url": "http://127.0.0.1:9/"}})
    policy = str(_policy(tmp_path))
    refused = runner.invoke(app, ["gate", str(data), "--policy", policy])
    assert refused.exit_code == 2
    assert refused.stderr == (
        f"error: {data}:1: w1.env.sites.shop.url: http://127.0.0.1:9 is not one of the "
        "operator's sites; allow it with --site shop=URL (or WA_*, or a file named by "
        "--env-defaults)\n"
    )
    # the link-local metadata address: refused the same way, with or without other sites
    data = _web_line(tmp_path, {"meta": {"url": "http://169.254.169.254/latest"}})
    other = runner.invoke(
        app, ["gate", str(data), "--policy", policy, "--site", "shop=http://127.0.0.1:9"]
    )
    assert other.exit_code == 2 and "w1.env.sites.meta.url" in other.stderr


def test_the_browser_refuses_a_site_the_operator_did_not_name() -> None:
    from fidelity.sandboxes.images import EnvironmentUnavailableError
    from fidelity.sandboxes.sites import resolve_sites

    env = EnvSpec.model_validate({"sites": {"shop": "http://127.0.0.1:9"}})
    with pytest.raises(EnvironmentUnavailableError, match="not one of the operator's sites"):
        resolve_sites(env, {})
    allowed = resolve_sites(env, {"shop": WebSite(url="http://127.0.0.1:9/x")})
    assert [s.url for s in allowed] == ["http://127.0.0.1:9"]
    reset = EnvSpec.model_validate({"sites": {"shop": {"reset": "true"}}})
    operator = {"shop": WebSite(url="http://127.0.0.1:9")}
    with pytest.raises(EnvironmentUnavailableError, match="--trust-dataset-commands"):
        resolve_sites(reset, operator)
    trusted = resolve_sites(reset, operator, trust_commands=True)
    assert trusted[0].reset_from == "dataset"


def test_an_env_defaults_file_beside_the_data_is_not_read(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    (tmp_path / "fidelity-env.toml").write_text(
        f'image = "evil:latest"\n[sites.shop]\nurl = "http://127.0.0.1:9"\nreset = "touch {marker}"\n'
    )
    data = _web_line(tmp_path, {"shop": {}})
    result = runner.invoke(
        app, ["gate", str(data), "--policy", str(_policy(tmp_path)), "--sample", "1"]
    )
    # not read: its site is unknown (exit 2 at the replay), and it says why, before
    assert result.exit_code == 2, result.output
    assert "fidelity-env.toml is not read (it came with the data)" in result.stderr
    assert "unknown site 'shop'" in result.stderr
    assert not marker.exists()


# -- backends ------------------------------------------------------------------------


def test_each_trajectory_replays_in_the_backend_it_names() -> None:
    def env(**fields: object) -> EnvSpec:
        return EnvSpec.model_validate(fields)

    assert trajectory_backend("terminal", env(), None) == "local"
    assert trajectory_backend("terminal", env(backend="local"), "docker") == "docker"
    assert trajectory_backend("terminal", env(backend="docker"), None) == "docker"
    assert trajectory_backend("terminal", env(image="bar-missing:404"), None) == "docker"
    with pytest.raises(UsageError, match="--sandbox local was given"):
        trajectory_backend("terminal", env(backend="docker", image="x:1"), "local")
    with pytest.raises(UsageError, match=r"env\.backend is 'local'"):
        trajectory_backend("terminal", env(backend="local", image="x:1"), None)
    with pytest.raises(UsageError, match="cannot replay domain 'terminal'"):
        trajectory_backend("terminal", env(backend="browser"), None)


def test_a_named_backend_under_another_sandbox_is_refused_not_swapped(tmp_path: Path) -> None:
    named = Trajectory.model_validate(
        {
            "id": "d1",
            "domain": "terminal",
            "env": {"backend": "docker", "image": "bar-missing:404"},
            "steps": [{"action": {"type": "command", "command": "ls"}, "observation": {}}],
        }
    )
    data = tmp_path / "data.jsonl"
    write_trajectories(data, [named])
    policy = str(_policy(tmp_path))
    result = runner.invoke(app, ["gate", str(data), "--policy", policy, "--sandbox", "local"])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: {data}:1: d1.env: env.image replays in Docker, but --sandbox local was given\n"
    )
    replayed = runner.invoke(
        app, ["replay", str(data), "-o", str(tmp_path / "r.jsonl"), "--sandbox", "local"]
    )
    assert replayed.exit_code == 2 and "--sandbox local was given" in replayed.stderr


@pytest.mark.docker
def test_a_missing_named_image_is_unverifiable_never_verified_in_bubblewrap(
    docker: None, bwrap: None, tmp_path: Path
) -> None:
    """The issue's case: {"backend": "docker", "image": "bar-missing:404"} replayed in
    bubblewrap and was admitted as verified. Now it replays in Docker, beside a line that
    names no backend and replays in bubblewrap, and is unverifiable."""
    real = command_trajectory("local-1", "echo hi")
    named = command_trajectory("docker-1", "echo hi").model_copy(
        update={"env": EnvSpec(backend="docker", image="fidelity-bar-missing:404")}
    )
    sim = [Observation(text="hi\n", exit_code=0, cwd="/workspace")]
    lines = [t.with_observations(sim, "sim") for t in (real, named)]
    data = tmp_path / "data.jsonl"
    write_trajectories(data, lines)
    out = tmp_path / "replayed.jsonl"
    replayed = runner.invoke(app, ["replay", str(data), "-o", str(out)])
    assert replayed.exit_code == 0, replayed.output
    sandboxes = {t.id: t.meta["sandbox"] for t in read_trajectories(out)}
    assert sandboxes == {"local-1": "local", "docker-1": "docker"}
    gated = runner.invoke(
        app,
        [
            "gate", str(data), "--policy", str(_policy(tmp_path)), "--all",
            "--db", str(tmp_path / "g.duckdb"), "-o", str(tmp_path / "o"),
        ],
    )  # fmt: skip
    decisions = {
        d["trajectory_id"]: d
        for d in map(json.loads, (tmp_path / "o" / "decisions.jsonl").read_text().splitlines())
    }
    assert decisions["docker-1"]["outcome"] == "unverifiable", decisions
    assert "fidelity-bar-missing:404" in decisions["docker-1"]["reason"]
    assert "--pull" in decisions["docker-1"]["reason"]
    assert decisions["local-1"]["outcome"] == "admitted" and decisions["local-1"]["verified"]
    assert gated.exit_code == 1  # half the sample unverifiable: over the default 5% limit


# -- outcomes ------------------------------------------------------------------------


def _checked_line(check: str, claimed: bool = True) -> Trajectory:
    trajectory = command_trajectory("c1", "echo hi > out.txt", "cat out.txt")
    trajectory = trajectory.model_copy(
        update={
            "env": EnvSpec.model_validate(
                {"workdir": None, "check": {"command": check, "timeout": 30}}
            ),
            "outcome": Outcome(success=claimed, claimed_by="simulation"),
            "instruction": "Write hi to out.txt.",
        }
    )
    sim = [
        Observation(text="", exit_code=0, cwd="/workspace"),
        Observation(text="hi\n", exit_code=0, cwd="/workspace"),
    ]
    return trajectory.with_observations(sim, "sim")


@pytest.mark.bwrap
def test_a_claim_whose_check_cannot_run_is_quarantined_not_exported(
    bwrap: None, tmp_path: Path
) -> None:
    data = tmp_path / "data.jsonl"
    # exit 126: the check could not run (Terminal-Bench's run-tests.sh needing the network)
    write_trajectories(data, [_checked_line("exit 126")])
    out = tmp_path / "o"
    result = runner.invoke(
        app,
        [
            "gate", str(data), "--policy", str(_policy(tmp_path)), "--all", "--to", "openrlhf",
            "--db", str(tmp_path / "g.duckdb"), "-o", str(out),
        ],
    )  # fmt: skip
    assert result.exit_code == 1, result.output  # 1 of 1 claims uncheckable > 5%
    (decision,) = map(json.loads, (out / "decisions.jsonl").read_text().splitlines())
    assert decision["outcome"] == "quarantined"
    assert decision["cause"] == "outcome-unverifiable"
    assert decision["reason"].startswith("outcome-unverifiable: claimed success, the real check")
    assert (out / "admitted.openrlhf.jsonl").read_text() == ""
    (quarantined,) = read_trajectories(out / "quarantined.jsonl")
    assert quarantined.meta["quarantine_reason"] == "outcome-unverifiable"
    manifest = json.loads((out / "manifest.json").read_text())
    failed = [c["name"] for c in manifest["verdict"]["checks"] if not c["passed"]]
    assert failed == ["outcome_unverifiable_rate <= 0.05"]


@pytest.mark.bwrap
def test_a_baseline_audit_checks_real_outcomes(bwrap: None, tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    write_trajectories(suite, [_checked_line("test -s out.txt"), _second_checked()])
    result = runner.invoke(app, ["audit", str(suite), "--db", str(tmp_path / "a.duckdb"), "--json"])
    assert result.exit_code == 0, result.output
    (outcomes,) = json.loads(result.stdout)["summary"]["outcomes"]
    assert outcomes["checked"] == 2
    assert outcomes["table"]["agree_success"] == 1 and outcomes["table"]["false_success"] == 1


def _second_checked() -> Trajectory:
    """A claimed success whose check fails: out.txt is never written."""
    line = _checked_line("test -s missing.txt")
    return line.model_copy(update={"id": "c2"})


# -- nothing compared ------------------------------------------------------------------


@pytest.mark.bwrap
def test_an_audit_with_every_answer_failed_shows_no_figure(
    bwrap: None, tmp_path: Path, fake_llm: FakeLLM
) -> None:
    fake_llm.default = Reply.http(400)  # a client error: not retried
    suite = tmp_path / "suite.jsonl"
    write_trajectories(suite, [command_trajectory("t1", "echo a", "echo b")])
    argv = [
        "audit", str(suite), "--db", str(tmp_path / "a.duckdb"),
        "--sim-url", fake_llm.url, "--sim-model", "fake/agentworld-tiny",
    ]  # fmt: skip
    result = runner.invoke(app, [*argv, "--json"])
    assert result.exit_code == 3, result.output
    totals = json.loads(result.stdout)["summary"]["totals"]
    assert totals["compared_steps"] == 0
    assert [totals[k] for k in ("drift_rate", "trust_horizon", "mean_score")] == [None] * 3
    text = runner.invoke(app, [*argv, "--run-id", "again"])
    assert text.exit_code == 3
    assert "drift rate          — (nothing compared)" in text.stdout
    assert "0.0%" not in text.stdout and "depth" not in text.stdout
    assert text.stderr.startswith("error: nothing was compared: 2 of 2 steps failed")


# -- secrets from a trusted reset never reach an output --------------------------------


@pytest.mark.browser
def test_a_trusted_reset_reads_no_secret_into_any_output(tmp_path: Path) -> None:
    """The issue's case: a failed reset's stderr (here the secret read from the auditor's own
    /proc environ, as root can) went into manifest, decisions, quarantine, DB and report."""
    from tests.conftest import require_binary

    require_binary("chromium", "apt-get install chromium")
    envlog = tmp_path / "env.log"
    leak = f"env > {envlog}; tr '\\0' '\\n' < /proc/$PPID/environ | grep AWS_SECRET >&2; exit 3"
    data = _web_line(
        tmp_path, {"shop": {"url": "http://127.0.0.1:9", "reset": leak, "recorded": "http://r"}}
    )
    out, db = tmp_path / "o", tmp_path / "g.duckdb"
    env = {**os.environ, "AWS_SECRET_ACCESS_KEY": SECRET}
    argv = [
        sys.executable, "-m", "fidelity", "gate", str(data), "--policy", str(_policy(tmp_path)),
        "--all", "--db", str(db), "-o", str(out), "--site", "shop=http://127.0.0.1:9",
        "--trust-dataset-commands",
    ]  # fmt: skip
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr
    (decision,) = map(json.loads, (out / "decisions.jsonl").read_text().splitlines())
    assert decision["outcome"] == "unverifiable"
    assert decision["reason"].startswith("unverifiable: site shop: its reset command exited 3")
    # the control: the command ran, read the secret, and what it printed was redacted
    assert decision["reason"].endswith(f"AWS_SECRET_ACCESS_KEY={REDACTED}")
    assert "PATH=" in envlog.read_text() and SECRET not in envlog.read_text()
    report = tmp_path / "r.html"
    subprocess.run(
        [sys.executable, "-m", "fidelity", "report", "--db", str(db), "-o", str(report)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with duckdb.connect(str(db), read_only=True) as connection:
        stored = json.dumps(connection.execute("SELECT * FROM observations").fetchall())
    for text in (
        *(p.read_text() for p in out.iterdir() if p.is_file()),
        stored,
        report.read_text(),
        done.stdout,
        done.stderr,
    ):
        assert SECRET not in text


def test_options_of_another_backend_are_left_out_not_refused() -> None:
    """A [sites] table in a defaults file broke a docker replay ("sites: Extra inputs are
    not permitted", naming neither the file nor the reason): world options a backend does
    not take are left out; an option no backend knows is still refused."""
    from fidelity.sandboxes import sandbox_config

    world = {"sites": {"shop": {"url": "http://shop.test"}}, "trust_commands": True}
    docker = sandbox_config("terminal", "docker", {**world, "pull": True})
    assert docker.type == "docker" and docker.pull is True  # type: ignore[attr-defined]
    browser = sandbox_config("web", None, {**world, "pull": True, "instances": None})
    assert browser.trust_commands is True  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="sandbox 'docker': bogus: Extra inputs"):
        sandbox_config("terminal", "docker", {"bogus": 1})
