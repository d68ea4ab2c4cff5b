"""AndroidComparator: UI elements by class, resource id and text; status bar and keyboard ignored."""

from __future__ import annotations

import json

import pytest

from fidelity.compare import AndroidComparator
from fidelity.compare.android import raw_elements, rounded_bounds, volatile_kind
from fidelity.compare.base import CompareContext
from fidelity.trajectory import Observation, TextAction

CONTEXT = CompareContext(action=TextAction(text='{"action_type": "click", "index": 4}'))


def element(
    index: int,
    text: str,
    cls: str,
    rid: str,
    box: tuple[int, int, int, int],
    package: str = "com.android.settings",
    clickable: bool = False,
    checked: bool = False,
) -> str:
    """One line of AndroidWorld's UI element text form."""
    x0, y0, x1, y1 = box
    return (
        f"UI element {index}: UIElement(text={text!r}, content_description=None, "
        f"class_name='android.widget.{cls}', bbox=BoundingBox(x_min={x0}, x_max={x1}, "
        f"y_min={y0}, y_max={y1}), is_checked={checked}, is_clickable={clickable}, "
        f"is_enabled=True, package_name='{package}', resource_name='{rid}')"
    )


def screen(
    clock: str = "10:41", shift: int = 0, wifi: bool = True, keyboard: bool = False, extra: str = ""
) -> str:
    lines = [
        element(
            0,
            clock,
            "TextView",
            "com.android.systemui:id/clock",
            (0, 0, 90, 63),
            package="com.android.systemui",
        ),
        element(
            1, "Network & internet", "TextView", "android:id/title", (42, 240 + shift, 600, 300)
        ),
        element(2, "Wi-Fi", "TextView", "android:id/title", (42, 400 + shift, 300, 460)),
        element(
            3,
            "",
            "Switch",
            "android:id/switch_widget",
            (900, 400, 1040, 460),
            clickable=True,
            checked=wifi,
        ),
        element(4, "Bluetooth", "TextView", "android:id/title", (42, 520, 300, 580)),
    ]
    if keyboard:
        lines.append(
            element(
                5,
                "q",
                "Button",
                "com.google.android.inputmethod.latin:id/key_q",
                (0, 1800, 108, 1950),
                package="com.google.android.inputmethod.latin",
            )
        )
    if extra:
        lines.append(extra)
    return "\n".join(lines) + "\n"


def compare(real: str, sim: str):  # type: ignore[no-untyped-def]
    return AndroidComparator().compare(Observation(text=real), Observation(text=sim), CONTEXT)


def test_clock_keyboard_indices_and_small_shifts_do_not_drift() -> None:
    result = compare(screen(), screen(clock="10:47", shift=3, keyboard=True))
    assert (result.score, result.drift, result.reasons) == (1.0, False, [])
    assert result.normalizations["android_chrome"] == 3


def test_flipped_switch_is_flagged() -> None:
    result = compare(screen(wifi=True), screen(wifi=False))
    assert result.drift
    assert result.metrics["flag_agreement"] < 1.0
    assert any(
        r.startswith("flags Switch:: checked,clickable,enabled != clickable,enabled")
        for r in result.reasons
    )


def test_invented_setting_is_hallucinated_with_its_label() -> None:
    extra = element(6, "Satellite mode", "TextView", "android:id/title", (42, 640, 400, 700))
    result = compare(screen(), screen(extra=extra))
    assert result.drift
    assert result.hallucinations == ["ui:TextView:Satellite mode"]
    assert result.metrics["element_recall"] == 1.0


def test_missing_element_is_an_omission() -> None:
    real = screen()
    sim = "\n".join(line for line in real.splitlines() if "Bluetooth" not in line)
    result = compare(real, sim)
    assert result.drift
    assert result.omissions == ["ui:TextView:Bluetooth"]


def test_uiautomator_xml_and_json_forms_parse_alike() -> None:
    xml = (
        '<hierarchy><node index="0" text="Wi-Fi" resource-id="android:id/title" '
        'class="android.widget.TextView" package="com.android.settings" content-desc="" '
        'checkable="false" clickable="false" enabled="true" bounds="[42,400][300,460]" /></hierarchy>'
    )
    data = json.dumps(
        [
            {
                "index": 7,
                "text": "Wi-Fi",
                "resource_id": "android:id/title",
                "class": "android.widget.TextView",
                "package": "com.android.settings",
                "enabled": True,
                "bounds": [42, 401, 300, 459],
            }
        ]
    )
    result = compare(xml, data)
    assert (result.score, result.drift) == (1.0, False)
    assert [e["text"] for e in raw_elements(xml)] == ["Wi-Fi"]


def test_bounds_round_to_ten_pixels() -> None:
    assert rounded_bounds("[42,400][303,458]") == (40, 400, 300, 460)


def bar_screen(clock: str, battery: str, title: str = "Wi-Fi", keys: str = "") -> str:
    """A 1080x2400 screen in AgentWorldBench's ``[ i] | class | … | bounds | flags`` layout,
    without package names (status bar and keyboard must be found by position)."""
    lines = [
        f"[ 0] | android.widget.TextView | text={clock} res= | bounds=[30,10][160,110] |",
        f"[ 1] | android.widget.ImageView | text= desc={battery} res= | bounds=[950,10][1050,110] |",
        f"[ 2] | android.widget.TextView | text={title} res=android:id/title | "
        "bounds=[42,400][300,460] | clickable,enabled",
        "[ 3] | android.widget.Switch | text= res=android:id/switch_widget | "
        "bounds=[900,400][1040,460] | checkable,checked,clickable",
        "[ 4] | android.widget.FrameLayout | text= res= | bounds=[0,2270][1080,2400] |",
    ]
    for i, key in enumerate(keys):
        x = 20 + 100 * i
        lines.append(
            f"[{5 + i:2d}] | android.widget.Button | text={key} res= | "
            f"bounds=[{x},1700][{x + 90},1820] | clickable"
        )
    return "\n".join(lines)


def test_agentworldbench_element_list_layout_is_read() -> None:
    items = raw_elements(bar_screen("10:41", "Battery 80 percent"))
    assert items[2]["class"] == "android.widget.TextView"
    assert items[2]["text"] == "Wi-Fi" and items[2]["resource_id"] == "android:id/title"
    assert items[3]["checked"] == "true" and items[1]["content_description"] == "Battery 80 percent"


def test_status_bar_without_package_names_is_found_by_position() -> None:
    """AndroidControl-style recordings: a clock or battery change is not drift."""
    comparator = AndroidComparator()
    real = Observation(text=bar_screen("10:41", "Battery 80 percent"))
    sim = Observation(text=bar_screen("10:42", "Battery 79 percent"))
    result = comparator.compare(real, sim, CONTEXT)
    assert not result.drift and result.score == 1.0
    assert result.normalizations["android_chrome"] == 4
    renamed = comparator.compare(
        real, Observation(text=bar_screen("10:41", "Battery 80 percent", "Wi-Fi calling")), CONTEXT
    )
    assert renamed.drift


def test_keyboard_without_package_names_is_found_by_position() -> None:
    comparator = AndroidComparator()
    real = Observation(text=bar_screen("10:41", "Battery 80 percent", keys="qwertyuiop"))
    sim = Observation(text=bar_screen("10:41", "Battery 80 percent", keys="azertyuiop"))
    result = comparator.compare(real, sim, CONTEXT)
    assert not result.drift


# The two layouts below are built by hand from REFERENCE's description of AgentWorldBench's
# android observations (a ``**Current Phone State:**`` bullet list plus a numbered element
# list; a DroidBot ``Accessibility Tree:``); no recording of either is at hand.


def state_screen(label: str = "Wi-Fi", clock: str = "10:41", keyboard: str = "Hidden") -> str:
    """A ``**Current Phone State:**`` observation (built from REFERENCE, not recorded)."""
    return "\n".join(
        [
            "**Current Phone State:**",
            "• **App:** Settings (com.android.settings)",
            f"• **Keyboard:** {keyboard}",
            "• **Focused Element:** ''",
            "",
            "Current UI elements:",
            f'1. TextView: "{clock}" - (30,10,160,110)',
            "2. FrameLayout - (0,120,1080,2400)",
            f'  3. TextView: "android:id/title", "{label}" - (42,400,300,460)',
            '  4. Switch: "android:id/switch_widget" - (900,400,1040,460)',
            '  5. TextView: "android:id/title", "Bluetooth" - (42,520,300,580)',
        ]
    )


def test_current_phone_state_layout_is_read() -> None:
    """Bullets become PhoneState elements (the keyboard's is chrome); numbered lines elements."""
    items = raw_elements(state_screen())
    assert [(i["class"], i.get("resource_id"), i.get("text")) for i in items] == [
        ("PhoneState", "state:app", "Settings (com.android.settings)"),
        ("PhoneState", "state:keyboard", "Hidden"),
        ("PhoneState", "state:focused element", "''"),
        ("TextView", None, "10:41"),
        ("FrameLayout", None, None),
        ("TextView", "android:id/title", "Wi-Fi"),
        ("Switch", "android:id/switch_widget", ""),
        ("TextView", "android:id/title", "Bluetooth"),
    ]
    assert items[5]["bounds"] == "42,400,300,460"


def test_current_phone_state_clock_and_keyboard_do_not_drift_a_label_does() -> None:
    same = compare(state_screen(), state_screen(clock="10:42", keyboard="Visible"))
    assert (same.drift, same.score) == (False, 1.0)
    # per side: the keyboard bullet and the clock (by position)
    assert same.normalizations["android_chrome"] == 4
    renamed = compare(state_screen(), state_screen(label="Wi-Fi calling"))
    assert renamed.drift
    assert renamed.hallucinations == ["ui:TextView:Wi-Fi calling"]
    assert renamed.omissions == ["ui:TextView:Wi-Fi"]


def test_current_phone_state_numbered_lines_without_class_colon() -> None:
    text = "**Current Phone State:**\n- App: Clock\n\n1. Button 'Time: 7:05' clickable\n"
    text += "2. FrameLayout - (0,0,1080,2400)"
    items = raw_elements(text)
    assert [(i["class"], i.get("text")) for i in items] == [
        ("PhoneState", "Clock"),
        ("Button", "Time: 7:05"),
        ("FrameLayout", None),
    ]
    assert items[1]["clickable"] == "true" and items[2]["bounds"] == "(0,0,1080,2400)"


def test_current_phone_state_changed_app_is_named() -> None:
    real = state_screen()
    sim = real.replace("Settings (com.android.settings)", "Clock (com.google.android.deskclock)")
    result = compare(real, sim)
    assert result.drift
    assert result.hallucinations == ["ui:PhoneState:Clock (com.google.android.deskclock)"]


def droidbot_html(label: str = "Wi-Fi", checked: str = "True", clock: str = "10:41") -> str:
    """A DroidBot ``Accessibility Tree:`` in the HTML-like form (built from REFERENCE)."""
    return "\n".join(
        [
            "Accessibility Tree:",
            f"<p id=0>{clock}</p>",
            "<div id=1>",
            f"  <button id=2 resource_id='android:id/title'>{label}</button>",
            f"  <checkbox id=3 checked={checked} clickable></checkbox>",
            "  <p id=4>3 notifications</p>",
            "</div>",
        ]
    )


def droidbot_brackets(label: str = "Wi-Fi", checked: bool = True, clock: str = "10:41") -> str:
    """The same screen as bracketed lines, bounds and quoted names (built from REFERENCE)."""
    flags = "checkable,checked" if checked else "checkable"
    return "\n".join(
        [
            "Accessibility Tree:",
            f"[0] TextView '{clock}'",
            f"  [1] Button 'Don't {label}' clickable [42,400][300,460]",
            f"  [2] Switch resource_id=android:id/switch_widget {flags} (900,400,1040,460)",
        ]
    )


def test_droidbot_tree_layouts_are_read() -> None:
    html = raw_elements(droidbot_html())
    assert [(i["class"], i.get("text")) for i in html] == [
        ("p", "10:41"),
        ("div", None),
        ("button", "Wi-Fi"),
        ("checkbox", None),
        ("p", "3 notifications"),
    ]
    assert html[2]["resource_id"] == "android:id/title"
    assert html[3]["checked"] == "True" and html[3]["clickable"] == "true"
    brackets = raw_elements(droidbot_brackets())
    assert [(i["class"], i.get("text")) for i in brackets] == [
        ("TextView", "10:41"),
        ("Button", "Don't Wi-Fi"),
        ("Switch", None),
    ]
    assert brackets[1]["bounds"] == "[42,400][300,460]" and brackets[1]["clickable"] == "true"
    assert brackets[2]["resource_id"] == "android:id/switch_widget"
    assert brackets[2]["checked"] == "true" and brackets[2]["bounds"] == "(900,400,1040,460)"


def test_droidbot_tree_flag_and_label_changes_drift() -> None:
    flipped = compare(droidbot_html(), droidbot_html(checked="False"))
    assert flipped.drift and flipped.metrics["flag_agreement"] < 1.0
    renamed = compare(droidbot_brackets(), droidbot_brackets(label="Mobile data"))
    assert renamed.drift
    assert renamed.hallucinations == ["ui:Button:Don't Mobile data"]


def test_volatile_values_weigh_without_forcing_drift() -> None:
    """No bounds, no package: a clock change is weighed, not named; a count inside the app and
    a label are content, named."""
    real = droidbot_html()
    minute = compare(real, droidbot_html(clock="10:42"))
    assert not minute.drift and (minute.hallucinations, minute.omissions) == ([], [])
    assert minute.metrics["value_agreement"] < 1.0 and minute.score < 1.0
    assert minute.normalizations["android_volatile"] == 2
    count = compare(real, real.replace("3 notif", "4 notif"))
    assert count.drift and count.hallucinations == ["ui:p:4 notifications"]
    label = compare(real, droidbot_html(label="Wi-Fi calling"))
    assert label.drift and label.hallucinations == ["ui:button:Wi-Fi calling"]


def test_invented_volatile_element_is_still_hallucinated() -> None:
    """An invented clock is drift, and named as the simulation wrote it (not ``<clock>``)."""
    real = "Accessibility Tree:\n<p id=0>Alarms</p>"
    result = compare(real, real + "\n<p id=1>7:05 PM</p>")
    assert result.drift and result.hallucinations == ["ui:p:7:05 PM"]
    assert "hallucinated ui:p:7:05 PM" in result.reasons


def test_volatile_kinds() -> None:
    kinds = [
        volatile_kind(t)
        for t in (
            "10:41",
            "7:05 PM",
            "Battery 80 percent",
            "Battery charging, 100 percent.",
            "80%",
            "3 notifications",
            "Wi-Fi",
        )
    ]
    # a bare percentage or count is content in an app (the status bar's are dropped whole)
    assert kinds == ["clock", "clock", "battery", "battery", None, None, None]
    assert volatile_kind("Alarm set for 7:00 AM") is None  # only a whole-text value is volatile


def test_json_nested_past_the_parser_is_not_an_element_list() -> None:
    """The property test's case: deeply nested brackets raise RecursionError in json.loads."""
    deep = "[" * 5000 + "]" * 5000
    assert raw_elements(deep) == []
    result = AndroidComparator().compare(
        Observation(text="x"), Observation(text=deep), CompareContext(action=TextAction(text="a"))
    )
    assert result.drift


def test_a_flag_flipped_on_one_of_several_alike_elements_drifts() -> None:
    """The checkboxes of a settings list share class, resource id and (no) text: they are
    matched in order, so the first one's lost check is not hidden behind the last one."""

    def rows(first_checked: bool) -> str:
        return "\n".join(
            element(
                i,
                "",
                "CheckBox",
                "android:id/checkbox",
                (936, 448 + 200 * i, 1032, 544 + 200 * i),
                checked=first_checked if i == 0 else False,
            )
            for i in range(3)
        )

    result = compare(rows(True), rows(False))
    assert result.drift and result.metrics["flag_agreement"] == pytest.approx(2 / 3)
    assert result.reasons == ["flags CheckBox:: checked,enabled != enabled"]
