"""The browser backend: real Chromium (Playwright) against the bundled web sites on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.request import urlopen

import pytest

from fakes.world_model import FakeLLM
from fidelity.audit import AuditConfig, run_audit
from fidelity.compare.web import parse_tree, strip_bids
from fidelity.errors import UsageError
from fidelity.pipeline import SimConfig, load_suite
from fidelity.resources import default_suite
from fidelity.sandboxes import get_sandbox
from fidelity.sandboxes.browser import BrowserConfig, BrowserSandbox, _marked_processes, sweep_stale
from fidelity.trajectory import BrowserAction, EnvSpec, Observation
from tests.conftest import unavailable
from tests.sandboxes.conformance_lifecycle import *  # noqa: F403 - backend-agnostic lifecycle

LIBRARY = EnvSpec(backend="browser", project="library")
pytestmark = pytest.mark.browser


# -- real Chromium -------------------------------------------------------------


@pytest.fixture
def sandbox(chromium: None) -> Iterator[BrowserSandbox]:
    box = BrowserSandbox()
    try:
        yield box
    finally:
        box.close()


@pytest.fixture
def env() -> EnvSpec:
    return LIBRARY


@pytest.fixture
def ok_action() -> BrowserAction:
    return BrowserAction(action="goto('/books?page=2')")


@pytest.fixture
def bad_action() -> BrowserAction:
    return BrowserAction(action="click('12'")


@pytest.fixture
def dirty_actions() -> list[BrowserAction]:
    return [
        BrowserAction(action=a)
        for a in (
            "goto('/login?next=/books/1')",
            "fill('16', 'alice')",
            "fill('18', 'wonderland')",
            "press('18', 'Enter')",
            "click('27')",  # Borrow this book
        )
    ]


@pytest.fixture
def probe_action() -> BrowserAction:
    return BrowserAction(action="goto('/books/1')")


@pytest.fixture
def leftovers() -> Callable[[BrowserSandbox], list[str]]:
    def find(box: BrowserSandbox) -> list[str]:
        found = [f"pid {pid}" for pid, _ in _marked_processes(box._token)]
        if box._site is not None and box._site.proc.poll() is None:
            found.append(f"site server pid {box._site.proc.pid}")
        if box._root is not None and box._root.exists():
            found.append(str(box._root))
        return found

    return find


def step(box: BrowserSandbox, action: str) -> Observation:
    return box.step(BrowserAction(action=action), timeout=20)


def bid_of(observation: Observation, role: str, name: str) -> str:
    for line in observation.text.splitlines():
        if f"] {role} '{name}'" in line:
            return line.strip()[1:].split("]", 1)[0]
    raise AssertionError(f"no {role} {name!r} in:\n{observation.text}")


def test_observation_has_tree_state_and_stable_origin(sandbox: BrowserSandbox) -> None:
    first = sandbox.reset(LIBRARY)
    assert first.state is not None
    assert first.state["url"] == "http://localhost:8000/"
    assert first.state["tabs"] == [
        {"index": 0, "url": "http://localhost:8000/", "title": first.state["title"], "active": True}
    ]
    assert "127.0.0.1" not in first.text  # the live port never shows
    nodes = parse_tree(strip_bids(first.text)[0])
    assert (nodes[0].role, nodes[0].props) == ("tab", "active")  # the `# tab 0` header
    assert nodes[1].role == "RootWebArea" and "Lantern Library" in nodes[1].name
    assert "link:Catalogue" in {n.label for n in nodes}
    catalogue = step(sandbox, f"click('{bid_of(first, 'link', 'Catalogue')}')")
    assert catalogue.state is not None and catalogue.state["url"].endswith("/books")
    assert "10 result(s)" not in catalogue.text and "48 result(s), page 1 of 5." in catalogue.text


def test_forms_login_and_errors_are_observations(sandbox: BrowserSandbox) -> None:
    sandbox.reset(LIBRARY)
    login = step(sandbox, "goto('/login')")
    step(sandbox, f"fill('{bid_of(login, 'textbox', 'Username')}', 'alice')")
    step(sandbox, f"fill('{bid_of(login, 'textbox', 'Password')}', 'wonderland')")
    done = step(sandbox, f"press('{bid_of(login, 'textbox', 'Password')}', 'Enter')")
    assert "Welcome back, Alice Liddell." in done.text
    assert done.state is not None and done.state["last_action_error"] is None
    missing = step(sandbox, "click('99999')")
    assert missing.state is not None
    assert missing.state["last_action_error"] == "click(): no element with bid '99999'"
    assert "# error: 'click(): no element with bid \\'99999\\''" in missing.text
    refused = step(sandbox, "goto('file:///etc/passwd')")
    assert refused.state is not None and "only http(s)" in refused.state["last_action_error"]
    assert refused.error is None and refused.state["url"] == missing.state["url"]


def test_tabs(sandbox: BrowserSandbox) -> None:
    sandbox.reset(LIBRARY)
    step(sandbox, "new_tab()")
    second = step(sandbox, "goto('/books?page=3')")
    assert second.state is not None and [t["active"] for t in second.state["tabs"]] == [
        False,
        True,
    ]
    first = step(sandbox, "tab_focus(0)")
    assert first.state is not None and first.state["url"] == "http://localhost:8000/"
    assert step(sandbox, "tab_focus(5)").state["last_action_error"].startswith("tab_focus()")  # type: ignore[index]
    closed = step(sandbox, "tab_close()")
    assert closed.state is not None and [t["url"] for t in closed.state["tabs"]] == [
        "http://localhost:8000/books?page=3"
    ]


def _outside_address() -> str | None:
    """A non-loopback address of this machine (a host the browser must not reach)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout
    addresses = [a for a in out.split() if "." in a and not a.startswith("127.")]
    return addresses[0] if addresses else None


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"<title>escaped</title>reachable")

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


def test_network_is_loopback_only(sandbox: BrowserSandbox) -> None:
    address = _outside_address()
    if address is None:
        unavailable("this machine has no non-loopback IPv4 address to test against")
    server = ThreadingHTTPServer((address, 0), _Hello)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://{address}:{server.server_port}/"
        assert b"reachable" in urlopen(url, timeout=5).read()  # the host itself can reach it
        sandbox.reset(LIBRARY)
        blocked = step(sandbox, f"goto({url!r})")
        assert blocked.state is not None and "ERR_" in blocked.state["last_action_error"]
        assert "reachable" not in blocked.text
        fetched = step(sandbox, "goto('/books')")
        assert fetched.state is not None and fetched.state["last_action_error"] is None
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow
def test_same_trajectory_same_observations(chromium: None) -> None:
    trajectory = next(t for t in load_suite(default_suite("web")) if t.id == "web-ds-filter")
    texts = []
    for _ in range(2):
        with get_sandbox("browser") as box:
            box.reset(trajectory.env)
            texts.append([box.step(s.action, timeout=20).text for s in trajectory.steps])
    assert texts[0] == texts[1]
    assert "amount__gt=400" in texts[0][-2]


def test_unknown_project_and_missing_chromium() -> None:
    with pytest.raises(UsageError, match="unknown web project 'nope'; known: datasette, docs"):
        BrowserSandbox().reset(EnvSpec(backend="browser", project="nope"))
    from fidelity.errors import SandboxUnavailableError

    with pytest.raises(SandboxUnavailableError, match="apt-get install chromium"):
        BrowserSandbox(BrowserConfig(executable="/nonexistent/chromium")).reset(LIBRARY)


def test_sweep_removes_folders_of_dead_owners(tmp_path: Path) -> None:
    pid = os.getpid() + 4_000_000  # above pid_max: never a live process
    stale = tmp_path / "fidelity-browser-stale"
    stale.mkdir()
    (stale / "owner.pid").write_text(str(pid))
    live = tmp_path / "fidelity-browser-live"
    live.mkdir()
    (live / "owner.pid").write_text(str(os.getpid()))
    assert sweep_stale(str(tmp_path)) >= 1
    assert not stale.exists() and live.exists()


@pytest.mark.slow
def test_audit_web_domain_end_to_end(chromium: None, tmp_path: Path, db_path: Path) -> None:
    report = tmp_path / "report.html"
    result = run_audit(
        AuditConfig(
            domain="web", db=db_path, report=report, limit=3, sim=SimConfig(baseline="copy")
        )
    )
    totals = result.summary.totals
    assert totals.trajectories == 3 and result.failed_trajectories == []
    assert totals.compared_steps == totals.steps >= 15
    import duckdb

    with duckdb.connect(str(db_path), read_only=True) as db:
        states = db.execute("SELECT state FROM observations WHERE side = 'real'").fetchall()
    urls = [json.loads(s[0])["url"] for s in states if s[0]]
    assert len(urls) == totals.steps and all(u.startswith("http://localhost:8000/") for u in urls)
    assert report.read_text().lower().startswith("<!doctype html>")


@pytest.mark.slow
def test_world_model_is_shown_the_real_start_page(
    chromium: None, tmp_path: Path, db_path: Path, fake_llm: FakeLLM
) -> None:
    from fidelity.batch import replay_suite
    from fidelity.formats.jsonl import read_trajectories, write_trajectories

    (trajectory,) = [t for t in load_suite(default_suite("web")) if t.id == "web-lib-search"]
    suite = tmp_path / "one.jsonl"
    write_trajectories(suite, [trajectory])
    replay_suite(suite, tmp_path / "real.jsonl")
    (replayed,) = read_trajectories(tmp_path / "real.jsonl")
    start = replayed.env.initial_observation
    assert (
        start is not None and "RootWebArea" in start and "# url: 'http://localhost:8000/" in start
    )

    # The audit fills it from its own real reset and shows it in the system prompt; the
    # domain comes from the suite.
    sim = SimConfig(url=fake_llm.url, model="fake/agentworld-tiny")
    result = run_audit(AuditConfig(suite=suite, db=db_path, sim=sim, mode="open-loop", report=None))
    assert result.summary.run.domain == "web" and result.summary.run.sandbox == "browser"
    system = fake_llm.requests[0]["messages"][0]["content"]
    assert "<initial_observation>\n" + start.strip("\n") + "\n</initial_observation>" in system
