"""The report in real headless Chromium: it renders, its own script runs, planted payloads do not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fakes.trajectories import command_trajectory
from fidelity.analysis.models import RunSummary
from fidelity.analysis.summary import summarize
from fidelity.compare.base import StepComparison
from fidelity.report import write_report
from fidelity.sandboxes.browser import CHROMIUM_FLAGS, BrowserConfig
from fidelity.store import Store, TimedObservation, TrajectoryRecord
from fidelity.trajectory import Observation
from tests.conftest import require_binary, require_module
from tests.report.conftest import PAYLOADS
from tests.test_store import INFO

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_binary("chromium", "apt-get install chromium")
    playwright_api: Any = require_module("playwright.sync_api", "pip install -e '.[test]'")
    with playwright_api.sync_playwright() as driver:
        # The web sandbox's own Chromium settings: nothing but loopback is reachable, so a
        # report that tried to fetch anything from a CDN would show it.
        chromium = driver.chromium.launch(
            executable_path=BrowserConfig().executable, args=list(CHROMIUM_FLAGS), headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


def open_report(
    browser: Any, summary: RunSummary, tmp_path: Path
) -> tuple[Any, list[str], list[str]]:
    path = write_report(summary, tmp_path / "report.html")
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    dialogs: list[str] = []
    requests: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(path.resolve().as_uri())
    page.wait_for_load_state("load")
    page.wait_for_timeout(300)  # give any delayed payload (onerror, onload) time to fire
    return page, dialogs, requests


def test_report_renders_and_its_script_runs(
    browser: Any, summary: RunSummary, tmp_path: Path
) -> None:
    page, dialogs, requests = open_report(browser, summary, tmp_path)
    assert dialogs == []
    assert all(url.startswith("file://") for url in requests)  # nothing fetched from anywhere
    assert len(page.inner_text("body")) > 500
    assert page.locator("svg").count() >= 2
    shot = page.screenshot(full_page=True)
    assert len(shot) > 30_000  # a blank page compresses to almost nothing
    # The filter script is allowed by the page's CSP hash: its controls become visible.
    assert page.evaluate("() => [...document.querySelectorAll('[hidden]')].length") < 5


def test_planted_payloads_do_not_run(
    browser: Any, payload_summary: RunSummary, tmp_path: Path
) -> None:
    page, dialogs, requests = open_report(browser, payload_summary, tmp_path)
    assert dialogs == [], f"a payload ran: {dialogs}"
    assert all(url.startswith("file://") for url in requests), requests
    assert page.evaluate("() => document.querySelectorAll('img[src=x], svg[onload]').length") == 0
    for link in page.eval_on_selector_all("a[href]", "links => links.map(a => a.href)"):
        assert not link.lower().startswith("javascript:")
    assert "<script>alert(1)</script>" in page.inner_text("body")  # shown as text, not run


def test_escaping_alone_holds_without_the_csp(
    browser: Any, payload_summary: RunSummary, tmp_path: Path
) -> None:
    """The CSP is a second wall: with it removed, escaping must still stop every payload."""
    path = write_report(payload_summary, tmp_path / "report.html")
    html = path.read_text()
    start = html.index('<meta http-equiv="Content-Security-Policy"')
    path.write_text(html[:start] + html[html.index(">", start) + 1 :])
    page = browser.new_page()
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(path.resolve().as_uri())
    page.wait_for_timeout(300)
    assert dialogs == []
    assert page.evaluate("() => document.querySelectorAll('img[src=x], svg[onload]').length") == 0


def _stored_payload_summary(db_path: Path) -> RunSummary:
    """A real DuckDB run whose actions, entities, rules and model name carry payloads."""
    info = INFO | {"world_model": {"model": PAYLOADS[1]}}
    with Store(db_path) as store:
        for run_id in ("old", "new"):
            store.start_run(run_id, info)
            for index in range(12):
                commands = [f"echo '{p}'" for p in PAYLOADS]
                trajectory = command_trajectory(f"t{index}{PAYLOADS[0]}", *commands)
                obs = [TimedObservation(Observation(text=p, exit_code=0)) for p in PAYLOADS]
                comparisons = [
                    StepComparison(
                        score=0.5,
                        drift=depth > 2 and run_id == "new",
                        hallucinations=[f"{p}:x", "file:y"],
                        omissions=[p],
                        normalizations={p: 1},
                    )
                    for depth, p in enumerate(PAYLOADS, start=1)
                ]
                record = TrajectoryRecord(
                    trajectory,
                    obs,
                    obs,
                    comparisons,
                    "open-loop" if index % 2 else "teacher-forced",
                    0.0,
                    0.0,
                )
                store.write_trajectory(run_id, record)
        return summarize(store, "new")


def test_stored_run_report_filters_cells_and_runs_no_payload(browser: Any, tmp_path: Path) -> None:
    summary = _stored_payload_summary(tmp_path / "fidelity.duckdb")
    assert len(summary.trend) == 2 and {c.mode for c in summary.cells} == {
        "open-loop",
        "teacher-forced",
    }
    page, dialogs, requests = open_report(browser, summary, tmp_path)
    assert dialogs == [] and all(url.startswith("file://") for url in requests)
    assert page.evaluate("() => document.querySelectorAll('img[src=x], svg[onload]').length") == 0
    rows = page.locator("#cell-table tbody tr")
    assert rows.count() == 8  # 2 modes × 4 depths
    assert page.locator("#cell-filter").is_visible()
    page.select_option("#cell-filter select[name=mode]", "open-loop")
    page.fill("#cell-filter input[name=depth-min]", "3")
    page.dispatch_event("#cell-filter input[name=depth-min]", "input")
    visible = page.eval_on_selector_all(
        "#cell-table tbody tr", "rows => rows.filter(r => !r.hidden).map(r => r.dataset.depth)"
    )
    assert visible == ["3", "4"]
    assert "cells shown" in page.inner_text("#cell-filter")
    body = page.inner_text("body")
    assert PAYLOADS[0] in body and "Trend across runs" in body
    assert page.locator("#entity-table code", has_text="file").count() == 1
    assert page.locator("section#trend svg").count() == 1
