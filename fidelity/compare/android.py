"""The android comparator: lists of UI elements.

Accepted forms (auto-detected, per observation):

- AndroidWorld's text form, one element per line:
  ``UI element 3: UIElement(text='Wi-Fi', content_description=None,
  class_name='android.widget.TextView', bbox=BoundingBox(x_min=42, x_max=300, y_min=400,
  y_max=460), ..., is_clickable=True, package_name='com.android.settings',
  resource_name='android:id/title', ...)``;
- ``uiautomator dump`` XML ``<node index="0" text="…" resource-id="…" class="…"
  package="…" content-desc="…" clickable="true" … bounds="[0,63][1080,210]"/>``;
- M3A's element list (AndroidWorld's M3A agent prompt), one element per
  line: ``UI element 3: {"index": 3, "text": "Wi-Fi", "content_description":
  "Wi-Fi", "is_clickable": True, ...}`` (no class, resource id or bounds; a
  text holding a line break continues on the next line);
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

Element indices are ignored (like web bids). Elements of the status bar and of the keyboard
are dropped, counted as the ``android_chrome`` normalization: by package when a recording
names one, else by position, class and description (:mod:`fidelity.compare.android_system_ui`).
An element's key is class + resource id + text (the content description when there is no
text).

Bounds: AndroidWorld's ``bbox_pixels`` is read in preference to ``bbox``
(normalized, or None); two matched elements' bounds agree when no coordinate
moved by more than :data:`BOUNDS_TOLERANCE` px (a second real run settles a
list a few pixels off).

Volatile values: an element whose whole text is a clock time (``10:41``,
``7:05 PM``) or names a battery level (``Battery 80 percent``) is keyed by its
kind (``<clock>``, ``<battery>``, counted as the ``android_volatile``
normalization), so a clock in an app (an alarm list, a world clock) that moved
on does not name an omitted and a hallucinated entity; the changed value weighs
in ``value_agreement`` like bounds and flags do. Any other text change (a
button label, a count) changes the key and is named.

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

from fidelity.compare.android_system_ui import (
    NUMBER_RE,
    field_text,
    ignored,
    rounded_box,
    system_ui,
)
from fidelity.compare.base import CompareContext, StepComparison
from fidelity.compare.normalize import Normalizer
from fidelity.compare.structured import ItemComparator, listed, matched_pairs, overlap, verdict
from fidelity.compare.terminal import context_texts
from fidelity.trajectory import Observation

BOUNDS_STEP = 10
"""Bounds are rounded to this many pixels by :func:`rounded_bounds`."""

BOUNDS_TOLERANCE = 10
"""Two matched elements' bounds agree when no coordinate moved by more than this many px."""


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
_M3A_START_RE = re.compile(r"^[ \t]*UI element \d+: \{", re.MULTILINE)
_M3A_KEY_RE = re.compile(r"(?:^|, )\"(\w+)\": ")
_BAR_LINE_RE = re.compile(
    r"^\s*\[\s*\d+\]\s*\|\s*(?P<cls>[^|]*?)\s*\|(?P<fields>[^|]*)\|\s*bounds=(?P<bounds>[^|]*?)\s*"
    r"(?:\|(?P<flags>[^|]*))?$",
    re.MULTILINE,
)
_BAR_FIELD_RE = re.compile(r"(\w+)=(.*?)(?=\s+\w+=|\s*$)")


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
            r"(?:battery\s*(?:level\s*)?(?:charging,?\s*)?\d{1,3}\s?(?:%|percent)"
            r"|\d{1,3}\s?(?:%|percent)\s*battery)(?:,?\s*charging)?\.?",
            re.IGNORECASE,
        ),
    ),
)
"""Whole texts that are volatile wherever they appear: a clock time, a level the word
battery names. A bare percentage or count (``27%``, ``7 new messages``) is content inside an
app; in the status bar it is dropped with the rest of the system UI."""

_IS_SPELLING = "\x00is_"
"""Set on a canonical item whose flags were written ``is_checked`` (not a field name)."""

MAX_MISMATCHES = 5


class Element(NamedTuple):
    """One UI element after normalization."""

    key: str
    label: str
    resource: str
    bounds: tuple[float, ...]
    flags: frozenset[str]
    value: str = ""
    """The shown text when the key holds only its volatile kind (``<clock>``…), else empty."""
    written: str = ""
    """The text as the observation wrote it, when normalization changed it (else empty)."""
    description: str = ""
    """The content description, when the element also has a text that differs from it."""
    box: str = ""
    """The bounds as the observation wrote them (``BoundingBox(x_min=…)``, ``[0,63][1080,210]``)."""
    spelling: str = ""
    """``is_`` when the observation writes flags as AndroidWorld and M3A do (``is_checked``)."""


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
    if _M3A_START_RE.search(text) is not None:
        return m3a_elements(text)
    return [
        _canonical(_pairs(line))
        for line in text.split("\n")
        if ("class" in line or "UIElement(" in line) and "=" in line
    ]


def m3a_elements(text: str) -> list[dict[str, Any]]:
    """Elements of M3A's list, ``UI element 3: {"index": 3, "text": "Wi-Fi", ...}``.

    M3A writes the values without escaping (a text may hold a quote or a line break),
    so a value runs from its key to the next ``, "key": `` or to the closing brace.
    """
    starts = [m.end() for m in _M3A_START_RE.finditer(text)]
    items = []
    for start, end in zip(starts, [*starts[1:], len(text)], strict=True):
        chunk = text[start:end]
        body = chunk[: chunk.rfind("}")] if "}" in chunk else chunk
        keys = list(_M3A_KEY_RE.finditer(body))
        item: dict[str, Any] = {}
        for key, following in zip(keys, [*keys[1:], None], strict=False):  # no keys: no field
            raw = body[key.end() : following.start() if following else len(body)].strip()
            if len(raw) >= 2 and raw[0] == raw[-1] == '"':
                raw = raw[1:-1]
            item[key[1]] = raw
        item.pop("index", None)
        items.append(_canonical(item))
    return items


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


def _pairs(text: str) -> dict[str, Any]:
    return {
        m[1]: next((g for g in m.groups()[1:] if g is not None), "")
        for m in _PAIR_RE.finditer(text)
    }


def _canonical(item: dict[str, Any]) -> dict[str, Any]:
    """*item* with AndroidWorld/uiautomator/JSON field names mapped to one spelling.

    Of AndroidWorld's two boxes, ``bbox_pixels`` stands over ``bbox`` (normalized to the
    screen, or None); a box that is None never replaces one that is not."""
    out: dict[str, Any] = {}
    for key, value in item.items():
        if key.startswith("is_"):
            key = key[3:]
            out[_IS_SPELLING] = True
        name = _ALIASES.get(key, key)
        if (
            name == "bounds"
            and "bounds" in out
            and (field_text(value) == "" or (key == "bbox" and field_text(out["bounds"]) != ""))
        ):
            continue
        out[name] = value
    return out


def rounded_bounds(value: Any) -> tuple[int, ...]:
    """The numbers of a bounds value, each rounded to :data:`BOUNDS_STEP` px."""
    if isinstance(value, dict):
        value = " ".join(str(v) for v in value.values())
    elif isinstance(value, list):
        value = " ".join(str(v) for v in value)
    numbers = NUMBER_RE.findall(str(value or ""))
    return tuple(round(float(n) / BOUNDS_STEP) * BOUNDS_STEP for n in numbers)


def to_element(item: dict[str, Any], normalizer: Normalizer, counts: dict[str, int]) -> Element:
    """An :class:`Element` from a canonical dictionary; normalizations are added to *counts*."""
    text, description = field_text(item.get("text")), field_text(item.get("content_description"))
    written = text or description
    shown_text, fired = normalizer.cached(written)
    for name, n in fired.items():
        counts[name] = counts.get(name, 0) + n
    kind = volatile_kind(shown_text)
    value = ""
    if kind is not None:
        counts["android_volatile"] = counts.get("android_volatile", 0) + 1
        shown_text, value = f"<{kind}>", shown_text
    cls = field_text(item.get("class")).rsplit(".", 1)[-1]
    resource = field_text(item.get("resource_id"))
    flags = frozenset(
        f.replace("-", "_") for f in _FLAGS if str(item.get(f, "")).lower() in {"true", "1"}
    )
    box = item.get("bounds")
    return Element(
        f"{cls}|{resource}|{shown_text}",
        f"{cls}:{shown_text}",
        resource,
        _bounds(box),
        flags,
        value,
        written if written.split() != shown_text.split() else "",
        description.strip() if text and description.strip() != text.strip() else "",
        box if isinstance(box, str) else "" if box is None else _written(box),
        "is_" if item.get(_IS_SPELLING) else "",
    )


def _written(value: Any) -> str:
    """A JSON bounds value (a list, an object) as JSON writes it."""
    try:
        return json.dumps(value)
    except (TypeError, ValueError, RecursionError):  # not JSON, or nested past the encoder
        return ""


def _bounds(value: Any) -> tuple[float, ...]:
    """The box of a bounds value as ``(x_min, y_min, x_max, y_max)``, or its numbers."""
    box = rounded_box(value)
    if box is not None:
        return box
    if isinstance(value, dict):
        value = " ".join(str(v) for v in value.values())
    elif isinstance(value, list):
        value = " ".join(str(v) for v in value)
    return tuple(float(n) for n in NUMBER_RE.findall(str(value or "")))


def bounds_agree(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    """Whether two boxes are the same but for a move of at most :data:`BOUNDS_TOLERANCE` px."""
    if len(a) != len(b):
        return False
    return all(abs(x - y) <= BOUNDS_TOLERANCE for x, y in zip(a, b, strict=True))


def volatile_kind(text: str) -> str | None:
    """``clock`` or ``battery`` when the whole *text* is such a value, else None."""
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
        positional = system_ui(items)
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
        pairs = matched_pairs(real, sim)
        bounds, flags, values, mismatches = _matched(real, sim, pairs)
        real_e, sim_e = element_entities(real), element_entities(sim)
        result = verdict(
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
        return named_details(result, real, sim, pairs, context) if result.drift else result


def named_details(
    result: StepComparison,
    real: list[Element],
    sim: list[Element],
    pairs: list[tuple[Element, Element]],
    context: CompareContext,
) -> StepComparison:
    """A drifted step's entities at the granularity a labeller names them.

    The verdict is decided before (and is never changed here): by the score, a flag
    mismatch, or an element one side lacks. Then, as the rubric's labellers list what
    they copy from the screens:

    - an invented or omitted element whose text normalization rewrote (a clock time, a
      duration) is named as written (``ui::16:00``, not ``ui::<clock>``), and its content
      description is named too when it has a text as well (``ui::Predicted app: Gmail``
      beside ``ui::Gmail``);
    - a matched element whose flags differ names each changed flag as each side writes it
      (``flag::Sun, Oct 15:is_checked=True``);
    - a matched element whose box moved past :data:`BOUNDS_TOLERANCE` names the box as
      each side writes it (``bounds::Task:BoundingBox(x_min=912, …)``), a sim box the model
      had been shown going to ``stale``; the reasons say how many moved.

    A step that does not drift names none of these (a faithful step names nothing)."""
    hallucinations = _as_written(result.hallucinations, sim)
    omissions = _as_written(result.omissions, real)
    stale = list(result.stale)
    moved = 0
    seen: list[str] | None = None  # what the model was shown, read once a box has moved
    for a, b in pairs:
        for flag in sorted(a.flags ^ b.flags):
            hallucinations.append(f"flag:{_shown(b)}:{_spelt(b, flag, flag in b.flags)}")
            omissions.append(f"flag:{_shown(a)}:{_spelt(a, flag, flag in a.flags)}")
        if not bounds_agree(a.bounds, b.bounds):
            moved += 1
            if b.box and a.box:
                if seen is None:
                    seen = [text for text, _ in context_texts(context)]
                entity = f"bounds:{_shown(b)}:{b.box}"
                (stale if any(b.box in text for text in seen) else hallucinations).append(entity)
                omissions.append(f"bounds:{_shown(a)}:{a.box}")
    hallucinations = list(dict.fromkeys(hallucinations))
    omissions = list(dict.fromkeys(omissions))
    reasons = [r for r in result.reasons if not r.startswith(("hallucinated ", "omitted "))]
    reasons += [f"bounds moved: {moved} of {len(pairs)}"] if moved else []
    # flags and boxes have their reasons (``flags …``, ``bounds moved``): only elements listed
    reasons += listed("hallucinated", [e for e in hallucinations if not e.startswith(_DETAILS)])
    reasons += listed("omitted", [e for e in omissions if not e.startswith(_DETAILS)])
    return result.model_copy(
        update={
            "hallucinations": hallucinations,
            "omissions": omissions,
            "stale": list(dict.fromkeys(stale)),
            "reasons": reasons,
        }
    )


_DETAILS = ("flag:", "bounds:")


def _as_written(entities: list[str], side: list[Element]) -> list[str]:
    """*entities* with each ``ui:`` label of *side* as written: the text normalization
    rewrote replaced by what was written, then the descriptions of elements with a text."""
    labels = {e[3:] for e in entities if e.startswith("ui:")}
    written: dict[str, list[str]] = {}
    descriptions = []
    for element in side:
        if element.label not in labels:
            continue
        cls = element.label.partition(":")[0]
        if element.written:
            written.setdefault(element.label, []).append(f"ui:{_shown(element)}")
        if element.description:
            descriptions.append(f"ui:{cls}:{element.description}")
    out = []
    for entity in entities:
        out.extend(written.get(entity[3:], [entity]) if entity.startswith("ui:") else [entity])
    return [*out, *descriptions]


def _shown(element: Element) -> str:
    """*element*'s label with its text as written (``:16:00``, not ``:<clock>``)."""
    if not element.written:
        return element.label
    return f"{element.label.partition(':')[0]}:{element.written}"


def _spelt(element: Element, flag: str, value: bool) -> str:
    """A flag as *element*'s observation writes it: ``is_checked=True`` or ``checked=true``."""
    if element.spelling:
        return f"{element.spelling}{flag}={value}"
    return f"{flag}={str(value).lower()}"


def _matched(
    real: list[Element], sim: list[Element], pairs: list[tuple[Element, Element]]
) -> tuple[float, float, float, list[str]]:
    """Bounds, flag and volatile-value agreement over matched elements (by key, then by order
    among elements sharing one: the checkboxes of a list), and reasons for flag changes."""
    if not pairs:
        return 1.0, 1.0, 1.0, []
    moved = sum(not bounds_agree(a.bounds, b.bounds) for a, b in pairs)
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
