"""DuckDB files named on the command line: refuse what is not one before DuckDB opens it."""

from __future__ import annotations

from pathlib import Path

from fidelity.errors import NotADatabaseError, UsageError

DUCKDB_MAGIC = b"DUCK"
"""What a DuckDB database file holds at byte 8 (its header's magic bytes)."""


def refuse_other_files(path: Path, wanted: str) -> None:
    """Raise :class:`~fidelity.errors.NotADatabaseError` (exit 2) for an existing *path* that
    is not a DuckDB database file; *wanted* says what to pass instead (``--db with a
    fidelity database``).

    DuckDB does not always refuse one itself: an existing file named ``*.jsonl``, ``*.csv``,
    ``*.json`` or ``*.parquet`` (a dataset given by mistake) is opened as a new in-memory
    database, so what was written to it would be lost without a word (DuckDB 2.0).
    """
    if not path.exists():
        return
    if path.is_file():
        header = _header(path)
        if header is None or header[8:12] == DUCKDB_MAGIC:  # unreadable: DuckDB says why
            return
    raise NotADatabaseError(f"{path}: not a DuckDB database (pass {wanted}, or a new file name)")


def is_database(path: Path) -> bool:
    """Whether *path* is a DuckDB database file (its header's magic bytes)."""
    header = _header(path)
    return header is not None and header[8:12] == DUCKDB_MAGIC


def _header(path: Path) -> bytes | None:
    """The first bytes of the file *path* (a DuckDB header's magic is at 8), or None when it
    cannot be read."""
    try:
        with path.open("rb") as handle:
            return handle.read(12)
    except OSError:
        return None


def refuse_replacing_database(path: Path) -> None:
    """Raise :class:`~fidelity.errors.UsageError` (exit 2) when an output *path* is a DuckDB
    database: ``fidelity report -o fidelity.duckdb`` replaced every stored run with a page."""
    if is_database(path):
        raise UsageError(
            f"{path} is a DuckDB database: write to another file (it would be replaced)"
        )
