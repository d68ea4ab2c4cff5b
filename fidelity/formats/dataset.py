"""Datasets of any size: JSONL (plain, ``.gz``, ``.zst``), Parquet, folders and globs of shards.

A dataset is read as a stream of ``(shard, line, text)``: one trajectory per
JSONL line, or one per Parquet row (its columns are the trajectory's fields,
turned into one JSON object per row by DuckDB). Nothing holds more than one
line at a time, so memory stays flat in the dataset's size; errors name the
shard and line (``shard:line: field: reason``).
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from pydantic import ValidationError

from fidelity.errors import InputFormatError, NotFoundError
from fidelity.formats.jsonl import field_path
from fidelity.model import Trajectory

SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet")
"""The shard formats a dataset may mix."""

_PARQUET_BATCH = 1024


@dataclass(frozen=True)
class Line:
    """One trajectory's text and where it came from."""

    shard: int
    path: Path
    number: int
    text: str

    def parse(self) -> Trajectory:
        """The validated trajectory; InputFormatError naming ``shard:line: field``."""
        return parse_trajectory(self.text, str(self.path), self.number)


def shards(source: str | os.PathLike[str], exclude: Collection[Path] = ()) -> list[Path]:
    """The shard files of *source*: a file, a folder (its supported files), or a glob.

    Hidden entries (a name starting with ``.``, at any depth below a folder or a
    glob's wildcards) are never shards, nor are the files and folders in
    *exclude* or anything under them (the dataset gate's own outputs).
    """
    text = str(source)
    path = Path(text)
    if path.is_file():
        return [path]
    skipped = _Excluded(exclude)
    if path.is_dir():
        found = sorted(p for p in path.rglob("*") if _listed(p, path) and p not in skipped)
        if not found:
            raise NotFoundError(f"{path}: no dataset shards ({', '.join(SUFFIXES)}) in folder")
        return found
    if glob.has_magic(text):
        matched = (Path(p) for p in glob.glob(text, recursive=True))
        found = sorted(p for p in matched if _supported(p) and p not in skipped)
        if not found:
            raise NotFoundError(f"{text}: no dataset shards match")
        return found
    raise NotFoundError(f"{path}: no such file")


class _Excluded:
    """Membership in a set of files and folders (and everything under the folders)."""

    def __init__(self, paths: Collection[Path]) -> None:
        self.resolved = {p.resolve() for p in paths}

    def __contains__(self, path: object) -> bool:
        if not self.resolved or not isinstance(path, Path):
            return False
        found = path.resolve()
        return any(p in self.resolved for p in (found, *found.parents))


def _listed(path: Path, folder: Path) -> bool:
    """Whether *path*, found in *folder*, is a shard: a supported file, nothing hidden on the way."""
    hidden = any(part.startswith(".") for part in path.relative_to(folder).parts)
    return not hidden and path.is_file() and _supported(path)


def lines(source: str | os.PathLike[str]) -> Iterator[Line]:
    """Every non-blank, non-comment line of every shard of *source*, in order."""
    for index, path in enumerate(shards(source)):
        yield from shard_lines(index, path)


def shard_lines(index: int, path: Path) -> Iterator[Line]:
    """Every non-blank, non-comment line of the shard *path* (number *index* of its dataset)."""
    if path.name.endswith(".parquet"):
        yield from _parquet_rows(index, path)
        return
    with _open_text(path) as handle:
        try:
            for number, text in enumerate(handle, start=1):
                # a line starting "{" (nearly all) is kept without copying it to strip it
                if text[:1] == "{" or (text.strip() and not text.lstrip().startswith("//")):
                    yield Line(index, path, number, text)
        except UnicodeDecodeError as exc:
            raise InputFormatError(str(path), None, None, f"not UTF-8 text ({exc.reason})") from exc
        except (OSError, EOFError) as exc:
            raise InputFormatError(str(path), None, None, f"cannot read ({exc})") from exc


def trajectories(source: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Every trajectory of *source*, validated one at a time."""
    for line in lines(source):
        yield line.parse()


def parse_trajectory(text: str, path: str, number: int) -> Trajectory:
    """Validate one JSON object (straight from its text); errors name ``path:number`` and field."""
    try:
        return Trajectory.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        if first["type"] == "json_invalid":
            raise InputFormatError(path, number, None, f"invalid JSON ({first['msg']})") from exc
        if first["type"] == "model_type":
            raise InputFormatError(path, number, None, "expected a JSON object") from exc
        extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputFormatError(
            path, number, field_path(first["loc"]), first["msg"] + extra
        ) from exc


def _without_nulls(value: Any) -> Any:
    """*value* without null fields (a Parquet column absent from a row reads as null)."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _supported(path: Path) -> bool:
    return path.name.endswith(SUFFIXES)


def _open_text(path: Path) -> IO[str]:
    try:
        if path.name.endswith(".gz"):
            return gzip.open(path, "rt", encoding="utf-8")
        if path.name.endswith(".zst"):
            import zstandard

            raw = zstandard.ZstdDecompressor().stream_reader(path.open("rb"))
            return io.TextIOWrapper(raw, encoding="utf-8")
        return path.open(encoding="utf-8")
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: no such file") from exc
    except OSError as exc:
        raise NotFoundError(f"{path}: cannot read ({exc.strerror})") from exc


def _parquet_rows(index: int, path: Path) -> Iterator[Line]:
    """Each row of a Parquet shard as one JSON object (DuckDB reads it in batches)."""
    import duckdb

    connection = duckdb.connect()
    try:
        try:
            cursor = connection.execute(
                "SELECT to_json(t)::VARCHAR FROM read_parquet(?) t", [str(path)]
            )
        except duckdb.Error as exc:
            message = str(exc).strip().splitlines()[0]
            raise InputFormatError(str(path), None, None, f"not Parquet ({message})") from exc
        number = 0
        while batch := cursor.fetchmany(_PARQUET_BATCH):
            for (text,) in batch:
                number += 1
                yield Line(index, path, number, json.dumps(_without_nulls(json.loads(text))))
    finally:
        connection.close()
