"""The adb backend against a loopback double of the adb server protocol.

Protocol tests only: the double (:mod:`tests.sandboxes.adb_double`) serves
fixed dumps; no Android device runs here, so nothing here measures fidelity.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from fidelity.compare.android import AndroidComparator
from fidelity.compare.base import CompareContext
from fidelity.errors import SandboxError, SandboxUnavailableError, UsageError
from fidelity.pipeline import load_suite
from fidelity.resources import data_dir
from fidelity.sandboxes import backend_for, get_sandbox
from fidelity.sandboxes.adb import (
    AdbClient,
    AdbConfig,
    AdbSandbox,
    input_text_argument,
    ui_elements,
)
from fidelity.trajectory import AndroidAction, CodeAction, EnvSpec
from tests.sandboxes.adb_double import SERIAL, AdbDouble
from tests.sandboxes.conformance_lifecycle import *  # noqa: F403 - backend-agnostic lifecycle

ENV = EnvSpec(backend="adb")


@pytest.fixture
def double() -> Iterator[AdbDouble]:
    server = AdbDouble().start()
    try:
        yield server
    finally:
        server.stop()


def config(double: AdbDouble, **update: object) -> AdbConfig:
    base = {"port": double.port, "serial": SERIAL, "start_server": False, "settle_interval": 0.0}
    return AdbConfig.model_validate({**base, **update})


@pytest.fixture
def sandbox(double: AdbDouble) -> Iterator[AdbSandbox]:
    box = AdbSandbox(config(double))
    try:
        yield box
    finally:
        box.close()


@pytest.fixture
def env() -> EnvSpec:
    return ENV


@pytest.fixture
def ok_action() -> AndroidAction:
    return AndroidAction(action_type="open_app", app_name="Settings")


@pytest.fixture
def bad_action() -> AndroidAction:
    return AndroidAction(action_type="click", index=999)


@pytest.fixture
def dirty_actions() -> list[AndroidAction]:
    return [AndroidAction(action_type="open_app", app_name="Settings")]


@pytest.fixture
def probe_action() -> AndroidAction:
    return AndroidAction(action_type="status", goal_status="infeasible")


@pytest.fixture
def leftovers() -> Callable[[AdbSandbox], list[str]]:
    return lambda box: ["device session open"] if box._open else []


def element_index(box: AdbSandbox, text: str) -> int:
    for index, element in enumerate(box._elements):
        if element.text == text or element.content_description == text:
            return index
    raise AssertionError(f"no element {text!r}")


# -- the protocol ----------------------------------------------------------------


def test_client_speaks_the_smart_socket_protocol(double: AdbDouble) -> None:
    client = AdbClient("127.0.0.1", double.port, SERIAL)
    assert client.host_query("host:version") == "0029"
    assert client.devices() == {SERIAL: "device"}
    assert client.shell("echo hi") == "hi\n"
    assert double.requests[-2:] == [f"host:transport:{SERIAL}", "shell:echo hi"]
    with pytest.raises(SandboxError, match="device 'nope' not found"):
        AdbClient("127.0.0.1", double.port, "nope").shell("echo hi")


def test_no_server_or_no_device_is_a_clear_error(double: AdbDouble) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(SandboxUnavailableError, match="emulator -avd"):
        AdbSandbox(AdbConfig(port=port, start_server=False)).reset(ENV)
    with pytest.raises(
        SandboxUnavailableError, match=r"'emulator-5556' is not attached.*emulator-5554"
    ):
        AdbSandbox(config(double, serial="emulator-5556")).reset(ENV)
    double.devices["emulator-5556"] = "offline"
    with pytest.raises(UsageError, match="2 devices attached: name one with --serial"):
        AdbSandbox(config(double, serial=None)).reset(ENV)


# -- observations ------------------------------------------------------------------


def test_observation_is_androidworlds_element_list(sandbox: AdbSandbox, double: AdbDouble) -> None:
    home = sandbox.reset(ENV)
    assert double.device.commands[0] == "input keyevent KEYCODE_HOME"
    lines = home.text.splitlines()
    assert lines[0].startswith("UI element 0: UIElement(text=None, content_description=None, ")
    assert any(
        line.startswith("UI element 2: UIElement(text='Settings', content_description='Settings', "
                        "class_name='android.widget.TextView', bbox=None, bbox_pixels=BoundingBox("
                        "x_min=60, x_max=260, y_min=1900, y_max=2150)")
        for line in lines
    )  # fmt: skip
    assert "package_name='com.android.systemui'" in home.text  # kept; the comparator drops it
    assert home.state is not None and home.state["xml"].startswith("<?xml")
    same = AndroidComparator().compare(
        home, home, CompareContext(action=AndroidAction(action_type="wait"))
    )
    assert same.score == 1.0 and not same.drift


def test_click_by_index_taps_the_elements_center(sandbox: AdbSandbox, double: AdbDouble) -> None:
    sandbox.reset(ENV)
    settings = sandbox.step(
        AndroidAction(action_type="click", index=element_index(sandbox, "Settings"))
    )
    assert "input tap 160 2025" in double.device.commands
    assert "Network &amp; internet" not in settings.text and "Network & internet" in settings.text
    network = sandbox.step(
        AndroidAction(action_type="click", index=element_index(sandbox, "Network & internet"))
    )
    switch = [e for e in sandbox._elements if e.class_name == "android.widget.Switch"]
    assert switch and switch[0].flags["checked"] is False
    sandbox.step(AndroidAction(action_type="click", x=969, y=795))
    switch = [e for e in sandbox._elements if e.class_name == "android.widget.Switch"]
    assert switch[0].flags["checked"] is True
    assert "Airplane mode" in network.text
    sandbox.step(AndroidAction(action_type="navigate_back"))
    assert any(e.text == "Connected devices" for e in sandbox._elements)


def test_input_text_and_keys(sandbox: AdbSandbox, double: AdbDouble) -> None:
    sandbox.reset(ENV)
    sandbox.step(AndroidAction(action_type="open_app", app_name="settings"))
    sandbox.step(
        AndroidAction(action_type="click", index=element_index(sandbox, "Search settings"))
    )
    typed = sandbox.step(AndroidAction(action_type="input_text", text="wi fi", index=2))
    assert "input text wi%sfi" in double.device.commands
    assert "text='wi fi'" in typed.text
    sandbox.step(AndroidAction(action_type="keyboard_enter"))
    assert "input keyevent KEYCODE_ENTER" in double.device.commands[-3:]
    sandbox.step(AndroidAction(action_type="navigate_home"))
    assert any(e.text == "Clock" for e in sandbox._elements)


def test_action_mapping(double: AdbDouble) -> None:
    box = AdbSandbox(config(double))
    box.reset(ENV)
    commands = box.commands_for
    assert commands(AndroidAction(action_type="scroll", direction="down")) == [
        "input swipe 540 1800 540 600 500"
    ]
    assert commands(AndroidAction(action_type="swipe", direction="down")) == [
        "input swipe 540 600 540 1800 500"
    ]
    assert commands(AndroidAction(action_type="long_press", x=5, y=6)) == [
        "input swipe 5 6 5 6 1000"
    ]
    assert commands(AndroidAction(action_type="double_tap", x=5, y=6)) == ["input tap 5 6"] * 2
    assert commands(AndroidAction(action_type="open_app", app_name="Settings")) == [
        "am start -W -n com.android.settings/.Settings"
    ]
    assert commands(AndroidAction(action_type="answer", text="42")) == []
    assert input_text_argument("it's 100% done") == "'it'\"'\"'s%s100\\%%sdone'"


def test_impossible_actions_are_observations(sandbox: AdbSandbox) -> None:
    sandbox.reset(ENV)
    for action, message in (
        (AndroidAction(action_type="click", index=99), "no UI element 99"),
        (AndroidAction(action_type="open_app", app_name="Nope"), "unknown app 'Nope'"),
        (AndroidAction(action_type="scroll"), "scroll needs direction"),
        (AndroidAction(action_type="click"), "click needs index or x and y"),
    ):
        observation = sandbox.step(action)
        assert observation.error is None and observation.state is not None
        assert message in observation.state["last_action_error"]
    with pytest.raises(SandboxError, match="cannot run CodeAction"):
        sandbox.step(CodeAction(code="DONE"))


def test_setup_commands_and_failures(sandbox: AdbSandbox, double: AdbDouble) -> None:
    sandbox.reset(
        ENV.model_copy(update={"setup": ["am start -W -n com.android.settings/.Settings"]})
    )
    assert any(e.text == "Search settings" for e in sandbox._elements)
    with pytest.raises(SandboxError, match=r"env.setup\[0\] failed"):
        sandbox.reset(ENV.model_copy(update={"setup": ["frobnicate"]}))


def test_ui_elements_drop_empty_and_offscreen_boxes() -> None:
    xml = (
        "<?xml version='1.0' encoding='UTF-8' standalone='yes' ?><hierarchy rotation=\"0\">"
        '<node index="0" text="" class="a.Frame" package="p" bounds="[0,0][100,200]">'
        '<node index="0" text="in" class="a.Text" package="p" bounds="[10,10][20,20]" />'
        '<node index="1" text="empty" class="a.Text" package="p" bounds="[10,10][10,20]" />'
        '<node index="2" text="off" class="a.Text" package="p" bounds="[90,190][120,220]" />'
        "</node></hierarchy>"
    )
    assert [e.text for e in ui_elements(xml)] == [None, "in"]


def test_registry_and_android_suite(double: AdbDouble) -> None:
    assert isinstance(get_sandbox("adb", port=double.port, serial=SERIAL), AdbSandbox)
    assert backend_for("android", "adb") == "adb"
    with pytest.raises(UsageError, match="domain 'android' needs --sandbox adb"):
        backend_for("android", None)  # no default: the device is the user's
    suite = load_suite(data_dir("suites") / "android" / "suite.jsonl")
    assert len(suite) >= 5 and all(t.env.backend == "adb" for t in suite)
    assert all(isinstance(s.action, AndroidAction) for t in suite for s in t.steps)


def test_audit_of_the_android_suite_over_the_protocol(double: AdbDouble, tmp_path: Path) -> None:
    """The whole audit path with --sandbox adb (a protocol test: the double is no device)."""
    from fidelity.audit import AuditConfig, run_audit
    from fidelity.pipeline import SimConfig

    options = {"port": double.port, "serial": SERIAL, "start_server": False, "settle_interval": 0}
    result = run_audit(
        AuditConfig(
            suite=data_dir("suites") / "android" / "suite.jsonl",
            sandbox="adb",
            sandbox_options=options,
            db=tmp_path / "f.duckdb",
            report=None,
            limit=3,
            concurrency=1,
            sim=SimConfig(baseline="copy"),
        )
    )
    totals = result.summary.totals
    assert totals.trajectories == 3 and result.failed_trajectories == []
    assert totals.compared_steps == totals.steps and result.summary.run.sandbox == "adb"
    assert any(r.startswith("shell:am start -W -n com.android.settings") for r in double.requests)
