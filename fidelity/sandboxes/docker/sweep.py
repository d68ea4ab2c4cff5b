"""Removing what killed audits left in Docker: containers labelled with an owner process of
this host that is gone (:func:`sweep_stale`), told without the Docker SDK when none is."""

from __future__ import annotations

import http.client
import json
import os
import socket
import urllib.parse

from fidelity.sandboxes.base import dead_owner
from fidelity.sandboxes.docker.containers import LABEL_HOST, LABEL_OWNER, _remove
from fidelity.sandboxes.images import docker_client, no_daemon

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
"""Where the Docker SDK looks for the daemon when ``DOCKER_HOST`` is unset."""


def _none_labelled(label: str) -> bool:
    """Whether the local daemon lists no container, running or not, carrying *label*.

    Asked over its Unix socket with the standard library: an audit of any domain sweeps
    Docker's leftovers, and importing the SDK to learn that there are none cost an audit
    0.4 s of CPU. A socket that does not exist, or that nobody listens on, means no daemon
    runs (SandboxUnavailableError, as the SDK's client would say, told without it). False
    whenever the answer cannot be told this way (``DOCKER_HOST`` names no Unix socket, any
    other error, an answer that is not a list): the SDK then asks, and says why it cannot.
    """
    host = os.environ.get("DOCKER_HOST") or DEFAULT_SOCKET
    if not host.startswith("unix://"):
        return False
    path = host.removeprefix("unix://")
    query = urllib.parse.urlencode({"all": "1", "filters": json.dumps({"label": [label]})})
    connection = _UnixConnection(path)
    try:
        connection.request("GET", f"/containers/json?{query}")
        response = connection.getresponse()
        listed = json.loads(response.read()) if response.status == 200 else None
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        raise no_daemon(f"nothing listens on {path}: {exc.strerror}") from exc
    except (OSError, http.client.HTTPException, ValueError):
        return False  # a garbled answer, a socket we may not open: the SDK's error says why
    finally:
        connection.close()
    return listed == []


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket (the Docker daemon's API)."""

    def __init__(self, path: str) -> None:
        super().__init__("localhost", timeout=30)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)


def sweep_stale(owner: int | None = None) -> int:
    """Remove containers whose owning fidelity process (on this host) is dead; how many.

    With *owner*, only that (dead) process's containers.
    """
    label = f"{LABEL_OWNER}={owner}" if owner is not None else LABEL_OWNER
    # the common cases (none labelled; no daemon at all: raised) told without loading the SDK
    if _none_labelled(label):
        return 0
    client = docker_client()
    removed = 0
    host = socket.gethostname()
    # sparse: the list's own data, no inspect per container (a container another process is
    # removing meanwhile would make that inspect fail with 404 and the whole sweep with it)
    for container in client.containers.list(all=True, sparse=True, filters={"label": label}):
        labels = container.attrs.get("Labels") or {}
        if labels.get(LABEL_HOST) != host:
            continue
        try:
            pid = int(labels.get(LABEL_OWNER, "-1"))
        except ValueError:
            pid = -1
        if not dead_owner(pid, owner):
            continue
        _remove(container)
        removed += 1
    return removed
