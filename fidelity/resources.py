"""Find the data folders (``suites/``, ``prompts/``, ``reports/``).

From a checkout they are the top-level folders; from an installed wheel they
ship as ``fidelity/_data/<name>`` (symlinks in the checkout, copies in a wheel).
"""

from __future__ import annotations

from pathlib import Path

from fidelity.errors import NotFoundError, UsageError

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The bundled data folder *name* (``suites``, ``prompts`` or ``reports``)."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise NotFoundError(f"bundled data folder {name!r} is missing; reinstall fidelity")


def default_suite(domain: str) -> Path:
    """The bundled action suite of *domain* (``suites/<domain>/suite.jsonl``)."""
    path = data_dir("suites") / domain / "suite.jsonl"
    if not path.is_file():
        raise NotFoundError(f"no bundled suite for domain {domain!r} (looked for {path})")
    return path


def suite_project(domain: str, project: str, marker: str, kind: str) -> Path:
    """The folder of *domain*'s bundled project *project* (``suites/<domain>/<project>``,
    which holds the file *marker*); a :class:`UsageError` naming the *kind* of project and
    the known ones for any other name (a path, a hidden name, an unknown project)."""
    root = data_dir("suites") / domain
    folder = root / project
    if "/" in project or project.startswith(".") or not (folder / marker).is_file():
        known = sorted(p.parent.name for p in root.glob(f"*/{marker}"))
        raise UsageError(f"unknown {kind} project {project!r}; known: {', '.join(known)}")
    return folder
