"""Full-text engines of the search backend: tantivy, SQLite FTS5, or a user's HTTP service.

Every engine answers :meth:`Engine.search` with at most *n* :class:`Hit` and
:meth:`Engine.page` with a stored page (or None). Ranking is the engine's own
(BM25 in both local engines); ties are broken by URL so results repeat
exactly. Snippets are cut the same way for both local engines: the window of
the body around the first query term.
"""

from __future__ import annotations

import json
import re
import sqlite3
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from fidelity.errors import SandboxError
from fidelity.sandboxes.search_corpus import Page

SNIPPET = 240
_TERM_RE = re.compile(r"\w+", re.UNICODE)
POOL = 50
"""Candidates fetched before the stable (score, URL) sort cuts them to *n*."""


@dataclass(frozen=True)
class Hit:
    """One search result as the agent sees it."""

    url: str
    title: str
    snippet: str
    date: str


class Engine(Protocol):
    """What the search backend needs from an engine."""

    name: str

    def search(self, query: str, n: int) -> list[Hit]:
        """At most *n* results for *query*, best first."""
        ...

    def page(self, url: str) -> Page | None:
        """The stored page at *url*, or None."""
        ...

    def close(self) -> None:
        """Release the engine."""
        ...


def terms(query: str) -> list[str]:
    """The words of *query* (lower case), in order, without repeats."""
    return list(dict.fromkeys(word.lower() for word in _TERM_RE.findall(query)))


def snippet(body: str, words: Sequence[str]) -> str:
    """About :data:`SNIPPET` characters of *body* around the first of *words* it contains.

    Only a window of the body is flattened (pages run to hundreds of kilobytes).
    """
    lower = body.lower()
    hits = [m.start() for w in words if (m := re.search(rf"\b{re.escape(w)}", lower))]
    first = min(hits) if hits else 0
    window = body[max(0, first - 4 * SNIPPET) : first + 4 * SNIPPET]
    before = _flat(body[max(0, first - 4 * SNIPPET) : first])
    flat = _flat(window)
    start = max(0, len(before) - 60) if first else 0
    if start:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < start + 20 else start
    text = flat[start : start + SNIPPET]
    more = start + SNIPPET < len(flat) or first + 4 * SNIPPET < len(body)
    if more:
        text = text.rsplit(" ", 1)[0] + " ..."
    return ("... " if start or first > 4 * SNIPPET else "") + text


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"[#`*]+", "", text)).lstrip()


class _Pages:
    """The pages table of a built corpus (one connection per thread)."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "pages.sqlite"
        if not self.path.is_file():
            raise SandboxError(
                f"search corpus {folder} is not built; run: fidelity sandbox build --domain search"
            )
        self._local = threading.local()

    def db(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            self._local.conn = conn
        return conn

    def page(self, url: str) -> Page | None:
        row = (
            self.db()
            .execute("SELECT url, title, date, body FROM pages WHERE url = ?", (url,))
            .fetchone()
        )
        return Page(*row) if row else None

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


class Fts5Engine:
    """SQLite FTS5 (stdlib): BM25 with the title weighted ten times the body."""

    name = "fts5"

    def __init__(self, folder: Path) -> None:
        self._pages = _Pages(folder)

    def search(self, query: str, n: int) -> list[Hit]:
        words = terms(query)
        if not words:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        rows = (
            self._pages.db()
            .execute(
                "SELECT p.url, p.title, p.date, p.body, bm25(pages_fts, 10.0, 1.0) AS s "
                "FROM pages_fts JOIN pages p ON p.rowid = pages_fts.rowid "
                "WHERE pages_fts MATCH ? ORDER BY s, p.url LIMIT ?",
                (match, n),
            )
            .fetchall()
        )
        return [Hit(url, title, snippet(body, words), date) for url, title, date, body, _ in rows]

    def page(self, url: str) -> Page | None:
        return self._pages.page(url)

    def close(self) -> None:
        self._pages.close()


class TantivyEngine:
    """tantivy (PyPI): BM25 over title (boosted ×10) and body, English stemming."""

    name = "tantivy"

    def __init__(self, folder: Path) -> None:
        import tantivy

        if not (folder / "tantivy" / "meta.json").is_file():
            raise SandboxError(
                f"no tantivy index in {folder}; run: fidelity sandbox build --domain search"
            )
        self._tantivy = tantivy
        self._index = tantivy.Index.open(str(folder / "tantivy"))
        self._pages = _Pages(folder)

    def search(self, query: str, n: int) -> list[Hit]:
        words = terms(query)
        if not words:
            return []
        text = " ".join(words)
        parsed = self._index.parse_query(text, ["title", "body"], field_boosts={"title": 10.0})
        searcher = self._index.searcher()
        found = []
        for score, address in searcher.search(parsed, POOL).hits:
            url = searcher.doc(address)["url"][0]
            found.append((-round(score, 4), url))
        hits = []
        for _, url in sorted(found)[:n]:
            page = self._pages.page(url)
            if page is not None:
                hits.append(Hit(page.url, page.title, snippet(page.body, words), page.date))
        return hits

    def page(self, url: str) -> Page | None:
        return self._pages.page(url)

    def close(self) -> None:
        self._pages.close()


class HttpEngine:
    """A search service on the user's network.

    ``GET {url}/search?q=…&n=10`` answers ``{"results": [{"url", "title",
    "snippet", "date"}…]}``; ``GET {url}/page?url=…`` answers ``{"url",
    "title", "date", "markdown"}`` or 404. :mod:`fidelity.sandboxes.search_http`
    serves a built corpus this way.
    """

    name = "http"

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, **params: Any) -> Any:
        target = f"{self.url}/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(target, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise SandboxError(f"search engine {self.url}: HTTP {exc.code}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise SandboxError(f"search engine {self.url}: {exc}") from exc

    def search(self, query: str, n: int) -> list[Hit]:
        answer = self._get("search", q=query, n=n)
        try:
            return [
                Hit(
                    str(r["url"]),
                    str(r.get("title", "")),
                    str(r.get("snippet", "")),
                    str(r.get("date", "")),
                )
                for r in answer["results"][:n]
            ]
        except (KeyError, TypeError) as exc:
            raise SandboxError(f"search engine {self.url}: malformed answer ({exc})") from exc

    def page(self, url: str) -> Page | None:
        answer = self._get("page", url=url)
        if answer is None:
            return None
        try:
            return Page(
                str(answer["url"]),
                str(answer.get("title", "")),
                str(answer.get("date", "")),
                str(answer["markdown"]),
            )
        except (KeyError, TypeError) as exc:
            raise SandboxError(f"search engine {self.url}: malformed page ({exc})") from exc

    def close(self) -> None:
        return None


def open_engine(kind: str, folder: Path | None, url: str | None) -> Engine:
    """The engine *kind* (``auto``: tantivy when installed and indexed, else FTS5)."""
    if url is not None:
        return HttpEngine(url)
    assert folder is not None
    if kind in {"auto", "tantivy"}:
        try:
            return TantivyEngine(folder)
        except (ImportError, SandboxError):
            if kind == "tantivy":
                raise
    return Fts5Engine(folder)
