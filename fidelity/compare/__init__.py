"""Per-domain comparators: ``(real, sim, context) -> StepComparison``.

:func:`get_comparator` is the registry; each domain registers a factory.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fidelity.compare.base import Comparator, CompareContext, StepComparison
from fidelity.errors import UnknownDomainError
from fidelity.trajectory import Domain

if TYPE_CHECKING:
    from fidelity.compare.android import AndroidComparator
    from fidelity.compare.config import CompareConfig, load_compare_config
    from fidelity.compare.jsondata import JsonComparator
    from fidelity.compare.osworld import OsComparator
    from fidelity.compare.search import SearchComparator
    from fidelity.compare.swe import SweComparator
    from fidelity.compare.terminal import TerminalComparator
    from fidelity.compare.web import WebComparator

#: The comparator classes, imported on first use: a command comparing one domain
#: never imports the others (the os comparator pulls in the desktop tree parser). The
#: compare settings too: the store needs only ``base`` (``fidelity runs`` compares nothing).
_LAZY = {
    "CompareConfig": "config",
    "load_compare_config": "config",
    "AndroidComparator": "android",
    "JsonComparator": "jsondata",
    "OsComparator": "osworld",
    "SearchComparator": "search",
    "SweComparator": "swe",
    "TerminalComparator": "terminal",
    "WebComparator": "web",
}

__all__ = [
    "AndroidComparator",
    "Comparator",
    "CompareConfig",
    "CompareContext",
    "JsonComparator",
    "OsComparator",
    "SearchComparator",
    "StepComparison",
    "SweComparator",
    "TerminalComparator",
    "WebComparator",
    "comparator_factory",
    "get_comparator",
    "load_compare_config",
    "register_comparator",
    "supported_domains",
]

Factory = Callable[["CompareConfig"], Comparator]
"""Builds a comparator from the user's compare settings."""


def _lazy(name: str) -> Factory:
    """A factory building *name* (a key of :data:`_LAZY`), imported when first called."""

    def factory(config: CompareConfig) -> Comparator:
        comparator: Comparator = (globals().get(name) or __getattr__(name))(config=config)
        return comparator

    return factory


_FACTORIES: dict[str, Factory] = {
    "terminal": _lazy("TerminalComparator"),
    "swe": _lazy("SweComparator"),
    "web": _lazy("WebComparator"),
    "android": _lazy("AndroidComparator"),
    "mcp": _lazy("JsonComparator"),
    "search": _lazy("SearchComparator"),
    "os": _lazy("OsComparator"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next look-up is a plain attribute
    return value


def register_comparator(domain: str, factory: Factory) -> None:
    """Make :func:`get_comparator` build comparators for *domain* with *factory*."""
    _FACTORIES[domain] = factory


def supported_domains() -> list[str]:
    """Domains that have a comparator, sorted."""
    return sorted(_FACTORIES)


def get_comparator(domain: str, config: CompareConfig | None = None) -> Comparator:
    """A fresh comparator for *domain*, built with *config* (the defaults when None).

    Raises :class:`~fidelity.errors.UnknownDomainError` (one line, listing the
    supported domains) for an unknown domain or one without a comparator yet.
    """
    from fidelity.compare.config import CompareConfig

    return comparator_factory(domain)(config or CompareConfig())


def comparator_factory(domain: str) -> Factory:
    """What builds *domain*'s comparators; :func:`get_comparator`'s error when there is none."""
    factory = _FACTORIES.get(str(domain))
    if factory is not None:
        return factory
    known = {d.value for d in Domain}
    what = "has no comparator yet" if str(domain) in known else "is not a known domain"
    raise UnknownDomainError(
        f"domain {str(domain)!r} {what}; supported: {', '.join(supported_domains())}"
    )
