"""What a dataset's Dockerfile makes the Docker daemon fetch when it is built.

A Terminal-Bench task folder comes with a dataset, so its Dockerfile is data: building it
must not pull an image the operator did not allow, nor fetch from a host. The classic
builder (the one the Docker SDK's ``images.build`` drives) pulls, on the daemon's side and
whatever the build's ``network_mode``,

- the image of every ``FROM`` that is not an earlier stage or ``scratch``;
- the image of every ``COPY --from`` / ``ADD --from`` that is not a stage;
- and it downloads every URL an ``ADD`` names.

:func:`reach` reads them out of the Dockerfile's text as the builder parses it (parser
directives, line continuations with the escape character, comments, ``ARG`` before the
first ``FROM`` with the build's arguments, ``ARG`` and ``ENV`` of a stage for ``ADD``
sources); a name that still holds a variable fidelity cannot resolve is reported as such, so
the caller can refuse it rather than guess.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

_DIRECTIVE = re.compile(r"#\s*([A-Za-z]+)\s*=\s*(\S*)\s*$")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://|git@)")
_VARIABLE = re.compile(r"\$\{(\w+)(?:(:?[-+])([^}]*))?\}|\$(\w+)")


@dataclass
class Reach:
    """What building a Dockerfile fetches: images it pulls, URLs it downloads, and names
    fidelity could not resolve (a variable with no value it knows)."""

    images: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)


def instructions(text: str) -> Iterator[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of each instruction of a Dockerfile, as the builder joins
    continued lines (escape character from the ``# escape=`` directive) and skips comments."""
    lines = text.splitlines()
    escape = "\\"
    for line in lines:  # parser directives: only at the very top
        match = _DIRECTIVE.match(line.strip())
        if not match:
            break
        if match.group(1).lower() == "escape" and match.group(2) in ("\\", "`"):
            escape = match.group(2)
    continued = re.compile(re.escape(escape) + r"[ \t]*$")
    current: str | None = None
    for raw in lines:
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue  # blank lines and comments, also inside a continued instruction
        end = continued.search(raw)
        body = raw[: end.start()] if end else raw
        current = body if current is None else current + body
        if end:
            continue
        yield _split(current)
        current = None
    if current is not None and current.strip():
        yield _split(current)


def _split(line: str) -> tuple[str, str]:
    parts = line.strip().split(None, 1)
    return parts[0].upper(), parts[1] if len(parts) > 1 else ""


def substitute(value: str, variables: Mapping[str, str | None]) -> str:
    """*value* with ``$NAME``, ``${NAME}``, ``${NAME:-word}`` and ``${NAME:+word}`` replaced
    as the builder replaces them (an unset name is empty); ``$`` stays where a form is not
    one of these, so the caller sees it unresolved."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(4)
        current = variables.get(name)
        operator, word = match.group(2), match.group(3) or ""
        if operator in (":-", "-"):
            unset = current is None or (operator == ":-" and current == "")
            return word if unset else str(current)
        if operator in (":+", "+"):
            unset = current is None or (operator == ":+" and current == "")
            return "" if unset else word
        return current or ""

    return _VARIABLE.sub(one, value)


def _flags(arguments: str) -> tuple[dict[str, str], str]:
    """The leading ``--name=value`` flags of an instruction's *arguments*, and the rest."""
    flags: dict[str, str] = {}
    rest = arguments.strip()
    while rest.startswith("--"):
        token, _, rest = rest.partition(" ")
        name, _, value = token[2:].partition("=")
        flags[name.lower()] = value
        rest = rest.strip()
    return flags, rest


def _assignments(arguments: str, env: bool = False) -> Iterator[tuple[str, str | None]]:
    """``(name, value or None)`` of an ``ARG`` (``name`` or ``name=value`` each) or an
    ``ENV`` (*env*: ``name=value`` pairs, or the legacy ``ENV name value words``)."""
    try:
        tokens = shlex.split(arguments, posix=True)
    except ValueError:
        return
    if env and len(tokens) >= 2 and "=" not in tokens[0]:  # ENV NAME value words
        yield tokens[0], " ".join(tokens[1:])
        return
    for token in tokens:
        name, equals, value = token.partition("=")
        yield name, value if equals else None


def reach(text: str, build_args: Mapping[str, str]) -> Reach:
    """What building the Dockerfile *text* with *build_args* pulls and downloads."""
    found = Reach()
    arguments: dict[str, str | None] = {}  # ARGs before the first FROM, as the build sets them
    stages: list[str] = []
    scope: dict[str, str | None] = {}  # a stage's ARG and ENV values (for ADD sources)
    started = False
    for instruction, rest in instructions(text):
        if instruction == "ARG":
            for name, default in _assignments(rest):
                value = build_args.get(name, default)
                if not started:
                    arguments[name] = value
                else:
                    known = arguments.get(name) if default is None else default
                    scope[name] = build_args.get(name, known)
        elif instruction == "ENV" and started:
            for name, value in _assignments(rest, env=True):
                scope[name] = substitute(value or "", scope)
        elif instruction == "FROM":
            started = True
            _, words = _flags(rest)
            tokens = words.split()
            if not tokens:
                continue
            image = substitute(tokens[0], arguments)
            name = tokens[2].lower() if len(tokens) >= 3 and tokens[1].lower() == "as" else ""
            scope = {}
            if "$" in image or not image:
                found.unresolved.append(f"FROM {tokens[0]}")
            elif image.lower() != "scratch" and image.lower() not in stages:
                found.images.append(image)
            stages.append(name)
        elif instruction in ("COPY", "ADD"):
            flags, words = _flags(rest)
            source = flags.get("from")
            if source is not None:
                resolved = substitute(source, {**arguments, **scope})
                if "$" in resolved or not resolved:
                    found.unresolved.append(f"{instruction} --from={source}")
                elif not resolved.isdigit() and resolved.lower() not in stages:
                    found.images.append(resolved)
            if instruction == "ADD" and source is None:
                for item in _sources(words):
                    resolved = substitute(item, scope)
                    if "$" in resolved:
                        found.unresolved.append(f"ADD {item}")
                    elif _URL.match(resolved):
                        found.urls.append(resolved)
    return found


def _sources(words: str) -> list[str]:
    """The sources of an ``ADD`` (every argument but the destination), shell or JSON form."""
    if words.startswith("["):
        try:
            parsed = json.loads(words)
        except ValueError:
            parsed = None
        if isinstance(parsed, list) and all(isinstance(item, str) for item in parsed):
            return [str(item) for item in parsed[:-1]]
    return words.split()[:-1]
