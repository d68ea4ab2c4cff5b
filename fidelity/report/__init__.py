"""HTML reports: one self-contained offline page per run (templates in ``reports/``)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fidelity.report.html import render_report, write_report

__all__ = ["render_report", "write_report"]


def __getattr__(name: str) -> Any:
    """The page writers, imported on first use: the package's other modules (``diff``)
    need neither jinja2 nor matplotlib."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("fidelity.report.html"), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value
