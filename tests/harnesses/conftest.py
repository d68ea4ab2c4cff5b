"""Fixtures of the harness tests: the stand-in SWE-bench instance image and its records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.harnesses import standin

MISSING_ID = "kjd__idna-90002"
"""An instance whose record is given but whose image is neither here nor pullable."""


@pytest.fixture(scope="session")
def standin_image(docker: None) -> str:
    """The stand-in instance image (see :mod:`tests.harnesses.standin`), built once."""
    return standin.build()


@pytest.fixture(scope="session")
def instances_file(standin_image: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A JSONL instances file: the stand-in's record, and one whose image cannot be had."""
    path = tmp_path_factory.mktemp("instances") / "instances.jsonl"
    records = [
        standin.record(standin_image),
        standin.record(standin_image, MISSING_ID, image=None),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
