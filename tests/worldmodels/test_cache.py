"""The response cache's file: kept across processes, and never a dataset opened in memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from fidelity.errors import NotADatabaseError, exit_code_for
from fidelity.worldmodels.cache import ResponseCache, request_key

KEY = request_key("m", [{"role": "user", "content": "hi"}], {"temperature": 0}, 0)


def test_a_cached_answer_is_read_back_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "answers.jsonl"  # not there yet: any name makes a DuckDB file
    cache = ResponseCache(path)
    cache.put(KEY, "m", 0, {"temperature": 0}, "hello")
    cache.close()
    again = ResponseCache(path)
    try:
        assert again.get(KEY) == (True, "hello")
    finally:
        again.close()


def test_an_existing_dataset_named_as_the_cache_is_refused(tmp_path: Path) -> None:
    """DuckDB would open it as a new in-memory database: no answer would ever be kept."""
    path = tmp_path / "dataset.jsonl"
    path.write_text('{"id": "t"}\n')
    with pytest.raises(NotADatabaseError, match=r"dataset\.jsonl: not a DuckDB database") as e:
        ResponseCache(path)
    assert exit_code_for(e.value) == 2
    assert "--sim-cache" in str(e.value)
    assert path.read_text() == '{"id": "t"}\n'
