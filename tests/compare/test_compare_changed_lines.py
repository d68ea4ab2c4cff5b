"""``terminal.changed_lines`` and ``terminal.with_hex``: the shortcuts give what the plain
definitions give (lines as multisets in text order; ``<HEX>`` filled only in ``line:``)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from fidelity.compare.terminal import changed_lines, with_hex


def _plain(real: str, sim: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The definition: each line as often as one side has it more often, first ones first."""

    def surplus(lines: list[str], other: list[str]) -> tuple[str, ...]:
        extra = Counter(lines)
        extra.subtract(Counter(other))
        out = []
        for line in lines:
            if extra[line] > 0:
                out.append(line)
                extra[line] -= 1
        return tuple(out)

    real_lines, sim_lines = real.split("\n"), sim.split("\n")
    return surplus(sim_lines, real_lines), surplus(real_lines, sim_lines)


@pytest.mark.parametrize("seed", range(200))
def test_changed_lines_is_the_multiset_difference_in_text_order(seed: int) -> None:
    rng = random.Random(seed)
    pool = ["", "a", "b", "total 4", "x = 1", "done"]
    real = "\n".join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
    sim = "\n".join(rng.choice(pool) for _ in range(rng.randint(1, 12)))
    assert changed_lines(real, sim) == _plain(real, sim)


def test_a_line_repeated_more_often_is_changed_once_per_extra_copy() -> None:
    real = "ok\nerror\nok\nend"
    sim = "ok\nok\nok\nnew\nend\nend"
    # sim: one more "ok", a new line, one more "end"; real: "error" gone
    assert changed_lines(real, sim) == (("ok", "new", "end"), ("error",))


def test_with_hex_fills_only_line_entities_and_copies_the_rest() -> None:
    entities = ["line:commit <HEX> done", "word:<HEX>", "ident:load"]
    raw = "commit 3f2a9c1 done\n"
    assert with_hex(entities, raw) == ["line:commit 3f2a9c1 done", "word:<HEX>", "ident:load"]
    plain = ["ident:load", "line:no id here"]
    out = with_hex(plain, raw)
    assert out == plain and out is not plain
