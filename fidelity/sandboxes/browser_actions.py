"""Parse BrowserGym high-level actions (``click('12')``, ``fill('7', "text")``) without eval.

The action text is parsed with :mod:`ast`: exactly one call of a whitelisted
function whose arguments are literals (``ast.literal_eval``). Names, attribute
access, expressions and ``*``/``**`` unpacking are rejected. Arguments are bound
to the function's parameters and type-checked, so the backend only ever sees a
:class:`ParsedAction` with validated values.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from fidelity.errors import UsageError

_BID_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_REQUIRED = object()


class ActionSyntaxError(UsageError):
    """A browser action that does not parse or whose arguments are wrong."""


@dataclass(frozen=True)
class Param:
    """One parameter: its name, accepted types and default (``_REQUIRED`` for none)."""

    name: str
    types: tuple[type, ...]
    default: Any = _REQUIRED


def _bid(name: str = "bid") -> Param:
    return Param(name, (str, int))


_MODIFIERS = Param("modifiers", (list,), ())
SIGNATURES: dict[str, tuple[Param, ...]] = {
    "click": (_bid(), Param("button", (str,), "left"), _MODIFIERS),
    "dblclick": (_bid(), Param("button", (str,), "left"), _MODIFIERS),
    "hover": (_bid(),),
    "fill": (_bid(), Param("value", (str,))),
    "select_option": (_bid(), Param("options", (str, list))),
    "press": (_bid(), Param("key_comb", (str,))),
    "focus": (_bid(),),
    "clear": (_bid(),),
    "check": (_bid(),),
    "uncheck": (_bid(),),
    "scroll": (Param("delta_x", (int, float)), Param("delta_y", (int, float))),
    "keyboard_press": (Param("key", (str,)),),
    "keyboard_type": (Param("text", (str,)),),
    "goto": (Param("url", (str,)),),
    "go_back": (),
    "go_forward": (),
    "new_tab": (),
    "tab_focus": (Param("index", (int,)),),
    "tab_close": (),
    "noop": (Param("wait_ms", (int, float), 1000),),
    "send_msg_to_user": (Param("text", (str,)),),
}
"""Every action the browser backend runs, with its parameters in positional order."""

_BUTTONS = ("left", "middle", "right")
_MODIFIER_KEYS = ("Alt", "Control", "ControlOrMeta", "Meta", "Shift")
MAX_WAIT_MS = 30_000


@dataclass(frozen=True)
class ParsedAction:
    """A validated action: the function name and its bound arguments."""

    name: str
    args: dict[str, Any]


def parse_action(text: str) -> ParsedAction:
    """The single whitelisted call in *text*; :class:`ActionSyntaxError` otherwise."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ActionSyntaxError(f"invalid action syntax: {exc.msg}") from None
    call = tree.body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Name):
        raise ActionSyntaxError("an action is one call such as click('12')")
    name = call.func.id
    if name not in SIGNATURES:
        raise ActionSyntaxError(f"unknown action {name!r}; known: {', '.join(sorted(SIGNATURES))}")
    positional = [_literal(name, arg) for arg in call.args]
    keywords: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            raise ActionSyntaxError(f"{name}: ** unpacking is not allowed")
        keywords[keyword.arg] = _literal(name, keyword.value)
    args = _bind(name, SIGNATURES[name], positional, keywords)
    _check_values(name, args)
    return ParsedAction(name, args)


def _literal(name: str, node: ast.expr) -> Any:
    if isinstance(node, ast.Starred):
        raise ActionSyntaxError(f"{name}: * unpacking is not allowed")
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise ActionSyntaxError(f"{name}: arguments must be literals") from None


def _bind(
    name: str, params: tuple[Param, ...], positional: list[Any], keywords: dict[str, Any]
) -> dict[str, Any]:
    if len(positional) > len(params):
        raise ActionSyntaxError(
            f"{name}() takes {len(params)} argument(s), {len(positional)} given"
        )
    known = {p.name for p in params}
    unknown = sorted(set(keywords) - known)
    if unknown:
        raise ActionSyntaxError(f"{name}() got an unexpected argument {unknown[0]!r}")
    args: dict[str, Any] = {}
    for index, param in enumerate(params):
        if index < len(positional):
            if param.name in keywords:
                raise ActionSyntaxError(f"{name}() got two values for {param.name!r}")
            value = positional[index]
        elif param.name in keywords:
            value = keywords[param.name]
        elif param.default is not _REQUIRED:
            value = param.default
        else:
            raise ActionSyntaxError(f"{name}() is missing the argument {param.name!r}")
        value = list(value) if isinstance(value, tuple) else value
        if isinstance(value, bool) or not isinstance(value, param.types):
            expected = " or ".join(t.__name__ for t in param.types)
            raise ActionSyntaxError(f"{name}(): {param.name} must be {expected}")
        args[param.name] = value
    return args


def _check_values(name: str, args: dict[str, Any]) -> None:
    if "bid" in args:
        args["bid"] = str(args["bid"])
        if not _BID_RE.match(args["bid"]):
            raise ActionSyntaxError(f"{name}(): invalid bid {args['bid']!r}")
    if args.get("button", "left") not in _BUTTONS:
        raise ActionSyntaxError(f"{name}(): button must be one of {', '.join(_BUTTONS)}")
    for key in args.get("modifiers", ()):
        if key not in _MODIFIER_KEYS:
            raise ActionSyntaxError(f"{name}(): unknown modifier {key!r}")
    if isinstance(args.get("options"), list) and not all(
        isinstance(o, str) for o in args["options"]
    ):
        raise ActionSyntaxError(f"{name}(): options must be strings")
    if name == "noop" and not 0 <= args["wait_ms"] <= MAX_WAIT_MS:
        raise ActionSyntaxError(f"noop(): wait_ms must be between 0 and {MAX_WAIT_MS}")
