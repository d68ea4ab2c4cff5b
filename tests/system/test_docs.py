"""The documentation: a short README whose links into docs/ hold, a CLI reference that
matches the CLI, a site that builds strictly, and CI running the README's test command."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path

from tests.conftest import require_module

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 200

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*(```|~~~)")


def markdown_lines(path: Path) -> list[str]:
    """The lines of a Markdown file outside fenced code blocks."""
    lines, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    """The anchor MkDocs' toc extension gives a heading (Python-Markdown's ``slugify``)."""
    text = re.sub(r"[`*_]", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def anchors(path: Path) -> set[str]:
    """The anchors of a page's ATX headings."""
    return {
        slug(line.lstrip("#").strip())
        for line in markdown_lines(path)
        if re.match(r"^#{1,6}\s", line)
    }


def broken_links(path: Path) -> list[str]:
    """Links from *path* into docs/ whose page or heading does not exist."""
    broken = []
    for line in markdown_lines(path):
        for target in _LINK.findall(line):
            page, _, anchor = target.partition("#")
            if not page.startswith("docs/"):
                continue
            file = ROOT / page
            if not file.is_file():
                broken.append(f"{target}: no file {page}")
            elif anchor and anchor not in anchors(file):
                broken.append(f"{target}: no heading with anchor #{anchor} in {page}")
    return broken


def readme_test_command() -> str:
    """The README's test command: its first shell line running bootstrap.sh with ``tests``
    (the Quick start's; later ones, such as a quick loop, may follow)."""
    text = README.read_text(encoding="utf-8")
    blocks: list[str] = re.findall(r"^```sh\n(.*?)^```", text, flags=re.M | re.S)
    commands = [
        line.strip()
        for block in blocks
        for line in block.splitlines()
        if line.strip().startswith("./scripts/bootstrap.sh") and "tests" in shlex.split(line)
    ]
    assert commands, "README.md shows no test command (./scripts/bootstrap.sh ... tests)"
    return commands[0]


def test_readme_fits_on_a_screen() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, (
        f"README.md has {len(lines)} lines, at most {MAX_README_LINES}: move detail into docs/"
    )


def test_ci_runs_the_readme_test_command() -> None:
    command = readme_test_command()
    assert command == "./scripts/bootstrap.sh lint typecheck tests"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert command in [line.strip() for line in ci if not line.lstrip().startswith("#")], (
        f".ci/run does not run the README's test command: {command}"
    )


def test_readme_links_into_docs_point_to_pages_and_headings() -> None:
    targets = [t for line in markdown_lines(README) for t in _LINK.findall(line)]
    assert sum(t.startswith("docs/") for t in targets) >= 10, "README.md should link into docs/"
    assert any("#" in t for t in targets if t.startswith("docs/")), "no anchor link checked"
    assert broken_links(README) == []


def test_link_check_reports_a_missing_page_and_a_missing_heading(tmp_path: Path) -> None:
    page = tmp_path / "README.md"
    page.write_text(
        "[a](docs/gate.md#dataset-gate) [b](docs/nope.md) [c](docs/gate.md#no-such-heading)\n"
        "```sh\n[d](docs/in-code.md)\n```\n",
        encoding="utf-8",
    )
    assert broken_links(page) == [
        "docs/nope.md: no file docs/nope.md",
        "docs/gate.md#no-such-heading: no heading with anchor #no-such-heading in docs/gate.md",
    ]


def test_slug_matches_mkdocs_anchors() -> None:
    assert slug("Your own rules: `--compare-config`") == "your-own-rules-compare-config"
    assert slug("Task → record") == "task-record"
    assert slug("Where the time went, and what runs compiled") == (
        "where-the-time-went-and-what-runs-compiled"
    )


def test_cli_reference_matches_the_cli() -> None:
    # Its own process: Typer reads the terminal width when it is imported.
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "cli_reference.py"), "--check"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cli_reference_lists_every_command() -> None:
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    for command in ("audit", "replay", "simulate", "import", "export", "diff", "report"):
        assert f"## `fidelity {command}`" in page
    for command in ("gate", "drift", "judge", "runs", "sandbox build", "sandbox sweep"):
        assert f"## `fidelity {command}`" in page


def test_site_builds_strictly(tmp_path: Path) -> None:
    require_module("mkdocs", "pip install -e '.[test]'")
    require_module("material", "pip install -e '.[test]'")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "cli" / "index.html").is_file()


def test_the_declared_python_api_resolves_and_is_documented() -> None:
    """``fidelity.__all__`` is the supported API: every name loads, and the Python API page
    renders each one (mkdocstrings, in the strict build above)."""
    import fidelity

    page = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"^::: fidelity\.[\w.]*\.(\w+)$", page, re.MULTILINE))
    for name in fidelity.__all__:
        assert getattr(fidelity, name) is not None, name
    assert set(fidelity.__all__) - {"__version__", "DEFAULT_DB", "SandboxConfig", "Domain"} <= (
        documented
    )
