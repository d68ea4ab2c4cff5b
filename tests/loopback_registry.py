"""A registry address on loopback that counts who connects: proof that nothing was pulled.

The Docker daemon pulls ``127.0.0.1:PORT/...`` from that address (loopback registries are
spoken to over plain HTTP too), so every pull it attempts is a TCP connection here. Nothing
is served: each connection is closed at once, and the pull fails quickly.

:meth:`LoopbackRegistry.connections` is exact without waiting on time: it connects once
itself and counts what was accepted before its own connection, which the kernel queues after
every earlier one.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType


class LoopbackRegistry:
    """A listening socket on 127.0.0.1 and a thread that accepts and counts connections."""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.host = f"127.0.0.1:{self._server.getsockname()[1]}"
        self._count = 0
        self._marks: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                connection, (_, port) = self._server.accept()
            except OSError:  # the server socket was closed: the registry is done
                return
            connection.close()
            with self._lock:
                mark = self._marks.pop(port, None)
                if mark is None:
                    self._count += 1
            if mark is not None:
                mark.set()

    def connections(self) -> int:
        """How many connections others made so far (all of them, accepted before this call's
        own marker connection, which the listen queue holds after them)."""
        with socket.socket() as marker:
            marker.bind(("127.0.0.1", 0))
            seen = threading.Event()
            with self._lock:
                self._marks[marker.getsockname()[1]] = seen
            marker.connect(self._server.getsockname())
            if not seen.wait(timeout=60):
                raise AssertionError("the loopback registry stopped accepting connections")
        with self._lock:
            return self._count

    def image(self, name: str) -> str:
        """A reference to *name* in this registry (never present locally)."""
        return f"{self.host}/{name}"

    def close(self) -> None:
        self._server.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept (close alone may not)
        self._server.close()
        self._thread.join(timeout=60)

    def __enter__(self) -> LoopbackRegistry:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


@contextmanager
def loopback_registry() -> Iterator[LoopbackRegistry]:
    """A :class:`LoopbackRegistry`, closed afterwards."""
    with LoopbackRegistry() as registry:
        yield registry
