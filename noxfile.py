"""nox sessions: tests, lint, typecheck, demo, web, benchmarks."""

from __future__ import annotations

import glob
import time
from pathlib import Path

import nox

nox.options.default_venv_backend = "uv|venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "typecheck", "tests"]

RUFF = "ruff==0.17.5"


def install_package(session: nox.Session, *args: str) -> None:
    """``pip install -e`` the package (with *args*), then compile its bytecode.

    Where ``PYTHONDONTWRITEBYTECODE`` is set (as on CI machines) an editable install
    never gets ``__pycache__``, and every start recompiles each module it imports
    (about 1.5 s for ``fidelity audit``); compileall writes it once, here.
    """
    session.install(*args)
    session.run(
        "python", "-m", "compileall", "-q", "fidelity", env={"PYTHONDONTWRITEBYTECODE": None}
    )


MYPY = "mypy==2.4.1"
MKDOCS_ENV = {"NO_MKDOCS_2_WARNING": "1"}  # Material's end-of-life banner, printed on every build


# verl's own dataset and reward code read the `--to verl` rows (tests/formats/
# test_stack_loaders.py). verl pins transformers<5.11 and pulls its whole training stack
# (ray[default], wandb, tensorboard, peft), so it goes in without its dependencies, beside the few
# that verl.utils.dataset.rl_dataset and verl.utils.reward_score import (22 MB in all).
VERL_LOADER = [
    "verl==0.9.1",
    "tensordict==0.10.0",
    "pyvers==0.2.3",
    "omegaconf==2.4.0",
    "antlr4-python3-runtime==4.9.3",
    "codetiming==1.4.0",
]


# pip, not uv: the CPU build of torch (for the real `transformers serve` tests) comes
# from the machine's pip configuration (find-links), which uv does not read.
@nox.session(venv_backend="venv")
def tests(session: nox.Session) -> None:
    """The whole test suite, real sandboxes included (CI=true makes missing ones fail)."""
    install_package(session, "-e", ".[test]")
    session.install("--no-deps", *VERL_LOADER)
    # under .nox/ (ignored); not session.create_tmp(), which would set TMPDIR inside the
    # virtualenv for every later command, and Ray refuses a temp_dir inside a virtualenv
    site = Path(".nox") / "docs-site"
    session.run("mkdocs", "build", "--strict", "--site-dir", str(site), env=MKDOCS_ENV)
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff lint and format check over the package, tests, benchmarks and this file."""
    session.install(RUFF)
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy --strict over the package (with the web extra, whose modules it imports)."""
    install_package(session, "-e", ".[web]", MYPY, "pandas-stubs")  # web: Playwright, uvicorn
    session.run("mypy")


@nox.session
def demo(session: nox.Session) -> None:
    """The main job on the embedded default: audit the bundled terminal suite."""
    install_package(session, "-e", ".")
    session.run(
        "fidelity",
        "audit",
        "--domain",
        "terminal",
        "--db",
        "fidelity.duckdb",
        "--report",
        "report.html",
        *session.posargs,
    )


@nox.session
def web(session: nox.Session) -> None:
    """Audit the bundled web suite in real Chromium (scripts/bootstrap.sh web installs it)."""
    install_package(session, "-e", ".[web]")
    session.run("fidelity", "audit", "--domain", "web", "--db", "fidelity.duckdb", *session.posargs)


@nox.session
def mcp(session: nox.Session) -> None:
    """Install the bundled MCP servers and audit the mcp suite (scripts/bootstrap.sh mcp)."""
    install_package(session, "-e", ".[mcp]")
    session.run("fidelity", "sandbox", "build", "--domain", "mcp")
    session.run("fidelity", "audit", "--domain", "mcp", "--db", "fidelity.duckdb", *session.posargs)


@nox.session
def search(session: nox.Session) -> None:
    """Build the search corpus and audit the search suite (scripts/bootstrap.sh search)."""
    install_package(session, "-e", ".[search]")
    session.run("fidelity", "sandbox", "build", "--domain", "search")
    session.run(
        "fidelity", "audit", "--domain", "search", "--db", "fidelity.duckdb", *session.posargs
    )


# Every script in benchmarks/ at a quick size (the whole step about half an hour on two
# busy cores); a script's own flags give the figures of the README (see its docstring).
BENCHMARK_ARGS: dict[str, list[str]] = {
    "agent_devset.py": [],
    "android_devset.py": [],
    "analysis_scale.py": ["--trajectories", "1000", "--depth", "50"],
    "browser_latency.py": ["--trajectories", "2"],
    "calibrate.py": ["--dry-run", "--cache", ".nox/benchmarks/replays"],
    "calibrate_os.py": [],  # its two desktop replays are made first, see below
    "calibrate_tools.py": ["--dry-run"],
    "compare_quality.py": ["--cache", ".nox/benchmarks/replays"],
    "compare_throughput.py": ["--pairs", "1000", "--repeat", "1"],
    "desktop_latency.py": ["--steps", "3"],
    "diff_throughput.py": ["--trajectories", "30", "--depth", "10", "--scale", "3"],
    "docker_latency.py": ["--steps", "30", "--starts", "2", "--max-concurrency", "2"],
    "fault_bounds.py": [],
    "gate_coverage.py": ["--gates", "100"],  # simulated gates; the docs' figures: no flag
    "gate_scale.py": ["--sizes", "2000,10000", "--sample", "10"],
    "images.py": ["--runs", "2", "--images", "2", "--trajectories", "4", "--rounds", "1"],
    "local_sandbox_latency.py": ["--steps", "50"],
    "mcp_latency.py": ["--steps", "30", "--starts", "2"],
    "outcome_check.py": ["--rounds", "1"],
    "ray_executor.py": ["--limit", "6"],
    "risk_auroc.py": ["--repeat", "1", "--cache", ".nox/benchmarks/replays"],
    "search_latency.py": ["--rounds", "1"],
    "simulate_concurrency.py": [],
    "startup.py": ["--runs", "3"],
    "rl_export.py": [],  # 5,000 trajectories; --trajectories 100000 for the docs' figure
    "wm_devset.py": ["--no-agent-pairs"],  # the docs' figures fit on the public-run pairs too
    "store_writes.py": ["--steps", "20000", "--naive-steps", "1000"],
    "swe_pool.py": ["--runs", "2", "--rounds", "1", "--max-concurrency", "2"],
    "web_devset.py": ["--cache", ".nox/benchmarks/replays"],  # two web replays, kept
}
BENCHMARK_MODULES = {
    "child_usage.py",
    "compare_devset.py",
    "replay_cli.py",
}  # imported by the scripts, not run


@nox.session
def benchmarks(session: nox.Session) -> None:
    """Every script in benchmarks/ to the end, at a quick size (figures and ratios, no asserts).

    ``nox -s benchmarks -- NAME.py …`` runs only those. A script that fails is
    reported at the end; the others still run.
    """
    install_package(session, "-e", ".[ray,mcp,search,web,desktop]")
    scripts = sorted(Path(p).name for p in glob.glob("benchmarks/*.py"))
    unknown = set(scripts) - set(BENCHMARK_ARGS) - BENCHMARK_MODULES
    if unknown:
        session.error(f"benchmarks without a quick size in noxfile.py: {sorted(unknown)}")
    chosen = session.posargs or [s for s in scripts if s in BENCHMARK_ARGS]
    session.run("fidelity", "sandbox", "build", "--domain", "mcp")  # mcp_latency, calibrate_tools
    failed: list[str] = []
    started = time.monotonic()
    for script in chosen:
        began = time.monotonic()
        session.log(f"=== {script} {' '.join(BENCHMARK_ARGS[script])}")
        try:
            args = BENCHMARK_ARGS[script] or _prepare(session, script)
            session.run("python", f"benchmarks/{script}", *args)
        except nox.command.CommandFailed:
            failed.append(script)
        session.log(f"=== {script}: {time.monotonic() - began:.0f} s")
    session.log(f"=== all {len(chosen)} benchmarks: {time.monotonic() - started:.0f} s")
    if failed:
        session.error(f"benchmarks that failed: {failed}")


def _prepare(session: nox.Session, script: str) -> list[str]:
    """Arguments that need work first: calibrate_os.py's two real desktop replays."""
    if script != "calibrate_os.py":
        return []
    replays = [f".nox/benchmarks/replays/os{n}.jsonl" for n in (1, 2)]
    for replay in replays:
        if not Path(replay).exists():
            session.run("fidelity", "replay", "suites/os/suite.jsonl", "-o", replay)
    return replays
