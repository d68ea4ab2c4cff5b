"""``fidelity report`` and ``runs``: what the store holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from fidelity.cli.application import escape, out
from fidelity.cli.options import DbOption, JsonOption
from fidelity.defaults import DEFAULT_DB, DEFAULT_REPORT


def report(
    db: DbOption = Path(DEFAULT_DB),
    run: Annotated[str | None, typer.Option("--run", help="Run id (default: the latest).")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="HTML file to write.")] = Path(
        DEFAULT_REPORT
    ),
) -> None:
    """Write the self-contained HTML report of a stored run."""
    from fidelity.analysis.summary import summarize
    from fidelity.report.html import write_report
    from fidelity.store import Store

    with Store(db, read_only=True) as store:
        summary = summarize(store, run)
    path = write_report(summary, output)
    out.print(f"wrote {path} (run {summary.run.run_id})")


def runs(db: DbOption = Path(DEFAULT_DB), as_json: JsonOption = False) -> None:
    """List stored runs, newest first; a run whose owner process died shows as ``dead``."""
    from rich.table import Table

    from fidelity.store import Store

    with Store(db, read_only=True) as store:
        rows = store.list_runs()
    if as_json:
        out.print_json(json.dumps(rows, default=str))
        return
    table = Table(
        "run", "started", "status", "owner", "domain", "world model", "mode", "steps", "drift"
    )
    for row in rows:
        model = row["world_model"]
        owner = "-" if row["owner_pid"] is None else f"{row['owner_host']}:{row['owner_pid']}"
        table.add_row(
            row["run_id"],
            str(row["started_at"])[:19],
            row["status"],
            escape(owner),
            row["domain"],
            escape(str(model.get("model") or model.get("backend", "?"))),
            row["mode"],
            str(row["steps"]),
            "-" if row["drift_rate"] is None else f"{row['drift_rate']:.1%}",
        )
    out.print(table)
