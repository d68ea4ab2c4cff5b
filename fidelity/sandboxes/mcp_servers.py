"""The bundled MCP servers: pinned recipes, their install cache, fresh state per trajectory.

``suites/mcp/servers.toml`` pins each server. ``build`` installs every
Python server into its own virtual environment (the SQLite server needs
``mcp<2``, the others the current SDK) and the npm servers into one npm
prefix, under ``~/.cache/fidelity/mcp/<hash of the recipe>/``: nothing is
downloaded at audit time (no ``npx -y``). A trajectory's state (a files
root, a seeded git repository, a seeded SQLite database, a memory file) is a
fresh temporary folder made by :func:`make_state`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fidelity.errors import SandboxError, SandboxUnavailableError
from fidelity.resources import data_dir
from fidelity.sandboxes.base import dead_owner
from fidelity.sandboxes.images import cache_dir
from fidelity.trajectory import McpServer

Log = Callable[[str], None]
OWNER_FILE = ".fidelity-mcp-owner"
"""Holds the auditor's pid inside a trajectory's state folder (for ``sweep``)."""
_GIT_ENV = {
    "GIT_AUTHOR_NAME": "Fidelity Fixture",
    "GIT_AUTHOR_EMAIL": "fixture@example.com",
    "GIT_COMMITTER_NAME": "Fidelity Fixture",
    "GIT_COMMITTER_EMAIL": "fixture@example.com",
    "GIT_AUTHOR_DATE": "2026-01-05T10:00:00+00:00",
    "GIT_COMMITTER_DATE": "2026-01-05T10:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def recipe_folder() -> Path:
    """``suites/mcp`` (the server pins and the fixtures)."""
    return data_dir("suites") / "mcp"


def recipes() -> dict[str, Any]:
    """The parsed ``servers.toml``: ``{"python": {...}, "npm": {...}}``."""
    with (recipe_folder() / "servers.toml").open("rb") as handle:
        return tomllib.load(handle)


def install_dir() -> Path:
    """Where this recipe's servers are installed (by recipe hash)."""
    pins = (recipe_folder() / "servers.toml").read_bytes()
    return cache_dir() / "mcp" / hashlib.sha256(pins + sys.version.encode()).hexdigest()[:12]


def bundled_names() -> list[str]:
    """Every bundled server name."""
    parsed = recipes()
    return [*parsed.get("python", {}), *parsed.get("npm", {})]


def build(log: Log = lambda line: None) -> dict[str, str]:
    """Install every bundled server (idempotent); returns ``{server: its command}``."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise SandboxUnavailableError(
            "the npm MCP servers need node and npm (Debian nodejs npm; scripts/bootstrap.sh)"
        )
    target = install_dir()
    target.mkdir(parents=True, exist_ok=True)
    parsed = recipes()
    for name, recipe in parsed.get("python", {}).items():
        venv = target / name
        if not (venv / "bin" / recipe["command"]).exists():
            log(f"mcp: installing {name} ({', '.join(recipe['requirements'])})")
            _run([sys.executable, "-m", "venv", "--clear", str(venv)])
            _run([str(venv / "bin" / "pip"), "install", "-q", *recipe["requirements"]])
    npm_prefix = target / "npm"
    missing = [r for r in parsed.get("npm", {}).values() if not (npm_prefix / r["entry"]).exists()]
    if missing:
        packages = [r["package"] for r in parsed["npm"].values()]
        log(f"mcp: installing {', '.join(packages)}")
        npm_prefix.mkdir(exist_ok=True)
        _run(["npm", "install", "--prefix", str(npm_prefix), "--no-audit", "--no-fund", *packages])
    return {name: " ".join(resolve(McpServer(bundled=name)).argv) for name in bundled_names()}


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise SandboxError(f"{argv[0]} {argv[1]} failed: " + " | ".join(tail))


@dataclass(frozen=True)
class Launch:
    """How to start one server (placeholders not yet filled)."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None


def resolve(server: McpServer) -> Launch:
    """How to start *server*: its own command, or the bundled install's."""
    if server.bundled is None:
        assert server.command is not None  # the model validator says so
        return Launch([server.command, *server.args], dict(server.env), server.cwd)
    parsed = recipes()
    target = install_dir()
    if server.bundled in parsed.get("python", {}):
        recipe = parsed["python"][server.bundled]
        command = target / server.bundled / "bin" / recipe["command"]
        argv = [str(command)]
    else:
        recipe = parsed["npm"][server.bundled]
        command = target / "npm" / recipe["entry"]
        argv = [shutil.which("node") or "node", str(command)]
    if not command.exists():
        raise SandboxUnavailableError(
            f"bundled MCP server {server.bundled!r} is not installed; "
            "run: fidelity sandbox build --domain mcp"
        )
    args = server.args or list(recipe.get("args", []))
    env = {**recipe.get("env", {}), **server.env}
    return Launch([*argv, *args], env, server.cwd or recipe.get("cwd"))


def install_paths() -> list[Path]:
    """The host folders the bundled servers read, outside ``/usr`` (the jail's read-only
    binds): the install, and the Python and Node.js the install runs on where they live
    elsewhere (a pyenv, a version manager)."""
    paths = [install_dir(), Path(sys.base_prefix)]
    node = shutil.which("node")
    if node is not None:
        paths.append(Path(os.path.realpath(node)).parent.parent)
    return [path for path in paths if path.exists()]


def make_state(workdir: Path | None) -> dict[str, str]:
    """A fresh state folder for one trajectory; returns the placeholder values.

    ``root`` is a copy of *workdir* (default: the bundled ``fixtures/files``),
    ``repo`` the same files committed to a new git repository with fixed author
    and dates (so commit hashes repeat from run to run), ``db`` a SQLite
    database seeded from ``fixtures/seed.sql``, ``memory`` a memory file path
    (absent: an empty memory).
    """
    source = workdir or recipe_folder() / "fixtures" / "files"
    state = Path(tempfile.mkdtemp())  # /tmp/tmpXXXXXXXX: the comparators' temp_path rule
    (state / OWNER_FILE).write_text(str(os.getpid()))
    try:
        # symlinks stay links (as in the terminal's workspace): a dataset's link to a host
        # file must not be copied in by root, to be read by the servers
        shutil.copytree(source, state / "root", symlinks=True)
        shutil.copytree(source, state / "repo", symlinks=True)
        _seed_git(state / "repo")
        _seed_sqlite(state / "db.sqlite")
    except (OSError, subprocess.SubprocessError, sqlite3.Error) as exc:
        shutil.rmtree(state, ignore_errors=True)
        raise SandboxError(f"mcp: cannot prepare the trajectory state: {exc}") from exc
    return {
        "state": str(state),
        "root": str(state / "root"),
        "repo": str(state / "repo"),
        "db": str(state / "db.sqlite"),
        "memory": str(state / "memory.jsonl"),
    }


def _seed_git(repo: Path) -> None:
    env = {**os.environ, **_GIT_ENV}
    for argv in (
        ["git", "init", "-q", "-b", "main"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "Initial inventory tool"],
    ):
        subprocess.run(argv, cwd=repo, env=env, check=True, capture_output=True)


def _seed_sqlite(path: Path) -> None:
    seed = recipe_folder() / "fixtures" / "seed.sql"
    with sqlite3.connect(path) as db:
        db.executescript(seed.read_text())
    db.close()


def fill(value: str, state: dict[str, str]) -> str:
    """*value* with ``{root}``… replaced by this trajectory's paths (other braces kept)."""
    for key, path in state.items():
        value = value.replace("{" + key + "}", path)
    return value


def stale_states(owner: int | None = None) -> list[Path]:
    """State folders whose auditor process is gone (with *owner*: that dead process's)."""
    found = []
    for marker in Path(tempfile.gettempdir()).glob(f"tmp*/{OWNER_FILE}"):
        try:
            pid = int(marker.read_text().strip())
        except (OSError, ValueError):
            continue
        if dead_owner(pid, owner):
            found.append(marker.parent)
    return found
