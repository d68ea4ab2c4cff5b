"""The compiled line-local rules (``_fastnorm``) give exactly what the regexes give.

The regex passes (``Normalizer(line_memo=False)``: whole text, no compiled
matchers) are the reference; every text below goes through both, and the
normalized text and the counts per rule must be equal. The texts: the rule
examples, the sample outputs of every command builder, the public agent runs in
``../shared/agent-trajectories`` (observations and commands), and generated
texts made of the pieces the rules look at (dates, zones, ids, keys, brackets,
units) next to each other in every order.
"""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest
from compare_samples import OUTPUTS, Run
from hypothesis import given, settings
from hypothesis import strategies as st
from rapidfuzz.distance import Indel
from test_compare_normalize import MUST_KEEP, MUST_REWRITE

from fidelity.compare import normalize as normalize_module
from fidelity.compare.normalize import DEFAULT_RULES, RULES, Normalizer, compiled_program
from fidelity.compare.terminal import similarity
from tests.conftest import public_agent_steps

REFERENCE = Normalizer(line_memo=False)
COMPILED = Normalizer()

# What the rules look at, and their near misses: joined at random they make dates that stop
# half way, ids next to words, keys without values, units after versions...
PIECES = [
    *("pid", "PID", "Pid", "pID", "process", "Process", "PROCESS", "xpid", "_pid"),
    *(" ", "  ", "\t", "\n", ":", "=", "#", ",", ".", "-", "+", "/", "_", "@", "[", "]", "'"),
    *("]: ", "[1]", "[12]+", "sshd[", "1", "7", "12", "123", "2026", "12345", "123456", "0"),
    *("09", "19", "1990s", "1700000000", "1700000000123", "1499999999", "4", "0.5", "1.4"),
    *("Mon", "Fri", "Sun", "Jan", "Nov", "Dec", "Tue,", "Mar", "May", "Sat", "Wed", "Aug"),
    *("T", "Z", "UTC", "GMT", "CEST", "CET", "AEST", "EST", "PDT", "IST", "AM", "PM", " PM"),
    *("+0000", "+05:30", "-08", "+1", "23:55", "23:55:57", "1:02:03", "9:59", "23:55:57.123"),
    *("2026-11-20", "2026-13-40", "20 Nov 2026", "Nov 20", "T23:55:57Z", "99:99:99"),
    *("s", "ms", "us", "ns", "sec", "secs", "second", "seconds", "min", "mins", "minute"),
    *("hours", "hour", "hr", "hrs", "h", "m", "0m0.012s", "1h2m3s", "µs", "é", "✓"),
    *("deadbeef", "a1b2c3d", "0123456789abcdef", "DEADBEEF", "abcdef", "f" * 7, "0x"),
    *("0x7f3b2c1d9e80", "0x12345", "0x" + "a" * 17, "123e4567-e89b-12d3-a456-426614174000"),
    *("e89b", "-e89b-", "abcdef0123456789abcdef0123456789abcdef01", "9" * 130, "a1" * 70),
    *("/tmp/", "tmp", "tmp.", "tmpabc123", "tmp.AbCdEfGh12", "pytest-of-root", "/pytest-3"),
    *("/tmp/pip-build-env-", "ab12cd34", "\r", "\r\n", "eyJ", "eyJhbGciOi", "abcdefgh."),
    *("Bearer ", "Token ", "abcdefghijklmnop", "abcdefghijklmnopqrstuvwx=="),
    *("token=", "TOKEN=", "sessionid=", "csrf=", "sig=", "xtoken=", "session_key="),
    *("localhost", "127.0.0.1", "0.0.0.0", "[::]", "[::1]", ":8000", ":123456"),
    *("random seed", "Random-seed", "randomly-seed", "PYTHONHASHSEED", "hypothesis seed"),
    *("5816351", "0997741..abcdef0", "1234567/", "<1234567>", "a1b2c3d-", "-a1b2c3d"),
    *("seed", "root@", "@3f2a9c1b7e4d", "@3f2a9c1b7e4dx", "<TMP>", "<PORT>", "\x1c", "\x0b"),
]


def both(text: str, command: str | None = None) -> None:
    """The same text, and the same counts in the same order (they print as JSON objects)."""
    compiled, reference = COMPILED(text, command), REFERENCE(text, command)
    assert compiled[0] == reference[0], repr(text)
    assert list(compiled[1].items()) == list(reference[1].items()), repr(text)


def test_the_extension_is_built_and_runs_every_default_line_rule() -> None:
    """The package build compiles it; a missing module or a fingerprint out of date fails."""
    assert normalize_module._fastnorm is not None
    assert COMPILED._program is not None
    assert len(COMPILED._program_names) == len(COMPILED._line_passes) + 4  # the fused id pass
    assert COMPILED._git_program is not None


def test_an_edited_rule_is_not_matched_by_the_compiled_code() -> None:
    fastnorm = normalize_module._fastnorm
    assert fastnorm is not None
    pid = RULES["pid"]
    assert fastnorm.rule_id(pid.name, pid.regex, pid.replacement, int(pid.flags)) >= 0
    assert fastnorm.rule_id(pid.name, pid.regex + "x", pid.replacement, int(pid.flags)) == -1
    assert fastnorm.rule_id(pid.name, pid.regex, "<P>", int(pid.flags)) == -1
    assert fastnorm.rule_id("ansi", RULES["ansi"].regex, "", 0) == -1  # not line-local
    # a rule set whose line passes hold a rule of its own runs the regexes
    edited = dataclasses.replace(RULES["hex_id"], replacement="<ID>")
    custom = Normalizer([*DEFAULT_RULES[:-1], edited])
    assert custom._program is None
    assert compiled_program(custom._passes[-1:]) is None


def test_rule_examples_and_command_outputs() -> None:
    texts = [text for _, text, _ in MUST_REWRITE] + list(MUST_KEEP)
    for seed in range(5):
        run = Run(seed)
        texts += [build(run) for _, build in OUTPUTS.values()]
    for text in texts:
        for command in (None, "git log", "ps aux"):
            both(text, command)
    joined = "\n".join(texts)
    both(joined)
    assert COMPILED(joined)[1] == REFERENCE(joined)[1] and len(REFERENCE(joined)[1]) >= 15


def test_public_agent_runs() -> None:
    texts = 0
    for command, text in public_agent_steps():
        both(command, "git show")
        if text:
            both(text, command)
            texts += 1
    assert texts > 3000


@settings(max_examples=1500, deadline=None, derandomize=True)
@given(st.lists(st.sampled_from(PIECES), max_size=40))
def test_generated_texts(pieces: list[str]) -> None:
    text = "".join(pieces)
    both(text)
    both(text, "git log --oneline")


def test_mixed_ascii_and_other_lines_and_bail_outs() -> None:
    """Non-ASCII text goes to the regexes, ASCII text to the compiled passes; a guard of a
    rule without a compiled matcher (a lone \\r, pip's folders) sends it to the regexes."""
    rng = random.Random(5)
    for _ in range(300):
        lines = ["".join(rng.choices(PIECES, k=rng.randrange(12))) for _ in range(6)]
        both("\n".join(lines))
    both("pid 12 at 2026-11-20T10:00:00Z\n✓ pid 13 done in 12ms\nok\r50%\r")
    both("/tmp/pip-build-env-ab12cd34 Nov 20 10:00 pid 77")
    normalized, counts = COMPILED("[1] 4242\nµs pid 7\nsshd[123]: up 2s")
    assert normalized == "[1] <PID>\nµs pid <PID>\nsshd[<PID>]: up <DURATION>"
    assert counts == {"bracket_pid": 2, "pid": 1, "duration": 1}


@pytest.mark.parametrize(
    "text",
    [
        "[" * 5000,
        "1" * 20000,
        "a1" * 10000,
        "Nov " * 3000,
        "pid " * 3000,
        "token=" + "x" * 30000,
        "\n".join(["[1] 12345"] * 2000),
        "",
        "\n",
    ],
)
def test_long_and_degenerate_texts(text: str) -> None:
    both(text)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(
    st.lists(st.sampled_from([*PIECES[:60], "a b", "\n\n", " \t ", "x\x1cy"]), max_size=30),
    st.lists(st.sampled_from([*PIECES[:60], "a b", "\n\n", " \t ", "x\x1cy"]), max_size=30),
)
def test_sequence_codes_give_the_lists_similarity(left: list[str], right: list[str]) -> None:
    """Indel over a code point per token (or line) equals Indel over the lists of them."""
    a, b = "".join(left), "".join(right)
    if not (a.isascii() and b.isascii()):
        return
    fastnorm = normalize_module._fastnorm
    assert fastnorm is not None
    for lines, split in ((False, str.split), (True, lambda text: text.split("\n"))):
        expected = Indel.normalized_similarity(split(a), split(b))
        assert Indel.normalized_similarity(*fastnorm.sequence_codes(a, b, lines)) == expected


def test_sequence_codes_past_one_byte_and_the_surrogates() -> None:
    """Texts sharing more distinct pieces than one byte (and than the code points under the
    surrogates) holds: the codes grow in width, skip the surrogates, and keep the similarity."""
    fastnorm = normalize_module._fastnorm
    assert fastnorm is not None
    for shared in (300, 60_000):
        tokens = [f"t{i}" for i in range(shared)]
        a = " ".join(tokens) + " only-a"
        b = " ".join(tokens[shared // 3 :] + tokens[: shared // 3]) + " only-b x"
        codes_a, codes_b = fastnorm.sequence_codes(a, b, False)
        assert len(codes_a) == len(a.split()) and len(codes_b) == len(b.split())
        assert not any(0xD800 <= ord(c) <= 0xDFFF for c in codes_a + codes_b)
        expected = Indel.normalized_similarity(a.split(), b.split())
        assert Indel.normalized_similarity(codes_a, codes_b) == expected


def test_similarity_of_command_outputs_is_the_lists_one() -> None:
    texts = []
    for seed in range(3):
        run = Run(seed)
        texts += [REFERENCE(build(run))[0] for _, build in OUTPUTS.values()]
    for a, b in itertools.pairwise(texts):
        token = Indel.normalized_similarity(a.split(), b.split())
        line = Indel.normalized_similarity(a.split("\n"), b.split("\n"))
        assert similarity(a, b)["token_sim"] == token
        assert similarity(a, b)["line_sim"] == line
