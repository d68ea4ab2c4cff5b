"""The fidelity JSONL interchange format: one :class:`Trajectory` per line.

Reading validates every line before returning anything, so a bad line fails
the whole file with ``path:line: field: reason`` and nothing downstream is
written. Writing is atomic (temp file, then rename).
"""

from __future__ import annotations

import errno
import json
import os
import secrets
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, get_args

from pydantic import ValidationError

from fidelity.duckdb_files import refuse_replacing_database
from fidelity.errors import InputFormatError, NotFoundError, UsageError
from fidelity.trajectory import Action, EnvSpec, Trajectory


def read_trajectories(path: str | os.PathLike[str]) -> list[Trajectory]:
    """Parse and validate every trajectory of a JSONL file.

    Blank lines and lines starting with ``//`` are skipped. Raises
    :class:`InputFormatError` naming the file, line and field of the first
    invalid line, or a duplicate id.
    """
    return [trajectory for _, trajectory in read_numbered(path)]


def read_numbered(path: str | os.PathLike[str]) -> list[tuple[int, Trajectory]]:
    """:func:`read_trajectories` with the line number of each trajectory."""
    path = Path(path)
    try:
        lines = split_lines(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: no such file") from exc
    except UnicodeDecodeError as exc:
        raise InputFormatError(str(path), None, None, f"not UTF-8 text ({exc.reason})") from exc
    except OSError as exc:
        raise NotFoundError(f"{path}: cannot read ({exc.strerror})") from exc
    trajectories: list[tuple[int, Trajectory]] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip() or line.lstrip().startswith("//"):
            continue
        trajectory = parse_line(line, str(path), number)
        if trajectory.id in seen:
            raise InputFormatError(
                str(path),
                number,
                "id",
                f"duplicate id {trajectory.id!r} (first on line {seen[trajectory.id]})",
            )
        seen[trajectory.id] = number
        trajectories.append((number, trajectory))
    if not trajectories:
        raise InputFormatError(str(path), None, None, "no trajectories in file")
    return trajectories


def parse_line(line: str, path: str, number: int) -> Trajectory:
    """Validate one JSONL line; errors name ``path:number`` and the first bad field.

    A valid line is parsed and validated in one pass by pydantic (in Rust, about
    twice as fast as ``json.loads`` then validation). Any line that pass refuses
    goes through :func:`_parse_checked`, which names the error as before, or
    returns the trajectory for JSON only Python's parser takes (numbers past
    pydantic's range). A lone surrogate escape (``"\\ud800"``) and nesting deeper
    than :data:`MAX_DEPTH` are refused there: neither is text a sandbox, the store
    or a report can carry.
    """
    try:
        return Trajectory.model_validate_json(line)
    except ValidationError:
        return _parse_checked(line, path, number)


MAX_DEPTH = 200
"""How deeply objects and arrays may nest below a line's top-level object (pydantic's limit)."""


def json_object(line: str, path: str, number: int) -> dict[str, Any]:
    """One JSONL line (its line end aside) as a JSON object; errors name ``path:number``:
    invalid JSON with the column, nesting deeper than :data:`MAX_DEPTH`, not an object."""
    try:
        data = nested_json(line.rstrip("\r\n"), path, number)
    except json.JSONDecodeError as exc:
        raise InputFormatError(
            path, number, None, f"invalid JSON ({exc.msg} at column {exc.colno})"
        ) from exc
    if not isinstance(data, dict):
        raise InputFormatError(
            path, number, None, f"expected a JSON object, got {type(data).__name__}"
        )
    return data


def nested_json(text: str, path: str, line: int | None, field: str | None = None) -> Any:
    """``json.loads(text)`` for a reader of another format, with nesting deeper than
    :data:`MAX_DEPTH` refused as :class:`InputFormatError` naming *path*, *line* and *field*
    (whatever the depth: Python's parser raises RecursionError past about 1,000 levels, and
    the code after it would past fewer). ``json.JSONDecodeError`` is the caller's to name."""
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputFormatError(path, line, field, _TOO_DEEP) from None
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Iterable[Any] = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise InputFormatError(path, line, field, _TOO_DEEP)
        stack.extend((child, depth + 1) for child in children)
    return data


def _parse_checked(line: str, path: str, number: int) -> Trajectory:
    """:func:`parse_line` through ``json.loads`` and ``model_validate``: the exact error."""
    data = json_object(line, path, number)
    _check_text(data, path, number)
    try:
        return Trajectory.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = field_path(first["loc"])
        extra = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputFormatError(path, number, field, first["msg"] + extra) from exc


_TOO_DEEP = f"invalid JSON (nested deeper than {MAX_DEPTH} levels)"


def _check_text(data: dict[str, Any], path: str, number: int) -> None:
    """Refuse nesting past :data:`MAX_DEPTH` and strings holding a lone surrogate (named by field).

    Walked without recursion, so no depth of input can exhaust Python's stack.
    """
    stack: list[tuple[Any, tuple[int | str, ...]]] = [(data, ())]
    while stack:
        value, loc = stack.pop()
        if isinstance(value, str):
            if not _is_text(value):
                raise InputFormatError(path, number, _dotted(loc), _SURROGATE)
            continue
        if len(loc) > MAX_DEPTH and isinstance(value, dict | list):
            raise InputFormatError(path, number, None, _TOO_DEEP)
        if isinstance(value, dict):
            for key in value:
                if not _is_text(key):
                    raise InputFormatError(path, number, _dotted((*loc, "[key]")), _SURROGATE)
            items: list[tuple[int | str, Any]] = list(value.items())
        elif isinstance(value, list):
            items = list(enumerate(value))
        else:
            continue
        stack.extend((item, (*loc, key)) for key, item in reversed(items))  # document order


_SURROGATE = (
    "not valid text: a lone surrogate escape (\\ud800-\\udfff without its pair) "
    "encodes no character"
)


def _dotted(loc: tuple[int | str, ...]) -> str | None:
    """A location in parsed JSON as a dotted path (no union tags to drop, unlike pydantic's)."""
    return ".".join(str(part) for part in loc) or None


def _is_text(value: str) -> bool:
    """Whether *value* is encodable text (``json.loads`` lets a lone surrogate through)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def confine_paths(
    numbered: Sequence[tuple[int, Trajectory]],
    path: str | os.PathLike[str],
    allowed_roots: Sequence[str | os.PathLike[str]] | None = (),
) -> list[Trajectory]:
    """The trajectories of *path* with ``env.workdir`` and ``@file`` setup paths resolved.

    A dataset is untrusted input: its paths would be copied into a sandbox (and
    shown back). A relative path is taken against the file's folder; every path,
    once ``..`` and symbolic links are resolved, must lie inside the file's folder
    or one of *allowed_roots*, else :class:`InputFormatError` names the file, the
    line and the field. A missing file or folder is refused the same way.
    ``allowed_roots=None`` resolves without confining: only for callers that never
    read the files (simulation shows the world model no file).
    """
    confiner = PathConfiner(path, allowed_roots)
    return [confiner.confine(trajectory, number) for number, trajectory in numbered]


class PathConfiner:
    """:func:`confine_paths` for the trajectories of one file, one at a time.

    The file's folder and the allowed roots are resolved once, and each distinct
    path is resolved and checked once (a dataset's trajectories mostly share
    their workdir and setup files); a refused path is checked again every time.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        allowed_roots: Sequence[str | os.PathLike[str]] | None = (),
    ) -> None:
        self.path = str(path)
        self.base = Path(path).resolve().parent
        self.roots = (
            [Path("/")]
            if allowed_roots is None
            else [self.base, *(Path(root).resolve() for root in allowed_roots)]
        )
        self._resolved: dict[tuple[str, bool], Path] = {}

    def confine(self, trajectory: Trajectory, line: int) -> Trajectory:
        """*trajectory* with its env paths resolved (itself when it names none).

        A Terminal-Bench task folder is checked as one; a trajectory naming one without a task
        instruction of its own gets ``task.yaml``'s ``instruction`` as its ``instruction``.
        """
        env = trajectory.env
        if env.task is not None:
            folder, instruction = self._task(env.task, line)
            env = env.model_copy(update={"task": folder})
            update: dict[str, Any] = {"env": env}
            if trajectory.task_instruction is None:
                update["instruction"] = instruction
            trajectory = trajectory.model_copy(update=update)
        if env.workdir is None and not any(entry.startswith("@") for entry in env.setup):
            return trajectory
        return trajectory.model_copy(update={"env": self._env(env, line)})

    def with_instruction(self, trajectory: Trajectory, line: int) -> Trajectory:
        """*trajectory* with its Terminal-Bench folder's instruction when it has no task of its
        own (its paths left as they are); itself otherwise."""
        if trajectory.env.task is None or trajectory.task_instruction is not None:
            return trajectory
        _, instruction = self._task(trajectory.env.task, line)
        return trajectory.model_copy(update={"instruction": instruction})

    def _task(self, raw: str, line: int) -> tuple[str, str]:
        """The task folder, resolved and checked, and its ``task.yaml`` instruction."""
        folder = self._confined(raw, line, "env.task", dir_wanted=True)
        from fidelity.harnesses.terminal_bench import load_task

        try:
            task = load_task(folder)
        except InputFormatError as exc:
            raise InputFormatError(self.path, line, "env.task", str(exc)) from None
        return str(folder), task.config.instruction

    def _env(self, env: EnvSpec, line: int) -> EnvSpec:
        workdir = env.workdir
        if workdir is not None:
            workdir = str(self._confined(workdir, line, "env.workdir", dir_wanted=True))
        setup = [
            "@" + str(self._confined(entry[1:], line, f"env.setup[{index}]"))
            if entry.startswith("@")
            else entry
            for index, entry in enumerate(env.setup)
        ]
        return env.model_copy(update={"workdir": workdir, "setup": setup})

    def _confined(self, raw: str, line: int, field: str, dir_wanted: bool = False) -> Path:
        key = (raw, dir_wanted)
        found = self._resolved.get(key)
        if found is None:
            found = self._resolved[key] = _confined(
                raw, self.base, self.roots, self.path, line, field, dir_wanted
            )
        return found


def _confined(
    raw: str,
    base: Path,
    roots: list[Path],
    path: str,
    line: int,
    field: str,
    dir_wanted: bool = False,
) -> Path:
    """*raw* resolved (``..`` and links followed) and checked to lie inside *roots*."""
    resolved = Path(os.path.realpath(base / raw))
    if not any(resolved.is_relative_to(root) for root in roots):
        shown = ", ".join(str(root) for root in roots)
        raise InputFormatError(
            path,
            line,
            field,
            f"{raw!r} resolves to {resolved}, outside the allowed roots ({shown}); "
            "pass --allow-root DIR to allow another folder",
        )
    if dir_wanted and not resolved.is_dir():
        raise InputFormatError(path, line, field, f"{raw!r}: no such directory")
    if not dir_wanted and not resolved.is_file():
        raise InputFormatError(path, line, field, f"{raw!r}: no such file")
    return resolved


def distinct_output(
    output: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]]
) -> None:
    """Refuse an *output* that is one of the *inputs* (the same file by any path): writing it
    would replace what is read (``simulate real.jsonl -o real.jsonl`` would lose every real
    observation). A :class:`UsageError` naming both, exit 2."""
    target = Path(output)
    if not target.exists():
        return
    for source in inputs:
        if Path(source).exists() and os.path.samefile(source, target):
            raise UsageError(
                f"-o {output} is the input {source}: write to another file (the input would "
                "be replaced)"
            )


def staged_file(target: Path, suffix: str = "") -> tuple[int, Path]:
    """A new, empty file beside *target* (hidden: ``.NAME.<random><suffix>``), open for
    writing, to be renamed over *target* once written whole.

    Its mode is what the umask leaves of 0666, as for any file the user creates (and the
    gate's other outputs): ``tempfile.mkstemp`` creates 0600, which the rename would keep.
    A *target* that is a DuckDB database is refused (:class:`UsageError`): a store is never
    replaced by an output.
    """
    refuse_replacing_database(target)
    for _ in range(100):
        candidate = target.parent / f".{target.name}.{secrets.token_hex(6)}{suffix}"
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        return fd, candidate
    raise FileExistsError(errno.EEXIST, "no unused temporary name beside it", str(target))


def write_trajectories(path: str | os.PathLike[str], trajectories: Iterable[Trajectory]) -> int:
    """Write *trajectories* as JSONL atomically (mode as the umask says); returns how many."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    fd, tmp = staged_file(path)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            for trajectory in trajectories:
                handle.write(dump_line(trajectory) + "\n")
                count += 1
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return count


def dump_line(trajectory: Trajectory) -> str:
    """One trajectory as a compact JSON line (``None`` fields left out)."""
    data = trajectory.model_dump(mode="json", exclude_none=True)
    return json_line(data)


#: Characters JSON allows raw inside strings but that line-splitting tools
#: (``str.splitlines``, editors, some JSON-lines readers) treat as line breaks.
_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


def json_line(data: object, separators: tuple[str, str] = (",", ":")) -> str:
    """*data* as one JSON line: UTF-8 text kept, U+2028/U+2029/U+0085 written escaped.

    ``json.dumps`` escapes ``\\n`` and the other control characters, but leaves
    these three raw; outside strings JSON never contains them, so replacing
    them by their escapes keeps the value and makes the line safe for any reader.
    """
    text = json.dumps(data, ensure_ascii=False, separators=separators)
    for raw, escaped in _LINE_BREAKS.items():
        text = text.replace(raw, escaped)
    return text


def split_lines(text: str) -> list[str]:
    """JSONL lines of *text*: split on ``\\n`` only (a trailing ``\\r`` is dropped).

    Never ``str.splitlines``: it also splits on U+2028, U+2029, U+0085 and form
    feeds, which JSON allows raw inside strings (AgentWorldBench has such rows).
    """
    return [line.removesuffix("\r") for line in text.split("\n")]


_UNION_TAGS = {cls.model_fields["type"].default for cls in get_args(get_args(Action)[0])}


def field_path(loc: tuple[int | str, ...]) -> str | None:
    """A pydantic error location as a dotted path, without discriminated-union tags."""
    parts = [
        str(part)
        for index, part in enumerate(loc)
        if not (index > 0 and loc[index - 1] == "action" and part in _UNION_TAGS)
    ]
    return ".".join(parts) or None
