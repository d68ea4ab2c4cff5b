"""A response cache in DuckDB: a rerun of the same requests costs nothing and reproduces.

Entries are keyed by a SHA-256 of the model name, the messages, the sampling
parameters and the sample index (:func:`request_key`). Only successful
completions are stored; failures are retried on the next run. The cache is its
own DuckDB file (``--sim-cache``), apart from the audit's store: DuckDB lets
one process write a file at a time, and a cache is shared across runs.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from fidelity.duckdb_files import refuse_other_files
from fidelity.errors import StoreError

DEFAULT_CACHE = "fidelity-cache.duckdb"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key VARCHAR PRIMARY KEY,
    model VARCHAR NOT NULL,
    sample INTEGER NOT NULL,
    params JSON NOT NULL,
    content VARCHAR,
    created_at TIMESTAMP NOT NULL
);
"""


def request_key(
    model: str, messages: list[dict[str, str]], params: dict[str, Any], sample: int
) -> str:
    """The cache key of one request: SHA-256 of its canonical JSON form (hex)."""
    blob = json.dumps(
        {"model": model, "messages": messages, "params": params, "sample": sample},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    """Completions already received, in a DuckDB file (thread-safe; one writer process)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        refuse_other_files(self.path, "--sim-cache with a response cache")
        try:
            self._connection = duckdb.connect(str(self.path))
            self._connection.execute(_SCHEMA)
        except (duckdb.IOException, duckdb.CatalogException) as exc:
            first = str(exc).strip().splitlines()[0]
            raise StoreError(
                f"{self.path}: cannot open the response cache ({first}); another process may "
                "hold it: pass another --sim-cache"
            ) from exc
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> tuple[bool, str | None]:
        """``(True, content)`` when *key* is cached, ``(False, None)`` otherwise."""
        with self._lock:
            row = self._connection.execute(
                "SELECT content FROM responses WHERE key = ?", [key]
            ).fetchone()
        if row is None:
            self.misses += 1
            return False, None
        self.hits += 1
        return True, row[0]

    def get_many(self, keys: list[str]) -> dict[str, str | None]:
        """The cached content of every key of *keys* that is cached, in one query.

        Hits and misses are counted per entry of *keys*, repeats included.
        """
        if not keys:
            return {}
        with self._lock:
            rows = self._connection.execute(
                "SELECT key, content FROM responses WHERE key IN (SELECT unnest(?))", [keys]
            ).fetchall()
        found = dict(rows)
        self.hits += sum(key in found for key in keys)
        self.misses += sum(key not in found for key in keys)
        return found

    def put(
        self, key: str, model: str, sample: int, params: dict[str, Any], content: str | None
    ) -> None:
        """Store the content of a successful completion under *key*."""
        now = datetime.now(UTC).replace(tzinfo=None)
        with self._lock:
            self._connection.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?)",
                [key, model, sample, json.dumps(params, sort_keys=True), content, now],
            )

    def __len__(self) -> int:
        with self._lock:
            row = self._connection.execute("SELECT count(*) FROM responses").fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock:
            self._connection.close()


class BatchedLookup:
    """Coalesces the cache lookups of one event-loop turn into one query.

    Hundreds of concurrent predictions each asking DuckDB for one key cost
    ~0.5 ms a query; asked together they cost one query. ``await lookup(key)``
    parks the key, and the first caller of a turn schedules the flush for the
    next turn, when every coroutine of this turn has parked its key.
    """

    def __init__(self, cache: ResponseCache) -> None:
        self.cache = cache
        self._pending: dict[str, list[asyncio.Future[tuple[bool, str | None]]]] = {}

    async def lookup(self, key: str) -> tuple[bool, str | None]:
        """``(True, content)`` when *key* is cached, ``(False, None)`` otherwise."""
        loop = asyncio.get_running_loop()
        if not self._pending:
            loop.call_soon(self._flush)
        future: asyncio.Future[tuple[bool, str | None]] = loop.create_future()
        self._pending.setdefault(key, []).append(future)
        return await future

    def _flush(self) -> None:
        pending, self._pending = self._pending, {}
        try:
            found = self.cache.get_many([key for key, futures in pending.items() for _ in futures])
        except duckdb.Error as exc:  # a broken cache fails every waiter, not the event loop
            for futures in pending.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
            return
        for key, futures in pending.items():
            for future in futures:
                if not future.done():
                    future.set_result((True, found[key]) if key in found else (False, None))
