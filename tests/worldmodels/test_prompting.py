"""Message construction and answer parsing (AgentWorldBench rules)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fidelity.errors import MalformedPredictionError, UnknownDomainError
from fidelity.trajectory import (
    AndroidAction,
    CodeAction,
    CommandAction,
    Domain,
    InstanceSpec,
    KeystrokesAction,
    Observation,
    ToolAction,
    Trajectory,
)
from fidelity.worldmodels.prompting import (
    available_domains,
    benchmark_action,
    build_messages,
    parse_prediction,
    prompt_hash,
    prompt_set,
    reduce_screen,
    render_action,
    render_observation,
    strip_thinking,
)

LS = CommandAction(command="ls -la")
KEYS = KeystrokesAction(keys="q", duration=0.5)
BUNDLED = Path(__file__).resolve().parents[2] / "prompts"
OFFICIAL = Path(__file__).resolve().parents[1] / "formats" / "data" / "official_prompts"


def test_messages_alternate_and_end_with_current_action(
    make_trajectory: Callable[..., Trajectory],
) -> None:
    trajectory = make_trajectory()
    current = trajectory.steps[2].action
    messages = build_messages(trajectory, trajectory.steps[:2], current, 3)

    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert "A Python project checked out in /workspace." in messages[0]["content"]
    assert "LANG=C.UTF-8" in messages[0]["content"]
    assert "<predicted_observation>" in messages[0]["content"]
    assert messages[1]["content"].startswith("### Turn 1\n")
    assert messages[3]["content"].startswith("### Turn 2\n")
    assert messages[-1]["content"].startswith("### Turn 3\n")
    # The terminal as the model was trained on it: prompt, echoed command, output, next prompt.
    assert messages[2]["content"].startswith("**Environment Observation:**\n")
    assert messages[2]["content"].endswith("$ ")
    assert f"$ {trajectory.steps[0].action.render()}\n" in messages[2]["content"]
    # The benchmark's suffix is on the predicted turn only.
    assert "<predicted_observation>" in messages[-1]["content"]
    assert "<predicted_observation>" not in messages[1]["content"]


def test_action_is_a_fenced_json_block_of_keystrokes() -> None:
    text = render_action(LS, 4)
    body = text.split("```json\n", 1)[1].split("\n```", 1)[0]
    assert text.startswith("### Turn 4\n\n**Action:**\n```json\n")
    assert json.loads(body) == [{"keystrokes": "ls -la\n", "duration": 10.0}]


def test_keystrokes_control_characters_become_tmux_key_names() -> None:
    text = render_action(KeystrokesAction(keys="sleep 9\n\x03", duration=1.0), 1)
    assert "\x03" not in text
    body = json.loads(text.split("```json\n", 1)[1].split("\n```", 1)[0])
    assert body == [
        {"keystrokes": "sleep 9\n", "duration": 0.1},
        {"keystrokes": "C-c", "duration": 1.0},
    ]


def test_benchmark_actions_of_each_type() -> None:
    assert benchmark_action(ToolAction(tool="t", args={"a": 1})) == {
        "name": "t",
        "arguments": {"a": 1},
    }
    assert benchmark_action(CodeAction(code="WAIT")) == "WAIT"
    assert benchmark_action(AndroidAction(action_type="click", index=3)) == {
        "action_type": "click",
        "index": 3,
    }


def test_first_turn_carries_task_and_state(make_trajectory: Callable[..., Trajectory]) -> None:
    base = make_trajectory()
    trajectory = base.model_copy(
        update={
            "meta": {"task_instruction": "Find the notes."},
            "env": base.env.model_copy(update={"initial_observation": "agent@sandbox:~$ "}),
        }
    )
    first = build_messages(trajectory, [], LS, 1)[-1]["content"]
    assert "**Task Instruction:**\nFind the notes." in first
    assert "**Current State:**\nagent@sandbox:~$" in first
    later = build_messages(trajectory, trajectory.steps[:1], LS, 2)[-1]["content"]
    assert "Task Instruction" not in later


def test_the_instruction_field_comes_first_then_the_fallbacks(
    make_trajectory: Callable[..., Trajectory],
) -> None:
    """``instruction`` is the task on turn 1; ``meta.task_instruction`` (older files) and a
    SWE-bench record's ``problem_statement`` stand in for it; the agent's system prompt is
    never shown to the world model (its system prompt is its own)."""
    base = make_trajectory()
    record = {
        "instance_id": "a__b-1", "repo": "a/b", "version": "1.0", "base_commit": "c0ffee",
        "environment_setup_commit": "c0ffee", "test_patch": "", "FAIL_TO_PASS": [],
        "PASS_TO_PASS": [], "problem_statement": "Fix the parser.",
    }  # fmt: skip
    instance = InstanceSpec.model_validate({"instance_id": "a__b-1", "record": record})
    swe = base.model_copy(update={"env": base.env.model_copy(update={"instance": instance})})
    assert "**Task Instruction:**\nFix the parser." in build_messages(swe, [], LS, 1)[-1]["content"]
    older = swe.model_copy(update={"meta": {"task_instruction": "Find the notes."}})
    assert (
        "**Task Instruction:**\nFind the notes." in build_messages(older, [], LS, 1)[-1]["content"]
    )
    own = older.model_copy(update={"instruction": "Count the files.", "system_prompt": "SECRET"})
    messages = build_messages(own, [], LS, 1)
    assert "**Task Instruction:**\nCount the files." in messages[-1]["content"]
    assert all("SECRET" not in m["content"] for m in messages)


def test_all_seven_domains_have_bundled_prompts() -> None:
    assert set(available_domains()) >= {d.value for d in Domain}


def test_official_layout_fills_tool_definitions_and_keeps_the_rest_verbatim(
    make_trajectory: Callable[..., Trajectory],
) -> None:
    base = make_trajectory()
    tools = [{"name": "read_file", "inputSchema": {"type": "object"}}]
    trajectory = base.model_copy(
        update={"domain": Domain.mcp, "env": base.env.model_copy(update={"tools": tools})}
    )
    call = ToolAction(tool="read_file", args={"path": "a"})
    messages = build_messages(trajectory, [], call, 1, OFFICIAL)
    raw = (OFFICIAL / "mcp" / "system_prompt.txt").read_text()
    assert messages[0]["content"] == raw.replace(
        "{tool_definitions}", json.dumps(tools, ensure_ascii=False, indent=2)
    )
    assert "{unknown_placeholder}" in messages[0]["content"]
    assert messages[1]["content"].startswith("### Turn 1")  # turns: the bundled templates
    info = prompt_set(OFFICIAL)
    assert (info.kind, info.path) == ("official", str(OFFICIAL))
    assert prompt_set().kind == "bundled" and info.hash != prompt_set().hash


def test_screen_prediction_is_reduced_to_the_output() -> None:
    answer = (
        "<predicted_observation>\nagent@sandbox:/workspace$ ls -la\ntotal 0\n"
        "agent@sandbox:/workspace$ \n</predicted_observation>"
    )
    observation = parse_prediction(answer, LS)
    assert observation.text == "total 0\n"
    assert observation.state == {
        "screen": "agent@sandbox:/workspace$ ls -la\ntotal 0\nagent@sandbox:/workspace$ \n"
    }
    assert reduce_screen("total 0\n", "ls -la") == "total 0\n"  # output-only text unchanged
    assert reduce_screen("root@box:/# cat x\nhi\n", "ls") == "root@box:/# cat x\nhi\n"


def test_empty_description_has_fallback(make_trajectory: Callable[..., Trajectory]) -> None:
    messages = build_messages(make_trajectory(description=None), [], LS, 1)
    assert "No description is available" in messages[0]["content"]
    assert len(messages) == 2


def test_history_without_observation_is_refused(
    make_trajectory: Callable[..., Trajectory],
) -> None:
    trajectory = make_trajectory()
    bare = trajectory.steps[0].model_copy(update={"observation": None})
    with pytest.raises(ValueError, match="history step 1"):
        build_messages(trajectory, [bare], LS, 2)


def test_unknown_domain_names_the_missing_template(
    tmp_path: Path, make_trajectory: Callable[..., Trajectory]
) -> None:
    (tmp_path / "terminal").mkdir()
    for name in ("system.md.j2", "action.md.j2"):
        (tmp_path / "terminal" / name).write_text("x")
    data = make_trajectory().model_dump()
    trajectory = Trajectory.model_validate({**data, "domain": "android"})
    with pytest.raises(UnknownDomainError, match=r"android/system\.md\.j2.*terminal"):
        build_messages(trajectory, [], LS, 1, tmp_path)


@pytest.mark.parametrize(
    ("content", "text", "exit_code"),
    [
        ("<predicted_observation>\na\nb\n[exit_code: 2]\n</predicted_observation>", "a\nb\n", 2),
        ("<predicted_observation>\n[exit_code: 0]\n</predicted_observation>", "", 0),
        ("<predicted_observation>\nno code\n</predicted_observation>", "no code\n", None),
        ("<predicted_observation>inline</predicted_observation>", "inline", None),
        ("<predicted_observation>\n\n</predicted_observation>", "\n", None),
        ("[exit_code: 3] is not last\nreally", "[exit_code: 3] is not last\nreally", None),
        ("plain output\n[exit_code: 127]\n", "plain output\n", 127),
        ("\n\nwhole text, no tags\n\n", "whole text, no tags", None),
        ("**Environment Observation:**\nx\n[exit_code: 1]", "x\n", 1),
    ],
)
def test_parse_blocks_and_exit_codes(content: str, text: str, exit_code: int | None) -> None:
    assert parse_prediction(content, LS) == Observation(text=text, exit_code=exit_code)


def test_parse_takes_last_block_after_removing_thinking() -> None:
    content = (
        "<think>draft: <predicted_observation>\nwrong\n</predicted_observation></think>\n"
        "<predicted_observation>\nfirst\n[exit_code: 1]\n</predicted_observation>\n"
        "<think>second thoughts</think>"
        "<predicted_observation>\nlast\n[exit_code: 0]\n</predicted_observation>"
    )
    assert parse_prediction(content, LS) == Observation(text="last\n", exit_code=0)


def test_parse_orphan_closing_think() -> None:
    content = "reasoning whose opening tag was in the prompt</think>\n\nls output"
    assert parse_prediction(content, LS).text == "ls output"


def test_parse_unterminated_think_is_malformed() -> None:
    content = "<think>\nlet me see <predicted_observation>\nx\n</predicted_observation>"
    with pytest.raises(MalformedPredictionError, match="max_tokens"):
        parse_prediction(content, LS)


def test_parse_unclosed_block_keeps_what_was_written() -> None:
    assert parse_prediction("<predicted_observation>\npartial line", LS).text == "partial line"


@pytest.mark.parametrize("content", [None, "", "  \n\t "])
def test_parse_empty_is_malformed(content: str | None) -> None:
    with pytest.raises(MalformedPredictionError, match="empty"):
        parse_prediction(content, LS)


def test_keystrokes_keep_exit_code_line_as_text() -> None:
    content = "<predicted_observation>\nscreen\n[exit_code: 0]\n</predicted_observation>"
    assert parse_prediction(content, KEYS) == Observation(text="screen\n[exit_code: 0]\n")


@pytest.mark.parametrize(
    "observation",
    [
        Observation(text="total 8\ndrwxr-xr-x 2 agent agent 4096 .\n", exit_code=0),
        Observation(text="", exit_code=1),
        Observation(text="no exit code known\n"),
    ],
)
def test_rendered_history_parses_back(observation: Observation) -> None:
    rendered = render_observation(observation, LS, None, "terminal")
    assert parse_prediction(rendered, LS).text == observation.text


def test_strip_thinking_keeps_answer() -> None:
    assert strip_thinking("<think>a</think>b<think>c</think>d") == "bd"


def test_prompt_hash_is_stable_and_tracks_edits(tmp_path: Path) -> None:
    assert prompt_hash() == prompt_hash(BUNDLED)
    for folder in (p for p in BUNDLED.iterdir() if p.is_dir()):
        (tmp_path / folder.name).mkdir()
        for template in [*folder.glob("*.j2"), *folder.glob("*.txt")]:
            (tmp_path / folder.name / template.name).write_text(template.read_text())
    copy = tmp_path / "terminal"
    assert prompt_hash(tmp_path) == prompt_hash(BUNDLED)
    (copy / "system.md.j2").write_text("You simulate a terminal. {{ description }}")
    assert prompt_hash(tmp_path) != prompt_hash(BUNDLED)


def test_custom_prompts_dir_is_used(
    tmp_path: Path, make_trajectory: Callable[..., Trajectory]
) -> None:
    (tmp_path / "terminal").mkdir()
    (tmp_path / "terminal" / "system.md.j2").write_text("SYSTEM {{ cwd }} {{ description }}")
    (tmp_path / "terminal" / "action.md.j2").write_text("T{{ turn }} {{ rendered }}")
    messages = build_messages(make_trajectory(description="d"), [], LS, 1, tmp_path)
    assert messages == [
        {"role": "system", "content": "SYSTEM /workspace d"},
        {"role": "user", "content": "T1 ls -la"},
    ]


def test_awb_earlier_turn_gets_the_benchmark_suffix_once() -> None:
    from fidelity.formats.agentworldbench import read_agentworldbench

    data = Path(__file__).resolve().parents[1] / "formats" / "data" / "agentworldbench"
    sample = {t.id: t for t in read_agentworldbench(data / "terminal_test.jsonl")}["terminal-1-t3"]
    record = sample.meta["agentworldbench"]
    steps = sample.steps
    evaluated = build_messages(sample, steps[:2], steps[2].action, 3)
    assert evaluated[-1]["content"] == record["prompt"][2]  # already ends with the suffix
    assert [m["content"] for m in evaluated[2:5:2]] == record["response"][:2]
    earlier = build_messages(sample, steps[:1], steps[1].action, 2)  # --turns all
    assert earlier[-1]["content"] == record["prompt"][1] + record["suffix"]
    assert record["suffix"] and record["prompt"][2].endswith(record["suffix"])


def test_official_layout_without_the_domain_names_its_system_prompt(
    tmp_path: Path, make_trajectory: Callable[..., Trajectory]
) -> None:
    (tmp_path / "mcp").mkdir()
    (tmp_path / "mcp" / "system_prompt.txt").write_text("MCP {tool_definitions}")
    with pytest.raises(UnknownDomainError, match=r"terminal/system_prompt\.txt is missing.*mcp"):
        build_messages(make_trajectory(), [], LS, 1, tmp_path)
