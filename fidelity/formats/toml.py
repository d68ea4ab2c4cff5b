"""TOML files validated into pydantic models (gate policies, compare configs)."""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel, ValidationError

from fidelity.errors import InputFormatError, NotFoundError, UsageError
from fidelity.formats.jsonl import field_path

Model = TypeVar("Model", bound=BaseModel)


def load_toml_model(path: str | os.PathLike[str], model: type[Model], what: str) -> Model:
    """*path* parsed as TOML and validated as *model*; errors name the file and the field.

    *what* names the file in messages (``policy``, ``compare config``): a
    missing file is a :class:`NotFoundError`, an unreadable one a
    :class:`UsageError`, bad TOML or a bad field an :class:`InputFormatError`.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: cannot read {what}: no such file") from exc
    except OSError as exc:
        raise UsageError(f"{path}: cannot read {what}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise InputFormatError(str(path), None, None, f"invalid TOML ({exc})") from exc
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputFormatError(str(path), None, field_path(first["loc"]), first["msg"]) from exc
