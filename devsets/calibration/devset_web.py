"""Corruptions and volatile variation of web observations (BrowserGym accessibility trees).

Used with :func:`devsets.calibration.devset.build_pairs` on two real
Chromium replays of ``suites/web/suite.jsonl``. Observations are the
header (``# url:``, ``# tab N:``) plus one node per line,
``[bid] role 'name', props``, indented by depth with tabs.
"""

from __future__ import annotations

import random
import re

from devsets.calibration.devset import Corruption
from fidelity.compare.normalize import normalize
from fidelity.trajectory import Observation, Step

INVENTED_LABELS = (
    "Export as PDF",
    "Recently viewed",
    "Manage subscriptions",
    "Advanced filters",
    "Compare editions",
)
INVENTED_ROWS = ("The Amber Compass 99", "Morning Tide 2", "Nordic Atlas 1911")
RENAMES = {
    "Sign in": "Log in",
    "Sign out": "Log out",
    "Search": "Find",
    "Next": "Next page",
    "Previous": "Back",
    "Home": "Start",
    "Catalogue": "Catalog",
    "Submit": "Send",
    "Save": "Save changes",
    "Borrow": "Reserve",
}
WRONG_PATHS = ("/dashboard", "/search?q=", "/account/settings", "/index.html")
_LINE_RE = re.compile(
    r"^(?P<indent>\t*)(?:\[(?P<bid>[^\]\s]+)\] )?(?P<role>[A-Za-z][\w-]*)"
    r"(?: '(?P<name>(?:[^'\\]|\\.)*)')?(?P<props>.*)$"
)
_BID_RE = re.compile(r"^(\t*)\[(\d+)\]", re.MULTILINE)
_NUMBER_RE = re.compile(r"(?<![\w.:/-])\d+(?:\.\d+)?(?![\w:/-]|\.\d)")
_URL_LINE_RE = re.compile(r"^# url: '(?P<url>[^']*)'$", re.MULTILINE)
_TAB_LINE_RE = re.compile(r"^(# tab \d+ \(active\): ')(?P<title>[^']*)'$", re.MULTILINE)
_CHECKED_RE = re.compile(r"^(\t*(?:\[\w+\] )?(?:checkbox|radio|switch) .*checked=)(true|false)")

Result = tuple[Observation, str | None] | None


def _lines(obs: Observation) -> list[str]:
    return obs.text.split("\n")


def _text(obs: Observation, lines: list[str]) -> Observation:
    return obs.model_copy(update={"text": "\n".join(lines)})


def _next_bid(text: str) -> int:
    return max((int(m[2]) for m in _BID_RE.finditer(text)), default=0) + 1


def invented_element(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A link, button or table row the page does not have, next to one of its kind."""
    lines = _lines(obs)
    found = [(i, m) for i, line in enumerate(lines) if (m := _LINE_RE.match(line))]
    kinds = [(i, m) for i, m in found if m["role"] in {"link", "button", "row", "listitem"}]
    if not kinds:
        return None
    index, match = rng.choice(kinds)
    indent, bid = match["indent"], _next_bid(obs.text)
    url = _URL_LINE_RE.search(obs.text)
    origin = re.sub(r"^(\w+://[^/]+).*$", r"\1", url["url"]) if url else "http://localhost:8000"
    if match["role"] in {"row", "listitem"}:
        label = rng.choice(INVENTED_ROWS)
        new = [f"{indent}[{bid}] {match['role']}", f"{indent}\t[{bid + 1}] cell '{label}'"]
    else:
        label = rng.choice(INVENTED_LABELS)
        slug = label.lower().replace(" ", "-")
        props = f", url='{origin}/{slug}'" if match["role"] == "link" else ""
        new = [f"{indent}[{bid}] {match['role']} '{label}'{props}"]
    return _text(obs, [*lines[: index + 1], *new, *lines[index + 1 :]]), label


def renamed_label(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A link, button or heading shown under another, plausible name."""
    lines = _lines(obs)
    roles = {"link", "button", "heading", "tab", "menuitem", "columnheader"}
    named = [(i, m) for i, line in enumerate(lines) if (m := _LINE_RE.match(line)) and m["name"]]
    named = [(i, m) for i, m in named if m["role"] in roles]
    if not named:
        return None
    index, match = rng.choice(named)
    name = match["name"]
    new = RENAMES.get(name) or _reworded(name, rng)
    lines[index] = lines[index].replace(f"'{name}'", f"'{new}'", 1)
    return _text(obs, lines), new


def _reworded(name: str, rng: random.Random) -> str:
    words = name.split()
    if len(words) > 1:
        i = rng.randrange(len(words))
        return " ".join(words[:i] + words[i + 1 :])
    return f"{name} {rng.choice(['details', 'list', 'overview'])}"


def dropped_subtree(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A node and everything under it missing (a row, a list item, a section)."""
    lines = _lines(obs)
    candidates = [
        i
        for i, line in enumerate(lines)
        if (m := _LINE_RE.match(line)) and len(m["indent"]) >= 2 and m["role"] != "StaticText"
    ]
    if not candidates:
        return None
    start = rng.choice(candidates)
    depth = len(lines[start]) - len(lines[start].lstrip("\t"))
    end = start + 1
    while end < len(lines) and lines[end].strip():
        if len(lines[end]) - len(lines[end].lstrip("\t")) <= depth:
            break
        end += 1
    return _text(obs, lines[:start] + lines[end:]), None


def changed_value(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A number in a node's name (a price, a count, a year, a page number) replaced by another.

    Numbers inside URLs, dates and times are left alone (ports and dates are volatile):
    a change the shared normalization would erase (``11 Apr 2022`` to ``11 Apr 4044``
    is a date either way) is not a corruption.
    """
    lines = _lines(obs)
    found = [
        (i, m, n)
        for i, line in enumerate(lines)
        if (m := _LINE_RE.match(line)) and m["name"]
        for n in _NUMBER_RE.finditer(m["name"])
    ]
    if not found:
        return None
    index, match, number = rng.choice(found)
    old = number.group()
    value = float(old)
    new_value = value + rng.choice([1, 2, 3, 10]) if value < 20 else value * 2
    new = f"{new_value:.{len(old.split('.')[1])}f}" if "." in old else str(int(new_value))
    name = match["name"]
    renamed = name[: number.start()] + new + name[number.end() :]
    if normalize(renamed)[0] == normalize(name)[0]:
        return None
    start, end = match.span("name")
    lines[index] = lines[index][:start] + renamed + lines[index][end:]
    return _text(obs, lines), new


def wrong_location(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """The page at another URL, or under another title (header and root node alike)."""
    url = _URL_LINE_RE.search(obs.text)
    if url is None:
        return None
    text = obs.text
    if rng.random() < 0.5:
        old = url["url"]
        new = re.sub(r"^(\w+://[^/]+).*$", r"\1", old) + rng.choice(WRONG_PATHS)
        if new == old:
            return None
        return obs.model_copy(update={"text": text.replace(f"'{old}'", f"'{new}'")}), new
    title = _TAB_LINE_RE.search(text)
    if title is None or not title["title"]:
        return None
    old = title["title"]
    new = f"{rng.choice(['Dashboard', 'Untitled', 'Results'])} · {old.split(' · ')[-1]}"
    return obs.model_copy(update={"text": text.replace(f"'{old}'", f"'{new}'")}), None


def stale_page(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """The page as it was before the action, as if the click or key press had done nothing."""
    *earlier, _current = history
    if not earlier or earlier[-1].observation is None:
        return None
    before = earlier[-1].observation
    if before.text == obs.text:
        return None
    return obs.model_copy(update={"text": before.text, "state": before.state}), None


def flipped_checkbox(obs: Observation, history: list[Step], rng: random.Random) -> Result:
    """A checkbox or radio button in the other state."""
    lines = _lines(obs)
    found = [(i, m) for i, line in enumerate(lines) if (m := _CHECKED_RE.match(line))]
    if not found:
        return None
    index, match = rng.choice(found)
    flipped = "false" if match[2] == "true" else "true"
    lines[index] = match[1] + flipped + lines[index][match.end() :]
    return _text(obs, lines), None


def vary_volatile(obs: Observation, rng: random.Random) -> Observation | None:
    """The same page reached another way: every element id (bid) renumbered by one offset.

    BrowserGym numbers nodes in document order, so another navigation path or
    an extra hidden node shifts them all; None when the page has no bids.
    """
    offset = rng.randint(3, 400)
    text = _BID_RE.sub(lambda m: f"{m[1]}[{int(m[2]) + offset}]", obs.text)
    return None if text == obs.text else obs.model_copy(update={"text": text})


WEB_CORRUPTIONS: dict[str, Corruption] = {
    "invented_element": invented_element,
    "renamed_label": renamed_label,
    "dropped_subtree": dropped_subtree,
    "changed_value": changed_value,
    "wrong_location": wrong_location,
    "stale_page": stale_page,
    "flipped_checkbox": flipped_checkbox,
}
"""Corruption kind -> corruption of a web observation (see :data:`devset.CORRUPTIONS`)."""
