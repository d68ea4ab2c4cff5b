"""The browser backend: Debian's Chromium driven by Playwright, sites served on loopback.

One sandbox owns one thread that owns its Playwright instance and Chromium
(Playwright's sync API must stay on the thread that started it; the audit calls
sandboxes from worker threads and Ctrl-C closes them from the main thread, so
every call is a job handed to that thread). ``reset`` starts the trajectory's
site (``env.project``: ``suites/web/<project>/``) on an ephemeral port and a
fresh browser context (1280×720, en-US, UTC, a fixed clock); ``step`` runs one
BrowserGym action (:mod:`fidelity.sandboxes.browser_actions`), waits until the
page settles and returns the accessibility tree (:mod:`fidelity.sandboxes.browser_tree`).

URLs are shown with the site's live origin (``http://127.0.0.1:<port>``)
replaced by :data:`SITE_ORIGIN`, so observations do not depend on the port;
``goto`` accepts both and relative URLs. Network: only the trajectory's own
site. Every request of every tab (navigations, frames, fetches, images) whose
origin is not the site's ``127.0.0.1:<port>`` is aborted by a context route
(``net::ERR_BLOCKED_BY_CLIENT``, an observation's error); other hosts also go
to a dead proxy and fail to resolve, WebSockets to anywhere but the site are
closed, WebRTC UDP is off, and ``goto`` refuses schemes other than http(s)
and ``about:blank``. Chromium and the site server start with a few fixed
environment variables, none of the auditor's.

The user's own sites (``env.sites``, a WebArena deployment: see ``docs/user-sites.md``)
replace the bundled one: their names resolve to base URLs (the trajectory's, else
``BrowserConfig.sites``: ``--site``, BrowserGym's ``WA_*`` variables), each site's
reset command runs and each must answer HTTP before the first step (else the trajectory
is unverifiable), the browser may reach exactly their origins, ``goto`` maps a
site's recorded base URL to its live one and observations map it back.
"""

from __future__ import annotations

import contextlib
import os
import queue
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar
from urllib.parse import urljoin, urlsplit

from pydantic import Field, StringConstraints

from fidelity.defaults import STEP_TIMEOUT
from fidelity.errors import SandboxError, SandboxUnavailableError, UsageError
from fidelity.sandboxes.base import (
    Sandbox,
    dead_owner,
    owned_folder,
    stale_folders,
    track,
    untrack,
)
from fidelity.sandboxes.browser_actions import ActionSyntaxError, ParsedAction, parse_action
from fidelity.sandboxes.browser_tree import (
    MARK_BIDS_JS,
    MUTATION_COUNTER_JS,
    READ_MUTATIONS_JS,
    bids_by_backend_id,
    quote,
    render_tree,
)
from fidelity.sandboxes.config import SandboxConfigBase
from fidelity.sandboxes.sites import (
    OWNER_FLAG,
    LiveSite,
    SiteProcess,
    load_site,
    probe_site,
    project_dir,
    reset_site,
    resolve_sites,
    webarena_sites,
)
from fidelity.trajectory import SITE_NAME, Action, BrowserAction, EnvSpec, Observation, WebSite
from fidelity.trust import origin_of

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page, Playwright

SITE_ORIGIN = "http://localhost:8000"
FIXED_TIME = "2024-06-01T12:00:00Z"
CHROMIUM_FLAGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
    "--proxy-server=http://127.0.0.1:9",  # loopback bypasses proxies; everything else dies here
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--disable-features=Translate,MediaRouter,OptimizationHints,AutofillServerCommunication",
)
_LOOPBACK = ("localhost", "127.0.0.1")
_ROOT_PREFIX = "fidelity-browser-"
_TOKEN_FLAG = "--fidelity-sandbox"
T = TypeVar("T")


class BrowserConfig(SandboxConfigBase):
    """Settings of the browser backend."""

    type: Literal["browser"] = "browser"
    executable: str = "/usr/bin/chromium"
    step_timeout: float = Field(
        default=STEP_TIMEOUT, gt=0, description="seconds per step, settle included"
    )
    viewport_width: int = Field(default=1280, ge=200)
    viewport_height: int = Field(default=720, ge=200)
    locale: str = "en-US"
    timezone: str = "UTC"
    action_timeout_ms: int = Field(default=5000, gt=0, description="per element action")
    navigation_timeout_ms: int = Field(default=15000, gt=0)
    settle: Literal["dom", "sleep"] = Field(
        default="dom", description="dom: wait for load, no requests and N equal DOM reads"
    )
    settle_reads: int = Field(default=3, ge=2, description="equal consecutive reads that settle")
    settle_interval_ms: int = Field(default=50, ge=1)
    settle_timeout_ms: int = Field(default=5000, ge=0, description="settle gives up after this")
    settle_sleep_ms: int = Field(default=500, ge=0, description="the fixed wait of settle=sleep")
    max_tree_lines: int = Field(default=2000, ge=10)
    temp_root: str | None = Field(
        default=None, description="site copies go here (default: $TMPDIR)"
    )
    sites: dict[Annotated[str, StringConstraints(pattern=SITE_NAME)], WebSite] = Field(
        default_factory=webarena_sites,
        description="the user's sites by name, filling what env.sites leaves out "
        "(--site, --site-reset; default: BrowserGym's WA_* variables)",
    )
    site_probe_timeout: float = Field(
        default=30.0, gt=0, description="seconds a user site has to answer before the first step"
    )
    site_reset_timeout: float = Field(
        default=600.0, gt=0, description="seconds a user site's reset command may run"
    )
    trust_commands: bool = Field(
        default=False,
        description="run the reset commands a trajectory's env.sites name (--trust-dataset-"
        "commands), with a scrubbed environment; off: such a trajectory is unverifiable",
    )


def chromium_flags(hosts: tuple[str, ...] = ()) -> list[str]:
    """:data:`CHROMIUM_FLAGS`, with the user sites' *hosts* resolved and reached directly."""
    if not hosts:
        return list(CHROMIUM_FLAGS)
    excluded = "".join(f", EXCLUDE {host}" for host in hosts)
    flags = [
        f"{flag}{excluded}" if flag.startswith("--host-resolver-rules=") else flag
        for flag in CHROMIUM_FLAGS
    ]
    return [*flags, f"--proxy-bypass-list={';'.join(hosts)}"]


class _Worker:
    """One thread running jobs in order (Playwright's sync API is bound to its thread)."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[tuple[Callable[[], Any], Future[Any]] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="fidelity-browser", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            function, future = job
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function())
                except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
                    future.set_exception(exc)

    def call(self, function: Callable[[], T], timeout: float) -> T:
        """Run *function* on the worker thread; FutureTimeout after *timeout* seconds."""
        future: Future[T] = Future()
        self._jobs.put((function, future))
        return future.result(timeout)

    def stop(self, timeout: float) -> bool:
        """Let queued jobs finish, end the thread; False when it did not end in time."""
        self._jobs.put(None)
        self._thread.join(timeout)
        return not self._thread.is_alive()


def _home_folder(temp_root: str | None) -> Path:
    """A fresh folder for Chromium's HOME, marked with its owner (:func:`sweep_stale` removes
    it when that process died without closing the browser)."""
    return owned_folder(_ROOT_PREFIX, temp_root)


def _home_env(home: Path) -> dict[str, str]:
    """HOME and the XDG folders inside *home*: what Chromium and dconf write (crash reports,
    ``.config/chromium``, ``.cache/dconf``) goes there, never to ``$TMPDIR`` itself."""
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_RUNTIME_DIR": str(home),
    }


class _Browser:
    """Playwright, Chromium and the current context; touched only on the worker thread."""

    def __init__(self, config: BrowserConfig, token: str, hosts: tuple[str, ...] = ()) -> None:
        from playwright.sync_api import sync_playwright

        self.config = config
        self.hosts = hosts
        self.home = _home_folder(config.temp_root)
        try:
            self.playwright: Playwright = sync_playwright().start()
        except BaseException:
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        try:
            self.browser = self.playwright.chromium.launch(
                executable_path=config.executable,
                headless=True,
                args=[
                    *chromium_flags(hosts),
                    f"{OWNER_FLAG}={os.getpid()}",
                    f"{_TOKEN_FLAG}={token}",
                ],
                env={"TZ": config.timezone, "LANG": "C.UTF-8", **_home_env(self.home)},
            )
        except BaseException:
            self.playwright.stop()
            shutil.rmtree(self.home, ignore_errors=True)
            raise
        self.context: BrowserContext | None = None
        self.pages: list[Page] = []
        self.active = 0
        self.inflight: dict[Page, set[Any]] = {}
        self.messages: list[str] = []
        self.routes: list[tuple[str, str]] = []
        self.origin = ""

    def open_context(self, routes: list[tuple[str, str]]) -> None:
        """A fresh context (cookies, storage, tabs) with one blank tab, reaching only the live
        base URLs of *routes* (``(live, shown)``: observations show *shown* for *live*)."""
        self.close_context()
        config = self.config
        self.routes = sorted(routes, key=lambda route: -len(route[0]))
        self.origin = origin_of(routes[0][0]) if routes else ""
        self.messages = []
        self.context = self.browser.new_context(
            viewport={"width": config.viewport_width, "height": config.viewport_height},
            locale=config.locale,
            timezone_id=config.timezone,
            color_scheme="light",
            reduced_motion="reduce",
            device_scale_factor=1,
            accept_downloads=False,
            service_workers="block",
        )
        self.context.set_default_timeout(config.action_timeout_ms)
        self.context.set_default_navigation_timeout(config.navigation_timeout_ms)
        self.context.add_init_script(MUTATION_COUNTER_JS)
        self.context.clock.set_fixed_time(FIXED_TIME)
        self.context.route("**/*", self._guard)
        if hasattr(self.context, "route_web_socket"):
            self.context.route_web_socket("**/*", self._guard_socket)
        self.context.on("page", self._adopt)
        self.context.new_page()

    def allowed(self, url: str) -> bool:
        """Whether *url* is on one of the trajectory's sites."""
        return any(same_site(url, live) for live, _ in self.routes)

    def _guard(self, route: Any) -> None:
        """Let requests to the sites through; abort every other (host loopback services too)."""
        if self.allowed(route.request.url):
            route.fallback()
        else:
            route.abort("blockedbyclient")

    def _guard_socket(self, socket: Any) -> None:
        """WebSockets: connect only to the sites."""
        if self.allowed(socket.url.replace("ws", "http", 1)):
            socket.connect_to_server()
        else:
            socket.close(code=1008, reason="blocked: not the trajectory's site")

    def _adopt(self, page: Page) -> None:
        """Track a new tab (ours or a popup) and make it the active one, as BrowserGym does."""
        if page not in self.pages:
            self.pages.append(page)
            requests: set[Any] = set()
            self.inflight[page] = requests
            page.on("request", lambda request: requests.add(request))
            page.on("requestfinished", lambda request: requests.discard(request))
            page.on("requestfailed", lambda request: requests.discard(request))
        self.active = self.pages.index(page)

    def close_context(self) -> None:
        """Close the current context and forget its tabs."""
        context, self.context = self.context, None
        self.pages, self.inflight, self.active = [], {}, 0
        if context is not None:
            context.close()

    def shutdown(self) -> None:
        """Close context, Chromium and Playwright."""
        try:
            self.close_context()
            self.browser.close()
        finally:
            self.playwright.stop()

    @property
    def page(self) -> Page:
        """The active tab (a new blank one when every tab was closed)."""
        self.pages = [p for p in self.pages if not p.is_closed()]
        if not self.pages:
            assert self.context is not None
            self.context.new_page()
        self.active = min(self.active, len(self.pages) - 1)
        return self.pages[self.active]

    # -- URLs ----------------------------------------------------------------

    def public(self, text: str) -> str:
        """*text* with each site's live base URL replaced by the one shown (recorded)."""
        for live, shown in self.routes:
            text = text.replace(live, shown)
        return text

    def live(self, url: str) -> str:
        """The URL to load for *url* as an agent wrote it (relative, or on a shown base URL)."""
        for live, shown in sorted(self.routes, key=lambda route: -len(route[1])):
            if url == shown or url.startswith((f"{shown}/", f"{shown}?", f"{shown}#")):
                return live + url[len(shown) :]
        if url.startswith("/") and not url.startswith("//"):
            if not self.origin:
                raise ActionSyntaxError(f"goto(): relative URL {url!r} but no site is running")
            current = self.page.url
            url = urljoin(current if self.allowed(current) else self.origin, url)
        if url != "about:blank" and not url.startswith(("http://", "https://")):
            raise ActionSyntaxError("goto(): only http(s) URLs, site paths and about:blank")
        return url

    # -- actions -------------------------------------------------------------

    def run(self, action: ParsedAction) -> None:
        """Execute *action* on the active tab; Playwright errors propagate."""
        page, args = self.page, action.args
        if action.name in _ELEMENT_ACTIONS:
            locator = page.locator(f'[bid="{args["bid"]}"]')
            if locator.count() == 0:
                raise ActionSyntaxError(f"{action.name}(): no element with bid {args['bid']!r}")
            _ELEMENT_ACTIONS[action.name](locator, args)
        elif action.name == "goto":
            page.goto(self.live(args["url"]), wait_until="load")
        elif action.name in ("go_back", "go_forward"):
            getattr(page, action.name)(wait_until="load")
        elif action.name == "scroll":
            page.mouse.wheel(args["delta_x"], args["delta_y"])
        elif action.name == "keyboard_press":
            page.keyboard.press(args["key"])
        elif action.name == "keyboard_type":
            page.keyboard.type(args["text"])
        elif action.name == "noop":
            page.wait_for_timeout(args["wait_ms"])
        elif action.name == "send_msg_to_user":
            self.messages.append(args["text"])
        else:
            self._tabs(action)

    def _tabs(self, action: ParsedAction) -> None:
        if action.name == "new_tab":
            assert self.context is not None
            self.context.new_page()
        elif action.name == "tab_focus":
            index = action.args["index"]
            if not 0 <= index < len(self.pages):
                raise ActionSyntaxError(f"tab_focus(): no tab {index} ({len(self.pages)} open)")
            self.active = index
            self.pages[index].bring_to_front()
        elif action.name == "tab_close":
            self.page.close()
            self.pages = [p for p in self.pages if not p.is_closed()]
            self.active = len(self.pages) - 1
            self.page.bring_to_front()

    # -- settling and observing ----------------------------------------------

    def settle(self) -> None:
        """Wait for load, no requests in flight and ``settle_reads`` equal DOM reads (bounded)."""
        from playwright.sync_api import Error as PlaywrightError

        config, page = self.config, self.page
        if config.settle == "sleep":
            page.wait_for_timeout(config.settle_sleep_ms)
            return
        deadline = time.monotonic() + config.settle_timeout_ms / 1000
        previous: object = None
        equal = 0
        while time.monotonic() < deadline:
            try:
                current = page.evaluate(READ_MUTATIONS_JS)
            except PlaywrightError:  # a navigation replaced the document under us
                current = None
            quiet = current is not None and current[0] == "complete" and not self.inflight[page]
            equal = equal + 1 if quiet and current == previous else 0
            if equal >= config.settle_reads - 1:
                return
            previous = current
            page.wait_for_timeout(config.settle_interval_ms)

    def observe(self, error: str | None) -> Observation:
        """The accessibility tree of the active tab with URL, tabs, focus and error."""
        page = self.page
        count = page.evaluate(MARK_BIDS_JS)
        assert self.context is not None
        cdp = self.context.new_cdp_session(page)
        try:
            ax_nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
            snapshot = cdp.send("DOMSnapshot.captureSnapshot", {"computedStyles": []})
        finally:
            cdp.detach()
        tree, cut = render_tree(
            ax_nodes, bids_by_backend_id(snapshot), max_lines=self.config.max_tree_lines
        )
        titles = [p.title() for p in self.pages]
        tabs = [
            {"index": i, "url": self.public(p.url), "title": titles[i], "active": i == self.active}
            for i, p in enumerate(self.pages)
        ]
        focused = page.evaluate("() => document.activeElement?.getAttribute('bid') ?? null")
        url = self.public(page.url)
        state = {
            "url": url,
            "title": titles[self.active],
            "tabs": tabs,
            "focused_bid": focused,
            "last_action_error": error,
            "messages": list(self.messages),
            "elements": count,
        }
        header = [f"# url: {quote(url)}"]
        header += [
            f"# tab {i}{' (active)' if i == self.active else ''}: {quote(title)}"
            for i, title in enumerate(titles)
        ]
        if error:
            header.append(f"# error: {quote(error)}")
        text = self.public("\n".join([*header, tree]))
        return Observation(text=text + "\n", truncated=cut, state=state)


_ELEMENT_ACTIONS: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "click": lambda loc, a: loc.click(button=a["button"], modifiers=a["modifiers"]),
    "dblclick": lambda loc, a: loc.dblclick(button=a["button"], modifiers=a["modifiers"]),
    "hover": lambda loc, a: loc.hover(),
    "fill": lambda loc, a: loc.fill(a["value"]),
    "select_option": lambda loc, a: loc.select_option(a["options"]),
    "press": lambda loc, a: loc.press(a["key_comb"]),
    "focus": lambda loc, a: loc.focus(),
    "clear": lambda loc, a: loc.clear(),
    "check": lambda loc, a: loc.set_checked(True),
    "uncheck": lambda loc, a: loc.set_checked(False),
}


class BrowserSandbox(Sandbox):
    """Chromium through Playwright against one site on loopback (see module docstring)."""

    name = "browser"

    def __init__(self, config: BrowserConfig | None = None) -> None:
        self.config = config or BrowserConfig()
        self._token = secrets.token_hex(8)
        self._lock = threading.Lock()
        self._worker: _Worker | None = None
        self._browser: _Browser | None = None
        self._site: SiteProcess | None = None
        self._root: Path | None = None
        self._closed = threading.Event()

    def reset(self, env: EnvSpec) -> Observation:
        """Start *env*'s site afresh and a new browser context on its start page."""
        if env.project and env.sites:
            raise UsageError(
                "env.project and env.sites exclude each other: one bundled site or the user's sites"
            )
        folder = project_dir(env.project) if env.project else None
        sites = resolve_sites(env, self.config.sites, self.config.trust_commands)
        self._check_available()
        self._stop_site()
        self._closed.clear()
        track(self)
        self._root = owned_folder(_ROOT_PREFIX, self.config.temp_root)
        start = "about:blank"
        routes: list[tuple[str, str]] = []
        if folder is not None:
            self._site = SiteProcess(folder, self._root)
            start = load_site(folder).start
            routes = [(f"http://127.0.0.1:{self._site.port}", SITE_ORIGIN)]
        elif sites:
            self._prepare(sites)
            start = sites[0].recorded + "/"
            routes = [(site.url, site.recorded) for site in sites]
        hosts = tuple(sorted({urlsplit(s.url).hostname or "" for s in sites} - set(_LOOPBACK)))
        with self._lock:
            if self._worker is None:
                self._worker = _Worker()
        self._call(lambda: self._open(routes, hosts), self.config.step_timeout)
        for index, entry in enumerate([f"goto({start!r})", *env.setup]):
            observation = self._call(partial(self._act, entry), self.config.step_timeout)
            error = (observation.state or {}).get("last_action_error")
            if error:
                where = f"env.setup[{index - 1}] {entry!r}" if index else f"start page {start}"
                raise SandboxError(f"{where} failed: {error}")
        return observation

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        """Run one BrowserGym action; its failure is the observation's ``last_action_error``."""
        if self._browser is None or self._closed.is_set():
            raise SandboxError("step() before reset() or after close(): the browser is not running")
        if not isinstance(action, BrowserAction):
            raise SandboxError(f"the browser sandbox cannot run {type(action).__name__}")
        budget = timeout if timeout is not None else self.config.step_timeout
        return self._call(lambda: self._act(action.action), budget)

    def close(self) -> None:
        """Close the browser (killing Chromium if its thread hangs) and the site. Idempotent."""
        self._closed.set()
        with self._lock:
            worker, self._worker = self._worker, None
        if worker is not None:
            self._shutdown(worker)
        self._stop_site()
        untrack(self)

    # -- helpers -------------------------------------------------------------

    def _shutdown(self, worker: _Worker) -> None:
        """Stop Chromium and Playwright on their thread; kill Chromium when that hangs."""
        from playwright.sync_api import Error as PlaywrightError

        browser, self._browser = self._browser, None
        stopped = browser is None
        if browser is not None:
            try:
                worker.call(browser.shutdown, timeout=10)
                stopped = True
            except (FutureTimeout, PlaywrightError):
                stopped = False
        if not worker.stop(timeout=5) or not stopped:
            kill_marked(f"{_TOKEN_FLAG}={self._token}")
        if browser is not None:  # Chromium is gone (closed or killed): its HOME goes too
            shutil.rmtree(browser.home, ignore_errors=True)

    def _check_available(self) -> None:
        if not shutil.which(self.config.executable):
            raise SandboxUnavailableError(
                f"Chromium ({self.config.executable}) not found: `apt-get install chromium` "
                "(scripts/bootstrap.sh does it) or set executable"
            )
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            raise SandboxUnavailableError(
                "Playwright for Python is missing: pip install 'fidelity[web]'"
            ) from None

    def _prepare(self, sites: list[LiveSite]) -> None:
        """Reset every user site, then wait until each answers (EnvironmentUnavailableError)."""
        for site in sites:
            reset_site(site, self.config.site_reset_timeout)
        for site in sites:
            probe_site(site, self.config.site_probe_timeout)

    def _open(self, routes: list[tuple[str, str]], hosts: tuple[str, ...]) -> None:
        """A fresh context on a Chromium started for *hosts* (restarted when they changed)."""
        if self._browser is not None and self._browser.hosts != hosts:
            browser, self._browser = self._browser, None
            try:
                browser.shutdown()
            finally:
                shutil.rmtree(browser.home, ignore_errors=True)
        if self._browser is None:
            self._browser = _Browser(self.config, self._token, hosts)
        self._browser.open_context(routes)

    def _act(self, text: str) -> Observation:
        """Parse and run *text*, settle, observe (on the worker thread)."""
        from playwright.sync_api import Error as PlaywrightError

        browser = self._browser
        assert browser is not None
        error = None
        try:
            browser.run(parse_action(text))
        except ActionSyntaxError as exc:
            error = str(exc)
        except PlaywrightError as exc:
            if browser.context is None or not browser.browser.is_connected():
                raise
            error = _first_line(browser.public(exc.message))
        browser.settle()
        return browser.observe(error)

    def _call(self, function: Callable[[], T], timeout: float) -> T:
        from playwright.sync_api import Error as PlaywrightError

        worker = self._worker
        if worker is None:
            raise SandboxError("the browser sandbox was closed")
        try:
            return worker.call(function, timeout + 10)
        except FutureTimeout:
            self.close()
            raise SandboxError(f"the browser stopped answering for {timeout + 10:.0f} s") from None
        except PlaywrightError as exc:
            if self._closed.is_set():
                raise SandboxError("the browser sandbox was closed while a step ran") from None
            raise SandboxError(f"browser failure: {_first_line(exc.message)}") from exc

    def _stop_site(self) -> None:
        site, self._site = self._site, None
        if site is not None:
            site.stop()
        root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)


def same_site(url: str, origin: str) -> bool:
    """Whether *url* has the origin of *origin* (a base URL; localhost and 127.0.0.1 alike)."""
    want, got = origin_of(origin), origin_of(url)
    if not want or not got:
        return False
    return _loopback_as_ip(got) == _loopback_as_ip(want)


def _loopback_as_ip(origin: str) -> str:
    return origin.replace("://localhost:", "://127.0.0.1:", 1)


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "error"


def _marked_processes(marker: str) -> list[tuple[int, str]]:
    """``(pid, cmdline)`` of the processes whose command line holds *marker*."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append((int(entry.name), cmdline))
    return found


def kill_marked(marker: str) -> int:
    """SIGKILL every process whose command line holds *marker*; returns how many."""
    killed = 0
    for pid, _ in _marked_processes(marker):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            killed += 1
    return killed


def sweep_stale(temp_root: str | None = None, owner: int | None = None) -> int:
    """Kill browsers and site servers of dead fidelity processes, delete their folders.

    With *owner*, only that (dead) process's.
    """
    removed = 0
    for pid, cmdline in _marked_processes(f"{OWNER_FLAG}="):
        text = cmdline.split(f"{OWNER_FLAG}=", 1)[1].split("\0", 1)[0]
        if text.isdigit() and dead_owner(int(text), owner):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                removed += 1
    for folder in stale_folders(_ROOT_PREFIX, temp_root, owner):
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    return removed
