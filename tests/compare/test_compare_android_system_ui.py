"""System UI without package names (AndroidWorld, AndroidControl): found by position, class and
description; its changes are volatile, the same texts inside an app are content; boxes moved
by a few pixels agree; M3A's element list is read."""

from __future__ import annotations

from fidelity.compare import AndroidComparator
from fidelity.compare.android import BOUNDS_TOLERANCE, m3a_elements, raw_elements
from fidelity.compare.android_system_ui import system_ui
from fidelity.compare.base import CompareContext
from fidelity.trajectory import AndroidAction, Observation

WAIT = CompareContext(action=AndroidAction(action_type="wait"))


def ui(
    index: int,
    box: tuple[int, int, int, int],
    text: str | None = None,
    desc: str | None = None,
    clickable: bool = False,
    checked: bool = False,
) -> str:
    """One line of AndroidWorld's element form without class, resource or package (as
    AndroidControl's screens and M3A's lists come), ``bbox`` None beside ``bbox_pixels``."""
    x0, y0, x1, y1 = box
    return (
        f"UI element {index}: UIElement(text={text!r}, content_description={desc!r}, "
        f"class_name=None, bbox=None, bbox_pixels=BoundingBox(x_min={x0}, x_max={x1}, "
        f"y_min={y0}, y_max={y1}), is_checked={checked}, is_clickable={clickable}, "
        "package_name=None, resource_name=None)"
    )


def phone(
    clock: str = "10:41",
    signal: str = "Wifi signal full.",
    notification: str | None = "Gmail notification: 7 new messages",
    inbox: str = "7 new messages",
    shift: int = 0,
    strip: bool = False,
) -> str:
    """A 1080x2400 screen: a status bar (clock, notification icon, signal, battery), then an
    app whose list shows a count of its own."""
    lines = [ui(0, (0, 0, 1080, 2400))]
    if strip:  # the status bar's background, as AndroidWorld's full forest has it
        lines.append(ui(1, (0, 0, 1080, 63)))
    lines += [
        ui(2, (21, 0, 119, 63), text=clock),
        ui(4, (866, 2, 970, 60), desc=signal),
        ui(5, (986, 0, 1006, 63), desc="Battery 80 percent."),
        ui(6, (42, 84 + shift, 147, 210 + shift), desc="Navigate up", clickable=True),
        ui(7, (147, 84 + shift, 900, 210 + shift), text="Inbox"),
        ui(8, (0, 300 + shift, 1080, 420 + shift), text=inbox, clickable=True),
        ui(9, (0, 420 + shift, 1080, 540 + shift), text="Meeting notes", clickable=True),
    ]
    if notification is not None:
        lines.insert(2, ui(3, (119, 0, 177, 63), desc=notification))
    return "\n".join(lines)


def compare(real: str, sim: str):  # type: ignore[no-untyped-def]
    return AndroidComparator().compare(Observation(text=real), Observation(text=sim), WAIT)


def test_status_bar_changes_are_volatile_without_package_names() -> None:
    real = phone()
    second = phone(clock="10:43", signal="Wifi signal two bars.", notification=None)
    result = compare(real, second)
    assert (result.drift, result.hallucinations, result.omissions) == (False, [], [])
    assert result.score == 1.0
    # clock, notification icon, signal and battery: 4 + 3
    assert result.normalizations["android_chrome"] == 7


def test_the_same_count_inside_the_app_is_content() -> None:
    result = compare(phone(), phone(inbox="9 new messages"))
    assert result.drift
    assert result.hallucinations == ["ui::9 new messages"]
    assert result.omissions == ["ui::7 new messages"]


def test_a_notification_icon_a_model_invents_is_not_content() -> None:
    result = compare(phone(notification=None), phone(notification="Slack notification: 2 new"))
    assert not result.drift and result.hallucinations == []


def test_elements_moved_by_a_few_pixels_agree_and_further_ones_do_not() -> None:
    near = compare(phone(), phone(shift=BOUNDS_TOLERANCE - 1))
    assert (near.drift, near.metrics["bounds_agreement"]) == (False, 1.0)
    # a shift across a multiple of ten no longer halves the agreement (rounding did)
    crossing = compare(phone(shift=4), phone(shift=6))
    assert crossing.metrics["bounds_agreement"] == 1.0
    far = compare(phone(), phone(shift=60))
    assert far.metrics["bounds_agreement"] < 1.0


def test_a_measured_strip_keeps_an_apps_badge_below_it() -> None:
    """The bilibili screens of the shared data: a 63 px status strip on a 2274 px screen and
    app badges at 92-141 px (inside the default 6 % band) that are the app's content."""
    lines = [
        ui(0, (0, 0, 1080, 2274)),
        ui(1, (0, 0, 1080, 63)),
        ui(2, (1027, 92, 1063, 128), text="2"),
        ui(3, (45, 102, 98, 141), text="27%"),
    ]
    items = raw_elements("\n".join(lines))
    assert system_ui(items) == [False, True, False, False]
    changed = compare("\n".join(lines), "\n".join(lines).replace("text='2'", "text='3'"))
    assert changed.drift and changed.hallucinations == ["ui::3"]


def test_without_a_strip_the_top_band_is_system_ui_but_a_clickable_app_bar_is_not() -> None:
    lines = [
        ui(0, (0, 0, 1080, 2400)),
        ui(1, (30, 10, 160, 110), text="10:41"),
        ui(2, (900, 10, 1040, 120), desc="Close", clickable=True),
        ui(3, (0, 200, 1080, 400), text="Player"),
    ]
    assert system_ui(raw_elements("\n".join(lines))) == [False, True, False, False]


def test_a_strip_holding_something_clickable_is_an_apps_own_bar() -> None:
    """An immersive app drawing a full-width bar at the top: its strip is no status bar."""
    lines = [
        ui(0, (0, 0, 1080, 2400)),
        ui(1, (0, 0, 1080, 140)),
        ui(2, (20, 10, 120, 130), desc="Back", clickable=True),
        ui(3, (140, 10, 600, 130), text="Video title"),
    ]
    marks = system_ui(raw_elements("\n".join(lines)))
    assert marks[2] is False


def test_status_bar_classes_and_packages_decide_first() -> None:
    items = [
        {"class": "com.android.systemui.statusbar.phone.StatusBarIconView", "bounds": "[0,0][9,9]"},
        {
            "class": "android.widget.TextView",
            "text": "10:41",
            "package": "com.example.app",
            "bounds": "[0,0][100,40]",
        },
        {"class": "android.widget.FrameLayout", "bounds": "[0,0][1080,2400]"},
    ]
    assert system_ui(items) == [True, False, False]


def test_bbox_pixels_stands_over_a_normalized_or_missing_bbox() -> None:
    line = (
        "UI element 0: UIElement(text='OK', bbox=BoundingBox(x_min=0.1, x_max=0.2, y_min=0.5, "
        "y_max=0.6), bbox_pixels=BoundingBox(x_min=108, x_max=216, y_min=1200, y_max=1440))"
    )
    assert "x_min=108" in raw_elements(line)[0]["bounds"]
    reversed_ = (
        "UI element 0: UIElement(text='OK', bbox_pixels=BoundingBox(x_min=108, x_max=216, "
        "y_min=1200, y_max=1440), bbox=None)"
    )
    assert "x_min=108" in raw_elements(reversed_)[0]["bounds"]


M3A = "\n".join(
    [
        'UI element 0: {"index": 0, "text": "Phone", "content_description": "Phone", '
        '"is_clickable": True, "is_long_clickable": True, "is_editable": False, '
        '"is_focusable": True, "is_selected": False, "is_checked": False}',
        'UI element 1: {"index": 1, "text": "By continuing, you agree to the "Terms".',
        'To help improve the app, Chrome sends data", "is_clickable": False, "is_checked": True}',
        'UI element 2: {"index": 2, "text": "15:34", "content_description": "23:34", '
        '"is_clickable": False}',
        'UI element 3: {"index": 3, "content_description": "Android System notification: '
        'Serial console enabled", "is_clickable": False}',
        'UI element 4: {"index": 4, "content_description": "Phone three bars.", '
        '"is_clickable": False}',
        'UI element 5: {"index": 5, "content_description": "Battery charging, 100 percent.", '
        '"is_clickable": False}',
    ]
)


def test_m3a_element_lists_are_read_with_unescaped_quotes_and_line_breaks() -> None:
    items = m3a_elements(M3A)
    assert [i.get("text") for i in items[:3]] == [
        "Phone",
        'By continuing, you agree to the "Terms".\nTo help improve the app, Chrome sends data',
        "15:34",
    ]
    assert items[0]["clickable"] == "True" and items[1]["checked"] == "True"
    assert raw_elements(M3A) == items


def test_m3a_status_bar_is_found_by_description_and_a_recapture_does_not_drift() -> None:
    """M3A's lists have no boxes: the status bar's icons are known by what they say."""
    assert system_ui(m3a_elements(M3A)) == [False, False, False, True, True, True]
    again = M3A.replace("15:34", "15:35").replace("three bars", "two bars")
    result = compare(M3A, again)
    assert (result.drift, result.hallucinations, result.omissions) == (False, [], [])
    assert result.normalizations["android_volatile"] == 2
    flipped = compare(M3A, M3A.replace('"is_checked": True', '"is_checked": False'))
    assert flipped.drift


def test_in_app_texts_like_a_status_icon_stay_content_below_the_band() -> None:
    """Chrome's offline page says "No internet" too: far below the status bar it is content."""
    lines = [ui(0, (0, 0, 1080, 2400)), ui(1, (100, 900, 980, 1000), text="No internet")]
    assert system_ui(raw_elements("\n".join(lines))) == [False, False]


def test_a_drifted_step_names_what_a_labeller_copies() -> None:
    """On a drifted step the entities go down to what the rubric's labellers copy from the
    screens: a box moved past the tolerance as each side wrote it, a changed flag in
    AndroidWorld's spelling, an invented element's description beside its text, an invented
    time as written (not ``<clock>``); the reasons count the boxes instead of listing them."""
    real = phone()
    sim = (
        phone(inbox="9 new messages", shift=60)
        + "\n"
        + ui(10, (0, 600, 1080, 700), text="Gmail", desc="Predicted app: Gmail")
        + "\n"
        + ui(11, (0, 700, 1080, 800), text="16:00", checked=True)
    )
    sim = sim.replace(
        "y_min=480, y_max=600), is_checked=False", "y_min=480, y_max=600), is_checked=True"
    )
    result = compare(real, sim)
    assert result.drift
    assert {"ui::9 new messages", "ui::Gmail", "ui::Predicted app: Gmail", "ui::16:00"} <= set(
        result.hallucinations
    )
    assert "ui::<clock>" not in result.hallucinations
    assert "bounds::Inbox:BoundingBox(x_min=147, x_max=900, y_min=144, y_max=270)" in (
        result.hallucinations
    )
    assert "bounds::Inbox:BoundingBox(x_min=147, x_max=900, y_min=84, y_max=210)" in (
        result.omissions
    )
    assert "flag::Meeting notes:is_checked=True" in result.hallucinations
    assert "flag::Meeting notes:is_checked=False" in result.omissions
    assert any(r.startswith("bounds moved: 3 of ") for r in result.reasons)
    assert not any("BoundingBox" in r for r in result.reasons)


def test_a_box_alone_never_decides_and_a_faithful_step_names_nothing() -> None:
    """One element of several moved far: the score weighs it, no entity is named (the verdict
    is the score's); a shown box the model repeats is stale, not invented."""
    real = phone()
    moved = real.replace("y_min=420, y_max=540", "y_min=460, y_max=580")
    quiet = compare(real, moved)
    assert quiet.metrics["bounds_agreement"] < 1.0
    assert (quiet.drift, quiet.hallucinations, quiet.omissions) == (False, [], [])
    far = phone(inbox="9 new messages", shift=60)
    shown = CompareContext(action=AndroidAction(action_type="wait"), env_description=far)
    result = AndroidComparator().compare(Observation(text=real), Observation(text=far), shown)
    boxes = [e for e in result.stale if e.startswith("bounds:")]
    assert result.drift and boxes
    assert not [e for e in result.hallucinations if e.startswith("bounds:")]


def test_other_forms_name_flags_and_boxes_as_they_write_them() -> None:
    """uiautomator's XML writes ``checked="true"`` and ``[x1,y1][x2,y2]``."""

    def node(checked: str, top: int) -> str:
        return (
            f'<node index="0" text="Wi-Fi" resource-id="a:id/t" class="android.widget.CheckBox" '
            f'package="com.x" checked="{checked}" bounds="[0,{top}][500,{top + 100}]"/>'
        )

    result = compare(node("false", 100), node("true", 160))
    assert result.drift
    assert "flag:CheckBox:Wi-Fi:checked=true" in result.hallucinations
    assert "bounds:CheckBox:Wi-Fi:[0,160][500,260]" in result.hallucinations
    assert "bounds:CheckBox:Wi-Fi:[0,100][500,200]" in result.omissions


def test_an_m3a_line_without_fields_does_not_raise() -> None:
    assert m3a_elements("UI element 0: {x}") == [{}]
    assert compare("UI element 0: {x}", 'UI element 0: {"text": "a"}').drift
