"""Recurring options read from ``FIDELITY_*`` variables when not given; an option given wins."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from fidelity.cli import app
from fidelity.cli.options import ENVIRONMENT
from fidelity.store import Store

runner = CliRunner()


def _envvars(command: object) -> set[str]:
    found = {getattr(p, "envvar", None) for p in getattr(command, "params", [])}
    for child in getattr(command, "commands", {}).values():
        found |= _envvars(child)
    return {name for name in found if isinstance(name, str)}


def test_the_documented_variables_are_the_ones_the_options_read() -> None:
    assert _envvars(typer.main.get_command(app)) == set(ENVIRONMENT)


def test_fidelity_db_names_the_database_and_db_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    empty, missing = tmp_path / "empty.duckdb", tmp_path / "missing.duckdb"
    Store(empty).close()
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["runs", "--json"], env={"FIDELITY_DB": str(missing)})
    assert (result.exit_code, result.stderr) == (
        2,
        f"error: {missing}: no such database (run `fidelity audit` first)\n",
    )
    result = runner.invoke(
        app, ["runs", "--json", "--db", str(empty)], env={"FIDELITY_DB": str(missing)}
    )
    assert result.exit_code == 0 and json.loads(result.stdout) == []


def test_the_executor_and_the_ray_address_come_from_the_environment(tmp_path: Path) -> None:
    audit = ["audit", "--sim-baseline", "copy", "--db", str(tmp_path / "a.duckdb")]
    result = runner.invoke(app, audit, env={"FIDELITY_EXECUTOR": "threads"})
    assert (result.exit_code, result.stderr) == (
        2,
        "error: --executor 'threads': choose local or ray\n",
    )
    result = runner.invoke(app, audit, env={"FIDELITY_RAY_ADDRESS": "auto"})
    assert (result.exit_code, result.stderr) == (2, "error: --ray-address needs --executor ray\n")
    assert not (tmp_path / "a.duckdb").exists()


def test_the_world_model_comes_from_the_environment(tmp_path: Path, closed_port_url: str) -> None:
    env = {"FIDELITY_SIM_URL": closed_port_url, "FIDELITY_SIM_MODEL": "m"}
    result = runner.invoke(app, ["audit", "--db", str(tmp_path / "f.duckdb")], env=env)
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "does not answer" in result.stderr
    assert closed_port_url in result.stderr
