"""Sandbox folders and the sweep that runs beside an audit's replays.

``run_audit`` sweeps dead processes' leftovers on a thread while its own sandboxes run.
CI at 56a632c lost a browser root that way: the sweep met the folder between ``mkdtemp``
and the write of its ``owner.pid``, took it for a dead process's, and deleted it
(``FileNotFoundError`` on ``owner.pid``). A folder now carries its owner in its name.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from fidelity.sandboxes import browser, desktop, local
from fidelity.sandboxes.base import owned_folder

SWEEPERS: dict[str, tuple[str, Callable[..., int]]] = {
    "local": ("fidelity-local-", local.sweep_stale),
    "browser": ("fidelity-browser-", browser.sweep_stale),
    "desktop": ("fidelity-desktop-", desktop.sweep),
}


@pytest.mark.parametrize("backend", sorted(SWEEPERS))
def test_a_folder_is_its_makers_from_the_moment_it_exists(backend: str, tmp_path: Path) -> None:
    prefix, sweep = SWEEPERS[backend]
    fresh = owned_folder(prefix, str(tmp_path))  # nothing written in it yet
    dead = tmp_path / f"{prefix}999999999-abcd1234"
    dead.mkdir()
    assert fresh.name.startswith(f"{prefix}{os.getpid()}-")
    assert sweep(str(tmp_path)) >= 1  # and any dead owner's processes
    assert fresh.is_dir() and not dead.exists()


@pytest.mark.parametrize("backend", sorted(SWEEPERS))
def test_an_earlier_versions_folder_is_owned_by_its_owner_pid_file(
    backend: str, tmp_path: Path
) -> None:
    prefix, sweep = SWEEPERS[backend]
    live, dead, ownerless = (
        tmp_path / f"{prefix}{n}" for n in ("k2j4h9ab", "x7y8z9ab", "q1w2e3r4")
    )
    for folder, owner in ((live, str(os.getpid())), (dead, "999999999"), (ownerless, None)):
        folder.mkdir()
        if owner is not None:
            (folder / "owner.pid").write_text(owner)
    assert sweep(str(tmp_path)) >= 2
    assert live.is_dir() and not dead.exists() and not ownerless.exists()


def test_only_the_named_owners_folders_go_when_an_owner_is_given(tmp_path: Path) -> None:
    mine = owned_folder("fidelity-local-", str(tmp_path))
    other = tmp_path / "fidelity-local-999999998-abcd1234"
    other.mkdir()
    assert local.sweep_stale(str(tmp_path), owner=999999998) == 1
    assert mine.is_dir() and not other.exists()
