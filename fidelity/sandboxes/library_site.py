"""A small stateful lending library (WSGI): login, forms, pagination, a per-process state.

The web suite's ``library`` site. Everything is deterministic: the catalogue
comes from a seeded generator, session tokens are counters, dates are fixed.
A fresh server process (one per trajectory) starts from the same state.
Every value written into HTML goes through :func:`html.escape`.
"""

from __future__ import annotations

import html
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qs, urlencode

PAGE_SIZE = 10
GENRES = ("Fantasy", "History", "Mystery", "Poetry", "Science")
USERS = {"alice": ("wonderland", "Alice Liddell"), "bob": ("builder", "Bob Stone")}
_ADJECTIVES = ("Silent", "Hidden", "Golden", "Broken", "Distant", "Quiet", "Northern", "Last")
_NOUNS = ("River", "Garden", "Lantern", "Harbour", "Mountain", "Library", "Orchard", "Compass")
_AUTHORS = ("Ada Byron", "Chen Wei", "Nia Okafor", "Lars Berg", "Maria Rossi", "Omar Haddad")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]


@dataclass
class Book:
    """One catalogue entry."""

    id: int
    title: str
    author: str
    year: int
    genre: str
    borrower: str | None = None


@dataclass
class Library:
    """The application state: catalogue, sessions, flash messages."""

    books: dict[int, Book] = field(default_factory=dict)
    sessions: dict[str, str] = field(default_factory=dict)
    flashes: dict[str, str] = field(default_factory=dict)
    counter: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def seeded(cls, count: int = 48, seed: int = 7) -> Library:
        """The catalogue every trajectory starts from."""
        rng = random.Random(seed)
        library = cls()
        for number in range(1, count + 1):
            title = f"The {rng.choice(_ADJECTIVES)} {rng.choice(_NOUNS)}"
            library.books[number] = Book(
                number,
                f"{title} {number}",
                rng.choice(_AUTHORS),
                1900 + rng.randrange(120),
                GENRES[number % len(GENRES)],
            )
        for number in (3, 8, 21):
            library.books[number].borrower = "bob"
        return library


class Request:
    """The parts of a WSGI request the pages need."""

    def __init__(self, environ: dict[str, Any]) -> None:
        self.method = environ["REQUEST_METHOD"]
        self.path = environ.get("PATH_INFO", "/") or "/"
        self.query = {k: v[0] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        self.form: dict[str, str] = {}
        if self.method == "POST":
            length = int(environ.get("CONTENT_LENGTH") or 0)
            body = environ["wsgi.input"].read(min(length, 100_000)).decode("utf-8", "replace")
            self.form = {k: v[0] for k, v in parse_qs(body, keep_blank_values=True).items()}
        cookie = SimpleCookie(environ.get("HTTP_COOKIE", ""))
        self.token = cookie["session"].value if "session" in cookie else None


@dataclass
class Response:
    """Status, headers and an HTML body."""

    body: str = ""
    status: str = "200 OK"
    headers: list[tuple[str, str]] = field(default_factory=list)


def redirect(location: str, *headers: tuple[str, str]) -> Response:
    """A 303 See Other to *location* (a path on this site)."""
    return Response("", "303 See Other", [("Location", location), *headers])


class LibraryApp:
    """The WSGI application over one :class:`Library`."""

    def __init__(self, library: Library | None = None) -> None:
        self.library = library or Library.seeded()

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = Request(environ)
        with self.library.lock:
            response = self.route(request)
        body = response.body.encode()
        headers = [("Content-Type", "text/html; charset=utf-8"), ("Cache-Control", "no-store")]
        start_response(response.status, headers + response.headers)
        return [body]

    def route(self, request: Request) -> Response:
        """The response for *request*."""
        user = self.library.sessions.get(request.token or "")
        path, method = request.path.rstrip("/") or "/", request.method
        if path == "/":
            return self.home(user, request)
        if path == "/login":
            return self.login(request) if method == "POST" else self.login_form(request, None)
        if path == "/logout":
            self.library.sessions.pop(request.token or "", None)
            return redirect("/", ("Set-Cookie", "session=; Path=/; Max-Age=0"))
        if path == "/books":
            return self.catalogue(user, request)
        if path == "/books/new":
            if user is None:
                return redirect("/login?" + urlencode({"next": "/books/new"}))
            return (
                self.add_book(user, request)
                if method == "POST"
                else self.book_form(user, request, {}, [])
            )
        if path == "/account":
            return self.account(user, request) if user else redirect("/login?next=/account")
        if path.startswith("/books/") and path[7:].isdigit():
            return self.book(user, request, int(path[7:]), method == "POST")
        return Response(
            self.page(user, request, "Not found", "<p>No page at this address.</p>"),
            "404 Not Found",
        )

    # -- pages ---------------------------------------------------------------

    def page(self, user: str | None, request: Request, title: str, content: str) -> str:
        """The layout around *content*: navigation, flash message, footer."""
        who = (
            f'<span>Signed in as {html.escape(USERS[user][1])}</span> <a href="/account">My account</a> '
            '<form method="post" action="/logout" class="inline"><button>Sign out</button></form>'
            if user
            else '<a href="/login">Sign in</a>'
        )
        flash = self.library.flashes.pop(request.token or "", None)
        notice = f'<p role="status">{html.escape(flash)}</p>' if flash else ""
        return (
            f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{html.escape(title)} "
            "· Lantern Library</title></head><body><header><nav aria-label='Main'>"
            "<a href='/'>Home</a> <a href='/books'>Catalogue</a> <a href='/books/new'>Add a book</a> "
            f"{who}</nav></header><main><h1>{html.escape(title)}</h1>{notice}{content}</main>"
            "<footer><p>Lantern Library · open 9:00–17:00</p></footer></body></html>"
        )

    def home(self, user: str | None, request: Request) -> Response:
        """Welcome page with counts."""
        books = self.library.books.values()
        free = sum(1 for b in books if b.borrower is None)
        content = (
            f"<p>{len(books)} books in the catalogue, {free} available.</p>"
            "<ul><li><a href='/books'>Browse the catalogue</a></li>"
            "<li><a href='/books?genre=Poetry'>Poetry shelf</a></li></ul>"
        )
        return Response(self.page(user, request, "Welcome", content))

    def login_form(self, request: Request, error: str | None, status: str = "200 OK") -> Response:
        """The sign-in form (with an error after a failed attempt)."""
        target = request.query.get("next") or request.form.get("next") or "/books"
        alert = f'<p role="alert">{html.escape(error)}</p>' if error else ""
        content = (
            f'{alert}<form method="post" action="/login">'
            f'<input type="hidden" name="next" value="{html.escape(target)}">'
            '<label>Username <input name="username" autocomplete="off"></label> '
            '<label>Password <input name="password" type="password"></label> '
            "<button type='submit'>Sign in</button></form>"
        )
        return Response(self.page(None, request, "Sign in", content), status)

    def login(self, request: Request) -> Response:
        """Check the credentials; a session cookie and a redirect on success."""
        name, password = request.form.get("username", ""), request.form.get("password", "")
        if USERS.get(name, ("",))[0] != password or not password:
            return self.login_form(request, "Invalid username or password.", "401 Unauthorized")
        self.library.counter += 1
        token = f"s{self.library.counter}"
        self.library.sessions[token] = name
        self.library.flashes[token] = f"Welcome back, {USERS[name][1]}."
        target = request.form.get("next", "/books")
        target = target if target.startswith("/") and not target.startswith("//") else "/books"
        return redirect(target, ("Set-Cookie", f"session={token}; Path=/; HttpOnly; SameSite=Lax"))

    def catalogue(self, user: str | None, request: Request) -> Response:
        """Search form, filtered list and pagination."""
        query, genre = request.query.get("q", "").strip(), request.query.get("genre", "")
        found = [
            b
            for b in self.library.books.values()
            if (query.lower() in (b.title + " " + b.author).lower()) and genre in ("", b.genre)
        ]
        pages = max(1, -(-len(found) // PAGE_SIZE))
        page = min(max(_int(request.query.get("page"), 1), 1), pages)
        shown = found[(page - 1) * PAGE_SIZE : page * PAGE_SIZE]
        options = "".join(
            f'<option value="{g}"{" selected" if g == genre else ""}>{g}</option>' for g in GENRES
        )
        rows = "".join(
            f'<tr><td><a href="/books/{b.id}">{html.escape(b.title)}</a></td>'
            f"<td>{html.escape(b.author)}</td><td>{b.year}</td><td>{b.genre}</td>"
            f"<td>{'On loan' if b.borrower else 'Available'}</td></tr>"
            for b in shown
        )
        content = (
            '<form method="get" action="/books" role="search">'
            f'<label>Search <input name="q" value="{html.escape(query)}"></label> '
            f'<label>Genre <select name="genre"><option value="">Any genre</option>{options}</select></label> '
            "<button>Search</button></form>"
            f"<p>{len(found)} result(s), page {page} of {pages}.</p>"
            "<table><thead><tr><th>Title</th><th>Author</th><th>Year</th><th>Genre</th><th>Status</th>"
            f"</tr></thead><tbody>{rows}</tbody></table>{self.pager(query, genre, page, pages)}"
        )
        return Response(self.page(user, request, "Catalogue", content))

    @staticmethod
    def pager(query: str, genre: str, page: int, pages: int) -> str:
        """Previous / numbered / Next links that keep the search."""

        def href(number: int) -> str:
            params = {k: v for k, v in (("q", query), ("genre", genre)) if v}
            return "/books?" + urlencode({**params, "page": number})

        links = [f'<a href="{html.escape(href(page - 1))}">Previous</a>'] if page > 1 else []
        for number in range(1, pages + 1):
            links.append(
                f'<a aria-current="page">{number}</a>'
                if number == page
                else f'<a href="{html.escape(href(number))}">{number}</a>'
            )
        if page < pages:
            links.append(f'<a href="{html.escape(href(page + 1))}">Next</a>')
        return f'<nav aria-label="Pagination">{" ".join(links)}</nav>'

    def book(self, user: str | None, request: Request, number: int, post: bool) -> Response:
        """A book's page; POST borrows or returns it (signed-in users only)."""
        book = self.library.books.get(number)
        if book is None:
            return Response(
                self.page(user, request, "Not found", "<p>No such book.</p>"), "404 Not Found"
            )
        if post:
            if user is None:
                return redirect("/login?" + urlencode({"next": f"/books/{number}"}))
            message = self._lend(book, user, request.form.get("do", ""))
            self.library.flashes[request.token or ""] = message
            return redirect(f"/books/{number}")
        status = f"On loan to {USERS[book.borrower][1]}" if book.borrower else "Available"
        action = ""
        if user and book.borrower is None:
            action = '<form method="post"><button name="do" value="borrow">Borrow this book</button></form>'
        elif user and book.borrower == user:
            action = '<form method="post"><button name="do" value="return">Return this book</button></form>'
        content = (
            f"<dl><dt>Author</dt><dd>{html.escape(book.author)}</dd><dt>Year</dt><dd>{book.year}</dd>"
            f"<dt>Genre</dt><dd>{book.genre}</dd><dt>Status</dt><dd>{status}</dd></dl>{action}"
            '<p><a href="/books">Back to the catalogue</a></p>'
        )
        return Response(self.page(user, request, book.title, content))

    @staticmethod
    def _lend(book: Book, user: str, do: str) -> str:
        if do == "borrow" and book.borrower is None:
            book.borrower = user
            return f"You borrowed {book.title}. Due back on 2024-07-01."
        if do == "return" and book.borrower == user:
            book.borrower = None
            return f"You returned {book.title}."
        return "That action is not possible for this book."

    def account(self, user: str, request: Request) -> Response:
        """The signed-in user's loans."""
        loans = [b for b in self.library.books.values() if b.borrower == user]
        items = "".join(
            f'<li><a href="/books/{b.id}">{html.escape(b.title)}</a></li>' for b in loans
        )
        content = f"<h2>My loans ({len(loans)})</h2>" + (
            f"<ul>{items}</ul>" if loans else "<p>No loans.</p>"
        )
        return Response(self.page(user, request, "My account", content))

    def book_form(
        self, user: str, request: Request, values: dict[str, str], errors: list[str]
    ) -> Response:
        """The add-a-book form, with validation errors."""
        alert = (
            '<div role="alert"><p>Please fix:</p><ul>'
            + "".join(f"<li>{html.escape(e)}</li>" for e in errors)
            + "</ul></div>"
            if errors
            else ""
        )
        genre = values.get("genre", "")
        options = "".join(
            f"<option{' selected' if g == genre else ''}>{g}</option>" for g in GENRES
        )
        content = (
            f'{alert}<form method="post" action="/books/new">'
            f'<label>Title <input name="title" value="{html.escape(values.get("title", ""))}" required></label> '
            f'<label>Author <input name="author" value="{html.escape(values.get("author", ""))}"></label> '
            '<label>Year <input name="year" inputmode="numeric" '
            f'value="{html.escape(values.get("year", ""))}"></label> '
            f'<label>Genre <select name="genre">{options}</select></label> '
            "<button type='submit'>Add book</button></form>"
        )
        status = "422 Unprocessable Entity" if errors else "200 OK"
        return Response(self.page(user, request, "Add a book", content), status)

    def add_book(self, user: str, request: Request) -> Response:
        """Validate and add a book; its page on success."""
        values = {k: request.form.get(k, "").strip() for k in ("title", "author", "year", "genre")}
        errors = []
        if not values["title"]:
            errors.append("Title is required.")
        if not values["author"]:
            errors.append("Author is required.")
        if not (values["year"].isdigit() and 1400 <= int(values["year"]) <= 2024):
            errors.append("Year must be a number between 1400 and 2024.")
        if values["genre"] not in GENRES:
            errors.append("Choose a genre.")
        if errors:
            return self.book_form(user, request, values, errors)
        number = max(self.library.books) + 1
        self.library.books[number] = Book(
            number, values["title"], values["author"], int(values["year"]), values["genre"]
        )
        self.library.flashes[request.token or ""] = f"Added {values['title']}."
        return redirect(f"/books/{number}")


def _int(text: str | None, default: int) -> int:
    try:
        return int(text or default)
    except ValueError:
        return default
