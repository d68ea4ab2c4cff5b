"""A loopback double of the adb server protocol, serving fixed uiautomator dumps.

For protocol tests of the adb backend only: it speaks the adb server's smart
socket protocol (4-hex-digit length prefixed requests, ``OKAY``/``FAIL``
answers) and plays a tiny Settings app from the dumps in ``adb_dumps/``.
Those dumps were written for these tests in the exact layout of real
``uiautomator dump`` files (attribute set and order, status bar node); they
are not recordings of a device, and nothing measured against this double is a
fidelity figure.
"""

from __future__ import annotations

import re
import shlex
import socketserver
import threading
from pathlib import Path

DUMPS = Path(__file__).with_name("adb_dumps")
SERIAL = "emulator-5554"
_BOUNDS = re.compile(r'bounds="\[(\d+),(\d+)\]\[(\d+),(\d+)\]"')
_TAPS = {  # screen -> (text or resource id of the tapped element's subtree) -> next screen
    "home": {"Settings": "settings"},
    "settings": {"Network &amp; internet": "network", "Search settings": "search"},
    "network": {"Navigate up": "BACK"},
}
_ACTIVITIES = {"com.android.settings/.Settings": "settings"}


class Device:
    """The double's screen state and the shell commands it received."""

    def __init__(self) -> None:
        self.screens = {p.stem: p.read_text() for p in DUMPS.glob("*.xml")}
        self.stack = ["home"]
        self.dumped = ""
        self.commands: list[str] = []
        self.status = 0
        self.lock = threading.Lock()

    @property
    def xml(self) -> str:
        """The current screen's dump."""
        return self.screens[self.stack[-1]]

    def shell(self, command: str) -> bytes:
        """Run one shell command line (``a && b`` and ``a; b`` chains of the ones it knows)."""
        with self.lock:
            self.commands.append(command)
            out = []
            for part in re.split(r"\s*(?:&&|;)\s*", command):
                out.append(self._one(part.replace(">/dev/null", "").strip()))
            return "".join(out).encode()

    def _one(self, command: str) -> str:
        words = shlex.split(command) if command else []
        if not words:
            return ""
        if words[0] != "echo":
            self.status = 0
        if words[:2] == ["uiautomator", "dump"]:
            self.dumped = self.xml
            return ""
        if words[0] == "cat":
            return self.dumped if self.dumped else f"cat: {words[1]}: No such file or directory\n"
        if words[:2] == ["input", "keyevent"]:
            self._key(words[-1])
            return ""
        if words[:2] == ["input", "tap"]:
            self._tap(int(words[2]), int(words[3]))
            return ""
        if words[:2] == ["input", "text"]:
            self._type(words[2].replace("%s", " "))
            return ""
        if words[:2] == ["am", "start"]:
            screen = _ACTIVITIES.get(words[-1])
            if screen is None:
                return f"Error: Activity class {{{words[-1]}}} does not exist.\n"
            self.stack.append(screen)
            return "Status: ok\n"
        if words[0] == "echo":
            return " ".join(words[1:]).replace("$?", str(self.status)) + "\n"
        if words[:2] == ["input", "swipe"]:
            return ""
        self.status = 127
        return f"/system/bin/sh: {words[0]}: not found\n"

    def _key(self, key: str) -> None:
        if key == "KEYCODE_HOME":
            self.stack = ["home"]
        elif key == "KEYCODE_BACK" and len(self.stack) > 1:
            self.stack.pop()

    def _tap(self, x: int, y: int) -> None:
        screen = self.stack[-1]
        for label, target in _TAPS.get(screen, {}).items():
            for match in re.finditer(r"<node [^>]*>", self.xml):
                tag = match.group(0)
                if f'"{label}"' not in tag:
                    continue
                box = _BOUNDS.search(tag)
                assert box is not None
                x1, y1, x2, y2 = (int(g) for g in box.groups())
                if x1 <= x <= x2 and y1 <= y <= y2:
                    if target == "BACK":
                        self.stack.pop()
                    else:
                        self.stack.append(target)
                    return
        if screen == "network" and 750 <= y <= 840:  # the airplane mode switch flips
            xml = self.xml
            flipped = ('checked="false"', 'checked="true"')
            switch = re.search(r"<node [^>]*android:id/switch_widget[^>]*>", xml)
            assert switch is not None
            old = switch.group(0)
            new = (
                old.replace(*flipped) if flipped[0] in old else old.replace(flipped[1], flipped[0])
            )
            self.screens["network"] = xml.replace(old, new)

    def _type(self, text: str) -> None:
        if self.stack[-1] == "search":
            xml = self.screens["search"]
            self.screens["search"] = re.sub(
                r'text="[^"]*"( resource-id="android:id/search_src_text")', f'text="{text}"\\1', xml
            )


class _Handler(socketserver.BaseRequestHandler):
    server: AdbDouble

    def _read(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.request.recv(size - len(data))
            if not chunk:
                raise ConnectionError
            data += chunk
        return data

    def _request(self) -> str:
        length = int(self._read(4), 16)
        return self._read(length).decode()

    def _fail(self, message: str) -> None:
        data = message.encode()
        self.request.sendall(b"FAIL" + f"{len(data):04x}".encode() + data)

    def _okay_with(self, body: str) -> None:
        data = body.encode()
        self.request.sendall(b"OKAY" + f"{len(data):04x}".encode() + data)

    def handle(self) -> None:
        try:
            request = self._request()
            self.server.requests.append(request)
            if request == "host:version":
                self._okay_with("0029")
            elif request == "host:devices":
                self._okay_with("".join(f"{s}\t{st}\n" for s, st in self.server.devices.items()))
            elif request.startswith("host:transport"):
                serial = request.split(":", 2)[2] if request.count(":") == 2 else None
                if request == "host:transport-any":
                    serial = next(iter(self.server.devices), None)
                if serial not in self.server.devices:
                    self._fail(f"device '{serial}' not found")
                    return
                self.request.sendall(b"OKAY")
                command = self._request()
                self.server.requests.append(command)
                if not command.startswith("shell:"):
                    self._fail(f"unknown service {command}")
                    return
                self.request.sendall(b"OKAY")
                self.request.sendall(self.server.device.shell(command[len("shell:") :]))
            else:
                self._fail(f"unknown host service {request}")
        except ConnectionError:
            return


class AdbDouble(socketserver.ThreadingTCPServer):
    """The double, listening on an ephemeral loopback port."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.device = Device()
        self.devices = {SERIAL: "device"}
        self.requests: list[str] = []
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.server_address[1])

    def start(self) -> AdbDouble:
        """Serve in a background thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.shutdown()
        self.server_close()
