"""``fidelity sandbox build`` and ``sweep``: the real backends' images and leftovers."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from fidelity.cli.application import err, escape, out
from fidelity.cli.options import JsonOption

sandbox_app = typer.Typer(
    help="Docker images and leftovers of the real backends.",
    no_args_is_help=True,
)


@sandbox_app.command("build")
def sandbox_build(
    domain: Annotated[
        list[str] | None,
        typer.Option("--domain", "-d", help="Domain image to build (default: every recipe)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Build the Docker images (debootstrap base + domain layers), the MCP servers or the
    search corpus; cached by recipe (or corpus) hash."""
    from fidelity.sandboxes.images import build, buildable_domains
    from fidelity.sandboxes.prepared import PREPARED, prepare

    log = lambda line: err.print(escape(line))  # noqa: E731
    wanted = domain or buildable_domains()
    tags = prepare([d for d in wanted if d in PREPARED], log)
    images = [d for d in wanted if d not in PREPARED]
    tags.update(build(images, log=log) if images else {})
    if as_json:
        out.print_json(json.dumps(tags))
        return
    for name, tag in tags.items():
        out.print(f"{name}: {tag}")


@sandbox_app.command("sweep")
def sandbox_sweep(
    backend: Annotated[
        str, typer.Option("--sandbox", help="Backend whose leftovers to remove.")
    ] = "docker",
) -> None:
    """Remove containers (or folders) left by audits whose process is dead."""
    from fidelity.sandboxes import sweep

    out.print(f"removed {sweep(backend)} leftover sandbox(es)")
