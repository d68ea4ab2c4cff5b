"""One exception root for fidelity.

Every expected failure is a :class:`FidelityError`. Subclasses also subclass the
builtin they mean, so library users can catch either. The CLI maps them to exit
codes in one place (:func:`exit_code_for`):

====  ==========================================================================
0     success, or the gate passed (pass or warn)
1     the gate (or ``drift``) failed; an unexpected error (a bug)
2     usage or input error: bad option, bad or untrusted file, not a DuckDB file, an
      optional dependency the command needs is not installed (:func:`missing_extra`)
3     infrastructure or store error: database locked or unwritable, disk full,
      a file that cannot be written
130   interrupted (Ctrl-C, SIGTERM)
====  ==========================================================================
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

EXIT_GATE_FAIL = 1
EXIT_USAGE = 2
EXIT_INFRASTRUCTURE = 3
EXIT_INTERRUPTED = 130


class FidelityError(Exception):
    """Root of every error fidelity raises on purpose."""

    exit_code = 1


class UsageError(FidelityError, ValueError):
    """Bad options or bad input: the user can fix it. Exit code 2."""

    exit_code = 2


class InputFormatError(UsageError):
    """A file that does not parse or validate; names the file, line and field."""

    def __init__(self, path: str, line: int | None, field: str | None, reason: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.reason = reason
        where = path if line is None else f"{path}:{line}"
        what = f"{field}: {reason}" if field else reason
        super().__init__(f"{where}: {what}")

    def __reduce__(self) -> tuple[type[InputFormatError], tuple[str, int | None, str | None, str]]:
        # pickled (a Ray worker's shard scan hands it to the driver) by its own arguments
        return type(self), (self.path, self.line, self.field, self.reason)


class UnknownDomainError(UsageError):
    """A domain fidelity does not know or does not support yet."""


class NotFoundError(UsageError, LookupError):
    """A run, trajectory or file that does not exist."""


class SandboxError(FidelityError, RuntimeError):
    """The real environment failed (not the action inside it). Exit code 3."""

    exit_code = EXIT_INFRASTRUCTURE


class SandboxUnavailableError(SandboxError):
    """The sandbox backend cannot start on this machine (missing binary, no permission)."""


class SandboxTimeout(SandboxError, TimeoutError):
    """A step ran past its timeout; its processes were killed."""


class WorldModelError(FidelityError, RuntimeError):
    """The world model failed to produce an observation. Exit code 3."""

    exit_code = EXIT_INFRASTRUCTURE


class EndpointUnreachableError(WorldModelError, ConnectionError):
    """The world-model endpoint does not answer: a wrong --sim-url is a usage error."""

    exit_code = 2


class MalformedPredictionError(WorldModelError):
    """The world model answered, but not with a usable observation."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped a run; ``summary`` says what the database kept."""

    def __init__(self, summary: str) -> None:
        super().__init__(summary)
        self.summary = summary


class InfrastructureError(FidelityError, RuntimeError):
    """The machine failed the run (disk full, database locked): exit code 3, never the
    gate-fail code."""

    exit_code = EXIT_INFRASTRUCTURE


class StoreError(InfrastructureError):
    """The DuckDB store cannot be opened or written."""


class NotADatabaseError(StoreError, UsageError):
    """``--db`` names a file that is not a DuckDB database: the user's mistake, exit 2."""

    exit_code = EXIT_USAGE


class SetupFailedError(SandboxError):
    """An ``env.setup`` entry failed. The message never holds the command's output: a
    setup script's output can echo the contents of the files it touched."""

    def __init__(self, index: int, command: str, exit_code: int | None) -> None:
        super().__init__(
            f"setup command {index + 1} ({command!r}) failed with exit code {exit_code} "
            "(its output is not shown)"
        )


# errno values that mean "the machine ran out of something", not "you gave a bad path"
_INFRASTRUCTURE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EMFILE, errno.ENFILE}


def exit_code_for(error: BaseException) -> int:
    """Exit code the CLI returns for *error* (the table in this module's docstring).

    fidelity's own errors carry their code; an ``OSError`` is 3 when the machine ran
    out of space or descriptors, else 2 (a path the user named cannot be used); a
    missing optional dependency is 2 (the user installs its extra); a DuckDB error
    that escaped the store is 3; anything else is a bug: 1.
    """
    if isinstance(error, FidelityError):
        return error.exit_code
    if isinstance(error, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(error, OSError):
        return EXIT_INFRASTRUCTURE if error.errno in _INFRASTRUCTURE_ERRNOS else EXIT_USAGE
    if missing_extra(error) is not None:
        return EXIT_USAGE
    if is_database_error(error):
        return EXIT_INFRASTRUCTURE
    return EXIT_GATE_FAIL


OPTIONAL_MODULES: dict[str, str] = {
    "swebench": "swebench",
    "pyarrow": "rl",
    "ray": "ray",
    "playwright": "web",
    "datasette": "web",
    "django": "web",
    "sqlite_web": "web",
    "mcp": "mcp",
    "tantivy": "search",
    "pyautogui": "desktop",
    "Xlib": "desktop",
}
"""Top-level module of each optional dependency, and the extra of ``pyproject.toml`` that
installs it. Code imports them where it needs them and lets a missing one raise
``ModuleNotFoundError``: the CLI turns that into one line (:func:`missing_extra`)."""


def missing_extra(error: BaseException) -> str | None:
    """The one line for a ``ModuleNotFoundError`` of an optional dependency: which module is
    missing and the extra that installs it (None for any other error: a missing module
    fidelity requires, or a bug, keeps its traceback)."""
    if not isinstance(error, ModuleNotFoundError) or not error.name:
        return None
    module = error.name.partition(".")[0]
    extra = OPTIONAL_MODULES.get(module)
    if extra is None:
        return None
    return f"the optional dependency {module!r} is not installed: pip install 'fidelity[{extra}]'"


def is_database_error(error: BaseException) -> bool:
    """Whether *error* is DuckDB's own (without importing DuckDB)."""
    return type(error).__module__.split(".")[0] in {"duckdb", "_duckdb"}


def describe_os_error(error: OSError) -> str:
    """One line for an ``OSError``: the file it concerns and the system's reason."""
    reason = error.strerror or str(error)
    where = error.filename if error.filename is not None else None
    return f"{where}: {reason}" if where is not None else reason


@contextlib.contextmanager
def writing(path: str | os.PathLike[str]) -> Iterator[None]:
    """An ``OSError`` raised inside that names no file (a write's ENOSPC names none) is
    raised again naming *path*, the file being written, so its one-line error says where."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), os.fspath(path)) from exc
