"""``--debug`` (``FIDELITY_DEBUG=1``): after an error's one line, its cause chain and the log;
without it, the one line alone. Exit codes are the same either way."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.cli.application import named_command
from fidelity.cli.debug import DebugLog, chained_traceback
from tests.test_dataset_gate import _dataset, _policy

runner = CliRunner()

BAD_SITE = ["audit", "--site", "a b=ftp://x"]
LINE = "error: --site a b: String should match pattern '^[a-z][a-z0-9_]{0,63}$'\n"


def test_an_input_error_is_one_line_and_under_debug_shows_its_cause(tmp_path: Path) -> None:
    db = ["--db", str(tmp_path / "f.duckdb")]
    plain = runner.invoke(app, [*BAD_SITE, *db])
    assert (plain.exit_code, plain.stdout, plain.stderr) == (2, "", LINE)

    debug = runner.invoke(app, ["--debug", *BAD_SITE, *db])
    assert (debug.exit_code, debug.stdout) == (2, "")
    assert debug.stderr.startswith(LINE + "debug: traceback, with the exceptions it came from:\n")
    chain = debug.stderr[len(LINE) :]
    cause = chain.index("pydantic_core._pydantic_core.ValidationError: 2 validation errors")
    link = chain.index("The above exception was the direct cause of the following exception:")
    error = chain.index("fidelity.errors.UsageError: --site a b: String should match pattern")
    assert cause < link < error
    assert chain.endswith("debug: log of the run: no records\n")
    assert not (tmp_path / "f.duckdb").exists()

    from_environment = runner.invoke(app, [*BAD_SITE, *db], env={"FIDELITY_DEBUG": "1"})
    assert (from_environment.exit_code, from_environment.stderr) == (2, debug.stderr)
    assert runner.invoke(app, [*BAD_SITE, *db], env={"FIDELITY_DEBUG": "0"}).stderr == LINE


def test_the_console_script_answers_debug_as_the_app_does(tmp_path: Path) -> None:
    """``fidelity --debug CMD`` builds CMD alone (a leading ``--debug`` is looked past)."""
    group = named_command(["--debug", "runs", "--db", "x"])
    assert group is not None and list(group.commands) == ["runs"]
    assert named_command(["--debug"]) is None
    argv = ["--debug", *BAD_SITE, "--db", str(tmp_path / "f.duckdb")]
    result = subprocess.run(
        [sys.executable, "-m", "fidelity", *argv], capture_output=True, text=True, cwd=tmp_path
    )
    assert result.returncode == 2
    assert result.stderr.startswith(LINE + "debug: traceback")
    assert "The above exception was the direct cause" in result.stderr


def test_a_context_hidden_by_from_none_is_shown_and_stays_hidden() -> None:
    try:
        try:
            {}["missing"]
        except KeyError:
            raise ValueError("no such thing") from None
    except ValueError as exc:
        error = exc
    text = "".join(chained_traceback(error))
    assert text.index("KeyError: 'missing'") < text.index("ValueError: no such thing")
    assert "During handling of the above exception, another exception occurred" in text
    assert error.__suppress_context__  # as raised: Python's own traceback still hides it


@pytest.mark.bwrap
@pytest.mark.usefixtures("bwrap")
def test_the_log_of_the_run_shows_under_debug_only(tmp_path: Path) -> None:
    """A dataset gate: the same output and exit code, then under ``--debug`` its log (each
    sandbox started and closed, each round with its bounds); nothing is left collecting."""
    dataset = _dataset(tmp_path, {f"t{i}": None for i in range(3)})
    policy = _policy(tmp_path, "[default]\nmax_drift_rate = 0.5\n")

    def gate(name: str, *debug: str) -> tuple[int, str, str]:
        args = [*debug, "gate", str(dataset), "--policy", str(policy), "--sample", "2"]
        where = ["--db", str(tmp_path / f"{name}.duckdb"), "-o", str(tmp_path / name)]
        result = runner.invoke(app, [*args, *where, "--run", "r"])
        return result.exit_code, result.stdout.replace(name, "NAME"), result.stderr

    code, out, err = gate("plain")
    assert "debug:" not in err and "fidelity." not in err
    debug_code, debug_out, debug_err = gate("debug", "--debug")
    assert (debug_code, debug_out) == (code, out)
    shown, _, log = debug_err.partition("debug: log of the run (")
    assert shown == err
    assert " DEBUG fidelity.sandboxes.base [sandbox_0]: sandbox local-" in log
    assert " DEBUG fidelity.gate.rounds [MainThread]: round 1: drift_rate <= 0.5: 0 [0, 1] " in log
    assert " INFO fidelity.gate.rounds [MainThread]: rounds end after round 1 (2 draws)" in log
    fidelity = logging.getLogger("fidelity")
    assert not [h for h in fidelity.handlers if isinstance(h, DebugLog)]
    assert fidelity.level == logging.NOTSET
