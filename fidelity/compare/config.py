"""User settings of the comparison: extra normalization rules, rules switched off, thresholds.

Loaded from TOML (``fidelity diff --compare-config compare.toml``)::

    [normalize]
    disable = ["epoch"]             # built-in rules (or truncate, unordered_lines, git_short_id, action_pid)

    [[normalize.rules]]             # user regex rules run first, in this order
    name = "request_id"
    pattern = "req-[0-9a-z]{8}"
    replacement = "<REQID>"

    [thresholds]                    # per-domain drift threshold (terminal: replaces the calibration)
    web = 0.85

    whitespace = "strict"           # top level; default "normalize" (see CompareConfig.whitespace)
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fidelity.compare.rules import (
    DEFAULT_RULES,
    GIT_ID_RULE,
    ORDER_RULE,
    PID_OUTPUT_RULE,
    RULES,
    TRUNCATE_RULE,
    WHITESPACE_RULES,
    Rule,
)
from fidelity.formats.toml import load_toml_model

WHOLE_TEXT_RULES = frozenset(
    {TRUNCATE_RULE, ORDER_RULE, GIT_ID_RULE, PID_OUTPUT_RULE, *WHITESPACE_RULES}
)
"""Rules that are not regex rewrites but can be switched off too."""

LINE_END_RULES = frozenset({"crlf", "carriage_return"})
"""The regex rules that rewrite line endings (off with ``whitespace = "strict"``)."""


class UserRule(BaseModel):
    """A regex rewrite added by the user (applied before the built-in rules)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    pattern: str = Field(min_length=1)
    replacement: str = ""
    multiline: bool = False
    description: str = ""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value

    def rule(self) -> Rule:
        """The rule as the normalizer runs it."""
        flags = re.MULTILINE if self.multiline else re.NOFLAG
        return Rule(self.name, self.pattern, self.replacement, flags, description=self.description)


class NormalizeConfig(BaseModel):
    """``[normalize]``: built-in rules switched off and user rules added."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    disable: list[str] = Field(default_factory=list)
    rules: list[UserRule] = Field(default_factory=list)

    @field_validator("disable")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = [n for n in value if n not in RULES and n not in WHOLE_TEXT_RULES]
        if unknown:
            known = ", ".join([*RULES, *sorted(WHOLE_TEXT_RULES)])
            raise ValueError(f"unknown rules {unknown}; known: {known}")
        return value

    @field_validator("rules")
    @classmethod
    def _unique(cls, value: list[UserRule]) -> list[UserRule]:
        names = [r.name for r in value]
        clash = sorted({n for n in names if names.count(n) > 1 or n in RULES})
        if clash:
            raise ValueError(f"rule names {clash} are used twice or by a built-in rule")
        return value


class CompareConfig(BaseModel):
    """Every user setting of the comparison; the defaults reproduce the built-in behaviour."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    whitespace: Literal["normalize", "strict"] = Field(
        default="normalize",
        description="normalize: line endings (\\r\\n, \\r), spaces and tabs at line ends and "
        "blank lines at the end do not count as differences (counted rules crlf, "
        "carriage_return, trailing_space, trailing_blank_lines); strict: they do (byte "
        "equality of whitespace; progress lines redrawn with \\r then differ too)",
    )
    thresholds: dict[str, float] = Field(
        default_factory=dict, description="domain -> drift threshold in [0, 1]"
    )

    @field_validator("thresholds")
    @classmethod
    def _in_range(cls, value: dict[str, float]) -> dict[str, float]:
        bad = {d: t for d, t in value.items() if not 0.0 <= t <= 1.0}
        if bad:
            raise ValueError(f"thresholds must lie in [0, 1]: {bad}")
        return value

    def rules(self, base: Sequence[Rule] = DEFAULT_RULES) -> tuple[Rule, ...]:
        """User rules, then *base* without the disabled rules."""
        disabled = set(self.normalize.disable)
        if self.whitespace == "strict":
            disabled |= LINE_END_RULES
        user = tuple(r.rule() for r in self.normalize.rules)
        return (*user, *(r for r in base if r.name not in disabled))

    def enabled(self, name: str) -> bool:
        """Whether the rule called *name* (a whole-text rule included) is switched on."""
        if self.whitespace == "strict" and (name in WHITESPACE_RULES or name in LINE_END_RULES):
            return False
        return name not in self.normalize.disable

    def whole_text(self, names: Iterable[str]) -> frozenset[str]:
        """Those of the whole-text rules *names* (and the whitespace rules) switched on."""
        return frozenset(n for n in (*names, *WHITESPACE_RULES) if self.enabled(n))

    def threshold(self, domain: str, default: float) -> float:
        """The configured drift threshold of *domain*, else *default*."""
        return self.thresholds.get(domain, default)


def load_compare_config(path: str | os.PathLike[str] | None) -> CompareConfig:
    """Read a compare config TOML file; the defaults when *path* is None.

    Raises :class:`~fidelity.errors.UsageError` naming the file (and field).
    """
    if path is None:
        return CompareConfig()
    return load_toml_model(path, CompareConfig, "compare config")
