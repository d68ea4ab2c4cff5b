"""The adb backend (android domain): a device or emulator the user brings, driven through adb.

No Android runs on fidelity's own machines (no emulator image can be fetched
there and the kernel has no binder). This backend talks to the adb server the
user runs (``adb start-server``, loopback port 5037 by default) with adb's own
"smart socket" protocol: every request is a 4-hex-digit length plus the
command; ``host:transport:<serial>`` picks the device, ``shell:<command>``
runs a command and streams its output until the connection closes.

Actions are AndroidWorld's ``JSONAction`` (:class:`~fidelity.trajectory.AndroidAction`),
mapped to ``input tap/swipe/text/keyevent`` and ``am start`` as AndroidWorld's
``actuation`` does; ``index`` names an element of the last observation.
Observations: ``uiautomator dump`` read until two dumps are equal (bounded),
turned into AndroidWorld's UI-element list (``UI element i: UIElement(…)``,
elements with an empty or off-screen box dropped), the dump itself in
``state["xml"]``. The status bar and keyboard stay in the dump; the android
comparator ignores them.
"""

from __future__ import annotations

import contextlib
import re
import shlex
import shutil
import socket
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Literal

from pydantic import ConfigDict, Field

from fidelity.defaults import STEP_TIMEOUT
from fidelity.errors import SandboxError, SandboxUnavailableError, UsageError
from fidelity.sandboxes.base import Sandbox, track, untrack
from fidelity.sandboxes.config import SandboxConfigBase
from fidelity.trajectory import Action, AndroidAction, EnvSpec, Observation

DUMP_PATH = "/sdcard/window_dump.xml"
APPS: dict[str, str] = {
    "settings": "com.android.settings/.Settings",
    "clock": "com.google.android.deskclock/com.android.deskclock.DeskClock",
    "contacts": "com.google.android.contacts/com.android.contacts.activities.PeopleActivity",
    "chrome": "com.android.chrome/com.google.android.apps.chrome.Main",
    "files": "com.google.android.documentsui/com.android.documentsui.files.FilesActivity",
    "camera": "com.android.camera2/com.android.camera.CameraLauncher",
    "calendar": "com.google.android.calendar/com.android.calendar.AllInOneActivity",
}
"""App names AndroidWorld's ``open_app`` uses, lower-cased, to the activity ``am start`` opens."""

_BOUNDS = re.compile(r"\[(-?\d+),(-?\d+)\]\[(-?\d+),(-?\d+)\]")
_KEYS = {
    "keyboard_enter": "KEYCODE_ENTER",
    "navigate_home": "KEYCODE_HOME",
    "navigate_back": "KEYCODE_BACK",
}


class AdbConfig(SandboxConfigBase):
    """Settings of the adb backend."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["adb"] = "adb"
    serial: str | None = Field(default=None, description="device serial; the only device if unset")
    host: str = Field(default="127.0.0.1", description="the adb server's address (loopback)")
    port: int = Field(default=5037, ge=1, le=65535)
    start_server: bool = Field(default=True, description="run `adb start-server` when none answers")
    step_timeout: float = Field(default=STEP_TIMEOUT, gt=0)
    settle_interval: float = Field(default=0.5, ge=0)
    settle_timeout: float = Field(default=10.0, ge=0)
    wait_seconds: float = Field(default=1.0, ge=0, description="what the wait action sleeps")
    apps: dict[str, str] = Field(default_factory=dict, description="more open_app names")


class AdbProtocolError(SandboxError):
    """The adb server refused a request or broke the protocol."""


class AdbClient:
    """A minimal client of the adb server's smart-socket protocol."""

    def __init__(self, host: str, port: int, serial: str | None, timeout: float = 30.0) -> None:
        self.host, self.port, self.serial, self.timeout = host, port, serial, timeout

    def _open(self) -> socket.socket:
        try:
            return socket.create_connection((self.host, self.port), timeout=self.timeout)
        except OSError as exc:
            raise SandboxUnavailableError(
                f"no adb server answers on {self.host}:{self.port} ({exc.strerror or exc})"
            ) from None

    @staticmethod
    def _request(conn: socket.socket, payload: str) -> None:
        data = payload.encode()
        conn.sendall(f"{len(data):04x}".encode() + data)
        status = _read_exact(conn, 4)
        if status == b"OKAY":
            return
        if status == b"FAIL":
            length = int(_read_exact(conn, 4), 16)
            message = _read_exact(conn, length).decode(errors="replace")
            raise AdbProtocolError(f"adb: {payload.split(':', 1)[0]}: {message}")
        raise AdbProtocolError(f"adb server answered {status!r} to {payload!r}")

    def host_query(self, payload: str) -> str:
        """A ``host:`` request answered with a length-prefixed string (``host:devices``)."""
        with self._open() as conn:
            self._request(conn, payload)
            length = int(_read_exact(conn, 4), 16)
            return _read_exact(conn, length).decode(errors="replace")

    def devices(self) -> dict[str, str]:
        """Serial → state (``device``, ``offline``, ``unauthorized``) of every attached device."""
        listing = self.host_query("host:devices")
        return dict(line.split("\t", 1) for line in listing.splitlines() if "\t" in line)

    def shell(self, command: str) -> str:
        """Run *command* on the device and return its output (stdout and stderr together)."""
        with self._open() as conn:
            target = f"host:transport:{self.serial}" if self.serial else "host:transport-any"
            self._request(conn, target)
            self._request(conn, f"shell:{command}")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")


def _read_exact(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise AdbProtocolError("the adb server closed the connection mid-answer")
        data += chunk
    return data


@dataclass(frozen=True)
class UIElement:
    """An element of the screen as AndroidWorld's ``representation_utils.UIElement`` holds it."""

    text: str | None
    content_description: str | None
    class_name: str | None
    bbox_pixels: tuple[int, int, int, int]
    flags: dict[str, bool]
    package_name: str | None
    resource_name: str | None

    def center(self) -> tuple[int, int]:
        """The middle of the element's box."""
        x_min, x_max, y_min, y_max = self.bbox_pixels
        return (x_min + x_max) // 2, (y_min + y_max) // 2

    def render(self, index: int) -> str:
        """``UI element i: UIElement(...)`` as AndroidWorld's agents are shown it."""
        x_min, x_max, y_min, y_max = self.bbox_pixels
        flags = ", ".join(f"is_{name}={value}" for name, value in self.flags.items())
        return (
            f"UI element {index}: UIElement(text={self.text!r}, "
            f"content_description={self.content_description!r}, class_name={self.class_name!r}, "
            f"bbox=None, bbox_pixels=BoundingBox(x_min={x_min}, x_max={x_max}, y_min={y_min}, "
            f"y_max={y_max}), hint_text=None, {flags}, is_visible=True, "
            f"package_name={self.package_name!r}, resource_name={self.resource_name!r}, "
            "tooltip=None, resource_id=None, metadata=None)"
        )


_FLAG_ATTRIBUTES = (
    ("checked", "checked"),
    ("checkable", "checkable"),
    ("clickable", "clickable"),
    ("editable", None),
    ("enabled", "enabled"),
    ("focused", "focused"),
    ("focusable", "focusable"),
    ("long_clickable", "long-clickable"),
    ("scrollable", "scrollable"),
    ("selected", "selected"),
)


def ui_elements(xml: str) -> list[UIElement]:
    """The on-screen elements of a ``uiautomator dump``, in document order."""
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as exc:
        raise AdbProtocolError(f"uiautomator dump is not XML: {exc}") from None
    nodes = list(root.iter("node"))
    screen = _box(nodes[0].get("bounds", "")) if nodes else None
    elements = []
    for node in nodes:
        box = _box(node.get("bounds", ""))
        if box is None or screen is None or not _on_screen(box, screen):
            continue
        flags = {
            name: (node.get(attribute) == "true")
            if attribute
            else node.get("class", "").endswith("EditText")
            for name, attribute in _FLAG_ATTRIBUTES
        }
        elements.append(
            UIElement(
                text=node.get("text") or None,
                content_description=node.get("content-desc") or None,
                class_name=node.get("class") or None,
                bbox_pixels=box,
                flags=flags,
                package_name=node.get("package") or None,
                resource_name=node.get("resource-id") or None,
            )
        )
    return elements


def _box(bounds: str) -> tuple[int, int, int, int] | None:
    found = _BOUNDS.fullmatch(bounds.strip())
    if not found:
        return None
    x1, y1, x2, y2 = (int(g) for g in found.groups())
    return x1, x2, y1, y2


def _on_screen(box: tuple[int, int, int, int], screen: tuple[int, int, int, int]) -> bool:
    x_min, x_max, y_min, y_max = box
    return (
        x_max > x_min
        and y_max > y_min
        and x_min >= screen[0]
        and y_min >= screen[2]
        and (x_max <= screen[1] and y_max <= screen[3])
    )


def input_text_argument(text: str) -> str:
    """*text* as ``input text`` needs it: spaces as ``%s``, shell-quoted."""
    return shlex.quote(text.replace("%", "\\%").replace(" ", "%s"))


class AdbSandbox(Sandbox):
    """An Android device through the user's adb server (see module docstring)."""

    name = "adb"

    def __init__(self, config: AdbConfig | None = None) -> None:
        self.config = config or AdbConfig()
        self.client = AdbClient(
            self.config.host, self.config.port, self.config.serial, self.config.step_timeout
        )
        self._lock = threading.Lock()
        self._open = False
        self._elements: list[UIElement] = []
        self._screen = (0, 1080, 0, 2400)
        self.commands: list[str] = []

    def reset(self, env: EnvSpec) -> Observation:
        """Check the device, go home, run ``env.setup`` (shell commands), observe."""
        self._ensure_server()
        devices = self.client.devices()
        serial = self.config.serial
        if serial is not None and devices.get(serial) != "device":
            listed = ", ".join(f"{s} ({st})" for s, st in devices.items()) or "none"
            raise SandboxUnavailableError(
                f"device {serial!r} is not attached and ready; devices: {listed}"
            )
        if serial is None and len(devices) != 1:
            raise UsageError(f"{len(devices)} devices attached: name one with --serial")
        track(self)
        self._open = True
        self._shell(f"input keyevent {_KEYS['navigate_home']}")
        for index, command in enumerate(env.setup):
            output = self._shell(f"{command}; echo __status=$?")
            if not output.rstrip().endswith("__status=0"):
                raise SandboxError(f"env.setup[{index}] failed: {output.strip()[-200:]}")
        return self._observe(None)

    def step(self, action: Action, timeout: float | None = None) -> Observation:
        """Run one AndroidWorld action; an impossible one is an observation with its error."""
        if not self._open:
            raise SandboxError("step() before reset() or after close(): no device session")
        if not isinstance(action, AndroidAction):
            raise SandboxError(f"the adb sandbox cannot run {type(action).__name__}")
        try:
            commands = self.commands_for(action)
        except ValueError as exc:
            return self._observe(str(exc))
        for command in commands:
            if command.startswith("sleep "):
                time.sleep(float(command.split()[1]))
            else:
                self._shell(command)
        return self._observe(None)

    def close(self) -> None:
        """Forget the device session (the device itself is the user's). Idempotent."""
        self._open = False
        untrack(self)

    # -- actions ----------------------------------------------------------------

    def commands_for(self, action: AndroidAction) -> list[str]:
        """The shell commands of *action* (``sleep N`` is waited here); ValueError when impossible."""
        kind = action.action_type
        if kind in _KEYS:
            return [f"input keyevent {_KEYS[kind]}"]
        if kind in ("status", "answer", "unknown"):
            return []
        if kind == "wait":
            return [f"sleep {self.config.wait_seconds:g}"]
        if kind == "open_app":
            return [self._open_app(action.app_name)]
        if kind == "input_text":
            return self._input_text(action)
        if kind in ("scroll", "swipe"):
            return [self._swipe(action)]
        x, y = self._target(action)
        if kind == "click":
            return [f"input tap {x} {y}"]
        if kind == "double_tap":
            return [f"input tap {x} {y}", f"input tap {x} {y}"]
        return [f"input swipe {x} {y} {x} {y} 1000"]  # long_press

    def _target(self, action: AndroidAction) -> tuple[int, int]:
        if action.index is not None:
            if action.index >= len(self._elements):
                raise ValueError(f"no UI element {action.index} ({len(self._elements)} on screen)")
            return self._elements[action.index].center()
        if action.x is None or action.y is None:
            raise ValueError(f"{action.action_type} needs index or x and y")
        return action.x, action.y

    def _open_app(self, name: str | None) -> str:
        if not name:
            raise ValueError("open_app needs app_name")
        apps = {**APPS, **{k.lower(): v for k, v in self.config.apps.items()}}
        component = apps.get(name.strip().lower())
        if component is None:
            raise ValueError(f"unknown app {name!r}; known: {', '.join(sorted(apps))}")
        return f"am start -W -n {shlex.quote(component)}"

    def _input_text(self, action: AndroidAction) -> list[str]:
        if action.text is None:
            raise ValueError("input_text needs text")
        commands = []
        if action.index is not None or (action.x is not None and action.y is not None):
            x, y = self._target(action)
            commands.append(f"input tap {x} {y}")
        if action.clear_text:
            commands += [
                "input keyevent KEYCODE_MOVE_END",
                "input keyevent --longpress KEYCODE_DEL",
            ]
        commands.append(f"input text {input_text_argument(action.text)}")
        return commands

    def _swipe(self, action: AndroidAction) -> str:
        """A 500 ms swipe; scroll directions move the content (the finger goes the other way)."""
        if action.direction is None:
            raise ValueError(f"{action.action_type} needs direction")
        x_min, x_max, y_min, y_max = (
            self._elements[action.index].bbox_pixels
            if action.index is not None and action.index < len(self._elements)
            else self._screen
        )
        cx, cy = (x_min + x_max) // 2, (y_min + y_max) // 2
        dx, dy = (x_max - x_min) // 4, (y_max - y_min) // 4
        finger: str = action.direction
        if action.action_type == "scroll":
            finger = {"up": "down", "down": "up", "left": "right", "right": "left"}[finger]
        start, end = {
            "up": ((cx, cy + dy), (cx, cy - dy)),
            "down": ((cx, cy - dy), (cx, cy + dy)),
            "left": ((cx + dx, cy), (cx - dx, cy)),
            "right": ((cx - dx, cy), (cx + dx, cy)),
        }[finger]
        return f"input swipe {start[0]} {start[1]} {end[0]} {end[1]} 500"

    # -- observing ----------------------------------------------------------------

    def _shell(self, command: str) -> str:
        with self._lock:
            self.commands.append(command)
            return self.client.shell(command)

    def _dump(self) -> str:
        output = self._shell(f"uiautomator dump {DUMP_PATH} >/dev/null && cat {DUMP_PATH}")
        start = output.find("<?xml")
        if start < 0:
            start = output.find("<hierarchy")
        if start < 0:
            raise SandboxError(f"uiautomator dump failed: {output.strip()[:200]}")
        return output[start:].strip()

    def _observe(self, error: str | None) -> Observation:
        deadline = time.monotonic() + self.config.settle_timeout
        current = self._dump()
        while time.monotonic() < deadline:
            time.sleep(self.config.settle_interval)
            previous, current = current, self._dump()
            if current == previous:
                break
        elements = ui_elements(current)
        root = ET.fromstring(current).find("node")
        screen = _box(root.get("bounds", "")) if root is not None else None
        self._elements, self._screen = elements, screen or self._screen
        text = "\n".join(element.render(i) for i, element in enumerate(elements))
        return Observation(text=text + "\n", state={"xml": current, "last_action_error": error})

    def _ensure_server(self) -> None:
        with contextlib.suppress(SandboxUnavailableError):
            self.client.host_query("host:version")
            return
        adb = shutil.which("adb")
        if not self.config.start_server or adb is None or self.config.host != "127.0.0.1":
            raise SandboxUnavailableError(
                f"no adb server answers on {self.config.host}:{self.config.port}: start one "
                "(`adb start-server`) with your device or emulator attached "
                "(`emulator -avd <name> -no-snapshot`)"
            )
        subprocess.run(
            [adb, "-P", str(self.config.port), "start-server"],
            check=False, capture_output=True, timeout=60,
        )  # fmt: skip
        self.client.host_query("host:version")


def build(config: AdbConfig) -> AdbSandbox:
    """An adb sandbox for *config* (the typed registry's entry point)."""
    return AdbSandbox(config)


def sweep(owner: int | None = None) -> int:
    """Nothing to sweep: the device and its adb server belong to the user."""
    del owner  # the registry passes a dead owner to every sweeper
    return 0
