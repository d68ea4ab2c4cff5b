"""The HTML report: content, offline self-containment, determinism, atomic writes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fidelity.analysis.models import RunSummary, WorstStep
from fidelity.report import html as report_html
from fidelity.report import render_report, write_report
from fidelity.report.view import MAX_WORST

Scan = Callable[[str], Any]

VERDICT = {
    "status": "fail",
    "checks": [
        {"name": "drift_rate", "value": 0.2137, "limit": 0.2, "passed": False},
        {"name": "trust_horizon", "value": 5, "limit": 4, "passed": True},
    ],
}


@pytest.fixture
def html(summary: RunSummary) -> str:
    return render_report(summary)


def _section(page: str, section_id: str) -> str:
    start = page.index(f'<section id="{section_id}"')
    return page[start : page.index("</section>", start)]


def test_renders_one_html_document(html: str, scan: Scan) -> None:
    assert html.startswith("<!doctype html>")
    page = scan(html)
    assert len(page.tags("html")) == 1
    assert len(page.tags("style")) == 1
    assert len(page.tags("script")) == 1
    assert not page.tags("link")
    assert not page.tags("img")


def test_header_shows_provenance(html: str, scan: Scan) -> None:
    text = scan(html).text
    for expected in [
        "run-20250314-0200-7f3a",
        "terminal",
        "local",
        "open-loop",
        "terminal/core-v1",
        "0.1.0+g258f87b",
        "Qwen/Qwen-AgentWorld-35B-A3B",
        "http://127.0.0.1:8000/v1",
        "temperature",
        "2025-03-14 02:00:05 UTC",
        "2025-03-14 02:41:37 UTC",
        "41 min 32 s",
        '"concurrency": 8',
    ]:
        assert expected in text, expected


def test_headline_banner_and_cards_without_verdict(html: str, scan: Scan) -> None:
    overview = scan(_section(html, "overview")).text
    assert "No verdict" in overview
    assert "trusted up to depth 5 of 12" in overview
    for figure in ["3,514", "21.4%", "9.8%", "0.841", "28"]:
        assert figure in overview, figure
    for label in [
        "Steps compared",
        "Drift rate",
        "Hallucination rate",
        "Mean score",
        "Trust horizon",
        "Infra failures",
    ]:
        assert label in overview, label


@pytest.mark.parametrize("status", ["pass", "warn", "fail"])
def test_verdict_banner(summary: RunSummary, status: str, scan: Scan) -> None:
    page = render_report(summary, {**VERDICT, "status": status})
    overview = _section(page, "overview")
    assert f'class="banner tone-{status}"' in overview
    text = scan(overview).text
    assert status.upper() in text
    assert "1 of 2 checks passed" in text
    assert "drift_rate" in text and "0.2137" in text and "✗ fail" in text and "✓ pass" in text


def test_verdict_tolerates_odd_shapes(summary: RunSummary) -> None:
    page = render_report(summary, {"status": "maybe", "checks": [{"name": "x"}, "bare"]})
    assert 'class="banner tone-info"' in page
    assert "0 of 2 checks passed" in page


def test_charts_are_inline_svg(html: str, scan: Scan) -> None:
    depth = _section(html, "depth")
    svgs = scan(depth).tags("svg")
    assert len(svgs) == 2
    assert all(attrs.get("class") == "chart-svg" and attrs.get("viewbox") for attrs in svgs)
    assert "<?xml" not in html and "<!DOCTYPE svg" not in html and "<metadata>" not in html


def test_depth_table_marks_beyond_horizon(html: str) -> None:
    table = _section(html, "depth")
    assert table.count('<tr class="beyond"') == 7  # depths 6..12, horizon 5


def test_action_table_sorted_by_drift(html: str) -> None:
    actions = _section(html, "actions")
    order = [
        "pytest",
        "curl",
        "git log",
        "pip install",
        "python",
        "make",
        "grep",
        "git status",
        "cat",
        "ls",
    ]
    positions = [actions.index(f"<code>{name}</code>") for name in order]
    assert positions == sorted(positions)
    assert 'style="width: 58.0%"' in actions  # pytest drift bar


def test_worst_steps_side_by_side(html: str, scan: Scan) -> None:
    worst = _section(html, "worst")
    page = scan(worst)
    assert len(page.tags("article")) == 6
    assert len(page.tags("table")) == 6
    text = page.text
    for expected in [
        "setup.py",
        ".gitignore",
        "ls_date ×14",
        "directory listing differs",
        "t-0003",
        "ls -la",
        "real 6 · sim 0",
        "mismatch",
    ]:
        assert expected in " ".join(text.split()), expected
    assert 'class="chip chip-hall">setup.py<' in worst
    assert 'class="chip chip-omit">.gitignore<' in worst


def test_diff_marks_the_changed_line(html: str) -> None:
    worst = _section(html, "worst")
    assert "total <del>32</del>" in worst
    assert "total <ins>40</ins>" in worst
    changed = worst[worst.index("total <del>32</del>") - 200 : worst.index("total <ins>40</ins>")]
    assert '<tr class="chg">' in changed
    invented = worst.index("1204 Mar 14 02:00 setup.py")
    assert worst.rindex("<tr", 0, invented) == worst.rindex('<tr class="add">', 0, invented)


def test_long_observations_are_cut_and_folded(html: str) -> None:
    worst = _section(html, "worst")
    assert "real has 120 more" in worst and "sim has 120 more" in worst
    assert "147 identical lines" in worst
    assert "processed batch 150 <ins>FAILED</ins>" in worst
    assert "[0250]" not in worst


def test_filter_controls_are_hidden_without_js(html: str, scan: Scan) -> None:
    (bar,) = [a for a in scan(html).tags("div") if a.get("id") == "step-filter"]
    assert "hidden" in bar
    options = [a.get("value") for a in scan(_section(html, "worst")).tags("option")]
    assert options == ["", *sorted(["curl", "git log", "pip install", "pytest", "python", "ls"])]


def test_content_security_policy_allows_only_the_inline_script(html: str, scan: Scan) -> None:
    (meta,) = [a for a in scan(html).tags("meta") if a.get("http-equiv")]
    policy = meta.get("content") or ""
    assert "default-src 'none'" in policy
    assert "script-src 'sha256-" in policy
    assert report_html._csp(scan(html).scripts[0]) == policy


def test_no_external_references(html: str, external_refs: Callable[[str], list[str]]) -> None:
    assert external_refs(html) == []


@pytest.mark.parametrize(
    "planted",
    [
        '<img src="https://cdn.example.com/x.png">',
        '<link rel="stylesheet" href="//fonts.example.com/inter.css">',
        '<script src="http://cdn.example.com/app.js"></script>',
        '<div style="background: url(https://example.com/bg.png)"></div>',
        '<style>@import url("https://example.com/a.css");</style>',
        '<svg><use xlink:href="https://example.com/s.svg#i"/></svg>',
        "<a href=https://example.com>x</a>",
    ],
)
def test_external_reference_check_can_fail(
    html: str, planted: str, external_refs: Callable[[str], list[str]]
) -> None:
    spoiled = html.replace("</main>", planted + "</main>")
    assert external_refs(spoiled)


def test_empty_run_renders(empty_summary: RunSummary, scan: Scan) -> None:
    page = render_report(empty_summary)
    text = " ".join(scan(page).text.split())
    assert "No steps were compared" in text
    assert "No compared steps: nothing to chart." in text
    assert "No steps to show." in text
    assert not scan(page).tags("svg")
    assert not scan(page).tags("article")


def test_deterministic(summary: RunSummary) -> None:
    assert render_report(summary, VERDICT) == render_report(summary, VERDICT)


def test_deterministic_across_processes(summary: RunSummary) -> None:
    here = Path(__file__).parent
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "from conftest import build_summary; from fidelity.report import render_report;"
        "sys.stdout.write(render_report(build_summary()))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(here)], capture_output=True, env=env, check=True
    ).stdout.decode("utf-8")
    assert out == render_report(summary)


def test_worst_steps_are_capped(summary: RunSummary, scan: Scan) -> None:
    base = summary.worst[1]
    many = [
        base.model_copy(
            update={
                "trajectory_id": f"t-{i:04d}",
                "real_text": base.real_text * 40,
                "sim_text": base.sim_text * 40,
            }
        )
        for i in range(MAX_WORST + 30)
    ]
    page = render_report(summary.model_copy(update={"worst": many}))
    assert len(scan(page).tags("article")) == MAX_WORST
    assert f"{MAX_WORST} of 80" in " ".join(scan(page).text.split())
    assert len(page.encode()) < 4_000_000


def test_long_action_and_entities_are_capped(summary: RunSummary) -> None:
    step = WorstStep.model_validate(
        {
            **summary.worst[0].model_dump(),
            "action": "echo " + "x" * 5000,
            "hallucinations": [f"/tmp/file{i}" for i in range(100)],
        }
    )
    page = render_report(summary.model_copy(update={"worst": [step]}))
    assert "… +3,005 chars" in page
    assert "/tmp/file39<" in page and "/tmp/file40<" not in page
    assert "+60 more" in page


def test_write_report_is_atomic(summary: RunSummary, tmp_path: Path) -> None:
    target = tmp_path / "nested" / "report.html"
    written = write_report(summary, target, verdict=VERDICT)
    assert written == target
    assert target.read_text(encoding="utf-8") == render_report(summary, VERDICT)
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.html"]


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600)])
def test_the_report_takes_the_users_umask(
    summary: RunSummary, tmp_path: Path, umask: int, mode: int
) -> None:
    old = os.umask(umask)
    try:
        target = write_report(summary, tmp_path / "report.html")
    finally:
        os.umask(old)
    assert stat.S_IMODE(target.stat().st_mode) == mode


def test_write_report_keeps_old_file_on_failure(
    summary: RunSummary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "report.html"
    target.write_text("old", encoding="utf-8")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(report_html.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_report(summary, target)
    assert target.read_text(encoding="utf-8") == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["report.html"]


def test_other_run_statuses(make_summary: Callable[..., RunSummary], scan: Scan) -> None:
    page = render_report(make_summary(status="interrupted", finished_at=None))
    assert '<span class="run-status warn">interrupted</span>' in page
    assert "Duration" in scan(page).text


def test_odd_config_values_render(make_summary: Callable[..., RunSummary], scan: Scan) -> None:
    page = render_report(make_summary(config={"retries": {1: "a", "b": 2}, "path": Path("/x")}))
    text = scan(page).text
    assert '"retries"' in text and '"/x"' in text
