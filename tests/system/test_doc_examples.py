"""Every TOML, JSON and JSONL example in the docs is what fidelity reads (issue 40, item 14).

Each fenced block tagged ``toml``, ``json`` or ``jsonl`` in ``docs/**/*.md`` and
``README.md`` must parse; then it goes through the loader of what it shows: a
trajectory (a JSON object with ``steps``, a JSONL line) is validated as ``fidelity``
reads a dataset line, and a TOML block by the loader of its page's file
(:data:`TOML_LOADERS`; a TOML block on another page fails until its loader is named
there). ``[sites.shop]`` followed by top-level keys parses as TOML but nests those keys
in the table: only the loader sees that.

A block may be marked as a fragment (part of a larger file, not meant to load alone)
by the line ``<!-- fragment -->`` right before its fence; such blocks are skipped. No
block is marked so today.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from fidelity.compare.config import load_compare_config
from fidelity.env_defaults import load_env_defaults
from fidelity.formats.jsonl import parse_line
from fidelity.policy import load_policy

REPO = Path(__file__).resolve().parents[2]
FRAGMENT = "<!-- fragment -->"
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
LANGUAGES = {"toml", "json", "jsonl"}

TOML_LOADERS: dict[str, Callable[[Path], Any]] = {
    "docs/comparing.md": load_compare_config,  # --compare-config
    "docs/environments.md": load_env_defaults,  # --env-defaults
    "docs/gate.md": load_policy,  # --policy
}
"""The file each page's TOML examples show, by the function that reads that file."""


class Block(NamedTuple):
    page: str
    line: int  # of the opening fence
    lang: str
    text: str


def blocks() -> Iterator[Block]:
    """The fenced blocks of the languages checked here, fragments left out."""
    pages = [*sorted((REPO / "docs").rglob("*.md")), REPO / "README.md"]
    for page in pages:
        lines = page.read_text(encoding="utf-8").splitlines()
        number = 0
        while number < len(lines):
            opening = FENCE.match(lines[number])
            if opening is None or not opening.group("lang"):
                number += 1
                continue
            end = next(i for i in range(number + 1, len(lines)) if lines[i].startswith("```"))
            fragment = number > 0 and lines[number - 1].strip() == FRAGMENT
            if opening.group("lang") in LANGUAGES and not fragment:
                text = "\n".join(lines[number + 1 : end]) + "\n"
                yield Block(str(page.relative_to(REPO)), number + 1, opening.group("lang"), text)
            number = end + 1


BLOCKS = list(blocks())


def test_the_docs_have_examples_of_each_kind() -> None:
    assert {block.lang for block in BLOCKS} >= {"toml", "json"}
    assert {block.page for block in BLOCKS if block.lang == "toml"} == set(TOML_LOADERS)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.page}:{b.line}" for b in BLOCKS])
def test_every_example_is_read_by_fidelity(block: Block, tmp_path: Path) -> None:
    where = f"{block.page}:{block.line}"
    if block.lang == "toml":
        tomllib.loads(block.text)  # the syntax first, then what fidelity makes of it
        loader = TOML_LOADERS.get(block.page)
        assert loader is not None, f"{where}: name the loader of this page's TOML in TOML_LOADERS"
        path = tmp_path / "example.toml"
        path.write_text(block.text, encoding="utf-8")
        loader(path)
        return
    if block.lang == "json":
        lines = [json.dumps(json.loads(block.text))]
    else:
        lines = [line for line in block.text.splitlines() if line.strip()]
    for number, line in enumerate(lines, start=block.line + 1):
        data = json.loads(line)
        if isinstance(data, dict) and "steps" in data:  # a trajectory: a dataset line
            parse_line(line, block.page, number)
