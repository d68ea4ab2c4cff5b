"""The user's own web sites (``env.sites``): a bundled site run as an outside server on
loopback, reached only through the user-site path (never ``env.project``)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from fidelity.batch import replay_suite
from fidelity.cli import app
from fidelity.compare.base import CompareContext
from fidelity.compare.web import WebComparator
from fidelity.formats.jsonl import read_trajectories, write_trajectories
from fidelity.pipeline import load_suite, unverifiable_reason
from fidelity.resources import default_suite
from fidelity.sandboxes.browser import (
    BrowserConfig,
    BrowserSandbox,
    _marked_processes,
    chromium_flags,
)
from fidelity.sandboxes.sites import OWNER_FLAG, WEBARENA_VARIABLES, project_dir
from fidelity.trajectory import BrowserAction, EnvSpec, Step, Trajectory, WebSite
from tests.conftest import require_binary, require_module

pytestmark = pytest.mark.browser
RECORDED = "http://library.example:7770"
runner = CliRunner()


@pytest.fixture(autouse=True)
def _no_webarena_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in WEBARENA_VARIABLES.values():
        monkeypatch.delenv(variable, raising=False)


@pytest.fixture
def chromium() -> None:
    require_binary(BrowserConfig().executable, "apt-get install chromium")
    require_module("playwright.sync_api", "pip install 'fidelity[web]'")


@pytest.fixture
def outside_site(chromium: None, tmp_path: Path) -> Iterator[str]:
    """The bundled library site as the user's own server: its own process on a loopback port."""
    root = tmp_path / "outside"
    root.mkdir()
    argv = [sys.executable, "-m", "fidelity.sandboxes.sites", str(project_dir("library"))]
    proc = subprocess.Popen(
        [*argv, str(root), f"{OWNER_FLAG}={os.getpid()}"],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()  # the server prints PORT <n> once it listens
        assert line.startswith("PORT "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]


def _library_suite(path: Path, sites: dict[str, object] | None = None) -> list[Trajectory]:
    """Three of the web suite's library trajectories, on the user site ``library`` recorded at
    :data:`RECORDED`; the first also loads a recorded absolute URL."""
    chosen = [t for t in load_suite(default_suite("web")) if t.env.project == "library"][:3]
    env = EnvSpec(backend="browser", sites=sites or {"library": {"recorded": RECORDED}})
    trajectories = [t.model_copy(update={"env": env}) for t in chosen]
    first = trajectories[0]
    visit = Step(action=BrowserAction(action=f"goto('{RECORDED}/books?page=2')"))
    trajectories[0] = first.model_copy(update={"steps": [visit, *first.steps]})
    write_trajectories(path, trajectories)
    return trajectories


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed: nothing listens there


def test_audit_and_two_replays_through_the_user_site_path(
    outside_site: str, tmp_path: Path
) -> None:
    suite = tmp_path / "suite.jsonl"
    trajectories = _library_suite(suite)
    db = tmp_path / "f.duckdb"
    site = f"library={outside_site}"
    result = runner.invoke(
        app,
        [
            "audit", str(suite), "--site", site, "--sim-baseline", "copy",
            "--db", str(db), "--report", str(tmp_path / "r.html"),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT text, state FROM observations WHERE side = 'real'").fetchall()
    assert len(rows) == sum(len(t.steps) for t in trajectories)
    urls = [json.loads(state)["url"] for _, state in rows]
    assert all(url.startswith(f"{RECORDED}/") for url in urls), urls
    assert f"{RECORDED}/books?page=2" in urls  # the recorded absolute URL was mapped to live
    assert not [text for text, _ in rows if "127.0.0.1" in text or outside_site in text]

    replays = []
    for name in ("a.jsonl", "b.jsonl"):
        replayed = runner.invoke(
            app, ["replay", str(suite), "-o", str(tmp_path / name), "--site", site]
        )
        assert replayed.exit_code == 0, replayed.output
        replays.append(read_trajectories(tmp_path / name))
    comparator, steps, drifted = WebComparator(), 0, 0
    for first, second in zip(*replays, strict=True):
        for depth, (a, b) in enumerate(zip(first.steps, second.steps, strict=True), 1):
            assert a.observation is not None and b.observation is not None
            assert a.observation.error is None
            context = CompareContext(action=a.action, depth=depth)
            steps += 1
            drifted += comparator.compare(a.observation, b.observation, context).drift
    assert steps >= 15 and drifted / steps < 0.01


def test_only_the_sites_origins_are_reached(outside_site: str) -> None:
    class Hello(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<title>escaped</title>reachable")

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    other = ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    config = BrowserConfig(sites={"library": WebSite(url=outside_site, recorded=RECORDED)})
    box = BrowserSandbox(config)
    try:
        start = box.reset(EnvSpec(backend="browser", sites={"library": {}}))
        assert start.state is not None and start.state["url"] == f"{RECORDED}/"
        for url in (f"http://127.0.0.1:{other.server_port}/", "http://example.org/"):
            blocked = box.step(BrowserAction(action=f"goto({url!r})"), timeout=20)
            assert blocked.state is not None
            assert "ERR_BLOCKED_BY_CLIENT" in blocked.state["last_action_error"]
            assert "reachable" not in blocked.text
        back = box.step(BrowserAction(action="goto('/books')"), timeout=20)
        assert back.state is not None and back.state["last_action_error"] is None
        assert back.state["url"] == f"{RECORDED}/books"
    finally:
        box.close()
        other.shutdown()
        other.server_close()


def test_the_reset_command_runs_before_each_trajectory(outside_site: str, tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    trajectories = _library_suite(suite)
    log = tmp_path / "resets.log"
    result = runner.invoke(
        app,
        [
            "replay", str(suite), "-o", str(tmp_path / "out.jsonl"), "--concurrency", "1",
            "--site", f"library={outside_site}",
            "--site-reset", f'library=echo "$FIDELITY_SITE $FIDELITY_SITE_URL" >> {log}',
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert log.read_text().splitlines() == [f"library {outside_site}"] * len(trajectories)


def test_a_failing_reset_or_a_site_down_is_unverifiable(chromium: None, tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    down = f"http://127.0.0.1:{_free_port()}"
    trajectories = _library_suite(suite, {"library": {"url": down, "recorded": RECORDED}})
    operator = {"library": {"url": down}}  # --site library=DOWN: the data may name it
    options = {"site_probe_timeout": 1.0, "sites": operator}
    result = replay_suite(suite, tmp_path / "out.jsonl", None, options)
    assert set(result.unverifiable or {}) == {t.id for t in trajectories}
    reason = next(iter((result.unverifiable or {}).values()))
    assert reason.startswith(f"site library ({down}) does not answer:"), reason
    assert "\n" not in reason
    written = read_trajectories(tmp_path / "out.jsonl")
    errors = {s.observation.error for t in written for s in t.steps if s.observation}
    assert {unverifiable_reason(e) for e in errors} == {reason}
    assert not [c for _, c in _marked_processes(f"{OWNER_FLAG}={os.getpid()}") if "chrom" in c]

    failing = {"library": {"url": down, "reset": "echo no docker >&2; exit 7"}}
    _library_suite(suite, {"library": {"recorded": RECORDED}})
    options = {"site_probe_timeout": 1.0, "sites": failing}  # the operator's reset
    result = replay_suite(suite, tmp_path / "out.jsonl", None, options)
    reasons = set((result.unverifiable or {}).values())
    assert reasons == {"site library: its reset command exited 7: no docker"}


def test_a_site_the_operator_did_not_name_is_unverifiable(chromium: None, tmp_path: Path) -> None:
    """Where the data is not checked before the replay (the library API), the browser still
    refuses a site the operator did not name: nothing is reached."""
    suite = tmp_path / "suite.jsonl"
    down = f"http://127.0.0.1:{_free_port()}"
    _library_suite(suite, {"library": {"url": down, "recorded": RECORDED}})
    result = replay_suite(suite, tmp_path / "out.jsonl", None, {"site_probe_timeout": 1.0})
    assert set((result.unverifiable or {}).values()) == {
        f"env.sites.library.url: {down} is not one of the operator's sites "
        "(allow it with --site library=URL)"
    }


def test_an_unknown_site_name_is_one_line_and_exit_2(tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    trajectories = _library_suite(suite, {"shopping": {}})
    result = runner.invoke(app, ["replay", str(suite), "-o", str(tmp_path / "out.jsonl")])
    assert result.exit_code == 2
    assert result.stderr == (
        f"error: trajectory {trajectories[0].id!r}: env.sites.shopping: unknown site "
        "'shopping', no URL given (set env.sites.shopping.url, pass --site shopping=URL "
        "or $WA_SHOPPING)\n"
    )
    bad = runner.invoke(app, ["replay", str(suite), "-o", "x.jsonl", "--site", "shop=ftp://x"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --site shop.url: ")


def test_webarena_variables_are_the_default_sites(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WA_SHOPPING_ADMIN", "http://shop.internal:7780/admin/")
    monkeypatch.setenv("WA_GITLAB", "")
    assert BrowserConfig().sites == {
        "shopping_admin": WebSite(url="http://shop.internal:7780/admin")
    }
    flags = chromium_flags(("shop.internal",))
    assert "--proxy-bypass-list=shop.internal" in flags
    assert any(
        f.startswith("--host-resolver-rules=") and f.endswith(", EXCLUDE shop.internal")
        for f in flags
    )


def test_the_gate_verifies_a_dataset_on_the_user_site(outside_site: str, tmp_path: Path) -> None:
    suite, real = tmp_path / "suite.jsonl", tmp_path / "real.jsonl"
    _library_suite(suite)
    site = f"library={outside_site}"
    replayed = runner.invoke(app, ["replay", str(suite), "-o", str(real), "--site", site])
    assert replayed.exit_code == 0, replayed.output
    policy = tmp_path / "policy.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.01\n")
    out = tmp_path / "out"
    gated = runner.invoke(
        app,
        [
            "gate", str(real), "--policy", str(policy), "--all", "--site", site,
            "--db", str(tmp_path / "g.duckdb"), "-o", str(out),
        ],
    )  # fmt: skip
    assert gated.exit_code == 0, gated.output
    decisions = [json.loads(line) for line in (out / "decisions.jsonl").read_text().splitlines()]
    assert [(d["outcome"], d["verified"]) for d in decisions] == [("admitted", True)] * 3
