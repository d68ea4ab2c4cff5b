"""A command whose optional dependency is missing says in one line which extra installs it
(issue 40, item 12: replaying an ``env.instance`` line without ``swebench`` printed a
76-line ``ModuleNotFoundError``)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from fidelity.errors import OPTIONAL_MODULES, exit_code_for, missing_extra

REPO = Path(__file__).resolve().parents[2]

WITHOUT = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # as if not installed: importing it raises ModuleNotFoundError
sys.argv = ["fidelity", *sys.argv[2:]]
from fidelity.cli import main
main()
"""


def _fidelity_without(modules: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT, modules, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


def test_replaying_a_swebench_instance_without_swebench_is_one_line(tmp_path: Path) -> None:
    record = {
        "instance_id": "psf__requests-2317",
        "repo": "psf/requests",
        "version": "2.4",
        "base_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
        "environment_setup_commit": "091991be0da19de9108dbe5e3752917fea3d7fdc",
        "test_patch": "",
        "FAIL_TO_PASS": "[]",
        "PASS_TO_PASS": "[]",
    }
    line = {
        "id": "run-17",
        "domain": "swe",
        "env": {
            "backend": "docker",
            "instance": {"instance_id": record["instance_id"], "record": record},
        },
        "steps": [{"action": {"type": "command", "command": "ls"}}],
    }
    (tmp_path / "rollouts.jsonl").write_text(json.dumps(line) + "\n")
    done = _fidelity_without(
        "swebench", "replay", "rollouts.jsonl", "-o", "real.jsonl", cwd=tmp_path
    )
    assert (done.returncode, done.stderr) == (
        2,
        "error: the optional dependency 'swebench' is not installed: "
        "pip install 'fidelity[swebench]'\n",
    )
    assert not (tmp_path / "real.jsonl").exists()


def test_every_optional_module_names_an_extra_of_the_project() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(OPTIONAL_MODULES.values()) <= set(extras)
    assert set(extras) - {"test", "lint"} <= set(OPTIONAL_MODULES.values())  # each has a module


@pytest.mark.parametrize("name", ["swebench", "swebench.harness.grading", "Xlib.display"])
def test_a_missing_optional_module_is_a_usage_error_naming_its_extra(name: str) -> None:
    error = ModuleNotFoundError(f"No module named {name!r}", name=name)
    line = missing_extra(error)
    module = name.partition(".")[0]
    extra = OPTIONAL_MODULES[module]
    assert (
        line
        == f"the optional dependency {module!r} is not installed: pip install 'fidelity[{extra}]'"
    )
    assert exit_code_for(error) == 2


def test_a_missing_required_module_is_still_a_bug() -> None:
    for error in (
        ModuleNotFoundError("No module named 'pydantic'", name="pydantic"),
        ModuleNotFoundError("no name"),
        ImportError("cannot import name 'x' from 'swebench'", name="swebench"),
    ):
        assert missing_extra(error) is None
        assert exit_code_for(error) == 1
