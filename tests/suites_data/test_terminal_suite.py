"""The bundled terminal suite and its fixture project (suites/terminal)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fidelity.trajectory import CommandAction, Trajectory, command_name
from tests.conftest import require_binary

ROOT = Path(__file__).resolve().parents[2]
TERMINAL = ROOT / "suites" / "terminal"
SUITE = TERMINAL / "suite.jsonl"
FIXTURES = TERMINAL / "fixtures"
PROJECT = FIXTURES / "project"
SETUP = FIXTURES / "setup.sh"

FAILING_TEST = (
    "test_percentile_nearest_rank (tests.test_stats.StatsTest.test_percentile_nearest_rank)"
)

# Program names (as fidelity.trajectory.command_name reports them) each category must use.
CATEGORIES: dict[str, set[str]] = {
    "navigation": {"cd", "pwd", "ls", "find"},
    "inspection": {"cat", "head", "tail", "wc", "grep", "sort", "awk", "cut"},
    "editing": {"sed", "echo", "mkdir", "cp", "mv", "rm", "chmod"},
    "python": {"python", "python -m unittest"},
    "git": {
        "git status",
        "git log",
        "git diff",
        "git add",
        "git commit",
        "git show",
        "git branch",
        "git checkout",
    },
    "errors": {"gti"},  # a typo that must come back as "command not found"
}
TAGS = set(CATEGORIES)

# find / grep -r commands left unsorted because they match at most one file.
SINGLE_MATCH = {
    "grep -rn TODO src tests",
    "find . -name '*.csv' -exec wc -l {} \\;",
    "find . -name '*.md' -not -path './.git/*'",
}


def _load() -> list[Trajectory]:
    return [
        Trajectory.model_validate_json(line)
        for line in SUITE.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]


def _commands(trajectories: list[Trajectory]) -> list[str]:
    return [
        step.action.command
        for t in trajectories
        for step in t.steps
        if isinstance(step.action, CommandAction)
    ]


def test_suite_lines_validate() -> None:
    trajectories = _load()
    assert len(trajectories) >= 30
    ids = [t.id for t in trajectories]
    assert len(ids) == len(set(ids)), "duplicate trajectory ids"
    for t in trajectories:
        assert re.fullmatch(r"term-\d{3}-[a-z0-9-]+", t.id), t.id
        assert t.domain == "terminal"
        assert t.source == "suite"
        assert 5 <= len(t.steps) <= 15, (t.id, len(t.steps))
        assert t.env.backend == "local"
        assert t.env.workdir == "fixtures/project"
        assert t.env.setup == ["@fixtures/setup.sh"]
        assert all(s.observation is None for s in t.steps), t.id
        assert all(isinstance(s.action, CommandAction) for s in t.steps), t.id
        assert t.meta.get("title"), t.id
        assert set(t.meta.get("tags", [])) <= TAGS, t.id


def test_suite_covers_every_category() -> None:
    trajectories = _load()
    names = {command_name(c) for c in _commands(trajectories)}
    for category, required in CATEGORIES.items():
        missing = required - names
        assert not missing, f"{category}: no command runs {sorted(missing)}"
        tagged = [t.id for t in trajectories if category in t.meta.get("tags", [])]
        assert len(tagged) >= 3, f"only {len(tagged)} trajectories tagged {category!r}"


def test_suite_covers_key_behaviours() -> None:
    text = "\n".join(_commands(_load()))
    for needle in [
        "ls -la",
        "ls -R",
        "grep -rn",
        "| uniq -c",
        "sed -i",
        ">> ",
        "python3 -m unittest discover",
        "python3 -c",
        "git show --stat",
        "git checkout -b",
        "git show deadbeef",  # bad revision
        "cat notes.txt",  # missing file
        "./scripts/summarize.py",  # not executable
    ]:
        assert needle in text, needle


def test_suite_avoids_nondeterministic_commands() -> None:
    for command in _commands(_load()):
        name = command_name(command)
        assert name not in {"date", "ps", "sleep", "top", "shuf", "vim", "nano", "less"}, command
        assert "$RANDOM" not in command, command
        if name == "find" or command.startswith("grep -r"):
            # directory order is filesystem dependent: sort, count, or match one file only
            stable = "| sort" in command or "| wc" in command
            assert stable or command in SINGLE_MATCH, command


def test_fixture_files_exist() -> None:
    assert SETUP.is_file()
    for rel in [
        "README.md",
        "Makefile",
        ".gitignore",
        "src/logstats/__init__.py",
        "src/logstats/parser.py",
        "src/logstats/stats.py",
        "src/logstats/report.py",
        "data/requests.csv",
        "data/access.log",
        "data/config.json",
        "tests/test_stats.py",
        "scripts/summarize.py",
        "scripts/run_tests.sh",
    ]:
        assert (PROJECT / rel).is_file(), rel
    assert not (PROJECT / ".git").exists(), "the fixture must not carry its own .git"
    size = sum(p.stat().st_size for p in PROJECT.rglob("*") if p.is_file())
    assert size < 100_000


@pytest.fixture
def built_project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A copy of the fixture project after setup.sh, and the env it ran with."""
    require_binary("git", "apt-get install git")
    work = tmp_path / "workspace"
    home = tmp_path / "home"
    home.mkdir()
    shutil.copytree(PROJECT, work, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "GIT_CONFIG_NOSYSTEM": "1",
        "LC_ALL": "C",
    }
    result = subprocess.run(
        ["bash", str(SETUP)], cwd=work, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return work, env


def _git(work: Path, env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        ["git", *args], cwd=work, env=env, capture_output=True, text=True, timeout=30, check=True
    )
    return result.stdout


def test_setup_builds_clean_history(built_project: tuple[Path, dict[str, str]]) -> None:
    work, env = built_project
    log = _git(work, env, "log", "--oneline").splitlines()
    assert 4 <= len(log) <= 6, log
    assert _git(work, env, "status", "--porcelain") == ""
    assert _git(work, env, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    # HEAD~1 is the commit that planted the bug; HEAD changes the config.
    assert "int(len(ordered) * pct / 100)" in _git(work, env, "show", "HEAD~1")
    assert "data/config.json" in _git(work, env, "show", "--stat", "HEAD")
    # Every fixture file is tracked and the tree matches the fixture exactly.
    tracked = set(_git(work, env, "ls-files").splitlines())
    on_disk = {
        p.relative_to(PROJECT).as_posix()
        for p in PROJECT.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert tracked == on_disk
    for rel in on_disk:
        assert (work / rel).read_bytes() == (PROJECT / rel).read_bytes(), rel


def test_exactly_the_planted_test_fails(built_project: tuple[Path, dict[str, str]]) -> None:
    work, env = built_project
    unittest = [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."]
    result = subprocess.run(
        unittest, cwd=work, env=env, capture_output=True, text=True, timeout=120
    )
    report = result.stdout + result.stderr
    assert result.returncode == 1, report
    assert re.findall(r"^(?:FAIL|ERROR): (.+)$", report, flags=re.M) == [FAILING_TEST]
    assert "FAILED (failures=1)" in report
    assert "AssertionError: 6 != 5" in report

    # The suite's one-line sed fix makes every test pass.
    fix = r"s|int(len(ordered) \* pct / 100)|math.ceil(len(ordered) * pct / 100) - 1|"
    subprocess.run(["sed", "-i", fix, "src/logstats/stats.py"], cwd=work, check=True)
    fixed = subprocess.run(unittest, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert _git(work, env, "status", "--porcelain") == " M src/logstats/stats.py\n"
