"""The compiled entity regex (``_fastentities``) finds exactly what ``_ENTITY_RE`` finds.

The regex (``entities._regex_found``) is the reference; every text below goes
through both and the entity sets must be equal: the sample outputs of every
command builder (raw and normalized), the public agent runs in
``../shared/agent-trajectories`` (observations, raw and normalized, and
commands), generated texts made of the pieces the alternatives look at, and
degenerate inputs.
"""

from __future__ import annotations

import random

import pytest
from compare_samples import OUTPUTS, Run
from hypothesis import given, settings
from hypothesis import strategies as st

from fidelity.compare import entities
from fidelity.compare.normalize import Normalizer
from tests.conftest import public_agent_steps

NORMALIZER = Normalizer()

PIECES = [
    *("http://", "https://h.io/a?b=1", "git+ssh://", "s3://", "abcdefghij://", "://", "x"),
    *("a", "Z", "_", ".", "/", "-", "+", "~", "@", "<", ">", "<TMP>", "<PORT>", "<X", "=", "=="),
    *("1", "2.3", "1.2.3", "rc1", ".dev0", "b2", " ", "\n", "\t", ",", ";", ":", "!", "?", ")"),
    *("]", "'", '"', "`", "\\", "\x1c", "Error", "ValueError", "Exception", "Warning", "Exit"),
    *("KeyboardInterrupt", "StopIteration", "S", "test", "Test", "test_x", "TestFoo", "est_"),
    *(".py", ".tar.gz", "file.txt", "README", ".env", ".git", ".x.", "a.B", "K", "Ki", "KiB"),
    *("MB", "%", "kb", "Gb", "x.ABCD", "x.abcdefghi", "pkg-1.0", "requests==2.31.0"),
    *("lodash@4.17.21", "foo_bar-2.0.1rc1", "A-1.2", "0", "42", "4.0K", "3.11.2", "1,234"),
    *("src/app.py", "/etc/hosts", "./run.sh", "../x", "~/.bashrc", "a/b/", "x-/y", "+/z"),
]


def same(text: str) -> None:
    assert entities._COMPILED is not None
    assert entities._COMPILED(text) == entities._regex_found(text), repr(text)


def test_the_extension_is_built_and_matches_the_pattern() -> None:
    assert entities._fastentities is not None
    assert entities._COMPILED is not None
    assert entities._fastentities.matches_pattern(entities._ENTITY_RE.pattern)
    assert not entities._fastentities.matches_pattern(entities._ENTITY_RE.pattern + "|x")


def test_command_outputs_raw_and_normalized() -> None:
    for seed in range(5):
        run = Run(seed)
        for _, build in OUTPUTS.values():
            text = build(run)
            same(text)
            same(NORMALIZER(text)[0])


def test_public_agent_runs() -> None:
    texts = 0
    for command, text in public_agent_steps():
        if command.isascii():
            same(command)
        if text and text.isascii():
            same(text)
            same(NORMALIZER(text)[0])
            texts += 1
    assert texts > 3000


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(PIECES), max_size=30))
def test_generated_texts(pieces: list[str]) -> None:
    same("".join(pieces))


def test_random_characters() -> None:
    rng = random.Random(11)
    alphabet = "aZ_./-+~@<>=1 \n,;)]'\"`KiBM%kbEtTsx:"
    for _ in range(3000):
        same("".join(rng.choices(alphabet, k=rng.randrange(40))))


def test_non_ascii_text_goes_to_the_regex() -> None:
    text = "Fehler: ValueError in datei.py — 1,5 MB geschrieben\n"
    assert entities.extract(text) == entities._regex_found(text) | {
        "errmsg:" + m for m in entities._error_messages(text)
    }
    with pytest.raises(ValueError, match="ASCII"):
        entities._COMPILED(text)  # type: ignore[misc]


@pytest.mark.parametrize(
    "text",
    [
        "-" * 5000,
        "1,1," * 3000,
        "a." * 5000,
        "a/" * 5000,
        "http://" + "x" * 20000 + ".",
        "pkg-" * 3000 + "1.2",
        "Test" * 3000,
        "<TMP>" * 3000,
        "",
    ],
)
def test_long_and_degenerate_texts(text: str) -> None:
    same(text)
