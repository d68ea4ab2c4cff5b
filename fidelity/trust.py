"""What a dataset may make the auditor do: nothing it does not say on the command line.

A dataset (a line, a ``fidelity-env.toml`` beside it) is untrusted data. It may name the
world a trajectory ran in, but on its own it may not

- run a command on the auditing host (a site's ``reset``, an MCP server's ``command``):
  :func:`host_commands` finds them, :func:`refuse_untrusted` refuses them unless the
  operator passed ``--trust-dataset-commands`` (:attr:`DatasetTrust.commands`); even
  then they run with :func:`scrubbed_environment` and what they print is :func:`redact`-ed;
- reach a host the operator did not name (``env.sites.<name>.url``): a site's origin must
  be one of the operator's sites (``--site``, ``WA_*``, a named ``--env-defaults`` file);
- pull an image (``--pull``, optionally ``--pull-registry``; the docker backend's config).

This module holds the rules and their one-line refusals; the backends apply them again
where the command or the host is used (a refusal there makes the trajectory
unverifiable), so a path that skips the scan still cannot run or reach anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from fidelity.errors import InputFormatError

if TYPE_CHECKING:
    from fidelity.trajectory import Trajectory

TRUST_FLAG: Final = "--trust-dataset-commands"
"""The command-line flag that lets a dataset's host-side commands run (contained)."""

REDACTED: Final = "[redacted]"
"""What a secret value of the auditor's environment is replaced with in any output."""

_SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASSW|PASSPHRASE|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|SIGNATURE|DSN",
    re.IGNORECASE,
)
_MIN_SECRET = 6  # shorter values ("1", "true") would redact ordinary text

SCRUBBED_KEEP: Final = ("PATH", "LANG", "LC_ALL", "TZ")
"""The auditor's variables a trusted dataset command still sees (nothing secret)."""


class DatasetTrust(BaseModel):
    """What the operator allowed a dataset, on the command line."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    commands: bool = False
    """``--trust-dataset-commands``: run the host-side commands a dataset names
    (contained where it can be, scrubbed environment, redacted output)."""
    site_origins: frozenset[str] | None = None
    """Origins (``scheme://host:port``) a dataset's ``env.sites.<name>.url`` may name: the
    operator's sites. None: not checked here (the browser backend checks at reset)."""


def host_commands(trajectory: Trajectory) -> list[tuple[str, str]]:
    """``(field, command)`` of every command *trajectory* names that would run on the host,
    not inside its sandbox: site resets and MCP server commands."""
    env = trajectory.env
    found = [
        (f"env.sites.{name}.reset", site.reset)
        for name, site in (env.sites or {}).items()
        if site.reset is not None
    ]
    found += [
        (f"env.mcp_servers.{name}.command", server.command)
        for name, server in (env.mcp_servers or {}).items()
        if server.command is not None
    ]
    return found


def refuse_untrusted(
    trajectory: Trajectory, trust: DatasetTrust, path: str, line: int | None
) -> None:
    """:class:`InputFormatError` (exit 2, naming the line and field) for the first host-side
    command or unallowed site *trajectory* names that *trust* does not allow."""
    if not trust.commands:
        for field, _ in host_commands(trajectory):
            raise InputFormatError(
                path,
                line,
                f"{trajectory.id}.{field}",
                "a dataset's command is not run on this host; pass "
                f"{TRUST_FLAG} to run it contained, or drop it from the dataset",
            )
    if trust.site_origins is not None:
        for name, site in (trajectory.env.sites or {}).items():
            if site.url is not None and not site_allowed(site.url, trust.site_origins):
                raise InputFormatError(
                    path,
                    line,
                    f"{trajectory.id}.env.sites.{name}.url",
                    f"{site.url} is not one of the operator's sites; allow it with "
                    f"--site {name}=URL (or WA_*, or a file named by --env-defaults)",
                )


def site_allowed(url: str, origins: Iterable[str]) -> bool:
    """Whether *url*'s origin is one of *origins* (the operator's sites)."""
    origin = origin_of(url)
    return bool(origin) and origin in set(origins)


def origin_of(url: str) -> str:
    """The origin of *url* with an explicit port (``http://h`` -> ``http://h:80``); '' if none."""
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return ""
    if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
        return ""
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port}"


def scrubbed_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a dataset's command: :data:`SCRUBBED_KEEP` of the auditor's and
    *extra*, nothing else (no key, token or proxy of the auditor's)."""
    kept = {name: os.environ[name] for name in SCRUBBED_KEEP if name in os.environ}
    kept.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return {**kept, **(extra or {})}


def secret_values(environ: Mapping[str, str] | None = None) -> list[str]:
    """Values of *environ* (default: the auditor's) that look secret, longest first: those of
    variables named like a key, token, password or credential."""
    environ = os.environ if environ is None else environ
    values = {
        value
        for name, value in environ.items()
        if _SECRET_NAME.search(name) and len(value.strip()) >= _MIN_SECRET
    }
    return sorted(values, key=len, reverse=True)


def redact(text: str, environ: Mapping[str, str] | None = None) -> str:
    """*text* with every :func:`secret_values` value replaced by :data:`REDACTED`.

    Applied to whatever a dataset's command printed before it reaches an error message
    (and so a decision, the store or a report)."""
    for value in secret_values(environ):
        if value in text:
            text = text.replace(value, REDACTED)
    return text
