"""``fidelity --debug`` (or ``FIDELITY_DEBUG=1``): what a person debugging a run wants.

While the command runs, the records of fidelity's loggers (``fidelity.*``, every level)
are collected in memory (the last :data:`KEPT`). After an error's one line, the error's
traceback follows with every exception it came from, including a context hidden by
``raise … from None`` (a usage error built from a validation error keeps its cause
for this), then the collected log; a run that ends without an error prints the log at
its end. Without ``--debug`` nothing is collected and every output is unchanged.

Records are collected in this process only: a Ray worker's or a child's stay there.
"""

from __future__ import annotations

import logging
import traceback
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console


KEPT = 10_000
"""Log records kept (the latest): a long run's first ones are dropped, and counted."""

_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(name)s [%(threadName)s]: %(message)s"


class DebugLog(logging.Handler):
    """The ``fidelity`` logger's records of one command, and what ``--debug`` prints on
    *err* (the stderr console)."""

    def __init__(self, err: Console) -> None:
        super().__init__(logging.DEBUG)
        self.err = err
        self.setFormatter(logging.Formatter(_FORMAT, "%H:%M:%S"))
        self.records: deque[logging.LogRecord] = deque(maxlen=KEPT)
        self.seen = 0
        self.printed = False
        self._logger = logging.getLogger("fidelity")
        self._level = self._logger.level

    def emit(self, record: logging.LogRecord) -> None:
        """Keep *record* (the oldest is dropped past :data:`KEPT`)."""
        self.seen += 1
        self.records.append(record)

    def start(self) -> DebugLog:
        """Collect every record of ``fidelity.*`` from now on."""
        self._logger.addHandler(self)
        self._logger.setLevel(logging.DEBUG)
        return self

    def stop(self) -> None:
        """Stop collecting (the logger gets its level back)."""
        self._logger.removeHandler(self)
        self._logger.setLevel(self._level)

    def after_error(self, error: BaseException) -> None:
        """Print *error*'s traceback with its causes, then the log (stderr)."""
        self.err.print("debug: traceback, with the exceptions it came from:", markup=False)
        self.err.print(
            "".join(chained_traceback(error)).rstrip("\n"), markup=False, highlight=False
        )
        self.print_log()

    def finish(self) -> None:
        """At the end of the command: the log when not printed yet (and any was
        collected); then stop collecting."""
        if not self.printed and self.records:
            self.print_log()
        self.stop()

    def print_log(self) -> None:
        """The records collected so far, oldest first (stderr)."""
        self.printed = True
        dropped = self.seen - len(self.records)
        if not self.records:
            self.err.print("debug: log of the run: no records", markup=False)
            return
        note = f", the first {dropped:,} dropped" if dropped else ""
        self.err.print(f"debug: log of the run ({self.seen:,} records{note}):", markup=False)
        for line in self._lines():
            self.err.print(line, markup=False, highlight=False)

    def _lines(self) -> Iterator[str]:
        for record in list(self.records):
            yield self.format(record)


def chained_traceback(error: BaseException) -> list[str]:
    """*error*'s traceback and those of the exceptions it came from, oldest first, as
    Python prints them; a context that ``raise … from None`` hid is shown too."""
    hidden: list[BaseException] = []
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if current.__suppress_context__ and current.__cause__ is None:
            hidden.append(current)
            current.__suppress_context__ = False
        current = current.__cause__ or current.__context__
    try:
        return traceback.format_exception(error)
    finally:
        for exc in hidden:
            exc.__suppress_context__ = True
