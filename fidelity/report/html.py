"""Render a :class:`RunSummary` as one self-contained, offline HTML file.

The page is built from ``reports/report.html.j2`` with autoescaping on for every
value; ``reports/report.css`` and ``reports/report.js`` are inlined, and a
Content-Security-Policy allows that one script (by hash) and nothing external.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined
from markupsafe import Markup

from fidelity.analysis.models import RunSummary
from fidelity.errors import writing
from fidelity.formats.jsonl import staged_file
from fidelity.report import view
from fidelity.resources import data_dir
from fidelity.version import __version__

TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"
SCRIPT = "report.js"


@cache
def _environment(directory: Path) -> Environment:
    env = Environment(
        loader=FileSystemLoader(directory),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(pct=view.percent, score=view.score, count=view.count, width=view.bar_width)
    env.filters.update(ci=view.interval)
    env.filters.update(score_or_dash=view.score_or_dash, percent_or_dash=view.percent_or_dash)
    return env


def _asset(directory: Path, name: str, closing: str) -> str:
    text = (directory / name).read_text(encoding="utf-8")
    if closing in text.lower():
        raise ValueError(f"{name} must not contain {closing!r}")
    return text


def _csp(script: str) -> str:
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return (
        "default-src 'none'; style-src 'unsafe-inline'; "
        f"script-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'"
    )


def prepare() -> None:
    """Load and compile the page's template now (an audit does it while its sandboxes run)."""
    _environment(data_dir("reports")).get_template(TEMPLATE)


def render_report(summary: RunSummary, verdict: Mapping[str, Any] | None = None) -> str:
    """The HTML report of *summary* as one self-contained string.

    *verdict* is a gate result ``{"status": "pass"|"warn"|"fail", "checks":
    [{"name", "value", "limit", "passed"}, ...]}``; without it the banner shows
    the headline figures. The output references nothing outside itself, escapes
    every text taken from the run, and is identical for identical input.
    """
    directory = data_dir("reports")
    css = _asset(directory, STYLESHEET, "</style")
    script = _asset(directory, SCRIPT, "</script")
    template = _environment(directory).get_template(TEMPLATE)
    return template.render(
        **view.context(summary, verdict),
        css=Markup(css),
        script=Markup(script),
        csp=_csp(script),
        version=__version__,
    )


def write_report(
    summary: RunSummary,
    path: str | os.PathLike[str],
    verdict: Mapping[str, Any] | None = None,
) -> Path:
    """Render *summary* and write it to *path* atomically; returns the path written.

    The page is rendered first, then written to a temporary file beside *path*
    and renamed over it, so *path* is either the old file or the complete new
    one. Missing parent folders are created. A failed write (a full disk) names *path*.
    """
    target = Path(path)
    html = render_report(summary, verdict)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = staged_file(target, ".tmp")  # its mode: what the umask leaves of 0666
    try:
        with writing(target), os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(html)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return target
