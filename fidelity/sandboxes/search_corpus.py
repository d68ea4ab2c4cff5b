"""The search backend's offline corpus and its full-text indexes.

Pages come from Debian documentation packages, each mapped to its public URL:

- ``python3.11-doc`` (``/usr/share/doc/python3.11/html``) → ``https://docs.python.org/3.11/…``,
  the Sphinx body converted to markdown, dated by the page's "Last updated on";
- ``dict-foldoc`` (``/usr/share/dictd/foldoc.*``) → ``https://foldoc.org/<term>``, one
  page per entry, dated by the entry's last ``(YYYY-MM-DD)``.

``build_corpus`` writes ``pages.sqlite`` (the pages plus an FTS5 index) and,
when the ``tantivy`` module is installed, a tantivy index beside it, under
``~/.cache/fidelity/search/<corpus hash>/``; the hash covers the source files
(names and sizes) and this builder's version, so a rebuild happens only when
a package changes.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import sqlite3
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

from fidelity.errors import SandboxUnavailableError
from fidelity.sandboxes.images import cache_dir

BUILDER_VERSION = "1"
PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
PYTHON_URL = "https://docs.python.org/3.11/"
FOLDOC = Path("/usr/share/dictd/foldoc")
FOLDOC_URL = "https://foldoc.org/"
Log = Callable[[str], None]


@dataclass(frozen=True)
class Page:
    """One corpus page."""

    url: str
    title: str
    date: str
    body: str


def sources() -> list[Path]:
    """The documentation files the corpus is made of (empty when no package is installed)."""
    files = sorted(PYTHON_DOCS.rglob("*.html")) if PYTHON_DOCS.is_dir() else []
    files = [f for f in files if not f.relative_to(PYTHON_DOCS).parts[0].startswith("_")]
    for suffix in (".index", ".dict.dz"):
        path = FOLDOC.with_name(FOLDOC.name + suffix)
        if path.is_file():
            files.append(path)
    return files


def corpus_hash(files: list[Path]) -> str:
    """Hash of the source files' names and sizes plus the builder version (16 hex digits)."""
    digest = hashlib.sha256(BUILDER_VERSION.encode())
    for path in files:
        digest.update(f"{path}\0{path.stat().st_size}\0".encode())
    return digest.hexdigest()[:16]


def corpus_dir() -> Path:
    """The built corpus of the installed documentation (may not exist yet)."""
    files = sources()
    if not files:
        raise SandboxUnavailableError(
            "no search corpus source: install Debian python3.11-doc and dict-foldoc "
            "(scripts/bootstrap.sh search)"
        )
    return cache_dir() / "search" / corpus_hash(files)


def build_corpus(log: Log = lambda line: None) -> Path:
    """Build (once) the corpus and its indexes; returns its folder."""
    folder = corpus_dir()
    if (folder / "complete").is_file():
        _add_tantivy(folder, log)
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    database = folder / "pages.sqlite"
    database.unlink(missing_ok=True)
    pages = sorted(set(iter_pages()), key=lambda page: page.url)
    log(f"search: {len(pages)} pages → {folder}")
    with sqlite3.connect(database) as db:
        db.execute("CREATE TABLE pages (url TEXT PRIMARY KEY, title TEXT, date TEXT, body TEXT)")
        db.execute(
            "CREATE VIRTUAL TABLE pages_fts USING fts5(title, body, content='pages', "
            "content_rowid='rowid', tokenize='porter unicode61')"
        )
        rows = [(p.url, p.title, p.date, p.body) for p in pages]
        db.executemany("INSERT OR IGNORE INTO pages VALUES (?, ?, ?, ?)", rows)
        db.execute(
            "INSERT INTO pages_fts (rowid, title, body) SELECT rowid, title, body FROM pages"
        )
    db.close()
    (folder / "complete").write_text(str(len(pages)))
    _add_tantivy(folder, log)
    return folder


def _add_tantivy(folder: Path, log: Log) -> None:
    """Index the stored pages with tantivy too, when it is installed and not done yet."""
    if (folder / "tantivy" / "meta.json").is_file():
        return
    try:
        with sqlite3.connect(f"file:{folder / 'pages.sqlite'}?mode=ro", uri=True) as db:
            pages = [
                Page(*row)
                for row in db.execute("SELECT url, title, date, body FROM pages ORDER BY url")
            ]
        db.close()
        build_tantivy(folder, pages)
        log("search: tantivy index built")
    except ImportError:
        log("search: tantivy is not installed; SQLite FTS5 only")


def build_tantivy(folder: Path, pages: Sequence[Page]) -> None:
    """Write a tantivy index of *pages* under ``folder/tantivy`` (ImportError without tantivy)."""
    import tantivy

    schema = _tantivy_schema(tantivy)
    target = folder / "tantivy"
    target.mkdir(exist_ok=True)
    index = tantivy.Index(schema, path=str(target))
    writer = index.writer(heap_size=100_000_000, num_threads=1)
    for page in pages:
        writer.add_document(tantivy.Document(url=page.url, title=page.title, body=page.body))
    writer.commit()
    writer.wait_merging_threads()


def _tantivy_schema(tantivy: Any) -> Any:
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("url", stored=True, tokenizer_name="raw")
    builder.add_text_field("title", stored=False, tokenizer_name="en_stem")
    builder.add_text_field("body", stored=False, tokenizer_name="en_stem")
    return builder.build()


def iter_pages() -> Iterator[Page]:
    """Every page of the installed documentation packages."""
    if PYTHON_DOCS.is_dir():
        for path in sorted(PYTHON_DOCS.rglob("*.html")):
            relative = path.relative_to(PYTHON_DOCS)
            if relative.parts[0].startswith("_"):
                continue
            page = python_page(path, PYTHON_URL + relative.as_posix())
            if page is not None:
                yield page
    yield from foldoc_pages()


# -- python3.11-doc ------------------------------------------------------------------------


class _SphinxToMarkdown(HTMLParser):
    """The ``div.body`` of a Sphinx page as markdown (headings, paragraphs, lists, code)."""

    _BLOCKS: ClassVar[set[str]] = {
        "p",
        "div",
        "section",
        "dt",
        "dd",
        "tr",
        "table",
        "br",
        "blockquote",
    }

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.updated = ""
        self.out: list[str] = []
        self._depth = 0  # nesting inside div.body
        self._in_title = False
        self._in_pre = False
        self._in_footer = False
        self._skip = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "title":
            self._in_title = True
        if tag == "div" and "footer" in classes:
            self._in_footer = True
        if self._depth == 0:
            if tag == "div" and "body" in classes:
                self._depth = 1
            return
        if tag == "div":
            self._depth += 1
        if tag in {"script", "style"} or "headerlink" in classes:
            self._skip += 1
        elif tag in {"h1", "h2", "h3", "h4", "h5", "h6"}:
            self.out.append("\n\n" + "#" * int(tag[1]) + " ")
        elif tag == "pre":
            self._in_pre = True
            self.out.append("\n\n```\n")
        elif tag == "li":
            self.out.append("\n- ")
        elif tag in self._BLOCKS:
            self.out.append("\n\n")
        elif tag == "code" and not self._in_pre:
            self.out.append("`")

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if self._depth == 0:
            return
        if tag == "div":
            self._depth -= 1
        if tag in {"script", "style"} or (tag == "a" and self._skip):
            self._skip = max(0, self._skip - 1)
        elif tag == "pre":
            self._in_pre = False
            self.out.append("\n```\n")
        elif tag == "code" and not self._in_pre:
            self.out.append("`")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        if self._in_footer and "Last updated on" in data:
            self.updated = data
        if self._depth == 0 or self._skip:
            return
        self.out.append(data if self._in_pre else re.sub(r"\s+", " ", data))


def python_page(path: Path, url: str) -> Page | None:
    """One Python documentation page; None when it has no body."""
    parser = _SphinxToMarkdown()
    parser.feed(path.read_text(errors="replace"))
    body = re.sub(r"\n{3,}", "\n\n", "".join(parser.out)).strip()
    body = re.sub(r"[ \t]+\n", "\n", body)
    if not body:
        return None
    title = parser.title.split(" — Python 3.11", 1)[0].split(" \u2014 Python", 1)[0].strip()
    match = re.search(r"Last updated on ([A-Z][a-z]+ \d{1,2}, \d{4})", parser.updated)
    date = datetime.strptime(match.group(1), "%B %d, %Y").date().isoformat() if match else ""
    return Page(url, title or url, date, body)


# -- dict-foldoc --------------------------------------------------------------------------

_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def _b64(value: str) -> int:
    number = 0
    for char in value:
        number = number * 64 + _B64.index(char)
    return number


def foldoc_pages() -> Iterator[Page]:
    """One page per FOLDOC entry (entries several headwords share appear once)."""
    index = FOLDOC.with_name(FOLDOC.name + ".index")
    data = FOLDOC.with_name(FOLDOC.name + ".dict.dz")
    if not (index.is_file() and data.is_file()):
        return
    text = gzip.decompress(data.read_bytes())
    seen: set[int] = set()
    for line in index.read_text(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) != 3 or parts[0].startswith("00-database"):
            continue
        offset, length = _b64(parts[1]), _b64(parts[2])
        if offset in seen:
            continue
        seen.add(offset)
        entry = text[offset : offset + length].decode(errors="replace")
        page = foldoc_page(entry)
        if page is not None:
            yield page


def foldoc_page(entry: str) -> Page | None:
    """A FOLDOC entry (headword line, indented definition) as a page; None for a stub."""
    lines = entry.strip("\n").splitlines()
    if len(lines) < 2:
        return None
    term = lines[0].strip()
    body = "\n".join(line.strip() for line in lines[1:]).strip()
    body = re.sub(r"\{([^{}]*?)\}", r"\1", body)  # {cross references} read as plain words
    body = re.sub(r"\n{3,}", "\n\n", body)
    if not term or len(body) < 20:
        return None
    dates = re.findall(r"\((\d{4}-\d{2}-\d{2})\)", body)
    url = FOLDOC_URL + urllib.parse.quote(term, safe="")
    return Page(url, term, dates[-1] if dates else "", f"# {term}\n\n{body}")
