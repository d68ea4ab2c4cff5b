"""The SWE sandbox in real Docker: editor semantics, repo state, malformed calls, pool, suite."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.resources import data_dir
from fidelity.sandboxes.docker import DockerSandbox
from fidelity.sandboxes.images import ensure_image
from fidelity.sandboxes.pool import SandboxPool
from fidelity.sandboxes.swe import SweSandbox
from fidelity.store import Store
from fidelity.trajectory import CommandAction, EnvSpec, Observation, ToolAction

pytestmark = pytest.mark.docker

SWE = data_dir("suites") / "swe"
REPO = "/repos/webcolors"
NORM = f"{REPO}/src/webcolors/normalization.py"


@pytest.fixture(scope="session")
def swe_image(docker: None) -> str:
    """The swe image (sdists from PyPI on first build), cached by recipe hash."""
    return ensure_image("swe")


@pytest.fixture(scope="module")
def pool(swe_image: str) -> Iterator[SandboxPool]:
    """One warm sandbox reused by the tests of this module (a clean state each lease)."""
    shared = SandboxPool({"image": swe_image, "domain": "swe", "step_timeout": 20}, size=1)
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def box(pool: SandboxPool) -> Iterator[SweSandbox]:
    with pool.lease(EnvSpec(project="webcolors")) as leased:
        assert isinstance(leased, SweSandbox)
        yield leased


def edit(box: DockerSandbox, **args: Any) -> Observation:
    return box.step(ToolAction(tool="str_replace_editor", args=args))


def sh(box: DockerSandbox, command: str, timeout: float = 20) -> Observation:
    return box.step(CommandAction(command=command), timeout=timeout)


def test_view_file_with_line_numbers_and_range(box: SweSandbox) -> None:
    whole = edit(box, command="view", path=NORM)
    assert whole.text.startswith(f"Here's the result of running `cat -n` on {NORM}:\n")
    assert '     1\t"""\n' in whole.text
    part = edit(box, command="view", path=NORM, view_range=[47, 49])
    lines = part.text.rstrip("\n").splitlines()[1:]
    assert [line.split("\t")[0].strip() for line in lines] == ["47", "48", "49"]
    assert "hex_digits = match.group(1)" in lines[0]
    to_end = edit(box, command="view", path=NORM, view_range=[60, -1]).text
    assert to_end.splitlines()[1].startswith("    60\t")
    bad = edit(box, command="view", path=NORM, view_range=[9, 3]).text
    assert "should be larger or equal than its first `9`" in bad


def test_view_directory(box: SweSandbox) -> None:
    listing = edit(box, command="view", path=f"{REPO}/src").text
    assert listing.splitlines()[:3] == [
        f"Here's the files and directories up to 2 levels deep in {REPO}/src, excluding hidden "
        "items:",
        f"{REPO}/src",
        f"{REPO}/src/webcolors",
    ]
    assert "__pycache__" not in listing and ".git" not in listing
    ranged = edit(box, command="view", path=f"{REPO}/src", view_range=[1, 2]).text
    assert "not allowed when `path` points to a directory" in ranged


def test_create_and_refuse_to_overwrite(box: SweSandbox) -> None:
    made = edit(box, command="create", path=f"{REPO}/notes/todo.txt", file_text="one\ntwo\n")
    assert made.text == f"File created successfully at: {REPO}/notes/todo.txt\n"
    assert sh(box, "cat notes/todo.txt").text == "one\ntwo\n"
    again = edit(box, command="create", path=f"{REPO}/notes/todo.txt", file_text="x")
    assert "File already exists at" in again.text
    assert sh(box, "cat notes/todo.txt").text == "one\ntwo\n"


def test_str_replace_fails_on_zero_and_several_matches(box: SweSandbox) -> None:
    none = edit(box, command="str_replace", path=NORM, old_str="no such text", new_str="x")
    assert none.text.startswith("No replacement was performed, old_str `no such text` did not")
    several = edit(box, command="str_replace", path=NORM, old_str="hex_digits", new_str="d")
    assert "Multiple occurrences of old_str `hex_digits` in lines [47, 48, 49, 50]" in several.text
    assert box.step(ToolAction(tool="submit")).text == ""  # nothing was written
    done = edit(
        box, command="str_replace", path=NORM, old_str="return f\"#{hex_digits.lower()}\"",
        new_str="return f\"#{hex_digits.upper()}\"",
    )  # fmt: skip
    assert done.text.startswith(f"The file {NORM} has been edited.")
    assert '    50\t    return f"#{hex_digits.upper()}"' in done.text  # the snippet around it
    assert done.state is not None and done.state["changed_files"] == [
        "src/webcolors/normalization.py"
    ]


def test_insert_and_undo_edit(box: SweSandbox) -> None:
    path = f"{REPO}/setup.cfg"
    before = sh(box, "cat setup.cfg").text
    inserted = edit(box, command="insert", path=path, insert_line=1, new_str="# added")
    assert "     2\t# added" in inserted.text
    assert sh(box, "sed -n 2p setup.cfg").text == "# added\n"
    out_of_range = edit(box, command="insert", path=path, insert_line=10_000, new_str="x")
    assert "Invalid `insert_line` parameter: 10000" in out_of_range.text
    undone = edit(box, command="undo_edit", path=path)
    assert undone.text.startswith(f"Last edit to {path} undone successfully.")
    assert sh(box, "cat setup.cfg").text == before
    assert edit(box, command="undo_edit", path=path).text == (
        f"No edit history found for {path}.\n"
    )


def test_malformed_calls_are_observations(box: SweSandbox) -> None:
    answers = {
        "unknown tool": box.step(ToolAction(tool="open_file", args={"path": NORM})).text,
        "unknown command": edit(box, command="delete", path=NORM).text,
        "missing path": edit(box, command="view").text,
        "missing old_str": edit(box, command="str_replace", path=NORM).text,
        "relative": edit(box, command="view", path="src").text,
        "missing file": edit(box, command="view", path=f"{REPO}/nope.py").text,
        "bash without command": box.step(ToolAction(tool="bash")).text,
        "bad types": edit(box, command="create", path=f"{REPO}/x", file_text=3).text,
    }
    assert answers == {
        "unknown tool": "Unknown tool 'open_file'. The available tools are: bash, "
        "str_replace_editor, submit\n",
        "unknown command": "Unrecognized command delete. The allowed commands for the "
        "str_replace_editor tool are: view, create, str_replace, insert, undo_edit\n",
        "missing path": "Parameter `path` is required for command: view\n",
        "missing old_str": "Parameter `old_str` is required for command: str_replace\n",
        "relative": "The path src is not an absolute path, it should start with `/`. Maybe you "
        "meant /src?\n",
        "missing file": f"The path {REPO}/nope.py does not exist. Please provide a valid path.\n",
        "bash without command": "Parameter `command` is required for tool: bash\n",
        "bad types": "Parameter `file_text` must be a string\n",
    }
    assert sh(box, "echo still here").text == "still here\n"


def test_repo_state_setup_baseline_tests_and_submit(pool: SandboxPool) -> None:
    env = EnvSpec(project="webcolors", setup=[f"@{SWE / 'webcolors' / 'bug-short-hex.sh'}"])
    with pool.lease(env) as box:
        assert sh(box, "git status --short").text == ""  # the planted bug is the baseline
        failing = sh(box, "python3 -m unittest -v tests.test_normalization 2>&1")
        assert failing.state is not None
        tests = failing.state["tests"]
        assert tests["tests.test_normalization.NormalizationTests.test_normalize_hex"] == "FAILED"
        assert tests["tests.test_normalization.NormalizationTests.test_normalize_hex_format"] == (
            "PASSED"
        )
        edit(
            box, command="str_replace", path=NORM, old_str="join(s for s in hex_digits)",
            new_str="join(2 * s for s in hex_digits)",
        )  # fmt: skip
        edit(box, command="create", path=f"{REPO}/tests/test_extra.py", file_text="pass\n")
        passing = sh(box, "python3 -m unittest tests.test_normalization -v 2>&1 | tail -3")
        state = passing.state or {}
        assert state["changed_files"] == ["src/webcolors/normalization.py", "tests/test_extra.py"]
        assert '+        hex_digits = "".join(2 * s for s in hex_digits)' in state["diff"]
        submitted = box.step(ToolAction(tool="submit"))
        assert submitted.text == state["diff"] and "new file mode" in submitted.text
        assert (
            sh(box, "git status --short").text
            == " M src/webcolors/normalization.py\n?? tests/test_extra.py\n"
        )


def test_git_sees_an_edit_that_kept_size_and_mtime(pool: SandboxPool) -> None:
    """An edit as fast as the setup commit (same size, same second) is still a change to the
    agent's own ``git diff``: the baseline index is left racy, so git hashes the contents."""
    env = EnvSpec(project="webcolors", setup=[f"@{SWE / 'webcolors' / 'bug-clip-integer.sh'}"])
    with pool.lease(env) as box:
        # in place (same inode), same size, the old mtime put back; ctime taken out of the stat
        kept = sh(
            box,
            "cp src/webcolors/normalization.py /tmp/o && "
            "sed 's/value > 256/value > 255/' /tmp/o > src/webcolors/normalization.py && "
            "touch -r /tmp/o src/webcolors/normalization.py && "
            "git -c core.trustctime=false diff --stat",
        )
        assert kept.text.splitlines()[-1] == " 1 file changed, 1 insertion(+), 1 deletion(-)"


def test_pool_reuses_and_resets_to_a_clean_state(pool: SandboxPool) -> None:
    env = EnvSpec(project="webcolors")
    with pool.lease(env) as box:
        container = box._container.id
        sh(box, "echo x > src/webcolors/new.py; echo y >> README.rst; touch /tmp/scratch; "
                "git commit -qam wip; (sleep 300 &); cd tests")  # fmt: skip
    recycled = pool.recycled
    with pool.lease(env) as box:
        assert box._container.id == container and pool.recycled == recycled + 1
        assert box._cwd == REPO
        left = sh(box, "git status --short; git log --oneline | wc -l; ls /tmp; pgrep -c sleep")
        assert left.text == "1\n1\n"  # clean tree, one commit, empty /tmp, only the keepalive
        assert left.state is not None and left.state["changed_files"] == []


def test_step_timeout_kills_the_process_group_not_the_container(pool: SandboxPool) -> None:
    with pool.lease(EnvSpec(project="webcolors")) as box:
        container = box._container.id
        sh(box, "echo kept > /tmp/kept; cd src")
        hung = sh(box, "echo started; sleep 200 & sleep 100", timeout=1)
        assert hung.timed_out and hung.exit_code is None and "started" in hung.text
        after = sh(box, "pwd; cat /tmp/kept; pgrep -c sleep")
        assert after.text == f"{REPO}/src\nkept\n1\n"  # cwd and /tmp kept; the sleeps are gone
        assert box._container.id == container


def test_dead_container_is_replaced(pool: SandboxPool) -> None:
    env = EnvSpec(project="webcolors")
    with pool.lease(env) as box:
        dead = box._container.id
    subprocess.run(["docker", "kill", dead], check=True, capture_output=True)
    started = pool.started
    with pool.lease(env) as box:
        assert box._container.id != dead and pool.started == started + 1
        assert sh(box, "git rev-parse HEAD").text.startswith("9d8c07b")


@pytest.mark.slow
def test_suite_replays_agree_and_audit_writes_run(swe_image: str, tmp_path: Path) -> None:
    runner = CliRunner()
    suite = tmp_path / "subset.jsonl"
    subset = [json.loads(line) for line in (SWE / "suite.jsonl").read_text().splitlines()][::3]
    for trajectory in subset:  # the setup scripts stay where the bundled suite has them
        setup = trajectory["env"]["setup"]
        trajectory["env"]["setup"] = [f"@{SWE / entry[1:]}" for entry in setup]
    suite.write_text("".join(json.dumps(t) + "\n" for t in subset))
    for name in ("a", "b"):
        output = tmp_path / f"{name}.jsonl"
        replayed = runner.invoke(
            app, ["replay", str(suite), "-o", str(output), "--allow-root", str(SWE)]
        )
        assert replayed.exit_code == 0, replayed.output
    diffed = runner.invoke(
        app, ["diff", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl"), "--format", "jsonl"]
    )
    assert diffed.exit_code == 0, diffed.output
    rows = [json.loads(line) for line in diffed.output.splitlines() if line.startswith("{")]
    assert len(rows) == sum(len(t["steps"]) for t in subset)
    assert [r for r in rows if r["drift"]] == []
    db, report = tmp_path / "f.duckdb", tmp_path / "report.html"
    audited = runner.invoke(
        app, ["audit", str(suite), "--domain", "swe", "--db", str(db),
              "--report", str(report), "--allow-root", str(SWE)],
    )  # fmt: skip
    assert audited.exit_code in (0, 1), audited.output
    with Store(db) as store:
        (run,) = store.list_runs()
    assert run["sandbox"] == "docker" and run["domain"] == "swe"
    assert report.is_file() and "swe-cachetools-lru-order" in report.read_text()
