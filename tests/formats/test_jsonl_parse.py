"""``parse_line``: one pass in pydantic, with the values and errors of ``json.loads`` + validation."""

from __future__ import annotations

import json

from fakes.trajectories import command_trajectory
from fidelity.errors import InputFormatError
from fidelity.formats.jsonl import _parse_checked, parse_line
from fidelity.trajectory import Trajectory


def _checked(line: str) -> Trajectory | str:
    """What the former parser (``json.loads`` then ``model_validate``) made of *line*."""
    try:
        return _parse_checked(line, "f.jsonl", 3)
    except InputFormatError as exc:
        return str(exc)


def _fast(line: str) -> Trajectory | str:
    try:
        return parse_line(line, "f.jsonl", 3)
    except InputFormatError as exc:
        return str(exc)


def test_one_pass_parse_reads_what_json_loads_read() -> None:
    """``parse_line`` validates JSON in one pass (pydantic); values and errors stay the former ones.

    Including JSON that only Python's parser reads (a lone surrogate, refused), numbers at the
    edges, a repeated key (the last wins), and lines refused for each kind of reason.
    """
    good = json.loads(command_trajectory("t", "ls").model_dump_json())
    good["steps"][0]["observation"] = {"text": "a", "exit_code": 1.0, "timed_out": "true"}
    line = json.dumps(good)
    cases = [
        line,
        line.replace('"text": "a"', '"text": "\\ud800 lone"'),
        line.replace('"text": "a"', '"text": "\\ud83d\\ude00 \\u2028 \\u0000"'),
        line[:-1] + ', "meta": {"big": 123456789012345678901234567890, "f": 0.1, "e": 1E-7}}',
        line[:-1] + ', "id": "second"}',
        line.replace('"text": "a"', '"text": "a\tb"'),
        line + " x",
        "[1, 2]",
        "\ufeff" + line,
        line.replace('"terminal"', '"spreadsheet"'),
        line.replace('"exit_code": 1.0', '"exit_code": 1.5'),
        line.replace('"id": "t"', '"id": 5'),
        '{"id": "t", "domain": "terminal", "steps": []}',
    ]
    for case in cases:
        expected, got = _checked(case), _fast(case)
        assert type(got) is type(expected), case
        assert got == expected and repr(got) == repr(expected)  # the same values and types
    # json.loads reads a lone surrogate, which no sandbox, store or report can carry: refused
    assert _fast(cases[1]) == (
        "f.jsonl:3: steps.0.observation.text: not valid text: a lone surrogate escape "
        "(\\ud800-\\udfff without its pair) encodes no character"
    )
    assert _fast(cases[7]) == "f.jsonl:3: expected a JSON object, got list"
