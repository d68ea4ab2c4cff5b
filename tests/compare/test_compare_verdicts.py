"""Verdicts on what world models write (issue 26): whitespace, amount of difference, lines.

- line endings, spaces at line ends and blank lines at the end are the same text on every
  text domain (counted rules), unless the compare config asks for ``whitespace = "strict"``;
- the drift probability grows with the amount of difference (changed lines, their share,
  changed characters), and a reordered but equal set of lines changes none of them;
- every added or changed line is a ``line:`` hallucination, dropped or changed real lines
  ``line:`` omissions, with the tokens the other side lacks, ranked and capped.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from compare_samples import context, obs

from fidelity.compare import CompareConfig, get_comparator, load_compare_config
from fidelity.compare.entities import MAX_ENTITIES, rank
from fidelity.compare.normalize import (
    BLANK_LINES_RULE,
    TRAILING_SPACE_RULE,
    WHITESPACE_RULES,
    Normalizer,
    strip_blank_end,
    strip_line_ends,
)
from fidelity.errors import UsageError

CODE = "".join(f"    value_{i} = compute({i}, name='item{i}')\n" for i in range(300))
TEXT_DOMAINS = ("terminal", "swe", "mcp", "search")

SAME_TEXT = [
    ("crlf", "a = 1\r\nb = 2\r\n", "a = 1\nb = 2\n", {"crlf": 2}),
    ("blank line", "a = 1\nb = 2\n", "a = 1\nb = 2\n\n", {BLANK_LINES_RULE: 1}),
    ("tab", "a = 1\t\nb = 2\n", "a = 1\nb = 2\n", {TRAILING_SPACE_RULE: 1}),
    ("no final newline", "a = 1\nb = 2", "a = 1\nb = 2\n", {}),
    ("all", "a = 1  \r\nb = 2\r\n", "a = 1\nb = 2\t\n \n\n", {"crlf": 2}),
]


@pytest.mark.parametrize("domain", TEXT_DOMAINS)
@pytest.mark.parametrize(("name", "real", "sim", "counted"), SAME_TEXT)
def test_whitespace_is_the_same_text_and_counted(
    domain: str, name: str, real: str, sim: str, counted: dict[str, int]
) -> None:
    result = get_comparator(domain).compare(obs(real), obs(sim), context("cat a.py"))
    assert (result.drift, result.score) == (False, 1.0), name
    assert result.hallucinations == result.omissions == []
    assert counted.items() <= result.normalizations.items()


@pytest.mark.parametrize("domain", ("terminal", "swe"))
@pytest.mark.parametrize(
    ("name", "real", "sim"),
    [
        ("leading", "\nflag{abc}\n", "flag{abc}\n"),  # a real CTF step the labellers call drift
        ("inner", "a = 1\n\nb = 2\n", "a = 1\nb = 2\n"),
    ],
)
def test_a_blank_line_anywhere_but_the_end_drifts(
    domain: str, name: str, real: str, sim: str
) -> None:
    """The rubric excuses only whitespace at the end; no character differs, so no amount or
    entity shows it: it is a mismatch of its own."""
    result = get_comparator(domain).compare(obs(real), obs(sim), context("cat a.py"))
    assert result.drift, name
    assert "blank lines differ: 1" in result.reasons


def test_all_whitespace_rules_count_on_one_text() -> None:
    comparison = get_comparator("terminal").compare(
        obs("a = 1  \r\nb = 2\r\n"), obs("a = 1\nb = 2\t\n \n\n"), context("cat a.py")
    )
    assert comparison.normalizations == {"crlf": 2, TRAILING_SPACE_RULE: 3, BLANK_LINES_RULE: 2}


@pytest.mark.parametrize("domain", TEXT_DOMAINS)
def test_strict_whitespace_counts_line_endings_and_trailing_space(
    domain: str, tmp_path: Path
) -> None:
    path = tmp_path / "compare.toml"
    path.write_text('whitespace = "strict"\n')
    config = load_compare_config(path)
    assert config.whitespace == "strict"
    comparator = get_comparator(domain, config)
    for name, real, sim, _ in SAME_TEXT:
        result = comparator.compare(obs(real), obs(sim), context("cat a.py"))
        assert result.score < 1.0, name
        assert result.drift or domain == "mcp", name  # mcp's calibration forgives a blank line
        assert not {"crlf", "carriage_return", *WHITESPACE_RULES} & result.normalizations.keys()


def test_unknown_whitespace_mode_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "compare.toml"
    path.write_text('whitespace = "loose"\n')
    with pytest.raises(UsageError) as caught:
        load_compare_config(path)
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "whitespace" in message


def test_whitespace_rules_can_be_disabled_one_by_one() -> None:
    config = CompareConfig.model_validate({"normalize": {"disable": [BLANK_LINES_RULE]}})
    comparator = get_comparator("terminal", config)
    assert comparator.compare(obs("a\n"), obs("a\n\n"), context("cat a")).drift
    assert not comparator.compare(obs("a \n"), obs("a\n"), context("cat a")).drift


@pytest.mark.parametrize(
    ("text", "expected", "lines"),
    [
        ("a \nb\t\t\nc", "a\nb\nc", 2),
        ("a\nb  ", "a\nb", 1),
        ("a\nb\n", "a\nb\n", 0),
        ("x \xa0\n", "x \xa0\n", 0),  # only spaces and tabs
    ],
)
def test_strip_line_ends(text: str, expected: str, lines: int) -> None:
    assert strip_line_ends(text) == (expected, lines)


@pytest.mark.parametrize(
    ("text", "expected", "blank"),
    [("a\n", "a", 0), ("a\n\n\n", "a", 2), ("a", "a", 0), ("\n\n", "", 1), ("", "", 0)],
)
def test_strip_blank_end(text: str, expected: str, blank: int) -> None:
    assert strip_blank_end(text) == (expected, blank)


@pytest.mark.parametrize(
    "text",
    [
        CODE.replace("\n", " \r\n") + "\n\n",
        "pid 1234  \nstarted 2026-11-20T23:55:57Z\t\n\n",
        "progress 10%\rprogress 100%  \r\ndone \t\n",
        "caf\xe9 \n\n",
    ],
)
def test_compiled_normalizer_agrees_with_the_regexes_on_whitespace(text: str) -> None:
    whole = frozenset(WHITESPACE_RULES)
    reference = Normalizer(line_memo=False, whole_text=whole)
    assert Normalizer(whole_text=whole)(text) == reference(text)


def drift_p(real: str, sim: str, domain: str = "terminal") -> float:
    comparison = get_comparator(domain).compare(obs(real), obs(sim), context("cat src/mod.py"))
    return comparison.metrics["drift_p"]


@pytest.mark.parametrize("domain", ["terminal", "swe"])
def test_drift_probability_grows_with_the_amount_of_difference(domain: str) -> None:
    lines = CODE.splitlines(keepends=True)

    def changed(n: int) -> str:
        return "".join(
            line.replace("compute(", "compute_v2(") if i < n else line
            for i, line in enumerate(lines)
        )

    reordered = "".join(reversed(lines))
    probabilities = [drift_p(CODE, changed(n), domain) for n in (1, 3, 30, 150, 300)]
    assert probabilities == sorted(probabilities)
    assert probabilities[0] < probabilities[-1]
    # the same lines in another order change no line: less evidence than one changed line
    assert drift_p(CODE, CODE, domain) < drift_p(CODE, reordered, domain) < probabilities[0]


def test_reordered_lines_change_no_line_and_no_character() -> None:
    comparison = get_comparator("terminal").compare(
        obs(CODE), obs("".join(reversed(CODE.splitlines(keepends=True)))), context("cat m.py")
    )
    metrics = comparison.metrics
    assert (metrics["lines_changed"], metrics["changed_share"], metrics["chars_changed"]) == (
        0.0,
        0.0,
        0.0,
    )
    # nothing invented or lost: only the lines off the longest run in order, named as moved
    assert len(comparison.hallucinations) == MAX_ENTITIES
    assert all(e.startswith("moved:") for e in comparison.hallucinations)
    assert comparison.omissions == []


def test_amount_of_one_changed_line() -> None:
    real = "alpha one\nbeta two\ngamma three\n"
    comparison = get_comparator("terminal").compare(
        obs(real), obs(real.replace("beta two", "beta twos")), context("cat notes")
    )
    metrics = comparison.metrics
    assert metrics["lines_changed"] == 2.0  # one line gone, one line new
    assert metrics["changed_share"] == 2 / 6
    assert metrics["chars_changed"] == 1.0


def test_an_invented_code_line_is_named_with_its_new_identifier_first() -> None:
    real = "def load(path):\n    return read(path)\n"
    sim = "def load(path):\n    cache = self._meta_cache[path]\n    return read(path)\n"
    comparison = get_comparator("swe").compare(obs(real), obs(sim), context("cat io.py"))
    assert comparison.drift
    assert comparison.hallucinations == [
        "ident:self._meta_cache",
        "line:cache = self._meta_cache[path]",
        "word:cache",
    ]
    assert comparison.omissions == []


def test_a_changed_message_names_its_line_and_words_on_both_sides() -> None:
    real = "Checking rows\nError: the header is missing\n"
    sim = "Checking rows\nError: the footer is malformed\n"
    comparison = get_comparator("terminal").compare(obs(real), obs(sim), context("python c.py"))
    assert comparison.hallucinations == [
        "line:Error: the footer is malformed",
        "word:footer",
        "word:malformed",
    ]
    assert comparison.omissions == [
        "line:Error: the header is missing",
        "word:header",
        "word:missing",
    ]


def test_volatile_values_in_an_added_line_are_not_entities() -> None:
    real = "server ready\n"
    sim = "server ready\nrequest served at 2026-11-20T23:55:57Z by pid 4242\n"
    comparison = get_comparator("terminal").compare(obs(real), obs(sim), context("cat log"))
    named = " ".join(comparison.hallucinations)
    assert "line:request served at <TIMESTAMP> by pid <PID>" in comparison.hallucinations
    assert "TIMESTAMP" not in named.replace("<TIMESTAMP>", "")
    assert "PID" not in named.replace("<PID>", "")
    assert "4242" not in named and "2026" not in named


def test_entities_are_capped_per_step_most_telling_first() -> None:
    sim = "".join(f"line {i} says hello_{i} to everyone here\n" for i in range(40))
    comparison = get_comparator("terminal").compare(obs("nothing\n"), obs(sim), context("cat x"))
    assert len(comparison.hallucinations) == MAX_ENTITIES
    assert comparison.hallucinations[0] == "ident:hello_0"
    assert not any(h.startswith("word:") for h in comparison.hallucinations)


def test_the_cap_names_one_thing_per_changed_line_before_a_second() -> None:
    real = "collecting\n"
    sim = "".join(
        f"FAIL: test_case_{i} (suite_{i}.tests.Case{i}) raised KeyError{i}Error\n"
        for i in range(12)
    )
    comparison = get_comparator("terminal").compare(obs(real), obs(sim), context("pytest"))
    named = comparison.hallucinations
    assert len(named) == MAX_ENTITIES
    # each of the first ten lines is named once (by its most telling name), none twice
    for i in range(MAX_ENTITIES):
        assert sum(f"_{i} " in h + " " or f"{i}Error" in h for h in named) == 1


def test_a_hex_id_in_an_invented_line_is_named_as_written() -> None:
    real = "release: ELF executable, BuildID[sha1]=675399f73a52ff88383a475ad8ffba9aed65bd71, ok\n"
    sim = (
        "release: ELF pie executable, BuildID[sha1]=4c3e1a9f0b7d2e5a86f1c0d93b7e24a5f8d61c02, ok\n"
    )
    comparison = get_comparator("terminal").compare(obs(real), obs(sim), context("file release"))
    assert (
        "line:release: ELF pie executable, BuildID[sha1]=4c3e1a9f0b7d2e5a86f1c0d93b7e24a5f8d61c02, ok"
    ) in comparison.hallucinations
    assert any("675399f73a52ff88383a475ad8ffba9aed65bd71" in o for o in comparison.omissions)
    # a hex id alone in an otherwise equal line stays volatile: no drift, nothing named
    same = get_comparator("terminal").compare(
        obs(real), obs(real.replace("675399f7", "8f9d01aa")), context("file release")
    )
    assert not same.drift and same.hallucinations == [] and same.omissions == []


def test_a_line_that_is_one_name_is_named_once() -> None:
    comparison = get_comparator("terminal").compare(
        obs("a.py\nb.py\n"), obs("a.py\nb.py\nhelpers_v2.py\n"), context("ls")
    )
    assert comparison.hallucinations == ["file:helpers_v2.py"]


def test_rank_orders_specific_then_lines_then_words_and_caps() -> None:
    entities = ["word:a", "line:x", "file:f.py", "word:b", "number:3", "line:x", "ident:q"]
    assert rank(entities) == ["file:f.py", "number:3", "ident:q", "line:x", "word:a", "word:b"]
    assert rank(entities, 2) == ["file:f.py", "number:3"]
