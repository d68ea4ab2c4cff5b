"""The user's compare config: TOML loading, rules switched off or added, thresholds."""

from __future__ import annotations

from pathlib import Path

import pytest

from fidelity.compare import CompareContext, TerminalComparator, get_comparator, load_compare_config
from fidelity.errors import UsageError
from fidelity.trajectory import CommandAction, Observation


def test_user_rule_and_disabled_rule(tmp_path: Path) -> None:
    path = tmp_path / "compare.toml"
    path.write_text(
        '[normalize]\ndisable = ["pid"]\n'
        '[[normalize.rules]]\nname = "request_id"\npattern = "req-[0-9a-z]{8}"\n'
        'replacement = "<REQID>"\n'
    )
    config = load_compare_config(path)
    comparator = get_comparator("terminal", config)
    assert isinstance(comparator, TerminalComparator)
    same = comparator.compare(
        Observation(text="served req-ab12cd34\n"),
        Observation(text="served req-zz99yy88\n"),
        CompareContext(action=CommandAction(command="x")),
    )
    assert not same.drift
    assert same.normalizations == {"request_id": 2}
    pids = comparator.compare(
        Observation(text="pid 123\n"),
        Observation(text="pid 456\n"),
        CompareContext(action=CommandAction(command="x")),
    )
    assert pids.drift  # pid switched off: the numbers now differ
    default = TerminalComparator().compare(
        Observation(text="pid 123\n"),
        Observation(text="pid 456\n"),
        CompareContext(action=CommandAction(command="x")),
    )
    assert not default.drift


def test_threshold_replaces_calibration(tmp_path: Path) -> None:
    path = tmp_path / "compare.toml"
    path.write_text("[thresholds]\nterminal = 0.5\n")
    comparator = get_comparator("terminal", load_compare_config(path))
    assert isinstance(comparator, TerminalComparator)
    assert comparator.calibration is None and comparator.threshold == 0.5
    assert TerminalComparator().calibration is not None


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[normalize]\ndisable = ["nope"]\n', "normalize.disable"),
        ('[[normalize.rules]]\nname = "x"\npattern = "("\n', "normalize.rules.0.pattern"),
        ('[[normalize.rules]]\nname = "pid"\npattern = "a"\n', "normalize.rules"),
        ("[thresholds]\nweb = 2.0\n", "thresholds"),
        ("[extra]\n", "extra"),
        ("not toml [", None),
    ],
)
def test_bad_config_names_file_and_field(tmp_path: Path, text: str, field: str | None) -> None:
    path = tmp_path / "compare.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        load_compare_config(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message
    if field:
        assert field in message


def test_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        load_compare_config(tmp_path / "absent.toml")
