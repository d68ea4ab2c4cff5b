"""The package's import structure: no circles, and a command imports only what it runs.

The circle check reads every ``import`` statement of every module with ``ast``:
module level, inside functions, and under ``if TYPE_CHECKING:`` alike (a lazy
or typing-only import that closes a circle is still two modules that need each
other). ``from package import name`` counts as an edge to the submodule when
*name* is one (compiled extensions included), else to the package's
``__init__``; importing a submodule is not counted as an edge to its parents.

The command checks run each command for real on a tiny input in a fresh
interpreter and read ``sys.modules`` at its exit.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

import fidelity
from fidelity.formats.jsonl import write_trajectories
from fidelity.store import Store
from tests.conftest import TERMINAL, command_trajectory

PACKAGE = Path(fidelity.__file__).resolve().parent
ROOT = PACKAGE.parent

HEAVY = ("sklearn", "matplotlib", "pandas", "openai", "jinja2", "scipy")
"""Libraries that take tenths of a second to import and that few commands use."""

# Modules imported by each command at its exit, with room for small changes (measured:
# runs 364, replay 627, audit with its HTML report 1020; before issue 31: 448, 1526, 2675).
CEILING = {"runs": 400, "replay": 700, "audit": 1120}

_PROBE = """
import atexit, json, runpy, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
sys.argv = ["fidelity", *sys.argv[2:]]
runpy.run_module("fidelity", run_name="__main__")
"""


def modules() -> dict[str, tuple[Path | None, bool]]:
    """Every module of the package by dotted name: (source file or None, is a package)."""
    found: dict[str, tuple[Path | None, bool]] = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    for path in PACKAGE.rglob("*.so"):  # compiled extensions: leaves
        parts = [*path.relative_to(ROOT).parts[:-1], path.name.split(".")[0]]
        found[".".join(parts)] = (None, False)
    return found


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def edges(name: str, known: dict[str, tuple[Path | None, bool]]) -> dict[str, int]:
    """The package's modules that module *name* imports, each with the line of one import."""
    path, package = known[name]
    if path is None:
        return {}
    found: dict[str, int] = {}
    for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = name.split(".") if package else name.split(".")[:-1]
            if node.level:
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            targets = [
                f"{module}.{alias.name}" if f"{module}.{alias.name}" in known else module
                for alias in node.names
            ]
        for target in targets:
            if target in known and target != name:
                found.setdefault(target, node.lineno)
    return found


def circles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One circle (a path back to its start) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:  # Tarjan
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_path_around(graph, group) for group in groups]


def _path_around(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """A shortest circle through the group's first module (breadth first)."""
    start = min(group)
    came: dict[str, str] = {}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(graph[node]):
            if target == start:
                path = [node]
                while path[-1] != start:
                    path.append(came[path[-1]])
                return [*reversed(path), start]
            if target in group and target not in came:
                came[target] = node
                queue.append(target)
    return sorted(group)


def import_graph() -> dict[str, dict[str, int]]:
    known = modules()
    return {name: edges(name, known) for name in known}


def test_the_package_has_no_import_circle() -> None:
    graph = import_graph()
    found = circles(graph)
    shown = [
        " -> ".join(f"{a} (line {graph[a][b]})" for a, b in pairwise(path)) + f" -> {path[-1]}"
        for path in found
    ]
    assert not found, "import circles:\n" + "\n".join(shown)


def test_the_circle_finder_finds_a_circle_through_a_function_level_import() -> None:
    """The check itself: a lazy import closing a circle, and a TYPE_CHECKING one, count."""
    graph = {
        "a": {"b": 1},
        "b": {"c": 3},
        "c": {"a": 9},  # e.g. inside a function
        "d": {"a": 2},
    }
    assert circles(graph) == [["a", "b", "c", "a"]]
    tree = ast.parse(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fidelity.store\n"
        "def f():\n    from fidelity import judge\n"
    )
    assert [type(n).__name__ for n in _imports(tree)] == ["ImportFrom", "Import", "ImportFrom"]


def test_a_package_import_of_a_submodule_points_at_the_submodule() -> None:
    known = modules()
    assert "fidelity.compare._fastnorm" in edges("fidelity.compare.normalize", known)
    assert "fidelity.compare" not in edges("fidelity.compare.normalize", known)
    assert "fidelity.sandboxes.base" in edges("fidelity.sandboxes", known)


def imported(tmp_path: Path, *args: str) -> set[str]:
    """The modules loaded by ``fidelity ARGS`` run in a fresh interpreter, at its exit."""
    out = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, str(out), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return set(json.loads(out.read_text()))


def _heavy(loaded: set[str]) -> list[str]:
    return sorted(name for name in HEAVY if name in loaded)


def test_runs_imports_neither_the_heavy_libraries_nor_numpy(tmp_path: Path) -> None:
    db = tmp_path / "x.duckdb"
    Store(db).close()
    loaded = imported(tmp_path, "runs", "--db", str(db))
    assert _heavy(loaded) == []
    assert "numpy" not in loaded
    assert not {"fidelity.task", "fidelity.sandboxes", "fidelity.judge"} & loaded
    assert len(loaded) <= CEILING["runs"], len(loaded)


@pytest.mark.bwrap
@pytest.mark.usefixtures("bwrap")
def test_replay_imports_no_world_model_judge_or_report_library(tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    write_trajectories(suite, [command_trajectory("t1", "echo hi")])
    loaded = imported(tmp_path, "replay", str(suite), "-o", str(tmp_path / "real.jsonl"))
    assert [name for name in _heavy(loaded) if name != "jinja2"] == []
    assert not {"fidelity.judge", "fidelity.judging", "fidelity.worldmodels.openai_compat"} & loaded
    assert len(loaded) <= CEILING["replay"], len(loaded)


@pytest.mark.bwrap
@pytest.mark.usefixtures("bwrap")
def test_an_audit_with_the_copy_baseline_imports_only_its_report_libraries(
    tmp_path: Path,
) -> None:
    args = ["audit", str(TERMINAL / "suite.jsonl"), "--sim-baseline", "copy", "--limit", "1"]
    loaded = imported(
        tmp_path, *args, "--db", str(tmp_path / "a.duckdb"), "--report", str(tmp_path / "r.html")
    )
    assert (tmp_path / "r.html").is_file()
    # the HTML report is written: its templates (jinja2) and charts (matplotlib) are used
    assert [name for name in _heavy(loaded) if name not in {"jinja2", "matplotlib"}] == []
    assert not {"fidelity.judge", "fidelity.worldmodels.openai_compat"} & loaded
    assert len(loaded) <= CEILING["audit"], len(loaded)
