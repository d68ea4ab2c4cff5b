"""The application: its consoles, the group every command runs in, which command lives
where, the Typer app, and the console entry point.

``out`` is stdout (results, tables, JSON) and ``err`` stderr (errors, notes, progress): a
command piped into a file or ``jq`` gets only its result.

:class:`FidelityGroup` turns every expected error into one line and its exit code. The
codes come from one place, :func:`fidelity.errors.exit_code_for`; OS and DuckDB errors
that escape the library (disk full, an unwritable report) and a missing optional
dependency end in one line too, never a traceback. Under ``--debug``
(:mod:`fidelity.cli.debug`) the line is followed by the error's chained traceback and
the log of the run, and an unexpected error's traceback by the log; the line and the
exit code stay the same.

Commands are plain functions in one module per family (:data:`COMMANDS`); the app
registers them in help order. ``fidelity NAME …`` imports and builds only NAME's
module and Click parameters (:func:`named_command`): Typer turns every command's
signature into Click parameters before it parses anything, and one run needs only
its own.
"""

from __future__ import annotations

import functools
import importlib
import json
import signal
import sys
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from fidelity.errors import (
    EXIT_INTERRUPTED,
    FidelityError,
    describe_os_error,
    exit_code_for,
    is_database_error,
    missing_extra,
)

if TYPE_CHECKING:
    from fidelity.cli.debug import DebugLog

# -- the consoles: results on stdout; errors, notes and progress on stderr ---------------------

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def escape(text: str) -> str:
    """*text* with rich's markup escaped (a file name may hold ``[bold]``)."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def first_line(exc: BaseException) -> str:
    """The first line of *exc*'s message, or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def plural(n: int, one: str, many: str) -> str:
    """``1 trajectory``, ``1,200 trajectories``."""
    return f"{n:,} {one if n == 1 else many}"


def styled() -> bool:
    """True when rich would style stdout (a terminal, or colour forced)."""
    return out.is_terminal or out.color_system is not None


def print_json(text: str) -> None:
    """``out.print_json(text)``: indented JSON; written directly, the same bytes, when unstyled.

    Rich highlights the text and renders it line by line (20 s and 1 GB for the
    rows of a 10,000-step diff); with no terminal and no colour there is nothing
    to style, and its output is ``json.dumps(..., indent=2, ensure_ascii=False)``.
    """
    if styled():
        out.print_json(text)
        return
    sys.stdout.write(json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n")


# -- the group every command runs in ------------------------------------------------------------

DEBUG = "fidelity.debug"
"""Where the root command's ``--debug`` keeps its :class:`~fidelity.cli.debug.DebugLog`
(``ctx.meta``, which every context of an invocation shares)."""


class FidelityGroup(TyperGroup):
    """Maps fidelity's exceptions to one-line errors and exit codes."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return self._invoke(ctx)
        finally:
            debug = debug_log(ctx)
            if debug is not None:
                debug.finish()

    def _invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except FidelityError as exc:
            _fail(ctx, exc, f"[bold red]error:[/] {escape(str(exc))}")
        except OSError as exc:
            _fail(ctx, exc, f"[bold red]error:[/] {escape(describe_os_error(exc))}")
        except Exception as exc:
            missing = missing_extra(exc)  # an optional dependency: which extra installs it
            if missing is None and not is_database_error(exc):
                debug = debug_log(ctx)
                if debug is not None and not is_click_error(exc) and not _is_exit(exc):
                    debug.print_log()  # a bug: Python prints its traceback after the log
                raise
            line = missing or f"database: {first_line(exc)}"
            _fail(ctx, exc, f"[bold red]error:[/] {escape(line)}")
        except KeyboardInterrupt as exc:
            stored = getattr(exc, "summary", None)
            _fail(ctx, exc, f"[yellow]interrupted[/]: {stored or 'sandboxes stopped'}")

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's own option errors (``--limit x``) as one line naming the option, exit 2."""
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:
            if not standalone_mode:
                raise
            err.print("[yellow]aborted[/]")
            sys.exit(EXIT_INTERRUPTED)
        except Exception as exc:
            if not standalone_mode or not is_click_error(exc):
                raise
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]
                sys.exit(0)
            context = getattr(exc, "ctx", None)
            command = f"{context.command_path}: " if context is not None else ""
            err.print(f"[bold red]error:[/] {escape(command + exc.format_message())}")  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


def is_click_error(error: BaseException) -> bool:
    """A Click usage error (Typer may vendor Click, so the class is matched by shape)."""
    return type(error).__module__.split(".")[0] in {"click", "typer"} and all(
        hasattr(error, name) for name in ("format_message", "exit_code", "show")
    )


def debug_log(ctx: Any) -> DebugLog | None:
    """The ``--debug`` log of the invocation *ctx* belongs to (None: no ``--debug``)."""
    found: DebugLog | None = ctx.meta.get(DEBUG)
    return found


def _fail(ctx: Any, error: BaseException, line: str) -> None:
    """*line* on stderr (with ``--debug``, then *error*'s traceback and the log), and
    *error*'s exit code."""
    err.print(line)
    debug = debug_log(ctx)
    if debug is not None:
        debug.after_error(error)
    ctx.exit(exit_code_for(error))


def _is_exit(error: BaseException) -> bool:
    """Click's (or Typer's) ``Exit`` (a command's chosen exit code) or ``Abort``: no bug."""
    return type(error).__name__ in {"Exit", "Abort"}


HELP = (
    "Audit how faithfully a language world model simulates real agent environments.\n\n"
    "An option shown with \\[env var: FIDELITY_…] is read from that variable when not given."
)

COMMANDS: tuple[tuple[str, str], ...] = (
    ("audit", "fidelity.cli.audit:audit"),
    ("replay", "fidelity.cli.audit:replay"),
    ("simulate", "fidelity.cli.audit:simulate"),
    ("import", "fidelity.cli.data:import_"),
    ("export", "fidelity.cli.data:export"),
    ("diff", "fidelity.cli.data:diff"),
    ("report", "fidelity.cli.runs:report"),
    ("gate", "fidelity.cli.gate:gate"),
    ("drift", "fidelity.cli.gate:drift"),
    ("risk", "fidelity.cli.gate:risk"),
    ("judge", "fidelity.cli.judge:judge"),
    ("runs", "fidelity.cli.runs:runs"),
)
"""Every command in help order, and where its function lives (``module:function``)."""

GROUPS: tuple[tuple[str, str], ...] = (("sandbox", "fidelity.cli.sandbox:sandbox_app"),)
"""Command groups (their own Typer apps), after the commands."""


DebugOption = Annotated[
    bool,
    typer.Option(
        "--debug",
        envvar="FIDELITY_DEBUG",
        help="After an error's one line, print its traceback with the exceptions it came from, "
        "then the log of the run (stderr); at the end of a run without error, the log. "
        "Exit codes do not change.",
    ),
]


def _root(ctx: typer.Context, debug: DebugOption = False) -> None:
    if debug:
        from fidelity.cli.debug import DebugLog

        ctx.meta[DEBUG] = DebugLog(err).start()


def _load(target: str) -> Any:
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def build(name: str | None = None) -> typer.Typer:
    """The app with every command, or with the command (or group) *name* alone."""
    built = typer.Typer(
        cls=FidelityGroup,
        help=HELP,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    built.callback()(_root)
    for command, target in COMMANDS:
        if name is None or command == name:
            built.command(command)(_load(target))
    for group, target in GROUPS:
        if name is None or group == name:
            built.add_typer(_load(target), name=group)
    return built


@functools.cache
def whole_app() -> typer.Typer:
    """The app with every command (built once): what ``fidelity.cli.app`` is."""
    return build()


def named_command(args: list[str]) -> TyperGroup | None:
    """A group holding only the command (or subgroup) that *args* start with, if they do.

    Help, no argument or an unknown name (Click suggests close ones) get the whole
    app: None. A leading ``--debug`` (the app's own option) is looked past.
    """
    given = args[1:] if args[:1] == ["--debug"] else args
    name = given[0] if given else None
    known = {command for command, _ in COMMANDS} | {group for group, _ in GROUPS}
    if name not in known:
        return None
    return typer.main.get_group(build(name))


def sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM does what Ctrl-C does: inside an audit's event loop, asyncio's own SIGINT
    handler cancels the run cleanly (a KeyboardInterrupt raised at an arbitrary point of
    a task would be logged with a traceback instead)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


def main() -> None:
    """Console entry point: SIGTERM cleans up like Ctrl-C."""
    signal.signal(signal.SIGTERM, sigterm)
    named = named_command(sys.argv[1:])
    if named is None:
        whole_app()()
    else:
        named()
