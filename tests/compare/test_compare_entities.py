"""Entity extraction from normalized terminal text."""

from __future__ import annotations

import random
import sys

import pytest
from compare_samples import Run, git_log_output, ls_la_output

from fidelity.compare import entities
from fidelity.compare.entities import extract, kind_of
from fidelity.compare.normalize import PLACEHOLDER_RE, normalize


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "cat: secrets.txt: No such file or directory",
            {"file:secrets.txt", "errmsg:No such file or directory"},
        ),
        (
            '  File "/workspace/src/app.py", line 12, in <module>',
            {"path:/workspace/src/app.py", "number:12"},
        ),
        ("see https://example.com/a/b?x=1, then", {"url:https://example.com/a/b?x=1"}),
        (
            "GET http://localhost:<PORT>/health 200",
            {"url:http://localhost:<PORT>/health", "number:200"},
        ),
        (
            "Successfully installed requests-2.31.0 urllib3-2.0.7",
            {"package:requests==2.31.0", "package:urllib3==2.0.7"},
        ),
        (
            "requests==2.31.0\nlodash@4.17.21",
            {"package:requests==2.31.0", "package:lodash@4.17.21"},
        ),
        ("ZeroDivisionError: division by zero", {"error:ZeroDivisionError"}),
        ("requests.exceptions.ConnectionError: refused", {"error:ConnectionError"}),
        (
            "tests/test_parser.py::TestParser::test_parse_dates PASSED",
            {
                "path:tests/test_parser.py",
                "test:TestParser",
                "test:test_parse_dates",
                "nodeid:tests/test_parser.py::TestParser::test_parse_dates",
            },
        ),
        (
            "test_parse_dates (tests.test_parser.ParserTest.test_parse_dates) ... ok",
            {"test:test_parse_dates"},
        ),
        (
            "4.0K\t./src\n12%\n1,234 rows\nPython 3.11.2",
            {"number:4.0K", "path:./src", "number:12%", "number:1,234", "number:3.11.2"},
        ),
        ("<TMP>/out/result.txt", {"path:<TMP>/out/result.txt"}),
        (
            "config.yaml .env .gitignore Makefile",
            {"file:config.yaml", "file:.env", "file:.gitignore"},
        ),
        ("bash: foo: command not found", {"errmsg:command not found"}),
        ("", set()),
    ],
)
def test_extract(text: str, expected: set[str]) -> None:
    assert extract(text) == expected


@pytest.mark.parametrize("text", ["py311 v2 x86_64 file1", "e2e utf-8", "a1b2 abc_12"])
def test_no_numbers_inside_words(text: str) -> None:
    assert not {e for e in extract(text) if kind_of(e) == "number"}


def test_changed_numbers_show_up() -> None:
    assert extract("  17 notes.txt") ^ extract("  71 notes.txt") == {"number:17", "number:71"}
    assert extract("1234 bytes") ^ extract("1243 bytes") == {"number:1234", "number:1243"}


def test_placeholders_are_never_entities() -> None:
    text, _ = normalize(ls_la_output(Run(1)) + git_log_output(Run(2)) + "pid 4321 took 0.2s\n")
    entities = extract(text) | extract(normalize(ls_la_output(Run(1)))[0], "ls -la")
    assert len(entities) > 10
    assert not any(PLACEHOLDER_RE.fullmatch(e.split(":", 1)[1]) for e in entities)
    assert not any("<" in e for e in entities if kind_of(e) != "path")


def test_ls_listing_names_every_entry() -> None:
    text, _ = normalize(ls_la_output(Run(3)), "ls -la")
    files = {e for e in extract(text, "ls -la") if kind_of(e) == "file"}
    assert files == {
        "file:.bashrc",
        "file:.gitignore",
        "file:README.md",
        "file:Makefile",
        "file:notes",
        "file:config.yaml",
        "file:src",
        "file:tests",
    }


def test_ls_without_command_only_sees_extensions() -> None:
    text, _ = normalize(ls_la_output(Run(3)))
    assert "file:Makefile" not in extract(text)
    assert "file:README.md" in extract(text)


def test_plain_ls_columns_and_marks() -> None:
    text = (
        "Makefile  notes  src/  run.sh*  link@\nls: cannot access 'x': No such file or directory\n"
    )
    files = {e for e in extract(text, "ls -F") if kind_of(e) == "file"}
    assert files == {"file:Makefile", "file:notes", "file:src", "file:run.sh", "file:link"}


def test_ls_symlink_target_is_not_the_name() -> None:
    text = "lrwxrwxrwx 1 root root 7 <TIMESTAMP> current -> v2.1.0\n"
    assert "file:current" in extract(text, "ls -l")
    assert "file:current -> v2.1.0" not in extract(text, "ls -l")


def test_git_status_names_files_without_extension() -> None:
    text = (
        "On branch main\nChanges not staged for commit:\n"
        "\tmodified:   src/app.py\n\tdeleted:    notes\n\n"
        'Untracked files:\n  (use "git add <file>..." to include)\n\tTODO\n'
    )
    files = {e for e in extract(text, "git status") if kind_of(e) == "file"}
    assert files == {"file:src/app.py", "file:notes", "file:TODO"}
    short = {
        e for e in extract(" M src/app.py\n?? TODO\n", "git status -s") if kind_of(e) == "file"
    }
    assert short == {"file:src/app.py", "file:TODO"}


def test_tree_output_names_entries() -> None:
    text = ".\n├── Makefile\n├── src\n│   └── app.py\n└── notes\n\n2 directories, 3 files\n"
    assert {"file:Makefile", "file:src", "file:app.py", "file:notes"} <= extract(text, "tree")


PATHOLOGICAL = [
    "-" * 60_000,
    "1," * 30_000,
    "a+" * 30_000,
    "-/" * 30_000,
    "a/" * 30_000,
    "Nov 20 " * 9_000,
    "http://" + "a" * 60_000 + ",",
    "a1" * 30_000,
    "a+" * 30_000,  # every "a" a url candidate: its scheme run is read 10 characters at most
    "x-" * 30_000,
    "\x1b]" + "x" * 60_000,
    "".join(random.Random(0).choice("aZ9 ./-:,+[]<>@\n\r\x1bé") for _ in range(60_000)),
]


def _calls(text: str) -> tuple[int, str, set[str]]:
    """The Python and C functions called from Python while *text* is normalized and its
    entities extracted (a count of work that no machine's speed changes), and the results."""
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        calls += event in ("call", "c_call")

    sys.setprofile(count)
    try:
        normalized, _ = normalize(text)
        found = extract(normalized, "ls -la")
    finally:
        sys.setprofile(None)
    return calls, normalized, found


@pytest.mark.parametrize("text", PATHOLOGICAL, ids=range(len(PATHOLOGICAL)))
def test_pathological_inputs_stay_linear(text: str) -> None:
    """The work grows linearly with the input: the calls made for the whole text are at most
    twice those for its first half (a loop over lines or matches inside another would make
    them four times), and the results are those of the plain paths: the compiled entity scan
    finds what the regexes find, every entity is in the text, normalizing again changes
    nothing. The work inside one C call (a regex, the compiled scan) is not counted: a
    quadratic one shows only as a slow test."""
    half_calls, _, _ = _calls(text[: len(text) // 2])
    calls, normalized, found = _calls(text)
    assert calls <= 2 * half_calls + 50, (calls, half_calls)
    assert normalize(normalized)[0] == normalized
    if entities._COMPILED is not None and normalized.isascii():
        assert entities._COMPILED(normalized) == entities._regex_found(normalized)
    assert all(entity.partition(":")[2] in normalized for entity in found), found


def test_a_git_revision_range_is_not_a_file() -> None:
    found = extract("index 3f2a1c9..8b7e4d0 100644\ngit log a59f0c8...4b3e6d5\nsee config.yaml\n")
    assert not any(e.startswith("file:") and ".." in e for e in found), found
    assert "file:config.yaml" in found
