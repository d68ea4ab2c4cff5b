"""Risk features read from a simulated trajectory alone: exact values on hand-made trajectories."""

from __future__ import annotations

import math

import pytest

from fidelity.errors import UsageError
from fidelity.risk import FEATURES, StepFeatures, action_key, sample_groups, step_features
from fidelity.risk.features import read_only, shape_of
from fidelity.trajectory import (
    BrowserAction,
    CommandAction,
    KeystrokesAction,
    Observation,
    Step,
    TextAction,
    ToolAction,
    Trajectory,
)


def trajectory(*steps: tuple[str, str | None], **meta: object) -> Trajectory:
    """A simulated terminal trajectory of (command, observation text or None) steps."""
    return Trajectory(
        id="t-1",
        domain="terminal",
        source="sim",
        steps=[
            Step(
                action=CommandAction(command=command),
                observation=None if text is None else Observation(text=text),
            )
            for command, text in steps
        ],
        meta=dict(meta),
    )


def test_novel_content_counts_what_nothing_shown_names() -> None:
    found = step_features(
        trajectory(("ls", "README.md\nsrc\n"), ("cat README.md", "# Demo\nversion 1.2\n"))
    )
    first, second = found
    # README.md (a file name) and src (listed by ls): nothing before names them
    assert (first.novel_entities, first.novel_numbers) == (2, 0)
    assert first.novel_words == 3  # README, md, src ("ls" is the action's)
    assert first.novel_chars == len("README.md") + len("src")
    assert (first.size, first.depth, first.action, first.shape) == (13, 1, "ls", "short")
    # the number 1.2 is new; README.md was shown (the listing, and the action)
    assert (second.novel_entities, second.novel_numbers) == (1, 1)
    assert second.novel_words == 2  # Demo, version
    assert second.novel_chars == len("# Demo") + len("version 1.2")


def test_shown_content_is_not_novel() -> None:
    text = "alpha beta 42\n"
    _, again = step_features(trajectory(("cat a.txt", text), ("cat a.txt", text)))
    assert (again.novel_entities, again.novel_words, again.novel_chars) == (0, 0, 0)
    assert again.contradictions == 0  # the same output again


def test_volatile_values_are_never_novel() -> None:
    (step,) = step_features(trajectory(("date", "2026-11-27T10:00:00Z\n")))
    assert (step.novel_entities, step.novel_numbers) == (0, 0)


def test_repeated_read_only_command_that_changes_is_a_contradiction() -> None:
    steps = step_features(
        trajectory(("ls", "README.md\nsrc\n"), ("cat README.md", "# Demo\n"), ("ls", "README.md\n"))
    )
    assert [s.contradictions for s in steps] == [0, 0, 1]  # file:src vanished, nothing removed it


def test_a_change_in_between_excuses_the_repeat() -> None:
    steps = step_features(
        trajectory(("ls", "README.md\nsrc\n"), ("rm -r src", ""), ("ls", "README.md\n"))
    )
    assert [s.contradictions for s in steps] == [0, 0, 0]


def test_a_name_shown_then_claimed_missing_is_a_contradiction() -> None:
    steps = step_features(
        trajectory(
            ("ls", "README.md\nsrc\n"),
            ("cat src", "cat: src: No such file or directory\n"),
            ("python run.py", "bash: python: command not found\n"),
            ("python run.py", "python: can't open file 'run.py': [Errno 2] No such file\n"),
        )
    )
    # src was listed; python had not run before step 3 (so its "not found" is no contradiction),
    # nor was run.py ever shown
    assert [s.contradictions for s in steps] == [0, 1, 0, 0]


def test_a_program_that_ran_then_is_not_found_is_a_contradiction() -> None:
    steps = step_features(
        trajectory(
            ("tshark -r a.pcap", "1 0.0 TCP\n"),
            ("tshark -r a.pcap -q", "bash: tshark: command not found\n"),
        )
    )
    assert [s.contradictions for s in steps] == [0, 1]


def test_created_names_exist_until_removed() -> None:
    steps = step_features(
        trajectory(
            ("echo hi > notes.txt", ""),
            ("cat notes.txt", "cat: notes.txt: No such file or directory\n"),
            ("rm notes.txt", ""),
            ("cat notes.txt", "cat: notes.txt: No such file or directory\n"),
        )
    )
    assert [s.contradictions for s in steps] == [0, 1, 0, 0]


def test_format_lines_echo_the_action_or_a_prompt() -> None:
    (step,) = step_features(
        trajectory(("python run.py --fast", "python run.py --fast\nuser@box:~$ ls\nok\n"))
    )
    assert step.format_lines == 2
    keys = Trajectory(
        id="k",
        domain="terminal",
        steps=[
            Step(action=KeystrokesAction(keys="ls\n"), observation=Observation(text="$ ls\na\n"))
        ],
    )
    (screen,) = step_features(keys)
    assert screen.format_lines is None  # a terminal screen shows prompts: not measured


def test_missing_observation_has_no_content_features() -> None:
    failed = Trajectory(
        id="f",
        domain="terminal",
        steps=[
            Step(action=CommandAction(command="ls"), observation=Observation(error="Timeout: x")),
            Step(action=CommandAction(command="pwd")),
        ],
    )
    for step in step_features(failed):
        assert step.shape == "none"
        assert all(
            value is None
            for name, value in zip(FEATURES, step.values(), strict=True)
            if name != "depth"
        )
    assert [s.depth for s in step_features(failed)] == [1, 2]


def test_log_probabilities_give_surprisal_and_absent_ones_give_none() -> None:
    steps = step_features(
        trajectory(("ls", "a\n"), ("pwd", "/w\n"), logprobs=[[-0.5, -1.5, 0.0], None])
    )
    assert (steps[0].mean_surprisal, steps[0].max_surprisal) == (pytest.approx(2 / 3), 1.5)
    assert (steps[1].mean_surprisal, steps[1].max_surprisal) == (None, None)
    plain = step_features(trajectory(("ls", "a\n")))
    assert (plain[0].mean_surprisal, plain[0].sample_spread) == (None, None)


@pytest.mark.parametrize(
    ("logprobs", "message"),
    [
        ([[-1.0]], ": expected one entry per step (2), got 1"),
        ("x", ": expected one entry per step (2), got str"),
        ([[-1.0], ["a"]], "[1]: expected null or a list of numbers <= 0"),
        ([[0.5], None], "[0]: expected null or a list of numbers <= 0"),
        ([[math.nan], None], "[0]: expected null or a list of numbers <= 0"),
    ],
)
def test_malformed_log_probabilities_are_refused(logprobs: object, message: str) -> None:
    with pytest.raises(UsageError) as raised:
        step_features(trajectory(("ls", "a\n"), ("pwd", "/w\n"), logprobs=logprobs))
    assert str(raised.value) == "trajectory 't-1': meta.logprobs" + message


def test_samples_disagreement_is_the_mean_pairwise_distance() -> None:
    def sample(k: int, text: str) -> Trajectory:
        t = trajectory(("ls", "same\n"), ("cat x", text), source_id="t", mode="open-loop", sample=k)
        return t.model_copy(update={"id": f"t@open-loop#{k}"})

    a, b, c = sample(0, "abcd"), sample(1, "abcd"), sample(2, "wxyz")
    steps = step_features(a, [a, b, c])
    assert steps[0].sample_spread == 0.0
    # pairs (a, b) 0, (a, c) 1, (b, c) 1: "abcd" and "wxyz" share no character
    assert steps[1].sample_spread == pytest.approx(2 / 3)


def test_sample_groups_are_adjacent_lines_of_one_source_and_mode() -> None:
    def t(id_: str, **meta: object) -> Trajectory:
        return trajectory(("ls", "a\n"), **meta).model_copy(update={"id": id_})

    lines = [
        t("x@open-loop#0", source_id="x", mode="open-loop", sample=0),
        t("x@open-loop#1", source_id="x", mode="open-loop", sample=1),
        t("x@teacher-forced#0", source_id="x", mode="teacher-forced", sample=0),
        t("plain"),
        t("y@open-loop#0", source_id="y", mode="open-loop", sample=0),
    ]
    groups = [[g.id for g in group] for group in sample_groups(lines)]
    assert groups == [
        ["x@open-loop#0", "x@open-loop#1"],
        ["x@teacher-forced#0"],
        ["plain"],
        ["y@open-loop#0"],
    ]
    assert [len(g) for g in sample_groups(lines[:2], limit=1)] == [1, 1]


@pytest.mark.parametrize(
    ("action", "key"),
    [
        (CommandAction(command="cd src && ls -la"), "cd"),
        (CommandAction(command="git log --oneline"), "git log"),
        (CommandAction(command="python -m pytest -q"), "python -m pytest"),
        (CommandAction(command="I'll update `debug_test.py`."), "(text)"),
        (CommandAction(command="This violates the type hint"), "(text)"),
        (CommandAction(command="RsaCtfTool.py -n 5"), "RsaCtfTool.py"),
        (TextAction(text="click the button"), "(text)"),
        (
            ToolAction(tool="str_replace_editor", args={"command": "view"}),
            "str_replace_editor view",
        ),
        (BrowserAction(action="click('12')"), "click"),
    ],
)
def test_action_key(action: object, key: str) -> None:
    assert action_key(action) == key  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls -la", True),
        ("cat a.py | grep foo 2>&1", True),
        ("git status && git diff", True),
        ("sed -n '1,5p' a.py", True),
        ("sed -i 's/a/b/' a.py", False),
        ("find . -name '*.pyc' -delete", False),
        ("cat a > b", False),
        ("python run.py", False),
        ("ls\nrm x", False),
    ],
)
def test_read_only(command: str, expected: bool) -> None:
    assert read_only(command) is expected


def test_shapes() -> None:
    assert [shape_of(t) for t in (None, " \n", "x" * 199, "x" * 200)] == [
        "none",
        "empty",
        "short",
        "long",
    ]


def test_values_follow_the_feature_order() -> None:
    step = StepFeatures(depth=3, domain="terminal", action="ls", shape="short", size=7)
    assert dict(zip(FEATURES, step.values(), strict=True))["depth"] == 3.0
    assert dict(zip(FEATURES, step.values(), strict=True))["size"] == 7.0
    assert step.with_values(size=9).size == 9
