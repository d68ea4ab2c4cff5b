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
import zlib
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from fidelity.errors import InputFormatError, NotFoundError
from fidelity.formats.jsonl import PathConfiner, parse_line
from fidelity.trajectory import Trajectory

SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet")
"""The shard formats a dataset may mix."""

_PARQUET_BATCH = 1024
_ZSTD_CHUNK = 1 << 16


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
        except (OSError, EOFError, zlib.error, _Undecodable) as exc:
            # a shard that does not decompress to its end is refused whole, never read short
            raise InputFormatError(str(path), None, None, f"cannot read ({exc})") from exc


def trajectories(source: str | os.PathLike[str]) -> Iterator[Trajectory]:
    """Every trajectory of *source*, validated one at a time."""
    for line in lines(source):
        yield line.parse()


def parse_trajectory(text: str, path: str, number: int) -> Trajectory:
    """Validate one JSON object (straight from its text); errors name ``path:number`` and field.

    The same parser as a JSONL file's (:func:`fidelity.formats.jsonl.parse_line`), so a
    dataset and a suite accept and refuse the same lines with the same messages.
    """
    return parse_line(text, path, number)


def read_all(source: str | os.PathLike[str]) -> list[tuple[Path, int, Trajectory]]:
    """Every trajectory of *source* (any dataset form), validated, with its shard and line.

    For commands that hold the whole suite in memory (``audit``, ``replay``,
    ``simulate``). Ids must be unique across shards; an empty dataset is refused.
    """
    read: list[tuple[Path, int, Trajectory]] = []
    seen: dict[str, tuple[Path, int]] = {}
    for line in lines(source):
        trajectory = line.parse()
        first = seen.setdefault(trajectory.id, (line.path, line.number))
        if first != (line.path, line.number):
            where = f"on line {first[1]}" if first[0] == line.path else f"at {first[0]}:{first[1]}"
            raise InputFormatError(
                str(line.path), line.number, "id", f"duplicate id {trajectory.id!r} (first {where})"
            )
        read.append((line.path, line.number, trajectory))
    if not read:
        what = "file" if Path(source).is_file() else "dataset"
        raise InputFormatError(str(source), None, None, f"no trajectories in {what}")
    return read


def confined(
    read: Sequence[tuple[Path, int, Trajectory]],
    allowed_roots: Sequence[str | os.PathLike[str]] | None = (),
) -> list[Trajectory]:
    """The trajectories of :func:`read_all` with their env paths resolved against their shard.

    Each shard's folder is a root for its own trajectories, as for one file
    (:func:`fidelity.formats.jsonl.confine_paths`); ``allowed_roots=None`` resolves
    without confining.
    """
    confiners: dict[Path, PathConfiner] = {}
    result = []
    for shard, number, trajectory in read:
        confiner = confiners.get(shard)
        if confiner is None:
            confiner = confiners[shard] = PathConfiner(shard, allowed_roots)
        result.append(confiner.confine(trajectory, number))
    return result


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
            return gzip.open(path, "rt", encoding="utf-8-sig")
        if path.name.endswith(".zst"):
            frames = io.BufferedReader(_ZstdFrames(path.open("rb")), _ZSTD_CHUNK)
            return io.TextIOWrapper(frames, encoding="utf-8-sig")
        return path.open(encoding="utf-8-sig")  # utf-8-sig: a leading BOM is dropped
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: no such file") from exc
    except OSError as exc:
        raise NotFoundError(f"{path}: cannot read ({exc.strerror})") from exc


class _Undecodable(Exception):
    """A compressed shard whose data cannot be decoded (corrupt, or cut short)."""


class _ZstdFrames(io.RawIOBase):
    """The decompressed bytes of a zstd file, every frame to the file's end.

    zstandard's ``stream_reader`` stops after the first frame by default, and even
    across frames it takes a file cut inside a frame for a clean end: either way a
    damaged shard would read as a smaller one. Here a frame left unfinished at the
    end of the file, or data that does not decode, raises :class:`_Undecodable`.
    """

    def __init__(self, raw: IO[bytes]) -> None:
        import zstandard

        super().__init__()
        self._raw = raw
        self._decompressor = zstandard.ZstdDecompressor()
        self._error: type[Exception] = zstandard.ZstdError
        self._frame: Any = None  # the frame being decoded (a zstandard decompressobj)
        self._pending = memoryview(b"")  # decoded bytes not handed out yet

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = self._raw.read(_ZSTD_CHUNK)
            if not chunk:
                if self._frame is not None:
                    raise _Undecodable("zstd: the file ends inside a frame, it was cut short")
                return 0
            self._pending = memoryview(self._decoded(chunk))
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _decoded(self, data: bytes) -> bytes:
        """The bytes *data* decodes to, starting a new frame wherever one ends."""
        out = []
        try:
            while data:
                if self._frame is None:
                    self._frame = self._decompressor.decompressobj()
                out.append(self._frame.decompress(data))
                if not self._frame.eof:
                    break
                data, self._frame = self._frame.unused_data, None
        except self._error as exc:
            raise _Undecodable(f"zstd: {exc}") from exc
        return b"".join(out)

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


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
            raise InputFormatError(
                str(path), None, None, f"not a readable Parquet file ({_first_line(exc)})"
            ) from exc
        number = 0
        while batch := _fetched(cursor, path, number):
            for (text,) in batch:
                number += 1
                yield Line(index, path, number, json.dumps(_without_nulls(json.loads(text))))
    finally:
        connection.close()


def _fetched(cursor: Any, path: Path, read: int) -> list[Any]:
    """The next batch of rows; a shard that breaks mid-read is refused whole, never read short."""
    import duckdb

    try:
        return list(cursor.fetchmany(_PARQUET_BATCH))
    except duckdb.Error as exc:
        raise InputFormatError(
            str(path), None, None, f"cannot read Parquet after row {read} ({_first_line(exc)})"
        ) from exc


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0]
