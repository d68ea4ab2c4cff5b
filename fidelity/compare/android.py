"""The android comparator: lists of UI elements.

Accepted forms (auto-detected, per observation):

- AndroidWorld's text form, one element per line:
  ``UI element 3: UIElement(text='Wi-Fi', content_description=None,
  class_name='android.widget.TextView', bbox=BoundingBox(x_min=42, x_max=300, y_min=400,
  y_max=460), ..., is_clickable=True, package_name='com.android.settings',
  resource_name='android:id/title', ...)``;
- ``uiautomator dump`` XML ``<node index="0" text="…" resource-id="…" class="…"
  package="…" content-desc="…" clickable="true" … bounds="[0,63][1080,210]"/>``;
- a JSON list of element objects (``class``/``class_name``, ``text``,
  ``content_description``/``content-desc``, ``resource_id``/``resource-id``/
  ``resource_name``, ``package``/``package_name``, ``bounds``/``bbox``, flags);
- AgentWorldBench's element list, one element per line:
  ``[ 3] | android.widget.TextView | text=Wi-Fi res=com.android.settings:id/title |
  bounds=[42,400][300,460] | clickable,enabled``;
- AgentWorldBench's ``**Current Phone State:**`` layout: a bullet list
  (``• **App:** Settings (com.android.settings)``, ``- Keyboard: Hidden``…)
  then a numbered element list, one element per line, nested by indentation
  (``3. TextView: "android:id/title", "Wi-Fi" - (42,400,300,460)``: class, the
  quoted resource id and text, bounds as ``(x1,y1,x2,y2)``); each bullet is a
  ``PhoneState`` element named by its label, except the keyboard's, which is
  chrome;
- AgentWorldBench's DroidBot ``Accessibility Tree:`` layout: after that header,
  one element per line, either DroidBot-GPT's HTML-like form
  (``<button id=3 checked=True>Wi-Fi</button>``: the tag is the class, the
  inner text the text, attributes as fields) or a bracketed index, a class and
  a quoted text (``[3] Button 'Wi-Fi' clickable [42,400][300,460]``), with
  optional ``key=value`` fields, flag words and bounds.

The last two layouts are read as REFERENCE describes them; no recording of
either is at hand, so their details (bullet markers, quoting) are read
leniently.

Element indices are ignored (like web bids). Elements of the status bar
(package ``com.android.systemui``) and of the keyboard (IME packages) are
dropped, counted as the ``android_chrome`` normalization. When a recording
has no package names (AndroidControl, AndroidWorld text), they are found by
role and position instead: an element wholly inside the top
:data:`STATUS_BAR_SHARE` of the screen (the largest ``y`` of the
observation), and a keyboard's keys (class ``…Keyboard…``, or ten or more
one-character elements) in its bottom half. An element's key is
class + resource id + text (the content description when there is no text);
bounds are rounded to :data:`BOUNDS_STEP` px.

Volatile values: an element whose whole text is a clock time (``10:41``,
``7:05 PM``), a battery level (``80%``, ``Battery 80 percent``) or a
notification/message count (``3 notifications``) is keyed by its kind
(``<clock>``, ``<battery>``, ``<count>``, counted as the ``android_volatile``
normalization), so a status bar the position rules miss does not turn a
one-minute clock change into an omitted and a hallucinated entity; the
changed value weighs in ``value_agreement`` like bounds and flags do. Any
other text change (a button label) changes the key and is named.

Metrics: ``element_precision``/``element_recall``/``element_f1`` over keys,
``bounds_agreement``, ``flag_agreement`` and ``value_agreement`` over matched
keys; ``score`` = 0.6 × f1 + 0.15 × bounds + 0.2 × flags + 0.05 × values (volatile
values alone never bring it under the threshold; with other differences they
can). Fixed threshold 0.9 (no calibration
data for this domain) plus the shared structured rule; a matched element
whose flags differ (``checked``, ``enabled``…) is a mismatch. Entities:
``ui:<Class>:<text or description>`` and ``resource:<resource id>``.
Text that parses on neither side is compared as terminal text.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any, NamedTuple

from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.normalize import Normalizer
from fidelity.compare.structured import ItemComparator, matched_pairs, overlap, verdict
from fidelity.model import Observation

BOUNDS_STEP = 10
"""Bounds are rounded to this many pixels before comparing."""

IGNORED_PACKAGES = ("com.android.systemui",)
"""Packages whose elements are never compared (status bar, notification shade)."""

_IME_HINTS = ("inputmethod", "honeyboard", "swiftkey", "gboard", ".ime", "keyboard")
_FLAGS = (
    "checkable",
    "checked",
    "clickable",
    "enabled",
    "focusable",
    "focused",
    "scrollable",
    "long_clickable",
    "long-clickable",
    "password",
    "selected",
    "editable",
)
_ALIASES = {
    "class_name": "class",
    "content-desc": "content_description",
    "content_desc": "content_description",
    "resource-id": "resource_id",
    "resource_name": "resource_id",
    "package_name": "package",
    "bbox": "bounds",
    "bbox_pixels": "bounds",
}
_PAIR_RE = re.compile(
    r"(\w[\w-]*)=(?:'((?:[^'\\]|\\.)*)'|\"([^\"]*)\"|(BoundingBox\([^)]*\))|([^,()\s]+))"
)
_XML_NODE_RE = re.compile(r"<node\b([^>]*)>")
_BAR_LINE_RE = re.compile(
    r"^\s*\[\s*\d+\]\s*\|\s*(?P<cls>[^|]*?)\s*\|(?P<fields>[^|]*)\|\s*bounds=(?P<bounds>[^|]*?)\s*"
    r"(?:\|(?P<flags>[^|]*))?$",
    re.MULTILINE,
)
_BAR_FIELD_RE = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")
STATUS_BAR_SHARE = 0.06
"""Without package names, elements wholly inside this top share of the screen are the status bar."""

_STATE_HEADER = "Current Phone State"
_BULLET_RE = re.compile(
    r"^\s*[•\-*]\s+(?:\*\*)?(?P<name>[^:*\n]+?)(?:\*\*)?\s*:\s*(?:\*\*)?\s*(?P<value>.*?)\s*$"
)
_NUMBERED_RE = re.compile(r"^\s*\d+\.\s+(?P<body>.*?)\s*$")
_NUM = r"-?\d+(?:\.\d+)?"
_TRAIL_BOUNDS_RE = re.compile(
    r"\s*-\s*\(\s*(?P<b>" + _NUM + r"(?:\s*,\s*" + _NUM + r"){3})\s*\)\s*$"
)
_QUOTED_RE = re.compile(r"\"((?:[^\"\\]|\\.)*)\"|'((?:[^'\\]|\\.)*)'")
_GREEDY_QUOTED_RE = re.compile(r"(['\"])(.*)\1")
_CLASS_RE = re.compile(r"[\w.$]+")
_RESOURCE_RE = re.compile(r"^[\w.]+:id/\S+$")
_TREE_HEADER_RE = re.compile(r"Accessibility Tree:?(?:\*\*)?[ \t]*(?:\n|$)")
_TAG_RE = re.compile(
    r"<(?P<tag>[A-Za-z][\w.-]*)(?P<attrs>[^<>]*?)/?>(?:(?P<inner>[^<]*)</(?P=tag)>)?"
)
_INDEX_RE = re.compile(r"^\s*(?:\[\s*\d+\s*\]|\d+[.)]|id=\d+)")
_ANY_BOUNDS_RE = re.compile(
    r"(?:bounds=)?(?:\[\s*" + _NUM + r"\s*,\s*" + _NUM + r"\s*\]\s*){2}"
    r"|(?:bounds=)?\(\s*" + _NUM + r"(?:\s*,\s*" + _NUM + r"){3}\s*\)"
)
_VOLATILE = (
    ("clock", re.compile(r"\d{1,2}:[0-5]\d(?:\s?[ap]\.?m\.?)?", re.IGNORECASE)),
    (
        "battery",
        re.compile(
            r"(?:battery\s*)?(?:charging,?\s*)?\d{1,3}\s?(?:%|percent)(?:\s*battery)?"
            r"(?:,?\s*charging)?\.?",
            re.IGNORECASE,
        ),
    ),
    (
        "count",
        re.compile(
            r"\d+\s+(?:new\s+|unread\s+)?(?:notifications?|messages?|emails?|alerts?|updates?)\.?",
            re.IGNORECASE,
        ),
    ),
)

MIN_SCREEN_HEIGHT = 400
"""Position rules apply only when the elements span at least this many pixels."""
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
MAX_MISMATCHES = 5


class Element(NamedTuple):
    """One UI element after normalization."""

    key: str
    label: str
    resource: str
    bounds: tuple[int, ...]
    flags: frozenset[str]
    value: str = ""
    """The shown text when the key holds only its volatile kind (``<clock>``…), else empty."""


def raw_elements(text: str) -> list[dict[str, Any]]:
    """Element dictionaries of *text* in any accepted form (canonical field names)."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except (json.JSONDecodeError, RecursionError):  # malformed, or nested past the parser
            data = None
        if isinstance(data, list):
            return [_canonical(d) for d in data if isinstance(d, dict)]
    if "<node" in text:
        return [_canonical(_pairs(m[1])) for m in _XML_NODE_RE.finditer(text)]
    if "| bounds=" in text:
        return [_bar_element(m) for m in _BAR_LINE_RE.finditer(text)]
    if _STATE_HEADER in text:
        return state_elements(text)
    tree = _TREE_HEADER_RE.search(text)
    if tree is not None:
        return tree_elements(text[tree.end() :])
    return [
        _canonical(_pairs(line)) for line in text.split("\n") if "class" in line and "=" in line
    ]


def state_elements(text: str) -> list[dict[str, Any]]:
    """Elements of the ``**Current Phone State:**`` layout: state bullets, then numbered elements."""
    items: list[dict[str, Any]] = []
    for line in text.split("\n"):
        bullet = _BULLET_RE.match(line)
        numbered = _NUMBERED_RE.match(line) if bullet is None else None
        if bullet is not None:
            name = bullet["name"].strip()
            items.append(
                {
                    "class": "PhoneState",
                    "resource_id": f"state:{name.lower()}",
                    "text": bullet["value"],
                    "chrome": "keyboard" in name.lower(),
                }
            )
        elif numbered is not None:
            items.append(_numbered_element(numbered["body"]))
    return items


def _numbered_element(body: str) -> dict[str, Any]:
    """``TextView: "android:id/title", "Wi-Fi" - (42,400,300,460)`` as an element."""
    cls, colon, rest = body.partition(":")
    if not colon or not _CLASS_RE.fullmatch(cls.strip()):
        return _bracket_element(body)  # ``Button 'OK' clickable``, ``FrameLayout - (0,0,9,9)``
    item: dict[str, Any] = {"class": cls.strip()}
    bounds = _TRAIL_BOUNDS_RE.search(rest)
    if bounds is not None:
        item["bounds"] = bounds["b"]
        rest = rest[: bounds.start()]
    quoted = [a if a is not None else b for a, b in _QUOTED_RE.findall(rest)]
    if not quoted:
        item["text"] = rest.strip()
        return item
    resources = [q for q in quoted if _RESOURCE_RE.match(q)]
    if resources:
        item["resource_id"] = resources[0]
    item["text"] = ", ".join(q for q in quoted if q not in resources[:1])
    return item


def tree_elements(text: str) -> list[dict[str, Any]]:
    """Elements after a DroidBot ``Accessibility Tree:`` header (HTML-like or bracketed lines)."""
    items: list[dict[str, Any]] = []
    for line in text.split("\n"):
        if not line.strip():
            continue
        tags = list(_TAG_RE.finditer(line))
        if tags:
            items.extend(_tag_element(m) for m in tags)
        elif not line.lstrip().startswith("</"):
            item = _bracket_element(line)
            if item:
                items.append(item)
    return items


def _tag_element(match: re.Match[str]) -> dict[str, Any]:
    """``<button id=3 checked=True>Wi-Fi</button>`` as an element (the tag is the class)."""
    attrs = match["attrs"]
    item = _pairs(attrs)
    item.pop("id", None)
    item.update({w: "true" for w in re.findall(r"[\w-]+", _PAIR_RE.sub(" ", attrs)) if w in _FLAGS})
    item["class"] = match["tag"]
    inner = (match["inner"] or "").strip()
    if inner:
        item["text"] = inner
    return _canonical(item)


def _bracket_element(line: str) -> dict[str, Any]:
    """``[3] Button 'Wi-Fi' clickable [42,400][300,460]`` as an element ({} when nothing is there)."""
    body = _INDEX_RE.sub("", line, count=1).strip()
    item: dict[str, Any] = {}
    bounds = _ANY_BOUNDS_RE.search(body)
    if bounds is not None:
        item["bounds"] = bounds[0].removeprefix("bounds=").strip()
        body = (body[: bounds.start()] + " " + body[bounds.end() :]).strip()
    pairs = _pairs(body)
    pairs.pop("bounds", None)
    item.update(pairs)
    bare = _PAIR_RE.sub(" ", body)
    if "text" not in item:
        quoted = _GREEDY_QUOTED_RE.search(bare)
        if quoted is not None:
            item["text"] = quoted[2]
            bare = bare[: quoted.start()] + " " + bare[quoted.end() :]
    words = bare.split()
    if words and "class" not in item and "class_name" not in item:
        item["class"] = words[0]
    flags = re.split(r"[\s,]+", " ".join(words[1:]).lower())
    item.update({w: "true" for w in flags if w in _FLAGS})
    return _canonical(item) if item else {}


def _bar_element(match: re.Match[str]) -> dict[str, Any]:
    """One element of the ``[ i] | class | text=… res=… | bounds=… | flags`` layout."""
    item: dict[str, Any] = {"class": match["cls"], "bounds": match["bounds"]}
    for key, value in _BAR_FIELD_RE.findall(match["fields"].strip()):
        item[{"res": "resource_id", "desc": "content_description"}.get(key, key)] = value
    for flag in re.split(r"[,\s]+", match["flags"] or ""):
        if flag:
            item[flag] = "true"
    return _canonical(item)


def chrome_by_position(items: list[dict[str, Any]]) -> list[bool]:
    """Per element: is it status bar or keyboard, judged by position when no package says so."""
    boxes = [rounded_box(i.get("bounds")) for i in items]
    height = max((b[3] for b in boxes if b), default=0)
    if height < MIN_SCREEN_HEIGHT:
        return [False] * len(items)
    keys = [
        b is not None and b[1] >= height / 2 and len(_text(i.get("text")).strip()) == 1
        for i, b in zip(items, boxes, strict=True)
    ]
    keyboard = sum(keys) >= 10
    marks = []
    for item, box, key in zip(items, boxes, keys, strict=True):
        if item.get("package") or box is None:
            marks.append(False)
            continue
        top = box[3] <= height * STATUS_BAR_SHARE
        lower = box[1] >= height / 2
        keyboard_class = "keyboard" in _text(item.get("class")).lower()
        marks.append(top or (keyboard and key) or (keyboard_class and lower))
    return marks


def rounded_box(value: Any) -> tuple[float, float, float, float] | None:
    """``(x_min, y_min, x_max, y_max)`` of a bounds value, or None without four numbers.

    ``[x1,y1][x2,y2]`` and lists give corners in that order; AndroidWorld's
    ``BoundingBox(x_min=…, x_max=…, y_min=…, y_max=…)`` is read by name.
    """
    text = str(value or "")
    if "x_min" in text:
        named = dict(re.findall(r"(\w_m\w\w)=(-?\d+(?:\.\d+)?)", text))
        try:
            return tuple(float(named[k]) for k in ("x_min", "y_min", "x_max", "y_max"))  # type: ignore[return-value]
        except KeyError:
            return None
    if isinstance(value, dict | list):
        text = " ".join(str(v) for v in (value.values() if isinstance(value, dict) else value))
    numbers = [float(n) for n in _NUMBER_RE.findall(text)]
    return (numbers[0], numbers[1], numbers[2], numbers[3]) if len(numbers) == 4 else None


def _pairs(text: str) -> dict[str, Any]:
    return {
        m[1]: next((g for g in m.groups()[1:] if g is not None), "")
        for m in _PAIR_RE.finditer(text)
    }


def _canonical(item: dict[str, Any]) -> dict[str, Any]:
    """*item* with AndroidWorld/uiautomator/JSON field names mapped to one spelling."""
    out: dict[str, Any] = {}
    for key, value in item.items():
        key = key[3:] if key.startswith("is_") else key
        out[_ALIASES.get(key, key)] = value
    return out


def ignored(item: dict[str, Any]) -> bool:
    """True for status-bar and keyboard elements."""
    package = str(item.get("package") or "")
    resource = str(item.get("resource_id") or "")
    owner = package or resource.split(":", 1)[0]
    if item.get("chrome") is True:
        return True
    return owner.startswith(IGNORED_PACKAGES) or any(h in owner.lower() for h in _IME_HINTS)


def rounded_bounds(value: Any) -> tuple[int, ...]:
    """The numbers of a bounds value, each rounded to :data:`BOUNDS_STEP` px."""
    if isinstance(value, dict):
        value = " ".join(str(v) for v in value.values())
    elif isinstance(value, list):
        value = " ".join(str(v) for v in value)
    numbers = _NUMBER_RE.findall(str(value or ""))
    return tuple(round(float(n) / BOUNDS_STEP) * BOUNDS_STEP for n in numbers)


def _text(value: Any) -> str:
    return "" if value is None or value in {"None", "null"} else str(value)


def to_element(item: dict[str, Any], normalizer: Normalizer, counts: dict[str, int]) -> Element:
    """An :class:`Element` from a canonical dictionary; normalizations are added to *counts*."""
    shown_text = _text(item.get("text")) or _text(item.get("content_description"))
    shown_text, fired = normalizer.cached(shown_text)
    for name, n in fired.items():
        counts[name] = counts.get(name, 0) + n
    kind = volatile_kind(shown_text)
    value = ""
    if kind is not None:
        counts["android_volatile"] = counts.get("android_volatile", 0) + 1
        shown_text, value = f"<{kind}>", shown_text
    cls = _text(item.get("class")).rsplit(".", 1)[-1]
    resource = _text(item.get("resource_id"))
    flags = frozenset(
        f.replace("-", "_") for f in _FLAGS if str(item.get(f, "")).lower() in {"true", "1"}
    )
    return Element(
        f"{cls}|{resource}|{shown_text}",
        f"{cls}:{shown_text}",
        resource,
        rounded_bounds(item.get("bounds")),
        flags,
        value,
    )


def volatile_kind(text: str) -> str | None:
    """``clock``, ``battery`` or ``count`` when the whole *text* is such a value, else None."""
    stripped = text.strip()
    if not stripped or not stripped[0].isalnum():
        return None
    return next((kind for kind, rule in _VOLATILE if rule.fullmatch(stripped)), None)


def element_entities(elements: list[Element]) -> set[str]:
    """UI labels and resource ids of *elements*."""
    found = {f"ui:{e.label}" for e in elements if not e.label.endswith(":")}
    found.update(f"resource:{e.resource}" for e in elements if e.resource)
    return found


class AndroidComparator(ItemComparator[Element]):
    """Compares UI element lists (the ``android`` domain); fixed threshold, see the module doc."""

    domain = "android"

    def parse(self, observation: Observation) -> tuple[list[Element], dict[str, int]]:
        """The compared elements of *observation* and the normalizations that fired."""
        items = raw_elements(observation.text)
        positional = chrome_by_position(items)
        kept = [i for i, p in zip(items, positional, strict=True) if not (p or ignored(i))]
        counts: dict[str, int] = {}
        if len(kept) < len(items):
            counts["android_chrome"] = len(items) - len(kept)
        return [to_element(i, self.normalizer, counts) for i in kept], counts

    def item_entities(self, items: list[Element]) -> set[str]:
        """UI labels and resource ids of *items*."""
        return element_entities(items)

    def structured(
        self, real: list[Element], sim: list[Element], normalizations: dict[str, int]
    ) -> bool:
        """A side has elements, or had only status-bar/keyboard ones (then both agree on none)."""
        return bool(real or sim or normalizations)

    def score_items(
        self,
        real: list[Element],
        sim: list[Element],
        context: CompareContext,
        normalizations: dict[str, int],
    ) -> StepComparison:
        """Element overlap, rounded bounds and flags of matched elements, entities."""
        precision, recall, f1 = overlap(Counter(e.key for e in real), Counter(e.key for e in sim))
        bounds, flags, values, mismatches = _matched(real, sim)
        real_e, sim_e = element_entities(real), element_entities(sim)
        return verdict(
            score=0.6 * f1 + 0.15 * bounds + 0.2 * flags + 0.05 * values,
            threshold=self.threshold,
            metrics={
                "element_precision": precision,
                "element_recall": recall,
                "element_f1": f1,
                "bounds_agreement": bounds,
                "flag_agreement": flags,
                "value_agreement": values,
            },
            sim_only=sim_e - real_e,
            real_only=real_e - sim_e,
            context=context,
            normalizations=normalizations,
            mismatches=mismatches,
        )


def _matched(real: list[Element], sim: list[Element]) -> tuple[float, float, float, list[str]]:
    """Bounds, flag and volatile-value agreement over matched elements (by key, then by order
    among elements sharing one: the checkboxes of a list), and reasons for flag changes."""
    pairs = matched_pairs(real, sim)
    if not pairs:
        return 1.0, 1.0, 1.0, []
    moved = sum(a.bounds != b.bounds for a, b in pairs)
    flipped = [(a, b) for a, b in pairs if a.flags != b.flags]
    reasons = [
        f"flags {a.label}: {','.join(sorted(a.flags)) or '-'} != {','.join(sorted(b.flags)) or '-'}"
        for a, b in flipped[:MAX_MISMATCHES]
    ]
    return (
        1 - moved / len(pairs),
        1 - len(flipped) / len(pairs),
        _value_agreement(real, sim),
        reasons,
    )


def _value_agreement(real: list[Element], sim: list[Element]) -> float:
    """Share of matched volatile elements (same kind, class, resource) showing the same value."""
    real_values = Counter((e.key, e.value) for e in real if e.value)
    sim_values = Counter((e.key, e.value) for e in sim if e.value)
    real_keys = Counter(e.key for e in real if e.value)
    sim_keys = Counter(e.key for e in sim if e.value)
    pairs = sum((real_keys & sim_keys).values())
    if not pairs:
        return 1.0
    return min(1.0, sum((real_values & sim_values).values()) / pairs)
