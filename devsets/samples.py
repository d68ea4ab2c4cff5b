"""Volatile values of one command run, for the comparator's tests and benchmarks (not shipped).

A :class:`Run` is seeded: two runs with different seeds render the same
command output with different dates, PIDs, SHAs, durations and temp names,
like two real executions. ``tests/compare/compare_samples.py`` and
``benchmarks/compare_throughput.py`` both build their outputs on it.
"""

from __future__ import annotations

import random

MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
DAYS = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"]


class Run:
    """The volatile values of one execution (seeded)."""

    def __init__(self, seed: int | float) -> None:
        self.rng = random.Random(seed)

    def hex(self, n: int) -> str:
        """*n* random lowercase hex digits (a SHA, a temp-name suffix)."""
        return "".join(self.rng.choice("0123456789abcdef") for _ in range(n))

    def clock(self) -> str:
        """``HH:MM:SS``."""
        r = self.rng
        return f"{r.randint(0, 23):02d}:{r.randint(0, 59):02d}:{r.randint(0, 59):02d}"

    def ls_date(self) -> str:
        """An ``ls -l`` date (``Nov  3 14:02``)."""
        return f"{self.rng.choice(MONTHS)} {self.rng.randint(1, 28):2d} {self.clock()[:5]}"

    def git_date(self) -> str:
        """A ``git log`` date (``Fri Nov 20 23:55:57 2026 +0000``)."""
        r = self.rng
        return f"{r.choice(DAYS)} {r.choice(MONTHS)} {r.randint(1, 28)} {self.clock()} 2026 +0000"

    def iso(self) -> str:
        """An ISO-8601 date and time (``2026-11-20 23:55:57``)."""
        return f"2026-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d} {self.clock()}"

    def seconds(self) -> str:
        """A test-runner duration under a second (``0.123s``)."""
        return f"{self.rng.random():.3f}s"

    def duration(self) -> str:
        """A duration under three seconds (``1.23s``)."""
        return f"{self.rng.random() * 3:.2f}s"

    def pid(self) -> int:
        """A process id."""
        return self.rng.randint(300, 65000)
