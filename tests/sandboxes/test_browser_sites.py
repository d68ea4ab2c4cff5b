"""The web suite's third-party sites (Django admin, sqlite-web, the Python docs) in real Chromium."""

from __future__ import annotations

import contextlib
import importlib.util
import sqlite3
from pathlib import Path

import pytest

from fidelity.compare.base import CompareContext
from fidelity.compare.web import WebComparator
from fidelity.errors import SandboxUnavailableError, UsageError
from fidelity.pipeline import load_suite
from fidelity.resources import default_suite
from fidelity.sandboxes import get_sandbox
from fidelity.sandboxes.browser import BrowserConfig
from fidelity.sandboxes.packaged_sites import build_inventory
from fidelity.sandboxes.sites import SiteProcess, project_dir
from fidelity.trajectory import Observation, Trajectory
from tests.conftest import IN_CI, require_binary, require_module

pytestmark = pytest.mark.browser

SITES = {
    "useradmin": ("django", "web-adm-add-user"),
    "sqliteweb": ("sqlite_web", "web-sw-edit-row"),
    "pydocs": (None, "web-py-search"),
}


def _require(project: str) -> None:
    require_binary(BrowserConfig().executable, "apt-get install chromium")
    require_module("playwright.sync_api", "pip install 'fidelity[web]'")
    module = SITES[project][0]
    if module is not None:
        require_module(module, "pip install 'fidelity[web]'")
    elif not Path("/usr/share/doc/python3.11/html/index.html").is_file():
        message = "the Python docs are not installed (apt-get install python3.11-doc)"
        if IN_CI:
            pytest.fail(f"{message}: CI must run this test, the test command installs it")
        pytest.skip(message)


def _trajectory(trajectory_id: str) -> Trajectory:
    return next(t for t in load_suite(default_suite("web")) if t.id == trajectory_id)


def _replay(trajectory_id: str) -> list[Observation]:
    trajectory = _trajectory(trajectory_id)
    with get_sandbox("browser") as box:
        box.reset(trajectory.env)
        return [box.step(s.action, timeout=60) for s in trajectory.steps]


@pytest.mark.slow
@pytest.mark.parametrize("project", sorted(SITES))
def test_two_real_replays_of_a_new_site_do_not_drift(project: str) -> None:
    """Run twice, a trajectory of each new site reads the same to the shipped comparator."""
    _require(project)
    trajectory_id = SITES[project][1]
    first, second = _replay(trajectory_id), _replay(trajectory_id)
    assert all(o.state.get("last_action_error") is None for o in first)
    comparator = WebComparator()
    steps = _trajectory(trajectory_id).steps
    for depth, (real, sim) in enumerate(zip(first, second, strict=True), 1):
        context = CompareContext(action=steps[depth - 1].action, depth=depth)
        result = comparator.compare(real, sim, context)
        assert (depth, result.drift, result.hallucinations) == (depth, False, [])
    if project == "useradmin":  # the new user's page: saved, with Django's masked salt
        assert "was added successfully" in first[-1].text
        assert "**********" in first[-1].text


def test_a_missing_site_package_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sqlite_web" else real(name)
    )
    with pytest.raises(SandboxUnavailableError, match=r"needs the Python package sqlite-web"):
        SiteProcess(project_dir("sqliteweb"), tmp_path)


def test_the_inventory_database_is_seeded(tmp_path: Path) -> None:
    dumps = []
    for name in ("a.db", "b.db"):
        build_inventory(tmp_path / name)
        with contextlib.closing(sqlite3.connect(tmp_path / name)) as db:
            dumps.append(list(db.iterdump()))
    assert dumps[0] == dumps[1]
    assert any("low_stock" in line for line in dumps[0])
    assert (tmp_path / "a.db").stat().st_mtime == 1_750_000_000


def test_new_sites_are_known_projects() -> None:
    for project in SITES:
        assert (project_dir(project) / "site.json").is_file()
    with pytest.raises(UsageError, match=r"known: .*pydocs, sqliteweb, useradmin"):
        project_dir("nope")
