"""Facts about operating-system processes that several parts of fidelity ask."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether a process with *pid* exists (a zombie counts; one owned by another user does too)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, owned by another user
        return True
    return True
