"""The package's import structure: no circles, and a command imports only what it runs.

The circle check reads every ``import`` statement of every module with ``ast``:
module level, inside functions, and under ``if TYPE_CHECKING:`` alike (a lazy
or typing-only import that closes a circle is still two modules that need each
other). ``from package import name`` counts as an edge to the submodule when
*name* is one (compiled extensions included), else to the package's
``__init__``; importing a submodule is not counted as an edge to its parents.

The command checks run each command for real on a tiny input in a fresh
interpreter and read ``sys.modules`` at its exit.

The package holds only what runs: every module is reached from an entry point
(the console script, ``python -m fidelity``, the package itself) through imports
or a module named by string (``"module:attr"`` in the sandbox registry, ``python -m
MODULE`` children); dev-set builders and fitting code live in ``devsets/``.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest

import fidelity
from fakes.trajectories import command_trajectory
from fidelity.formats.jsonl import write_trajectories
from fidelity.store import Store
from tests.conftest import TERMINAL

PACKAGE = Path(fidelity.__file__).resolve().parent
ROOT = PACKAGE.parent

HEAVY = ("sklearn", "matplotlib", "pandas", "openai", "jinja2", "scipy")
"""Libraries that take tenths of a second to import and that few commands use."""

# Modules imported by each command at its exit, with room for small changes (measured:
# runs 354, replay 513, audit with its HTML report 859 (its charts drawn without matplotlib);
# before issue 31: 448, 1526, 2675; after its first part: 364, 627, 1020; after its second,
# with matplotlib: 353, 514, 1010; runs 349 once the store built no model at import; 291
# once it imported no pydantic at all and Typer was held below 0.29; with the store a package,
# 295, 525, 667; with the command line a package whose commands import only their own family's
# module, and fidelity/defaults.py: 299, 532, 674; the compare modules split out of
# normalize.py and android.py, 299, 534; readers that drop a leading BOM load the
# standard library's utf_8_sig codec: replay 535).
CEILING = {"runs": 300, "replay": 540, "audit": 900}

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


_LIBRARY_AUDIT = """
import json, sys
from pathlib import Path
from fidelity.audit import AuditConfig, run_audit
from fidelity.pipeline import SimConfig
suite, db = (Path(arg) for arg in sys.argv[2:])
run_audit(AuditConfig(suite=suite, db=db, limit=1, sim=SimConfig(baseline="copy")))
open(sys.argv[1], "w").write(json.dumps(sorted(sys.modules)))
"""


def imported(tmp_path: Path, *args: str, probe: str = _PROBE) -> set[str]:
    """The modules loaded by ``fidelity ARGS`` (or by *probe* given ARGS) run in a fresh
    interpreter, at its exit."""
    out = tmp_path / "modules.json"
    result = subprocess.run(
        [sys.executable, "-c", probe, str(out), *args],
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
    # listing runs compares nothing and reads no trajectory: the store loads the models of
    # trajectories and comparisons (pydantic classes built at import) only where a method uses them
    unused = {"fidelity.task", "fidelity.sandboxes", "fidelity.judge", "fidelity.compare"}
    assert not unused & loaded
    assert not {"fidelity.trajectory", "fidelity.compare.base", "fidelity.compare.config"} & loaded
    # nor any pydantic machinery: building a schema (a model, a TypeAdapter; Typer 0.29 builds
    # one per option) costs more than the listing itself
    assert not {name for name in loaded if name.startswith("pydantic._internal")}
    assert len(loaded) <= CEILING["runs"], len(loaded)


@pytest.mark.bwrap
@pytest.mark.usefixtures("bwrap")
def test_replay_imports_no_world_model_judge_or_report_library(tmp_path: Path) -> None:
    suite = tmp_path / "suite.jsonl"
    write_trajectories(suite, [command_trajectory("t1", "echo hi")])
    loaded = imported(tmp_path, "replay", str(suite), "-o", str(tmp_path / "real.jsonl"))
    assert (tmp_path / "real.jsonl").is_file()
    assert _heavy(loaded) == []  # jinja2 too: the prompts are the world model's
    assert "numpy" not in loaded
    assert (
        not {
            "fidelity.judge.run",
            "fidelity.judge.steps",
            "fidelity.worldmodels.openai_compat",
        }
        & loaded
    )
    assert not {"fidelity.audit", "fidelity.analysis", "fidelity.report"} & loaded
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
    # the HTML report is written: its templates (jinja2) are used; its charts are SVG
    # written directly, without matplotlib
    assert [name for name in _heavy(loaded) if name != "jinja2"] == []
    assert not {"fidelity.judge.run", "fidelity.worldmodels.openai_compat"} & loaded
    assert len(loaded) <= CEILING["audit"], len(loaded)


def test_the_audit_loads_what_its_end_needs_beside_its_sandboxes() -> None:
    """Before its first sandbox, an audit imports no numpy (the summary's) and no jinja2 (the
    report's): a thread loads them once the sandboxes run (``fidelity.audit._Tail``)."""
    script = (
        "import sys; import fidelity.cli, fidelity.audit; "
        "print(sorted({'numpy', 'jinja2', 'fidelity.analysis.summary'} & set(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def named_by_string(known: dict[str, tuple[Path | None, bool]]) -> set[str]:
    """Modules the package names in a string constant rather than an import statement.

    A whole constant must name the module (a docstring mentioning one does not
    count): ``"module"`` or ``"module:attr"`` (the sandbox registry's backends, a
    child started with ``python -m module``), a submodule's short name in its
    package's ``__init__`` (the lazy ``_LAZY`` tables of ``compare`` and
    ``worldmodels``), or a sibling's file name (``"desktop_session.py"``, run as a
    script).
    """
    found: set[str] = set()
    for name, (path, package) in known.items():
        if path is None:
            continue
        home = name if package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                continue
            value = node.value
            candidates = {value.partition(":")[0], f"{home}.{value.removesuffix('.py')}"}
            if not package and not value.endswith(".py"):
                candidates.discard(f"{home}.{value}")
            found |= candidates & known.keys()
    return found


def entry_points() -> set[str]:
    """The modules a user starts: console scripts, ``python -m fidelity``, the package."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    scripts = {target.partition(":")[0] for target in project.get("scripts", {}).values()}
    return {"fidelity", "fidelity.__main__", *scripts}


def unreached(graph: dict[str, dict[str, int]], roots: set[str]) -> list[str]:
    """The modules of *graph* that no import path from *roots* loads.

    Loading a module also runs its parent packages' ``__init__``.
    """
    seen: set[str] = set()
    todo = [root for root in roots if root in graph]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parents = [name.rsplit(".", n)[0] for n in range(1, name.count(".") + 1)]
        todo.extend(target for target in [*graph[name], *parents] if target in graph)
    return sorted(set(graph) - seen)


LIBRARY_ONLY = {
    "fidelity.sandboxes.search_http": "docs/domains/search.md: serve() stands up engine_url",
}
"""Modules no command runs that the documentation offers as library API (and why)."""


def test_every_module_of_the_package_runs_from_an_entry_point() -> None:
    """A module only tests or benchmarks import belongs outside the package (``devsets/``)."""
    known = modules()
    graph = {name: edges(name, known) for name in known}
    roots = entry_points() | named_by_string(known)
    assert "fidelity.cli" in roots and "fidelity.sandboxes.mcp" in roots
    # an entry here that a command reaches or that is gone is stale: drop it
    assert sorted(set(LIBRARY_ONLY) & set(unreached(graph, roots))) == sorted(LIBRARY_ONLY)
    missing = unreached(graph, roots | set(LIBRARY_ONLY))
    assert not missing, "modules no entry point reaches (move them out of fidelity/):\n" + (
        "\n".join(missing)
    )


def test_the_reachability_walk_follows_imports_and_parent_packages_only() -> None:
    graph: dict[str, dict[str, int]] = {
        "p": {},
        "p.cli": {"p.a.b": 3},
        "p.a": {},
        "p.a.b": {},
        "p.a.fit": {"p.a.b": 1},  # imports shipped code, but nothing shipped imports it
        "p.tool": {},
    }
    assert unreached(graph, {"p.cli"}) == ["p.a.fit", "p.tool"]
    tree = {"fidelity.cli": (None, False), "fidelity.sandboxes.mcp": (None, False)}
    assert named_by_string(tree) == set()  # compiled or sourceless modules name nothing
    named = named_by_string(modules())
    assert {"fidelity.sandboxes.mcp", "fidelity.compare.osworld"} <= named  # registry, _LAZY
    assert "fidelity.sandboxes.desktop_session" in named  # run as a script by desktop.py
    assert "fidelity.sandboxes.reaper" in named  # python -m


@pytest.mark.slow
def test_the_wheel_ships_no_dev_set_builder(tmp_path: Path) -> None:
    """The built wheel carries the fitted calibrations and their loader, not the builders."""
    pip = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    result = subprocess.run(
        [*pip, "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (wheel,) = tmp_path.glob("fidelity-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    shipped = {n for n in names if n.startswith("fidelity/compare/calibration/")}
    assert {"fidelity/compare/calibration/__init__.py", "fidelity/compare/calibration/apply.py"} | {
        f"fidelity/compare/calibration/{d}.json"
        for d in ("terminal", "swe", "web", "mcp", "search", "os")
    } <= shipped
    assert not [n for n in names if "devset" in n or n.endswith("/fit.py")]
    assert not [n for n in names if not n.startswith(("fidelity/", "fidelity-"))]


@pytest.mark.bwrap
@pytest.mark.usefixtures("bwrap")
def test_an_audit_without_a_report_imports_no_report_library(tmp_path: Path) -> None:
    loaded = imported(
        tmp_path, str(TERMINAL / "suite.jsonl"), str(tmp_path / "a.duckdb"), probe=_LIBRARY_AUDIT
    )
    assert Store(tmp_path / "a.duckdb", read_only=True).list_runs()[0]["steps"] > 0
    assert _heavy(loaded) == []
    assert "fidelity.report" not in loaded


def test_the_report_writers_load_on_first_use(tmp_path: Path) -> None:
    """``fidelity.report``'s other modules (the side-by-side diff) need no template or chart."""
    script = (
        "import sys; import fidelity.report.diff; "
        "print(sorted({'jinja2', 'matplotlib'} & set(sys.modules))); "
        "from fidelity.report import render_report, write_report; "
        "print(render_report.__module__, write_report.__module__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert result.stdout.split("\n")[:2] == ["[]", "fidelity.report.html fidelity.report.html"]


def test_a_command_named_first_gets_a_group_of_that_command_alone() -> None:
    """``fidelity NAME …`` builds only NAME's Click parameters; help and unknown names get all."""
    from fidelity.cli.application import named_command

    for name in ("runs", "sandbox"):
        group = named_command([name, "--help"])
        assert group is not None
        assert list(group.commands) == [name]
    for args in ([], ["--help"], ["runz"], ["--db", "x"]):
        assert named_command(args) is None


_ENTRY = "import sys; sys.argv[0] = 'fidelity'; from fidelity.cli import {0}; {0}()"


@pytest.mark.parametrize(
    "args",
    [
        ["runs", "--db", "{db}"],
        ["runs", "--db", "{db}", "--bogus"],
        ["runs", "--db", "{missing}"],
        ["runs", "--help"],
        ["sandbox", "--help"],
        ["audit", "--limit", "x"],
    ],
)
def test_the_entry_point_answers_as_the_whole_app(tmp_path: Path, args: list[str]) -> None:
    """``main`` (one command built) and ``app`` (all built): same output, errors, exit code."""
    db = tmp_path / "x.duckdb"
    Store(db).close()
    argv = [arg.format(db=db, missing=tmp_path / "missing.duckdb") for arg in args]
    answers = [
        subprocess.run(
            [sys.executable, "-c", _ENTRY.format(entry), *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            check=False,
        )
        for entry in ("main", "app")
    ]
    lean, whole = ((a.returncode, a.stdout, a.stderr) for a in answers)
    assert lean == whole
