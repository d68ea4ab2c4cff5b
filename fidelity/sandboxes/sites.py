"""The web suite's sites: described in ``suites/web/<project>/site.json``, served on loopback.

Five kinds: ``datasette`` (Datasette over a SQLite database generated here,
seeded), ``static`` (a copy of documentation HTML from a Debian package, served
by :mod:`http.server`), ``library`` (:mod:`fidelity.sandboxes.library_site`), and
``django`` (the Django admin) and ``sqlite-web`` (see :mod:`fidelity.sandboxes.packaged_sites`).
Each site runs in its own process (``python -m fidelity.sandboxes.sites``)
in its own session, bound to an ephemeral port on 127.0.0.1; it prints
``PORT <n>`` when ready and exits when its owner process dies.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import selectors
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any, Literal
from urllib.error import HTTPError, URLError
from urllib.request import ProxyHandler, build_opener
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from pydantic import BaseModel, ConfigDict, ValidationError

from fidelity.errors import SandboxError, SandboxUnavailableError, UsageError
from fidelity.resources import suite_project
from fidelity.sandboxes.images import EnvironmentUnavailableError, cache_dir
from fidelity.trajectory import EnvSpec, WebSite
from fidelity.trust import TRUST_FLAG, origin_of, redact, scrubbed_environment

OWNER_FLAG = "--fidelity-owner"
START_TIMEOUT = 30.0


class SiteSpec(BaseModel):
    """``site.json``: what kind of site a web project is."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["datasette", "static", "library", "django", "sqlite-web"]
    description: str = ""
    start: str = "/"
    source: str | None = None
    package: str | None = None


def project_dir(project: str) -> Path:
    """The folder of web project *project*; UsageError for an unknown name."""
    return suite_project("web", project, "site.json", "web")


def load_site(folder: Path) -> SiteSpec:
    """The :class:`SiteSpec` of a project folder."""
    try:
        return SiteSpec.model_validate_json((folder / "site.json").read_text())
    except (OSError, ValidationError) as exc:
        raise UsageError(f"{folder / 'site.json'}: {exc}") from None


PYPI_KINDS = {"datasette": "datasette", "django": "django", "sqlite-web": "sqlite_web"}
"""Site kinds served by a PyPI package -> the module that must be importable."""


def _check_installed(spec: SiteSpec, folder: Path) -> None:
    """SandboxUnavailableError naming the install step when the site's software is missing."""
    if spec.kind == "static" and not Path(spec.source or "").is_dir():
        raise SandboxUnavailableError(
            f"{spec.source} is missing: install the Debian package {spec.package} "
            f"(`apt-get install {spec.package}`, or scripts/bootstrap.sh web)"
        )
    module = PYPI_KINDS.get(spec.kind)
    if module is not None and importlib.util.find_spec(module) is None:
        raise SandboxUnavailableError(
            f"web project {folder.name} needs the Python package {spec.kind} "
            "(pip install 'fidelity[web]', or scripts/bootstrap.sh web)"
        )


class SiteProcess:
    """A running site server (its own process session); :meth:`stop` is idempotent."""

    def __init__(self, folder: Path, root: Path) -> None:
        _check_installed(load_site(folder), folder)
        argv = [sys.executable, "-m", "fidelity.sandboxes.sites", str(folder), str(root)]
        self.proc = subprocess.Popen(
            [*argv, f"{OWNER_FLAG}={os.getpid()}"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=_server_environment(),
        )
        try:
            self.port = self._read_port()
        except BaseException:
            self.stop()
            raise

    def _read_port(self) -> int:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as selector:
            selector.register(self.proc.stdout, selectors.EVENT_READ)
            if selector.select(START_TIMEOUT):
                line = self.proc.stdout.readline().decode()
                if line.startswith("PORT "):
                    return int(line.split()[1])
        self.stop()
        assert self.proc.stderr is not None
        tail = self.proc.stderr.read().decode(errors="replace").strip().splitlines()[-3:]
        raise SandboxError(f"the web site did not start: {' | '.join(tail) or 'no output'}")

    def stop(self) -> None:
        """Kill the server's whole session (SIGTERM, then SIGKILL). Idempotent."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


def _server_environment() -> dict[str, str]:
    """What the site server inherits: how to find Python and fidelity, nothing of the auditor's."""
    keep = ("PATH", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
    env = {key: os.environ[key] for key in keep if key in os.environ}
    # the auditor's cache folder: sites that need a prepared database keep it there
    cache = str(cache_dir().parent)
    return {
        **env,
        "LANG": "C.UTF-8",
        "TZ": "UTC",
        "HOME": tempfile.gettempdir(),
        "XDG_CACHE_HOME": cache,
    }


# -- the user's own sites ------------------------------------------------------

WEBARENA_VARIABLES = {
    "shopping": "WA_SHOPPING",
    "shopping_admin": "WA_SHOPPING_ADMIN",
    "reddit": "WA_REDDIT",
    "gitlab": "WA_GITLAB",
    "wikipedia": "WA_WIKIPEDIA",
    "map": "WA_MAP",
    "homepage": "WA_HOMEPAGE",
}
"""BrowserGym's WebArena variables, by the site name they give a URL to."""


class UnknownSiteError(UsageError):
    """A trajectory names a web site that has no URL."""


@dataclass(frozen=True)
class LiveSite:
    """A site of a trajectory, resolved: its live and recorded base URLs and reset command.

    ``reset_from`` says who named the reset: the operator (``--site-reset``, a file named
    by ``--env-defaults``) or the dataset (``env.sites.<name>.reset``, run only when the
    operator trusts the dataset's commands, with a scrubbed environment)."""

    name: str
    url: str
    recorded: str
    reset: str | None = None
    reset_from: Literal["operator", "dataset"] = "operator"

    @property
    def origin(self) -> str:
        """``scheme://host:port`` of the live URL (what the browser may reach)."""
        return origin_of(self.url)


def webarena_sites(environ: Mapping[str, str] | None = None) -> dict[str, WebSite]:
    """The sites BrowserGym's ``WA_*`` variables name (unset or empty ones left out)."""
    environ = os.environ if environ is None else environ
    found: dict[str, WebSite] = {}
    for name, variable in WEBARENA_VARIABLES.items():
        if environ.get(variable, "").strip():
            try:
                found[name] = WebSite(url=environ[variable].strip())
            except ValidationError as exc:
                message = exc.errors()[0]["msg"]
                raise UsageError(f"${variable}: {message}") from None
    return found


def resolve_sites(
    env: EnvSpec, defaults: Mapping[str, WebSite], trust_commands: bool = False
) -> list[LiveSite]:
    """The user sites *env* names, each filled from *defaults* (the operator's) where it
    gives no value.

    *env* is the dataset's, untrusted: a URL it gives must have the origin of one of the
    operator's sites, and a reset it gives runs only with *trust_commands*; otherwise
    :class:`~fidelity.sandboxes.images.EnvironmentUnavailableError` (the trajectory is
    unverifiable). :class:`UnknownSiteError` (one line, naming ``env.sites.<name>``) for a
    site without a URL.
    """
    allowed = {origin_of(site.url) for site in defaults.values() if site.url is not None}
    resolved = []
    for name, site in (env.sites or {}).items():
        default = defaults.get(name, WebSite())
        if site.url is not None and origin_of(site.url) not in allowed:
            raise EnvironmentUnavailableError(
                f"env.sites.{name}.url: {site.url} is not one of the operator's sites "
                f"(allow it with --site {name}=URL)"
            )
        if site.reset is not None and not trust_commands:
            raise EnvironmentUnavailableError(
                f"env.sites.{name}.reset: a dataset's command is not run on this host "
                f"(pass {TRUST_FLAG} to run it)"
            )
        url = site.url or default.url
        if url is None:
            variable = WEBARENA_VARIABLES.get(name)
            hint = f" or ${variable}" if variable else ""
            raise UnknownSiteError(
                f"env.sites.{name}: unknown site {name!r}, no URL given "
                f"(set env.sites.{name}.url, pass --site {name}=URL{hint})"
            )
        recorded = site.recorded or default.recorded or url
        if site.reset is not None:
            resolved.append(LiveSite(name, url, recorded, site.reset, "dataset"))
        else:
            resolved.append(LiveSite(name, url, recorded, default.reset))
    return resolved


def reset_site(site: LiveSite, timeout: float) -> None:
    """Run *site*'s reset command (``/bin/sh -c``, its own session, killed whole on timeout).

    The operator's reset gets the auditor's environment; a dataset's (trusted on the
    command line) only :func:`~fidelity.trust.scrubbed_environment`. What it printed is
    redacted (:func:`~fidelity.trust.redact`) before it reaches the error message.
    :class:`EnvironmentUnavailableError` when it fails or times out.
    """
    if site.reset is None:
        return
    own = {"FIDELITY_SITE": site.name, "FIDELITY_SITE_URL": site.url}
    env = scrubbed_environment(own) if site.reset_from == "dataset" else {**os.environ, **own}
    proc = subprocess.Popen(
        ["/bin/sh", "-c", site.reset],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env,
        cwd="/",
    )
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise EnvironmentUnavailableError(
            f"site {site.name}: its reset command ran past {timeout:g} s"
        ) from None
    if proc.returncode != 0:
        tail = " | ".join(redact(stderr.decode(errors="replace")).strip().splitlines()[-2:])
        raise EnvironmentUnavailableError(
            f"site {site.name}: its reset command exited {proc.returncode}"
            + (f": {tail[:300]}" if tail else "")
        )


def probe_site(site: LiveSite, timeout: float) -> None:
    """Wait until *site* answers HTTP (any status below 500) at its base URL, at most *timeout*
    seconds; :class:`EnvironmentUnavailableError` naming the site and the failure otherwise.

    Refused connections are retried until then (a site its reset just restarted comes up).
    """
    opener = build_opener(ProxyHandler({}))  # the site itself, never the auditor's proxy
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            with opener.open(site.url + "/", timeout=max(left, 0.1)):
                return
        except HTTPError as exc:
            if exc.code < 500:
                return
            failure = f"HTTP {exc.code}"
        except (URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            failure = str(reason) or type(reason).__name__
            if isinstance(reason, ConnectionRefusedError) and left > 0.5:
                time.sleep(0.5)
                continue
        raise EnvironmentUnavailableError(
            f"site {site.name} ({site.url}) does not answer: {failure}"
        )


# -- inside the server process ------------------------------------------------


def build_database(path: Path, seed: int = 11) -> None:
    """The Datasette site's SQLite database: same seed, same bytes."""
    rng = random.Random(seed)
    departments = ("Engineering", "Finance", "Marketing", "Sales", "Support")
    titles = ("Analyst", "Engineer", "Manager", "Specialist", "Director")
    first = ("Ada", "Ben", "Chloe", "Dev", "Elif", "Femi", "Greta", "Hugo", "Ines", "Jonas")
    last = ("Ahmed", "Brown", "Costa", "Dubois", "Evans", "Fischer", "Garcia", "Hansen")
    cities = ("Lisbon", "Oslo", "Nairobi", "Osaka", "Lima", "Montreal", "Perth", "Tallinn")
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute(
            "create table cities (id integer primary key, name text, country text, population integer)"
        )
        db.execute(
            "create table employees (id integer primary key, name text, title text, "
            "department text, city_id integer references cities(id), salary integer, hired text)"
        )
        db.execute(
            "create table orders (id integer primary key, customer text, product text, "
            "amount real, status text, ordered text)"
        )
        countries = (
            "Portugal",
            "Norway",
            "Kenya",
            "Japan",
            "Peru",
            "Canada",
            "Australia",
            "Estonia",
        )
        for number, (city, country) in enumerate(zip(cities, countries, strict=True), 1):
            db.execute(
                "insert into cities values (?, ?, ?, ?)",
                (number, city, country, rng.randrange(200_000, 9_000_000)),
            )
        for number in range(1, 61):
            db.execute(
                "insert into employees values (?, ?, ?, ?, ?, ?, ?)",
                (
                    number,
                    f"{rng.choice(first)} {rng.choice(last)}",
                    rng.choice(titles),
                    rng.choice(departments),
                    rng.randrange(1, len(cities) + 1),
                    rng.randrange(40, 160) * 1000,
                    f"20{rng.randrange(10, 24)}-{rng.randrange(1, 13):02d}-01",
                ),
            )
        customers = ("Acme Corp", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay", "Stark Ltd")
        products = ("Widget", "Gadget", "Sprocket", "Gizmo", "Doohickey")
        for number in range(1, 121):
            db.execute(
                "insert into orders values (?, ?, ?, ?, ?, ?)",
                (
                    number,
                    rng.choice(customers),
                    rng.choice(products),
                    rng.randrange(500, 50_000) / 100,
                    rng.choice(("shipped", "pending", "cancelled")),
                    f"2024-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}",
                ),
            )


class _QuietStatic(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log (the sandbox owner reads only the PORT line)."""


class _QuietWSGI(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No access log."""


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def _listen() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


def _ready(port: int) -> None:
    sys.stdout.write(f"PORT {port}\n")
    sys.stdout.flush()


def _serve(folder: Path, root: Path) -> None:
    spec = load_site(folder)
    if spec.kind == "static":
        site = root / "site"
        shutil.copytree(spec.source or "", site, symlinks=False, ignore_dangling_symlinks=True)
        static = ThreadingHTTPServer(("127.0.0.1", 0), partial(_QuietStatic, directory=str(site)))
        _ready(static.server_address[1])
        static.serve_forever()
    elif spec.kind in {"library", "django", "sqlite-web"}:
        _serve_wsgi(spec.kind, root)
    else:
        _serve_datasette(folder, root)


def _serve_wsgi(kind: str, root: Path) -> None:
    """A WSGI site (the library, the Django admin, sqlite-web) on a threaded wsgiref server."""
    from fidelity.sandboxes import packaged_sites
    from fidelity.sandboxes.library_site import LibraryApp

    if kind == "library":
        app: packaged_sites.WsgiApp = LibraryApp()
    elif kind == "django":
        app = packaged_sites.django_app(root)
    else:
        app = packaged_sites.sqlite_web_app(root)
    wsgi = make_server(
        "127.0.0.1", 0, app, server_class=_ThreadingWSGIServer, handler_class=_QuietWSGI
    )
    _ready(wsgi.server_port)
    wsgi.serve_forever()


def _serve_datasette(folder: Path, root: Path) -> None:
    import uvicorn
    from datasette.app import Datasette

    database = root / "data.db"
    build_database(database)
    datasette = Datasette(
        files=[str(database)],
        metadata=json.loads((folder / "metadata.json").read_text()),
        template_dir=str(folder / "templates"),
        settings={"default_page_size": 20, "num_sql_threads": 2, "facet_time_limit_ms": 1000},
    )
    sock = _listen()
    server = uvicorn.Server(uvicorn.Config(datasette.app(), log_level="warning", lifespan="off"))
    _ready(sock.getsockname()[1])
    server.run(sockets=[sock])


def _watch_owner(owner: int) -> None:
    """Exit when the owner process is gone (SIGKILL of the audit skips every finally)."""
    while os.getppid() == owner:
        time.sleep(0.5)
    os._exit(0)


def main(argv: list[str] | None = None) -> None:
    """Serve one site: ``python -m fidelity.sandboxes.sites FOLDER ROOT --fidelity-owner=PID``."""
    parser = argparse.ArgumentParser(prog="fidelity.sandboxes.sites")
    parser.add_argument("folder", type=Path)
    parser.add_argument("root", type=Path)
    parser.add_argument(OWNER_FLAG, dest="owner", type=int, required=True)
    args = parser.parse_args(argv)
    threading.Thread(target=_watch_owner, args=(args.owner,), daemon=True).start()
    os.environ["TZ"] = "UTC"
    time.tzset()
    _serve(args.folder, args.root)


if __name__ == "__main__":
    main()
