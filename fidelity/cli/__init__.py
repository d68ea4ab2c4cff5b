"""The command line: parse options, call one library function, render the result.

Exit codes: 0 success (or gate pass), 1 gate fail or an unexpected failure,
2 usage or input error, 3 infrastructure or store error, 130 interrupted. The codes
come from :func:`fidelity.errors.exit_code_for`;
:class:`~fidelity.cli.application.FidelityGroup` turns every expected error into one line,
so no command prints a traceback for one (``--debug`` adds its traceback and the log).

Modules:

- :mod:`~fidelity.cli.application`: the consoles (results on stdout; notes, errors and
  progress on stderr), the Click group mapping errors to one line and an exit code, the
  Typer app, which command lives where, ``main``;
- :mod:`~fidelity.cli.options`: the options commands share (with their ``FIDELITY_*``
  variables) and how bundles of them become parameters; :mod:`~fidelity.cli.bundles`:
  the bundles (world model, the user's world, executor, Ray results) and their checks;
- :mod:`~fidelity.cli.render` and :mod:`~fidelity.cli.progress`: what a command prints;
  :mod:`~fidelity.cli.debug`: what ``--debug`` adds;
- one module per command family: :mod:`~fidelity.cli.audit` (audit, replay, simulate:
  real sandboxes and the world model), :mod:`~fidelity.cli.data` (import, export, diff:
  files in and out), :mod:`~fidelity.cli.gate` (gate, drift, risk: verdicts),
  :mod:`~fidelity.cli.runs` (report, runs: reading the store), :mod:`~fidelity.cli.judge`
  (judge: an LLM endpoint over a stored run) and :mod:`~fidelity.cli.sandbox` (sandbox
  build, sweep).

``app`` (every command) is built on first use; ``main``, the console script, builds
only the command it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fidelity.cli.application import main

if TYPE_CHECKING:
    import typer

    app: typer.Typer

__all__ = ["app", "main"]


def __getattr__(name: str) -> object:
    if name == "app":
        from fidelity.cli.application import whole_app

        return whole_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
