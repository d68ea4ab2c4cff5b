"""System UI on an Android screen: the status bar and the keyboard, which are never compared.

A package says whose an element is (:data:`IGNORED_PACKAGES`, IME packages: :func:`ignored`).
When a recording has no package names (AndroidControl, AndroidWorld text), system UI is found
by position, class and description (:func:`system_ui`):

- the status bar's band: the full-width, text-free strip at the top of the
  screen that holds nothing clickable (the status bar's background, 63 px on
  a 2400 px AndroidWorld screen), else the top :data:`STATUS_BAR_SHARE` of the
  screen; an element wholly inside it is system UI unless it is clickable;
- a description or text that only system UI writes (``Gmail notification: 7
  new messages``, ``Phone three bars.``, ``Wifi signal full.``, ``Battery
  charging, 100 percent.``, ``No internet``…, see :data:`SYSTEM_UI_TEXT`) wholly
  inside the top :data:`SYSTEM_UI_SHARE` of the screen, or on an element
  without bounds (M3A's element list); a status-bar class
  (``…StatusBar…``, ``…systemui…``, ``BatteryMeterView``) anywhere;
- a keyboard's keys (class ``…Keyboard…``, or ten or more one-character
  elements) in the bottom half.

The screen's size is the box of the full-screen root when there is one (else
the largest coordinates). The status bar's changes (a clock, the signal bars, a
notification icon come or gone) are therefore volatile, while the same texts
inside an app are content: ``7 new messages`` or ``27%`` in an app's list are
compared like any label.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
"""A number in a bounds value."""


IGNORED_PACKAGES = ("com.android.systemui",)
"""Packages whose elements are never compared (status bar, notification shade)."""


_IME_HINTS = ("inputmethod", "honeyboard", "swiftkey", "gboard", ".ime", "keyboard")


STATUS_BAR_SHARE = 0.06
"""Without package names and without a status-bar strip to measure, the status bar's band is
this top share of the screen."""


SYSTEM_UI_SHARE = 0.07
"""An element wholly inside this top share of the screen with a description only system UI
writes (:data:`SYSTEM_UI_TEXT`) is system UI (a notification icon taller than the band)."""


STRIP_SHARE = (0.01, 0.07)
"""A full-width, text-free strip at the top, this many times the screen's height tall (and
holding nothing clickable), is the status bar's band (its background or container)."""


SYSTEM_UI_TEXT = re.compile(
    r"(?:.{1,80}\bnotifications?:.*"  # "Gmail notification: 7 new messages"
    r"|(?:phone|wi-?fi|mobile|cellular|signal|ethernet|data)\b[^.]{0,40}"
    r"(?:\bbars?|\bsignal\b[^.]{0,20}|\bfull|\bnone|\bconnected|\bdisconnected|\bno signal)"
    r"|(?:battery|charging)\b.{0,40}|no internet|no sim(?: card)?|airplane mode(?: on)?"
    r"|do not disturb(?: on)?|vibrate|ringer silent|silent mode|bluetooth(?: connected| on)?"
    r"|alarm set for .{1,40}|location (?:on|active)|data saver(?: on)?|hotspot(?: on)?|vpn(?: on)?"
    r"|\d+ more notifications?|notification dot)\.?",
    re.IGNORECASE,
)
"""Descriptions (or texts) that only the status bar writes: notification icons, signal,
battery, connectivity and mode icons. Matched on the whole description."""


_STATUS_CLASS = re.compile(r"statusbar|status_bar|systemui|batterymeter|notificationicon", re.I)


MIN_SCREEN_HEIGHT = 400
"""Position rules apply only when the elements span at least this many pixels."""


class Screen(NamedTuple):
    """What the boxes of one observation say about its screen."""

    width: float
    height: float
    band: float
    """The status bar's band: y from 0 to this is the status bar."""


def screen_of(
    items: list[dict[str, Any]], boxes: list[tuple[float, float, float, float] | None]
) -> Screen | None:
    """The screen of an element list (None below :data:`MIN_SCREEN_HEIGHT`).

    Its size is the box of a root element at the origin (the full-screen window) when
    there is one, else the largest coordinates. The band is the full-width, text-free
    strip at the top (see :data:`STRIP_SHARE`: the status bar's background) when there is
    one and nothing clickable lies inside it (else it is an app's own bar, drawn where an
    immersive app has no status bar), otherwise :data:`STATUS_BAR_SHARE` of the height.
    """
    found = [b for b in boxes if b is not None]
    if not found:
        return None
    roots = [b for b in found if b[0] <= 0 and b[1] <= 0 and b[3] - b[1] >= MIN_SCREEN_HEIGHT]
    width = max(b[2] for b in (roots or found))
    height = max(b[3] for b in (roots or found))
    if height < MIN_SCREEN_HEIGHT or width <= 0:
        return None
    low, high = STRIP_SHARE[0] * height, STRIP_SHARE[1] * height
    strips = [
        b[3]
        for i, b in zip(items, boxes, strict=True)
        if b is not None
        and b[1] <= 0
        and b[0] <= 0.02 * width
        and b[2] >= 0.9 * width
        and low <= b[3] <= high
        and not field_text(i.get("text")).strip()
        and not field_text(i.get("content_description")).strip()
    ]
    band = max(strips) if strips else STATUS_BAR_SHARE * height
    if strips and any(
        b is not None and b[3] <= band + 2 and flag_set(i, "clickable") and not _says_system(i)
        for i, b in zip(items, boxes, strict=True)
    ):
        band = STATUS_BAR_SHARE * height
    return Screen(width, height, band)


def system_ui(items: list[dict[str, Any]]) -> list[bool]:
    """Per element: is it status bar or keyboard, judged by position, class and description
    when no package says so (see the module doc)."""
    boxes = [rounded_box(i.get("bounds")) for i in items]
    screen = screen_of(items, boxes)
    height = screen.height if screen is not None else 0.0
    keys = [
        b is not None and b[1] >= height / 2 and len(field_text(i.get("text")).strip()) == 1
        for i, b in zip(items, boxes, strict=True)
    ]
    keyboard = screen is not None and sum(keys) >= 10
    marks = []
    for item, box, key in zip(items, boxes, keys, strict=True):
        if item.get("package") and item.get("package") not in {"None", "null"}:
            marks.append(False)  # a package says whose it is (see ignored)
            continue
        cls = field_text(item.get("class"))
        says = _says_system(item)
        if _STATUS_CLASS.search(cls) is not None:
            marks.append(True)
        elif box is None or screen is None:
            marks.append(box is None and says)
        else:
            top = box[3] <= screen.band + 2 and (says or not flag_set(item, "clickable"))
            named = says and box[3] <= SYSTEM_UI_SHARE * screen.height
            lower = box[1] >= screen.height / 2
            keyboard_class = "keyboard" in cls.lower()
            marks.append(top or named or (keyboard and key) or (keyboard_class and lower))
    return marks


chrome_by_position = system_ui
"""The former name of :func:`system_ui`."""


def _says_system(item: dict[str, Any]) -> bool:
    """Whether the element's description (or text) is one only system UI writes."""
    for field in ("content_description", "text"):
        value = field_text(item.get(field)).strip()
        if value and SYSTEM_UI_TEXT.fullmatch(value) is not None:
            return True
    return False


def flag_set(item: dict[str, Any], name: str) -> bool:
    """Whether the element's flag *name* is true (``True``, ``true``, ``1``)."""
    return str(item.get(name, "")).lower() in {"true", "1"}


def rounded_box(value: Any) -> tuple[float, float, float, float] | None:
    """``(x_min, y_min, x_max, y_max)`` of a bounds value, or None without four numbers.

    ``[x1,y1][x2,y2]`` and lists give corners in that order; AndroidWorld's
    ``BoundingBox(x_min=…, x_max=…, y_min=…, y_max=…)`` is read by name.
    """
    if isinstance(value, dict) and "x_min" in value:
        value = " ".join(f"{k}={value.get(k)}" for k in ("x_min", "x_max", "y_min", "y_max"))
    text = str(value or "")
    if "x_min" in text:
        named = dict(re.findall(r"(\w_m\w\w)=(-?\d+(?:\.\d+)?)", text))
        try:
            return tuple(float(named[k]) for k in ("x_min", "y_min", "x_max", "y_max"))  # type: ignore[return-value]
        except KeyError:
            return None
    if isinstance(value, dict | list):
        text = " ".join(str(v) for v in (value.values() if isinstance(value, dict) else value))
    numbers = [float(n) for n in NUMBER_RE.findall(text)]
    return (numbers[0], numbers[1], numbers[2], numbers[3]) if len(numbers) == 4 else None


def ignored(item: dict[str, Any]) -> bool:
    """True for status-bar and keyboard elements."""
    package = field_text(item.get("package"))
    resource = field_text(item.get("resource_id"))
    owner = package or resource.split(":", 1)[0]
    if item.get("chrome") is True:
        return True
    return owner.startswith(IGNORED_PACKAGES) or any(h in owner.lower() for h in _IME_HINTS)


def field_text(value: Any) -> str:
    """A field's value as text; None and the strings ``None``/``null`` are empty."""
    return "" if value is None or value in {"None", "null"} else str(value)
