"""Fixtures of the world-model tests: a loopback fake endpoint and trajectories."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from fakes.trajectories import build_trajectory
from fidelity.trajectory import Trajectory


@pytest.fixture
def make_trajectory() -> Callable[..., Trajectory]:
    """Factory of terminal trajectories (see :func:`build_trajectory`)."""
    return build_trajectory
