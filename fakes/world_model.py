"""A real loopback OpenAI-compatible server with scriptable failure modes (test helper).

The server is a stdlib ``ThreadingHTTPServer`` on ``127.0.0.1`` (port 0) that
implements ``POST /v1/chat/completions`` and ``GET /v1/models``. Each chat
request takes the next :class:`Reply` from a queue (``FakeLLM.script``); when
the queue is empty it answers normally, echoing a deterministic prediction
built from the command in the last user message.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

MODEL = "fake/agentworld-tiny"
_JSON_BLOCK = re.compile(r"```json\n(.*?)\n```", re.DOTALL)


@dataclass(frozen=True)
class Reply:
    """One scripted behaviour of the fake server."""

    kind: str = "ok"  # ok | status | slow | garbage | content | drop | hang | drip | length
    status: int = 200
    content: str | None = None
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def ok(cls) -> Reply:
        """A normal answer echoing the current command."""
        return cls()

    @classmethod
    def http(cls, status: int, **headers: str) -> Reply:
        """An HTTP error status with an OpenAI-style JSON error body."""
        return cls(kind="status", status=status, headers=headers)

    @classmethod
    def slow(cls, delay: float) -> Reply:
        """A normal answer sent only after *delay* seconds."""
        return cls(kind="slow", delay=delay)

    @classmethod
    def garbage(cls) -> Reply:
        """HTTP 200 whose body is not JSON."""
        return cls(kind="garbage")

    @classmethod
    def text(cls, content: str | None) -> Reply:
        """HTTP 200 with *content* as the assistant message."""
        return cls(kind="content", content=content)

    @classmethod
    def cut(cls, content: str | None) -> Reply:
        """HTTP 200 with *content*, stopped by the length limit (``finish_reason: length``)."""
        return cls(kind="length", content=content)

    @classmethod
    def drop(cls) -> Reply:
        """Close the connection without sending a response."""
        return cls(kind="drop")

    @classmethod
    def hang(cls) -> Reply:
        """Accept the request and never answer (until the server is released)."""
        return cls(kind="hang")

    @classmethod
    def drip(cls, interval: float) -> Reply:
        """HTTP 200 headers, then one byte of body every *interval* seconds, never complete
        (until the client gives up or the server is released)."""
        return cls(kind="drip", delay=interval)


def echo_prediction(messages: list[dict[str, Any]]) -> str:
    """The deterministic answer of the fake: ``ran: <command>`` and exit code 0."""
    last = str(messages[-1].get("content", "")) if messages else ""
    match = _JSON_BLOCK.search(last)
    command = "?"
    if match:
        try:
            action = json.loads(match.group(1))
        except json.JSONDecodeError:
            action = match.group(1)
        if isinstance(action, list) and action and isinstance(action[0], dict):
            command = str(action[0].get("keystrokes", "?")).removesuffix("\n") or "?"
        elif isinstance(action, dict):
            command = action.get("command") or action.get("keys") or action.get("name") or "?"
        elif isinstance(action, str):
            command = action
    return f"<predicted_observation>\nran: {command}\n[exit_code: 0]\n</predicted_observation>"


class FakeLLM:
    """State shared between the test and the server threads."""

    def __init__(self, default: Reply | None = None) -> None:
        self.default = default or Reply.ok()
        self.replies: deque[Reply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.handler_errors: list[str] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.released = threading.Event()
        self.models_reply: Reply | None = None  # "drip": GET /v1/models drips, never ends
        self.on_hang: Callable[[], None] | None = None  # called as a "hang" reply starts

    def release(self) -> None:
        """End every hanging and dripping answer (call before shutting the server down)."""
        self.released.set()

    @property
    def url(self) -> str:
        """The base URL a client passes (``http://127.0.0.1:PORT/v1``)."""
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def script(self, *replies: Reply) -> None:
        """Queue *replies*; each chat request consumes one, in order."""
        with self.lock:
            self.replies.extend(replies)

    def next_reply(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            self.requests.append(body)
            return self.replies.popleft() if self.replies else self.default


def _completion(model: str, content: str | None, finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class FakeServer(ThreadingHTTPServer):
    """A thread per connection; a listen backlog deep enough for a burst of connections.

    The backlog is read when the socket starts listening (in the constructor):
    setting it on an instance afterwards does nothing, and the default of 5 makes
    a burst of 32 connections fail with resets.
    """

    daemon_threads = True
    request_queue_size = 256


def make_handler(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as vLLM and SGLang serve
        disable_nagle_algorithm = True  # headers and body go out at once, no delayed-ACK stall

        def log_message(self, format: str, *args: Any) -> None:
            """Keep test output quiet."""

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError) as error:
                fake.handler_errors.append(type(error).__name__)

        def _drip(self, interval: float) -> None:
            self.close_connection = True
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(1 << 30))
                self.end_headers()
                while not fake.released.wait(interval):
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except (BrokenPipeError, ConnectionResetError) as error:
                fake.handler_errors.append(type(error).__name__)

        def do_GET(self) -> None:
            if fake.models_reply is not None and fake.models_reply.kind == "drip":
                self._drip(fake.models_reply.delay)
                return
            if self.path.rstrip("/") != "/v1/models":
                self._send(404, b'{"error": {"message": "not found"}}')
                return
            data = {"object": "list", "data": [{"id": MODEL, "object": "model"}]}
            self._send(200, json.dumps(data).encode())

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, b'{"error": {"message": "not found"}}')
                return
            self._answer(fake.next_reply(body), body)

        def _answer(self, reply: Reply, body: dict[str, Any]) -> None:
            model = str(body.get("model", MODEL))
            if reply.kind == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            if reply.kind == "garbage":
                self._send(200, b"<html>definitely not json</html>")
                return
            if reply.kind == "status":
                error = {"error": {"message": f"scripted {reply.status}", "type": "fake"}}
                self._send(reply.status, json.dumps(error).encode(), reply.headers)
                return
            if reply.kind == "hang":
                if fake.on_hang is not None:
                    fake.on_hang()
                fake.released.wait()
                return
            if reply.kind == "drip":
                self._drip(reply.delay)
                return
            if reply.kind == "slow":
                time.sleep(reply.delay)
            content = reply.content if reply.kind in ("content", "length") else None
            if reply.kind not in ("content", "length"):
                content = echo_prediction(body.get("messages", []))
            finish = "length" if reply.kind == "length" else "stop"
            self._send(200, json.dumps(_completion(model, content, finish)).encode())

    return Handler


def main() -> None:
    """Serve on loopback until killed, answering after ``--latency`` seconds; prints the port.

    Benchmarks run it as its own process, as a real server would be, so its
    request handling does not compete with the client for one interpreter.
    """
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds per answer")
    args = parser.parse_args()
    fake = FakeLLM(default=Reply.slow(args.latency) if args.latency else Reply.ok())
    server = FakeServer(("127.0.0.1", 0), make_handler(fake))
    fake.server = server
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()


Fake = TypeVar("Fake", bound=FakeLLM)


@contextmanager
def serving(
    fake: Fake, handler: Callable[[Fake], type[BaseHTTPRequestHandler]] = make_handler
) -> Iterator[Fake]:
    """*fake* answering on a real loopback port (``fake.server``) until the block ends."""
    server = FakeServer(("127.0.0.1", 0), handler(fake))
    fake.server = server
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield fake
    finally:
        fake.release()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
