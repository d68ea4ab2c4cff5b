"""The desktop backend's session leader: one headless desktop, run by Debian's ``/usr/bin/python3``.

Why a separate process on the system Python: the AT-SPI bindings (``pyatspi``,
``gi``) are Debian packages that exist only for the system interpreter, not
for fidelity's virtualenv. This script uses the standard library plus those
bindings and nothing from fidelity.

It starts, in order and all in its own session: Xvfb (a free display chosen
by ``-displayfd``), a D-Bus session bus, the AT-SPI bus, openbox, then the
applications of the desktop one by one (each waits until it shows in the
accessibility tree, so their order is pinned). It then answers JSON requests,
one per line on stdin (``{"op": "tree"}``, ``{"op": "screenshot", "path": …}``,
``{"op": "quit"}``), one JSON answer per line on stdout. When stdin closes
(the audit ended, crashed or was SIGKILLed) or on SIGTERM/SIGINT it kills
every process carrying its token in the environment and deletes its folder:
nothing outlives the audit.

The tree is OSWorld's (``desktop_env/server/main.py``, ``_create_atspi_node``):
an XML element per accessible, tag = role name with spaces as dashes,
``name``, ``st:*`` states, ``attr:*`` attributes, ``cp:screencoord`` and
``cp:size`` for visible and showing nodes, ``val:*`` values, ``act:*``
actions, text as element text; rooted at ``desktop-frame``; applications in
the order they started (OSWorld's thread pool gives completion order).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "doc": "https://accessibility.ubuntu.example.org/ns/document",
    "docattr": "https://accessibility.ubuntu.example.org/ns/document/attributes",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
    "act": "https://accessibility.ubuntu.example.org/ns/action",
}
MAX_DEPTH = 50
MAX_WIDTH = 1024
TOKEN_VAR = "FIDELITY_DESKTOP_TOKEN"


logger = logging.getLogger("fidelity.sandboxes.desktop_session")
"""Its diagnostics, on its stderr (:func:`main` sets the handler): the desktop backend
logs them at debug level under ``fidelity --debug`` and drops them otherwise."""


def _log(message: str) -> None:
    logger.info("%s", message)


def _log_to_stderr() -> None:
    """Its diagnostics on stderr, one ``desktop-session: MESSAGE`` line each."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("desktop-session: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)


class Session:
    """The processes of one desktop and the folder holding its home."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.root = Path(spec["root"])
        self.token = str(spec["token"])
        self.procs: list[subprocess.Popen[bytes]] = []
        self.env = self._base_env()
        self.display = ""
        self.atspi: Any = None

    def _base_env(self) -> dict[str, str]:
        home = self.root / "home"
        run = self.root / "run"
        run.mkdir(mode=0o700, exist_ok=True)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(home),
            "USER": os.environ.get("USER", "user"),
            "XDG_RUNTIME_DIR": str(run),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_DATA_HOME": str(home / ".local/share"),
            "TZ": str(self.spec["timezone"]),
            "LANG": str(self.spec["locale"]),
            "LC_ALL": str(self.spec["locale"]),
            "LANGUAGE": str(self.spec["locale"]).split(".", 1)[0],
            "GSETTINGS_BACKEND": "memory",  # no dconf: settings never outlive the session
            "GTK_MODULES": "gail:atk-bridge",
            "NO_AT_BRIDGE": "0",
            "GTK_OVERLAY_SCROLLING": "0",
            "GTK_A11Y": "atspi",
            "GDK_BACKEND": "x11",
            TOKEN_VAR: self.token,
        }
        env.update(self.spec.get("env", {}))
        return env

    # -- starting ------------------------------------------------------------

    def spawn(
        self, argv: list[str], env: dict[str, str] | None = None, **kwargs: Any
    ) -> subprocess.Popen[bytes]:
        """Start *argv* in this session with its environment, output to the log."""
        log = open(self.root / "session.log", "ab")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            argv, env=env or self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, **kwargs
        )
        log.close()
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        """Xvfb, D-Bus, AT-SPI, openbox, then the applications in order."""
        self._start_xvfb()
        self._start_dbus()
        self.spawn(["/usr/libexec/at-spi-bus-launcher", "--launch-immediately"])
        self.spawn(["openbox", "--sm-disable"])
        self._wait(self._wm_ready, 20, "openbox did not take the display")
        os.environ.clear()
        os.environ.update(self.env)
        import pyatspi  # type: ignore[import-not-found]

        self.atspi = pyatspi
        for app in self.spec["apps"]:
            self._start_app(app)

    def _start_xvfb(self) -> None:
        read, write = os.pipe()
        width, height = self.spec["width"], self.spec["height"]
        self.spawn(
            [
                "Xvfb",
                "-displayfd",
                str(write),
                "-screen",
                "0",
                f"{width}x{height}x24",
                "-nolisten",
                "tcp",
                "-noreset",
                "-dpi",
                "96",
            ],
            pass_fds=(write,),
        )
        os.close(write)
        number = _read_line(read, 30, "Xvfb")
        self.display = f":{number}"
        self.env["DISPLAY"] = self.display

    def _start_dbus(self) -> None:
        read, write = os.pipe()
        self.spawn(
            [
                "dbus-daemon",
                "--session",
                "--nofork",
                f"--print-address={write}",
                f"--address=unix:path={self.root / 'run' / 'bus'}",
            ],
            pass_fds=(write,),
        )
        os.close(write)
        self.env["DBUS_SESSION_BUS_ADDRESS"] = _read_line(read, 30, "dbus-daemon")

    def _wm_ready(self) -> bool:
        probe = subprocess.run(
            ["xprop", "-root", "_NET_SUPPORTING_WM_CHECK"],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        return "window id" in probe.stdout

    def _start_app(self, app: dict[str, Any]) -> None:
        desktop = self.atspi.Registry.getDesktop(0)
        before = desktop.childCount
        env = dict(self.env)
        env.update(_faketime(self.spec.get("fake_time")))
        env.update(app.get("env", {}))
        proc = self.spawn(list(app["argv"]), env=env, cwd=self.env["HOME"])
        name = " ".join(app["argv"])
        self._wait(lambda: self._app_showing(before), 60, f"{name} never showed a window")
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with status {proc.returncode}")

    def _app_showing(self, before: int) -> bool:
        desktop = self.atspi.Registry.getDesktop(0)
        if desktop.childCount <= before:
            return False
        app = desktop[desktop.childCount - 1]
        return any(
            child is not None and child.getState().contains(self.atspi.STATE_SHOWING)
            for child in app
        )

    def _wait(self, ready: Any, seconds: float, message: str) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if ready():
                    return
            except Exception as exc:  # noqa: BLE001 - AT-SPI raises many kinds while starting
                _log(f"waiting: {exc}")
            time.sleep(0.1)
        raise RuntimeError(message)

    # -- observing -----------------------------------------------------------

    def tree(self) -> str:
        """OSWorld's accessibility tree of the whole desktop as XML text."""
        desktop = self.atspi.Registry.getDesktop(0)
        root = ET.Element("desktop-frame")
        for app in desktop:
            if app is not None:
                root.append(self._node(app, 1, None))
        return ET.tostring(root, encoding="unicode")

    def _node(self, node: Any, depth: int, flag: str | None) -> ET.Element:
        atspi = self.atspi
        attrs: dict[str, str] = {"name": _safe(lambda: node.name) or ""}
        states = _safe(lambda: node.getState().get_states()) or []
        for state in states:
            state_name = atspi.StateType._enum_lookup[state].split("_", 1)[1].lower()
            if state_name:
                attrs[f"{{{NS['st']}}}{state_name}"] = "true"
        for key, value in (_safe(node.get_attributes) or {}).items():
            if key:
                attrs[f"{{{NS['attr']}}}{key}"] = value
        st = NS["st"]
        if attrs.get(f"{{{st}}}visible") == "true" and attrs.get(f"{{{st}}}showing") == "true":
            box = _safe(lambda: node.queryComponent().getExtents(atspi.XY_SCREEN))
            if box is not None:
                attrs[f"{{{NS['cp']}}}screencoord"] = str((box[0], box[1]))
                attrs[f"{{{NS['cp']}}}size"] = str((box[2], box[3]))
        text = _safe(lambda: _text_of(node)) or ""
        if _safe(node.queryImage) is not None:
            attrs["image"] = "true"
        if _safe(node.querySelection) is not None:
            attrs["selection"] = "true"
        self._values(node, attrs)
        self._actions(node, attrs)
        raw_role = (_safe(node.getRoleName) or "").strip()
        role = (raw_role or "unknown").replace(" ", "-")
        if not flag and raw_role == "document spreadsheet":
            flag = "calc"
        element = ET.Element(role, attrs)
        if text:
            element.text = text
        if depth >= MAX_DEPTH:
            return element
        if flag == "calc" and role == "table":
            for child in self._showing_cells(node):
                element.append(self._node(child, depth + 1, flag))
            return element
        count = _safe(lambda: node.childCount) or 0
        for index in range(min(count, MAX_WIDTH)):
            child = _safe(lambda i=index: node.getChildAtIndex(i))
            if child is not None:
                element.append(self._node(child, depth + 1, flag))
        return element

    def _values(self, node: Any, attrs: dict[str, str]) -> None:
        value = _safe(node.queryValue)
        if value is None:
            return
        for key, read in (
            ("value", lambda: value.currentValue),
            ("min", lambda: value.minimumValue),
            ("max", lambda: value.maximumValue),
            ("step", lambda: value.minimumIncrement),
        ):
            got = _safe(read)
            if got is not None:
                attrs[f"{{{NS['val']}}}{key}"] = str(got)

    def _actions(self, node: Any, attrs: dict[str, str]) -> None:
        action = _safe(node.queryAction)
        if action is None:
            return
        for index in range(_safe(lambda: action.nActions) or 0):
            name = (_safe(lambda i=index: action.getName(i)) or "").replace(" ", "-")
            attrs[f"{{{NS['act']}}}{name}_desc"] = (
                _safe(lambda i=index: action.getDescription(i)) or ""
            )
            attrs[f"{{{NS['act']}}}{name}_kb"] = (
                _safe(lambda i=index: action.getKeyBinding(i)) or ""
            )

    def _showing_cells(self, table: Any) -> list[Any]:
        """The showing cells of a Calc sheet (OSWorld walks rows from the first showing one)."""
        showing = self.atspi.STATE_SHOWING
        columns = _safe(lambda: table.queryTable().nColumns) or 1024
        cells: list[Any] = []
        first_column: int | None = None
        for row in range(500):
            found = False
            for column in range(first_column or 0, min(columns, 500)):
                cell = _safe(lambda r=row, c=column: table.getChildAtIndex(r * columns + c))
                if cell is not None and cell.getState().contains(showing):
                    cells.append(cell)
                    first_column = column if first_column is None else first_column
                    found = True
                elif found:
                    break
            if first_column is not None and not found:
                break
        return cells

    def screenshot(self, path: str) -> None:
        """Save the screen as PNG at *path* (ImageMagick's ``import``)."""
        subprocess.run(
            ["import", "-silent", "-window", "root", path],
            env=self.env,
            check=True,
            capture_output=True,
            timeout=30,
        )

    # -- stopping ------------------------------------------------------------

    def stop(self) -> None:
        """Kill every process of this desktop (by token), then delete its folder."""
        for _ in range(3):
            pids = _pids_with(self.token)
            if not pids:
                break
            for pid in pids:
                _kill(pid)
            time.sleep(0.05)
        for proc in self.procs:
            _kill(proc.pid)
            proc.poll()
        shutil.rmtree(self.root, ignore_errors=True)


def _safe(read: Any) -> Any:
    """*read()*, or None when the accessible is gone or lacks the interface."""
    try:
        return read()
    except Exception:  # noqa: BLE001 - AT-SPI raises NotImplementedError, GLib errors, LookupError
        return None


def _text_of(node: Any) -> str:
    text = node.queryText()
    return str(text.getText(0, text.characterCount)).replace("\ufffc", "").replace("\ufffd", "")


def _read_line(fd: int, seconds: float, what: str) -> str:
    """The first line written to pipe *fd* within *seconds*."""
    import select

    data = b""
    deadline = time.monotonic() + seconds
    try:
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError(f"{what} did not start in {seconds:.0f} s")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"{what} exited while starting")
            data += chunk
    finally:
        os.close(fd)
    return data.split(b"\n", 1)[0].decode().strip()


def _pids_with(token: str) -> list[int]:
    """Processes (other than this one) whose environment carries *token*."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return


def _serve(session: Session) -> None:
    for line in sys.stdin:
        request = json.loads(line)
        op = request.get("op")
        if op == "quit":
            return
        try:
            if op == "tree":
                answer: dict[str, Any] = {"ok": True, "xml": session.tree()}
            elif op == "screenshot":
                session.screenshot(str(request["path"]))
                answer = {"ok": True}
            else:
                answer = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # noqa: BLE001 - reported to the caller, the session goes on
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


def _drop_root(root: Path, user: str | None) -> None:
    """As root, give the folder to *user* and become that user (apps then run as a normal user)."""
    if os.geteuid() != 0 or not user:
        return
    import pwd

    entry = pwd.getpwnam(user)
    for path in [root, *root.rglob("*")]:
        os.lchown(path, entry.pw_uid, entry.pw_gid)
    root.chmod(0o711)  # the action runner (bubblewrap, the audit's user) reaches the home
    (root / "home").chmod(0o755)
    os.setgroups([])
    os.setgid(entry.pw_gid)
    os.setuid(entry.pw_uid)
    os.environ["USER"] = os.environ["LOGNAME"] = user


def _faketime(start: str | None) -> dict[str, str]:
    """The environment that starts the applications' clock at *start* (libfaketime)."""
    if not start:
        return {}
    libraries = sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
    if not libraries:
        raise RuntimeError("libfaketime is missing (apt-get install faketime)")
    return {
        "LD_PRELOAD": str(libraries[0]),
        "FAKETIME": f"@{start}",
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }


def main() -> int:
    """Read the spec (JSON, first stdin line), start the desktop, serve until stdin closes."""
    _log_to_stderr()
    for name, value in NS.items():
        ET.register_namespace(name, value)
    spec = json.loads(sys.stdin.readline())
    _drop_root(Path(spec["root"]), spec.get("run_as"))
    session = Session(spec)

    def on_signal(signum: int, _frame: object) -> None:
        session.stop()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the audit's Ctrl-C closes us through stdin
    signal.signal(signal.SIGHUP, on_signal)
    try:
        session.start()
        print(json.dumps({"ready": True, "display": session.display}), flush=True)
        _serve(session)
    except Exception as exc:  # noqa: BLE001 - the one answer the caller waits for
        log = session.root / "session.log"
        tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
        print(json.dumps({"ready": False, "error": f"{exc}", "log": tail}), flush=True)
    finally:
        session.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
