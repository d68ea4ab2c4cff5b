"""curl's progress meter is volatile (the ``curl_progress`` rule); shown line and word entities."""

from __future__ import annotations

import random
import re

from compare_samples import context, obs

from fidelity.compare import TerminalComparator
from fidelity.compare.normalize import Normalizer, normalize
from fidelity.compare.terminal import _name_mentioned, _plain_mentioned

HEADER = (
    "  % Total    % Received % Xferd  Average Speed   Time    Time     Time  Current\n"
    "                                 Dload  Upload   Total   Spent    Left  Speed\n"
)
BODY = "<!DOCTYPE html>\n<title>Login</title>\n"


def meter(rows: list[str], separator: str = "\n") -> str:
    """A curl run: the meter (rows joined by *separator*), then the page."""
    return HEADER + separator + separator.join(rows) + "\n" + BODY


FIRST = "  0     0    0     0    0     0      0      0 --:--:-- --:--:-- --:--:--     0"
LAST = "100   673    0   652  100    21   7244    233 --:--:-- --:--:-- --:--:--  7733"


def test_meter_becomes_one_line_with_the_last_rows_sizes() -> None:
    text, counts = normalize(meter([FIRST, LAST]))
    assert text == "<PROGRESS> 100 673 0 652 100 21\n" + BODY
    assert counts == {"curl_progress": 1}


def test_runs_with_other_speeds_times_and_rows_normalize_alike() -> None:
    again = "100   673    0   652  100    21   812k   1.2M  0:00:01  0:00:01 --:--:--  901k"
    slow = "  45   673    0   300  100    21   1200      9  0:00:02  0:00:01  0:00:01  1200"
    # redrawn with \r, rows overwrite each other as on a terminal: curl writes every row at
    # the meter's fixed width, so each one covers the last
    width = max(map(len, (FIRST, slow, again)))
    redrawn = [row.rjust(width) for row in (FIRST, slow, again)]
    runs = [meter([FIRST, LAST]), meter([again]), meter(redrawn, "\r")]
    assert len({normalize(run)[0] for run in runs}) == 1


def test_other_sizes_stay_different() -> None:
    bigger = LAST.replace("652", "952").replace(" 673", " 973")
    assert normalize(meter([bigger]))[0] != normalize(meter([LAST]))[0]


def test_text_without_the_whole_meter_is_untouched() -> None:
    torn = HEADER + "curl: (7) Failed to connect to localhost port 80\n"
    assert normalize(torn) == (torn, {})
    assert Normalizer(line_memo=False)(torn) == (torn, {})


def test_curl_runs_differing_only_in_the_meter_do_not_drift() -> None:
    comparator = TerminalComparator()
    again = "100   673    0   652  100    21   5120      0  0:00:01 --:--:-- --:--:--  5301"
    result = comparator.compare(
        obs(meter([FIRST, LAST])), obs(meter([again])), context("curl -X POST localhost/login")
    )
    assert not result.drift
    assert result.hallucinations == result.omissions == []
    assert result.normalizations["curl_progress"] == 2


def test_mentions_are_the_boundary_regexes() -> None:
    """Names are found with ``str.find`` and their boundaries checked by hand (no pattern
    compiled per name): the answers of the regexes ``(?<![\\w.])name(?!\\w)`` (words,
    identifiers) and ``(?<![\\w.-])name(?![\\w-])`` (a file's base name), over random texts
    of letters and boundaries."""
    rng = random.Random(5)
    for _ in range(20_000):
        text = "".join(rng.choice("ab._- é\n1Z") for _ in range(rng.randint(0, 14)))
        value = "".join(rng.choice("abZ.") for _ in range(rng.randint(1, 3)))
        word = re.search(rf"(?<![\w.]){re.escape(value)}(?!\w)", text) is not None
        name = re.search(rf"(?<![\w.-]){re.escape(value)}(?![\w-])", text) is not None
        assert _plain_mentioned("word:" + value, text) == word, (value, text)
        assert _name_mentioned("ident:" + value, text) == word, (value, text)
        assert _name_mentioned("file:src/" + value, text) == name, (value, text)
        line = f"line:{value} {value}"
        assert _plain_mentioned(line, text) == _name_mentioned(line, text) == (line[5:] in text)
    # the boundaries: no word character or "." before, no word character after
    assert _plain_mentioned("word:abc", "x abc.")
    assert not _plain_mentioned("word:abc", "x.abc ")
    assert not _plain_mentioned("word:abc", "abc_ x")
    assert re.search(r"(?<![\w.])abc(?!\w)", "é abc") and _plain_mentioned("word:abc", "é abc")
