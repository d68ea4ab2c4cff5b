"""Property test: no input makes any comparator raise (arbitrary text and structured noise).

Every domain's comparator gets arbitrary Unicode text, the benchmark's
observation shapes with random contents (search result lists, MCP wrappers,
accessibility trees, android element lists, terminal screens, JSON documents
nested deeply) and combinations of them, on both sides, with every action
type. A comparison must come back with a score in [0, 1], never an exception.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fidelity.compare import get_comparator, supported_domains
from fidelity.compare.base import CompareContext
from fidelity.trajectory import (
    Action,
    AndroidAction,
    BrowserAction,
    CodeAction,
    CommandAction,
    KeystrokesAction,
    Observation,
    Step,
    TextAction,
    ToolAction,
)

DOMAINS = ("terminal", "swe", "web", "android", "mcp", "search", "os")
WORD = st.text(min_size=0, max_size=12)
LINE = st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=40)


def _json_values() -> st.SearchStrategy[object]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | WORD
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(WORD, inner, max_size=4),
        max_leaves=12,
    )


@st.composite
def search_results(draw: st.DrawFn) -> str:
    rows = draw(st.lists(st.tuples(WORD, LINE, LINE, LINE), max_size=5))
    return "\n\n".join(
        f"[{n}] https://{host or 'x'}.example/{n}\nTitle: {title}\nSnippet: {snippet}\nDate: {date}"
        for n, (host, title, snippet, date) in enumerate(rows, start=1)
    )


@st.composite
def mcp_wrapped(draw: st.DrawFn) -> str:
    inner = draw(st.one_of(LINE, _json_values().map(json.dumps)))
    item = {"type": "text", "text": inner}
    shape = draw(st.sampled_from(["item", "list", "result"]))
    value: object = item if shape == "item" else [item]
    if shape == "result":
        value = {"content": [item], "isError": draw(st.booleans())}
    return json.dumps(value)


@st.composite
def os_tree(draw: st.DrawFn) -> str:
    rows = draw(st.lists(st.tuples(WORD, LINE, LINE), max_size=6))
    if draw(st.booleans()):
        body = "\n".join(f"{t}\t{n}\t{x}\tclass\t\t(0, 0)\t(1, 1)" for t, n, x in rows)
        return "tag\tname\ttext\tclass\tdescription\tposition (top-left x&y)\tsize (w&h)\n" + body
    tags = "".join(f'<{t or "panel"} name="{n}">{x}</{t or "panel"}>' for t, n, x in rows)
    return f'<desktop-frame name="main">{tags}</desktop-frame>'


@st.composite
def android_screen(draw: st.DrawFn) -> str:
    rows = draw(st.lists(st.tuples(WORD, LINE), max_size=5))
    layout = draw(st.sampled_from(["list", "state", "droidbot", "m3a", "androidworld"]))
    if layout == "m3a":  # M3A's list: values unescaped, a text may run onto the next line
        return "\n".join(
            f'UI element {i}: {{"index": {i}, "text": "{t}", "content_description": "{c}", '
            f'"is_clickable": {draw(st.sampled_from(["True", "False", "None"]))}}}'
            for i, (c, t) in enumerate(rows)
        )
    if layout == "androidworld":  # no package, boxes anywhere (a status bar, a strip)
        boxes = st.tuples(*[st.integers(-50, 3000)] * 4)
        return "\n".join(
            f"UI element {i}: UIElement(text={t!r}, content_description={c!r}, class_name=None, "
            f"bbox=None, bbox_pixels=BoundingBox(x_min={b[0]}, x_max={b[2]}, y_min={b[1]}, "
            f"y_max={b[3]}), is_clickable={draw(st.booleans())}, package_name=None)"
            for i, ((c, t), b) in enumerate(
                zip(
                    rows, draw(st.lists(boxes, min_size=len(rows), max_size=len(rows))), strict=True
                )
            )
        )
    if layout == "list":
        return "\n".join(
            f"[{i:2d}] | {c} | text={t} res= | bounds=[0,0][10,10] | clickable"
            for i, (c, t) in enumerate(rows)
        )
    if layout == "state":
        items = "\n".join(f"{i}. {c}: {t}" for i, (c, t) in enumerate(rows, start=1))
        return f"**Current Phone State:**\n- App: {draw(WORD)}\n- Screen: {draw(LINE)}\n\n{items}"
    items = "\n".join(f"  [{i}] {c} '{t}'" for i, (c, t) in enumerate(rows))
    return f"Accessibility Tree:\n{items}"


@st.composite
def screen(draw: st.DrawFn) -> str:
    command, output = draw(LINE), draw(st.text(max_size=80))
    return f"agent@sandbox:/workspace$ {command}\n{output}\nagent@sandbox:/workspace$ "


@st.composite
def terminal_noise(draw: st.DrawFn) -> str:
    """Progress redraws, carriage returns, erase escapes and ``ps`` tables, mixed."""
    parts = st.sampled_from(
        [
            "\r",
            "\x1b[K",
            "\x1b[2K",
            "\x1b[1K",
            "\x1b[31m",
            "%",
            " 50.0%  1 of 2 [##  ] ",
            "100%|####| 2/2",
            "PID",
            "  PID TTY CMD\n",
            "  3 ? bash\n",
            "\n",
            "[1] 3\n",
            "bg=",
        ]
    )
    return "".join(draw(st.lists(st.one_of(parts, LINE), max_size=12)))


def _deep(draw_depth: int) -> str:
    return "[" * draw_depth + "]" * draw_depth


NOISE = st.one_of(
    st.text(max_size=200),
    st.binary(max_size=60).map(lambda b: b.decode("utf-8", "replace")),
    _json_values().map(json.dumps),
    search_results(),
    mcp_wrapped(),
    os_tree(),
    android_screen(),
    screen(),
    st.integers(min_value=1, max_value=3000).map(_deep),
    terminal_noise(),
    st.tuples(search_results(), st.text(max_size=40)).map("".join),
    st.tuples(st.text(max_size=40), os_tree()).map("".join),
)

ACTIONS: list[Action] = [
    CommandAction(command="ls -la"),
    KeystrokesAction(keys="cat x\n\x03", duration=0.5),
    TextAction(text="### Turn 1\n\n**Action:**\n```json\n{}\n```"),
    ToolAction(tool="web_search", args={"queries": ["a"]}),
    BrowserAction(action="click('12')"),
    CodeAction(code="pyautogui.click(10, 10)"),
    AndroidAction(action_type="click", index=1),
    CommandAction(command="sleep 0.3 & echo bg=$!; printf 'child %d\\n' $$"),
    CommandAction(command="python3 -c 'import os; print(f\"pid={os.getpid()}\", os.getpid())'"),
    CommandAction(command="ps -ef | grep x; pgrep -l x; pidof x; jobs -l"),
    CommandAction(command='echo "${!}$BASHPID${PPID}"; printf "%s" $!'),
]


def test_every_domain_has_a_comparator() -> None:
    assert set(DOMAINS) <= set(supported_domains())


@settings(
    max_examples=150,
    deadline=None,  # a busy machine must not fail the test: this checks safety, not speed
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    domain=st.sampled_from(DOMAINS),
    real=NOISE,
    sim=NOISE,
    action=st.sampled_from(ACTIONS),
    exit_codes=st.tuples(st.none() | st.integers(-1, 255), st.none() | st.integers(-1, 255)),
    history=st.lists(NOISE, max_size=2),
)
def test_no_input_makes_a_comparator_raise(
    domain: str,
    real: str,
    sim: str,
    action: Action,
    exit_codes: tuple[int | None, int | None],
    history: list[str],
) -> None:
    comparator = get_comparator(domain)
    context = CompareContext(
        action=action,
        history=[Step(action=action, observation=Observation(text=h)) for h in history],
        depth=len(history) + 1,
    )
    real_obs = Observation(text=real, exit_code=exit_codes[0])
    sim_obs = Observation(text=sim, exit_code=exit_codes[1])
    result = comparator.compare(real_obs, sim_obs, context)
    assert 0.0 <= result.score <= 1.0
    same = comparator.compare(real_obs, real_obs, context)
    assert 0.0 <= same.score <= 1.0
    entities = getattr(comparator, "entities", None)
    if entities is not None:
        entities(sim_obs, context)
