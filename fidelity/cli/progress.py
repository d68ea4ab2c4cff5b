"""Progress on stderr while a command runs, driven by the library's progress callback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from fidelity.cli.application import err, escape

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

    from fidelity.policy import Verdict

GATE_PHASES = {"scan": "read", "real": "replayed", "write": "decided"}
"""The progress bars of a dataset gate (its three passes)."""


@contextmanager
def progress_bars(
    quiet: bool, labels: dict[str, str] | None = None
) -> Iterator[Callable[[str, int], None]]:
    """A rich progress bar (on stderr) driven by the library's progress callback.

    *labels* maps the library's phases to bar titles (default: an audit's phases).
    ``("total", n)`` opens every bar with total *n*; ``("total:PHASE", n)`` opens
    one (``n == 0``: a total not known yet). The callback's ``bounds(verdict)`` shows each
    limit's current bound beside the replays (a dataset gate's rounds).
    """
    if quiet or not err.is_terminal:
        yield Silent()
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("{task.description:>12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=err,
        transient=True,
    ) as bar:
        yield Bars(
            bar, labels or {"real": "real replay", "sim": "simulation", "compare": "compared"}
        )


class Silent:
    """The progress callback of ``--json`` and non-terminal runs: says nothing."""

    def __call__(self, phase: str, n: int) -> None:
        """Nothing."""

    def bounds(self, verdict: Verdict) -> None:
        """Nothing."""


class Bars:
    """Rich bars per phase; the replay bar also shows each limit's bound after a round."""

    def __init__(self, bar: Progress, labels: dict[str, str]) -> None:
        self.bar = bar
        self.labels = labels
        self.tasks: dict[str, TaskID] = {}

    def __call__(self, phase: str, n: int) -> None:
        if phase == "total":
            for key, label in self.labels.items():
                self.tasks[key] = self.bar.add_task(label, total=n, note="")
        elif phase.startswith("total:") and phase[6:] in self.labels:  # one bar (0: unknown)
            key = phase[6:]
            self.tasks[key] = self.bar.add_task(self.labels[key], total=n or None, note="")
        elif phase in self.tasks:
            self.bar.advance(self.tasks[phase], n)

    def bounds(self, verdict: Verdict) -> None:
        """``drift_rate ≤ 0.083 pass · hallucination_rate ≤ 0.21 undecided`` on the replay bar."""
        if "real" not in self.tasks:
            return
        shown = [
            f"{c.name.split(' ')[0]} ≤ {c.upper:.3g} {c.decision}"
            for c in verdict.checks
            if c.severity == "critical" and c.decision is not None and c.upper is not None
        ]
        self.bar.update(self.tasks["real"], note=escape(" · ".join(shown)))


@contextmanager
def interrupt_hint(hint: str) -> Iterator[None]:
    """Print *hint* (how to resume) when Ctrl-C or SIGTERM stops the block."""
    try:
        yield
    except KeyboardInterrupt:
        err.print(f"[yellow]{hint}[/]")
        raise
