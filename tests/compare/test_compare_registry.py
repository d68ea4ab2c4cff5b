"""The comparator registry."""

from __future__ import annotations

import pytest

from fidelity.compare import (
    TerminalComparator,
    get_comparator,
    register_comparator,
    supported_domains,
)
from fidelity.errors import UnknownDomainError, UsageError
from fidelity.trajectory import Domain


def test_terminal_comparator_is_registered() -> None:
    comparator = get_comparator("terminal")
    assert isinstance(comparator, TerminalComparator)
    assert comparator.domain == "terminal"
    assert comparator.threshold == 0.9
    assert "terminal" in supported_domains()


def test_every_domain_has_a_comparator() -> None:
    assert supported_domains() == sorted(d.value for d in Domain)
    for domain in Domain:
        comparator = get_comparator(domain.value)
        assert comparator.domain == domain.value
        assert 0.0 < comparator.threshold <= 1.0


def test_unknown_domain_raises_one_line() -> None:
    with pytest.raises(UnknownDomainError) as caught:
        get_comparator("spreadsheet")
    message = str(caught.value)
    assert "\n" not in message
    assert "is not a known domain" in message
    assert "supported: android, mcp, os, search, swe, terminal, web" in message
    assert isinstance(caught.value, UsageError)


def test_domain_without_comparator_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import fidelity.compare as package

    monkeypatch.setattr(package, "_FACTORIES", {"terminal": package._FACTORIES["terminal"]})
    with pytest.raises(
        UnknownDomainError, match="'web' has no comparator yet; supported: terminal"
    ):
        get_comparator("web")


def test_register_comparator(monkeypatch: pytest.MonkeyPatch) -> None:
    import fidelity.compare as package

    monkeypatch.setattr(package, "_FACTORIES", dict(package._FACTORIES))
    register_comparator("os", lambda config: TerminalComparator(threshold=0.8))
    assert get_comparator("os").threshold == 0.8
    assert isinstance(get_comparator("os"), TerminalComparator)
