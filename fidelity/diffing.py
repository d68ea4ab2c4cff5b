"""``fidelity diff``: compare a real and a simulated JSONL file step by step."""

from __future__ import annotations

import functools
import itertools
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from fidelity import pipeline
from fidelity.compare import CompareConfig
from fidelity.errors import InputFormatError, NotFoundError, UsageError
from fidelity.formats.jsonl import parse_line
from fidelity.ordered_pool import available_cpus, ordered_map
from fidelity.trajectory import Observation, Trajectory, stable_hash
from fidelity.worldmodels.base import EVALUATED_TURN, Mode

T = TypeVar("T")


class DiffRow(BaseModel):
    """One compared step. The first seven fields are a public contract (DESIGN).

    ``hallucinations`` and ``omissions`` list every item in rank order (a step's verdict
    and the reasons name the first ten, the rubric's cap), their counts beside them."""

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    step: int
    domain: str
    score: float
    drift: bool
    hallucinations: list[str]
    omissions: list[str]
    hallucination_count: int = 0
    omission_count: int = 0
    stale: list[str]
    exit_match: bool | None
    infra_failure: bool
    action: str
    reasons: list[str]
    metrics: dict[str, float]
    normalizations: dict[str, int]


class DiffResult(BaseModel):
    """Every compared step, plus the trajectories only one file had."""

    rows: list[DiffRow]
    only_real: list[str]
    only_sim: list[str]

    @property
    def drift_rate(self) -> float:
        """Share of compared steps (infra failures excluded) flagged as drift."""
        compared = [r for r in self.rows if not r.infra_failure]
        return sum(r.drift for r in compared) / len(compared) if compared else 0.0


def diff_files(
    real_path: str | os.PathLike[str],
    sim_path: str | os.PathLike[str],
    config: CompareConfig | None = None,
    jobs: int | None = 1,
) -> DiffResult:
    """Pair trajectories by id and steps by depth, and compare every pair (with *config*,
    in *jobs* processes: see :meth:`DiffStream.compared`)."""
    stream = DiffStream(real_path, sim_path, config, jobs)
    rows = list(stream)
    return DiffResult(rows=rows, only_real=stream.only_real, only_sim=stream.only_sim)


class DiffStream:
    """The rows of :func:`diff_files`, compared as the real file is read (memory flat in its size).

    Iterating reads the real file one line at a time, in its order, and reads
    each partner from the simulated file through an index of its lines (id to
    byte offset, built by one pass that parses no trajectory); so both files
    may be in any order, and only a window of trajectories is held at a time.
    Every line of both files is validated, with the same ``path:line: field:
    reason`` errors as :func:`~fidelity.formats.jsonl.read_trajectories`; an
    error in a line comes when the stream reaches it, after the rows before it
    (a simulated line no real one pairs with, at the end). ``only_real`` and
    ``only_sim`` are filled once the stream is exhausted. *jobs* processes
    compare the pairs (``None``: see :meth:`compared`); the rows, their order and
    the errors are the same for any number.
    """

    def __init__(
        self,
        real_path: str | os.PathLike[str],
        sim_path: str | os.PathLike[str],
        config: CompareConfig | None = None,
        jobs: int | None = 1,
    ) -> None:
        self.real_path, self.sim_path, self.config = str(real_path), str(sim_path), config
        self.jobs = jobs
        self.only_real: list[str] = []
        self.only_sim: list[str] = []

    def __iter__(self) -> Iterator[DiffRow]:
        for _, rows in self.compared():
            yield from rows

    def compared(self) -> Iterator[tuple[LinePair, list[DiffRow]]]:
        """Each pair's lines and rows, in the real file's order, compared by :attr:`jobs` processes.

        ``jobs=None`` picks one process per CPU for a simulated file of at least
        :data:`PARALLEL_BYTES` and one below (forking costs more than it saves there).
        Rows, errors and their order are those of one process (:func:`~fidelity.ordered_pool.ordered_map`).
        """
        compare = PairComparer(self.real_path, self.sim_path, self.config)
        yield from self._per_pair(compare.batch, compare.rows)

    def rendered(self, render: Callable[[DiffRow], str]) -> Iterator[str]:
        """Each row as *render* (a module-level function) writes it, in order, rendered where
        it was compared: with workers, the reading process only reads, pairs and prints."""
        compare = PairComparer(self.real_path, self.sim_path, self.config)
        work = functools.partial(compare.render_batch, render)
        for _, texts in self._per_pair(work, lambda pair: list(map(render, compare.rows(pair)))):
            yield from texts

    def _per_pair(
        self, work: Callable[[list[LinePair]], list[T]], one: Callable[[LinePair], T]
    ) -> Iterator[tuple[LinePair, T]]:
        """``(pair, result)`` in order: *work* maps runs of pairs in :meth:`_processes`
        processes and stops short at a pair that fails, which *one* then does here, so its
        error comes in its process after the results before it."""
        batches = _batches(self.line_pairs())
        for batch, done in ordered_map(work, batches, self._processes()):
            yield from zip(batch, done, strict=False)  # done may stop short: see below
            for pair in batch[len(done) :]:  # from the pair that failed: its error, in order
                yield pair, one(pair)

    def _processes(self) -> int:
        if self.jobs is not None:
            return self.jobs
        try:
            big = os.path.getsize(self.sim_path) >= PARALLEL_BYTES
        except OSError:  # named when the file is read
            big = False
        return available_cpus() if big else 1

    def pairs(self) -> Iterator[tuple[Trajectory, Trajectory]]:
        """``(real, sim)`` for each id in both files, in the real file's order."""
        for pair in self.line_pairs():
            real = pair.real.partner(pair.trajectory_id)
            if pair.sim is not None:
                yield real, pair.sim.partner(pair.trajectory_id)

    def line_pairs(self) -> Iterator[LinePair]:
        """Each line of the real file with its partner's line, in order; every line is read
        (a real line without a partner too, to be validated) and no line is parsed here
        beyond its id, so the lines can be parsed and compared elsewhere."""
        with _open(self.real_path):  # a missing real file is named first, as before
            pass
        index = _line_index(self.sim_path)
        paired: set[str] = set()
        only_real: list[str] = []
        seen: dict[str, int] = {}
        with _open(self.sim_path) as sim_file, _open(self.real_path) as real_file:
            for real in _lines(real_file, self.real_path):
                trajectory_id = _line_id(real.text(), self.real_path, real.number)
                if trajectory_id in seen:  # a bad field of the line is named first
                    real.trajectory()
                _check_new(seen, trajectory_id, self.real_path, real.number)
                sim = index.get(trajectory_id)
                if sim is None:
                    only_real.append(trajectory_id)
                else:
                    paired.add(trajectory_id)
                    sim = sim.read_from(sim_file)
                yield LinePair(trajectory_id, real, sim)
            if not seen:
                raise InputFormatError(self.real_path, None, None, "no trajectories in file")
            unpaired = sorted(set(index) - paired)
            for trajectory_id in unpaired:  # validated like every other line
                index[trajectory_id].read_from(sim_file).partner(trajectory_id)
        self.only_real, self.only_sim = sorted(only_real), unpaired


PARALLEL_BYTES = 1 << 20
"""A simulated file this big or bigger is compared by one process per CPU (``jobs=None``)."""

_BATCH_STEPS = 64
"""Steps of real lines handed to a worker at once: a few milliseconds of comparison, so the
round trip between processes is a small part of it."""


class FileLine:
    """One line of a JSONL file: where it is, and its text once read.

    Pickled (to a worker process) without its text, which the worker reads from
    the file itself: the lines do not travel through a pipe.
    """

    __slots__ = ("_text", "_trajectory", "number", "offset", "path", "size")

    def __init__(self, path: str, number: int, offset: int, size: int, text: str | None = None):
        self.path, self.number, self.offset, self.size = path, number, offset, size
        self._text = text
        self._trajectory: Trajectory | None = None

    def __reduce__(self) -> tuple[type[FileLine], tuple[str, int, int, int]]:
        return FileLine, (self.path, self.number, self.offset, self.size)

    def read_from(self, handle: BinaryIO) -> FileLine:
        """This line with its text, read from *handle* (the file, open)."""
        handle.seek(self.offset)
        text = _decode(handle.read(self.size), self.path, self.number)
        return FileLine(self.path, self.number, self.offset, self.size, text)

    def text(self) -> str:
        """The line, without its end (read from the file by a process it was pickled to)."""
        if self._text is None:
            self._text = _decode(_read(self.path, self.offset, self.size), self.path, self.number)
        return self._text

    def trajectory(self) -> Trajectory:
        """The line's trajectory, validated (errors name the file and line); parsed once
        (``diff --db`` compares a pair and stores it, from the same line)."""
        if self._trajectory is None:
            self._trajectory = parse_line(self.text(), self.path, self.number)
        return self._trajectory

    def partner(self, trajectory_id: str) -> Trajectory:
        """The trajectory, which must have the id the line was found by."""
        trajectory = self.trajectory()
        if trajectory.id != trajectory_id:  # e.g. a second "id" key in the line
            raise InputFormatError(self.path, self.number, "id", f"ambiguous id {trajectory_id!r}")
        return trajectory


_DESCRIPTORS: dict[tuple[int, str], int] = {}
"""Per process and path, the descriptor :func:`_read` reads lines with: only the worker
processes of one :meth:`DiffStream.compared` read lines this way, and their descriptors
close when they end with it (the process that reads the files hands texts on)."""


def _read(path: str, offset: int, size: int) -> bytes:
    key = (os.getpid(), path)
    if key not in _DESCRIPTORS:
        _DESCRIPTORS[key] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    return os.pread(_DESCRIPTORS[key], size, offset)


class LinePair(NamedTuple):
    """A real line and its partner's (``None``: none in the simulated file)."""

    trajectory_id: str
    real: FileLine
    sim: FileLine | None


class PairComparer:
    """Compares :class:`LinePair` s of two files (in this process or a worker's)."""

    def __init__(self, real_path: str, sim_path: str, config: CompareConfig | None) -> None:
        self.real_path, self.sim_path, self.config = real_path, sim_path, config

    def rows(self, pair: LinePair) -> list[DiffRow]:
        """The compared steps of *pair* (none for a real line without a partner: validated)."""
        real = pair.real.partner(pair.trajectory_id)
        if pair.sim is None:
            return []
        sim = pair.sim.partner(pair.trajectory_id)
        return diff_trajectories(real, sim, self.real_path, self.sim_path, self.config)

    def batch(self, pairs: list[LinePair]) -> list[list[DiffRow]]:
        """:meth:`rows` of each pair up to the first that fails: the caller does that one
        again itself, so that its error comes after the rows before it and in its process."""
        done = []
        for pair in pairs:
            try:
                done.append(self.rows(pair))
            except Exception:  # noqa: BLE001 - raised again by the caller (DiffStream.compared)
                break
        return done

    def render_batch(
        self, render: Callable[[DiffRow], str], pairs: list[LinePair]
    ) -> list[list[str]]:
        """The rows of each pair rendered by *render*, as :meth:`batch`."""
        return [list(map(render, rows)) for rows in self.batch(pairs)]


def jsonl_line(row: DiffRow) -> str:
    """*row* as a line of ``fidelity diff --format jsonl``."""
    return row.model_dump_json() + "\n"


def indented_row(row: DiffRow) -> str:
    """*row* as ``fidelity diff --format json`` writes it in the rows' list (indented)."""
    # through json.loads, as the whole result is: the floats print as Python writes them
    indented = json.dumps(json.loads(row.model_dump_json()), indent=2, ensure_ascii=False)
    # textwrap.indent, for text without blank lines (indented JSON has none), at C speed
    return "    " + indented.replace("\n", "\n    ")


def _batches(pairs: Iterator[LinePair]) -> Iterator[list[LinePair]]:
    """*pairs* in runs of about :data:`_BATCH_STEPS` steps (one pair per run at least); an
    error reading them comes after the run before it, so errors keep the files' order."""
    batch: list[LinePair] = []
    steps = 0
    try:
        for pair in pairs:
            batch.append(pair)
            steps += pair.real.text().count('"observation"') or 1
            if steps >= _BATCH_STEPS:
                yield batch
                batch, steps = [], 0
    except Exception:
        if batch:
            yield batch
        raise
    if batch:
        yield batch


def json_chunks(stream: DiffStream) -> Iterator[str]:
    """``fidelity diff --format json`` as it streams: the text of the :class:`DiffResult`.

    Byte for byte ``json.dumps(result, indent=2, ensure_ascii=False)`` of what
    :func:`diff_files` returns, written one row at a time, so memory stays flat
    in the files' size (``only_real`` and ``only_sim`` come last, once known).
    """
    text = JsonResultText()
    for row in stream.rendered(indented_row):
        yield text.indented(row)
    yield text.end(stream.only_real, stream.only_sim)


class JsonResultText:
    """A :class:`DiffResult`'s indented JSON, piece by piece: each row as it comes, then the
    end. Nothing is produced before the first row (or the end), so a caller that validates
    first prints nothing for input it refuses."""

    def __init__(self) -> None:
        self.rows = 0

    def row(self, row: DiffRow) -> str:
        """The text of *row* (preceded by the document's start for the first one)."""
        return self.indented(indented_row(row))

    def indented(self, row: str) -> str:
        """The text of a row already written by :func:`indented_row`."""
        start = ",\n" if self.rows else '{\n  "rows": [\n'
        self.rows += 1
        return start + row

    def end(self, only_real: list[str], only_sim: list[str]) -> str:
        """The rest of the document, from the end of the rows."""
        rows_end = "\n  ]" if self.rows else '{\n  "rows": []'
        only = (("only_real", only_real), ("only_sim", only_sim))
        return (
            rows_end
            + ",\n"
            + ",\n".join(
                f'  "{key}": ' + json.dumps(ids, indent=2, ensure_ascii=False).replace("\n", "\n  ")
                for key, ids in only
            )
            + "\n}"
        )


_BUFFER = 1 << 16
"""Read buffer of the JSONL files: their lines run to tens of KB, which the default 8 KiB
buffer hands over in pieces (reading the lines of a file took 3.8x as long)."""


@contextmanager
def _open(path: str) -> Iterator[BinaryIO]:
    try:
        with open(path, "rb", buffering=_BUFFER) as handle:
            yield handle
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path}: no such file") from exc
    except IsADirectoryError as exc:
        raise NotFoundError(f"{path}: cannot read (Is a directory)") from exc


def _lines(handle: BinaryIO, path: str) -> Iterator[FileLine]:
    """Each JSONL line worth parsing (as ``split_lines``), read."""
    offset = 0
    for number, raw in enumerate(handle, start=1):
        start, offset = offset, offset + len(raw)
        line = _decode(raw, path, number)
        if line.strip() and not line.lstrip().startswith("//"):
            yield FileLine(path, number, start, len(raw), line)


def _decode(raw: bytes, path: str, number: int) -> str:
    try:
        text = raw.decode("utf-8-sig" if number == 1 else "utf-8")  # a leading BOM: dropped
    except UnicodeDecodeError as exc:
        raise InputFormatError(path, None, None, f"not UTF-8 text ({exc.reason})") from exc
    return text.removesuffix("\n").removesuffix("\r")


def _line_index(path: str) -> dict[str, FileLine]:
    """Id to the line (not kept: read again when needed) of each trajectory of *path*;
    JSON only, no model."""
    index: dict[str, FileLine] = {}
    seen: dict[str, int] = {}
    with _open(path) as handle:
        for line in _lines(handle, path):
            trajectory_id = _line_id(line.text(), path, line.number)
            _check_new(seen, trajectory_id, path, line.number)
            index[trajectory_id] = FileLine(path, line.number, line.offset, line.size)
    if not index:
        raise InputFormatError(path, None, None, "no trajectories in file")
    return index


class _LineId(BaseModel):
    """Only the top-level ``id`` of a JSONL line: pydantic checks the whole line is JSON
    but builds no Python object for the rest (a third of ``json.loads``' time)."""

    model_config = ConfigDict(extra="ignore")  # the line is validated in full when read

    id: Any = None


_LEADING_ID = re.compile(r'\{\s*"id"\s*:\s*"([^"\\]*)"')
"""A line that starts with its id, as fidelity writes them: read without parsing the line
(the reader of the line checks the id it parses is this one: ``FileLine.partner``)."""


def _line_id(line: str, path: str, number: int) -> str:
    leading = _LEADING_ID.match(line)
    if leading is not None:
        return leading.group(1)
    try:
        trajectory_id = _LineId.model_validate_json(line).id
    except ValidationError:  # not an object, not JSON, or JSON only Python's parser takes
        trajectory_id = _json_id(line)
    if isinstance(trajectory_id, str):
        return trajectory_id
    return parse_line(line, path, number).id  # raises the line's error, or coerces the id


def _json_id(line: str) -> Any:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        return None
    return data.get("id") if isinstance(data, dict) else None


def _check_new(seen: dict[str, int], trajectory_id: str, path: str, number: int) -> None:
    if trajectory_id in seen:
        raise InputFormatError(
            path,
            number,
            "id",
            f"duplicate id {trajectory_id!r} (first on line {seen[trajectory_id]})",
        )
    seen[trajectory_id] = number


class StoredDiff(BaseModel):
    """A diff stored as a run (so ``fidelity judge`` and ``report`` can use it)."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    db: str
    trajectories: int
    only_real: list[str] = []
    only_sim: list[str] = []


RowsCallback = Callable[[list[DiffRow]], None]
"""Called with each stored trajectory's rows (what ``fidelity diff`` prints)."""


def store_diff(
    real_path: str | os.PathLike[str],
    sim_path: str | os.PathLike[str],
    db: str | os.PathLike[str],
    config: CompareConfig | None = None,
    run_id: str | None = None,
    on_rows: RowsCallback | None = None,
    jobs: int | None = 1,
) -> StoredDiff:
    """Compare two recordings as :func:`diff_files` does (in *jobs* processes) and store the
    result as a run.

    Streams like :class:`DiffStream`, in two passes: the first validates every
    line of both files and learns the run's domains (nothing is written when a
    line is bad or no id is shared), the second compares each pair once and
    stores the records in bulk (:class:`~fidelity.store.RecordBuffer`), handing
    each trajectory's rows to *on_rows*. Steps a simulated recording did not
    predict (before its ``evaluated_turn``) are stored as infrastructure failures
    (``NotPredicted``), so they are never judged or counted as drift.
    """
    from fidelity.audit import code_version, new_run_id
    from fidelity.store import RecordBuffer, Store

    survey = DiffStream(real_path, sim_path)
    domains: set[str] = set()
    first_sim: Trajectory | None = None
    for real_t, sim_t in survey.pairs():
        domains.add(real_t.domain.value)
        first_sim = first_sim or sim_t
    if first_sim is None:
        raise UsageError(f"{real_path} and {sim_path} have no trajectory id in common")
    run = run_id or new_run_id()
    info = {
        "domain": next(iter(domains)) if len(domains) == 1 else "mixed",
        "sandbox": "recorded",
        "world_model": {"backend": "recorded", "data": str(sim_path)},
        "mode": _mode_label(first_sim),
        "suite": str(real_path),
        "suite_digest": stable_hash([str(real_path), str(sim_path)]),
        "code_version": code_version(),
    }
    stored = 0
    compared = DiffStream(real_path, sim_path, config, jobs).compared()
    started = list(itertools.islice(compared, 2))  # the workers fork before DuckDB's threads start
    with Store(db) as store:
        store.start_run(run, info)
        buffer = RecordBuffer(store, run)
        try:
            for pair, rows in itertools.chain(started, compared):
                if pair.sim is None:
                    continue
                real_t, sim_t = (line.partner(pair.trajectory_id) for line in (pair.real, pair.sim))
                buffer.add(_record(real_t, sim_t, rows, str(real_path)))
                stored += 1
                if on_rows is not None:
                    on_rows(rows)
        finally:
            buffer.flush()
        store.finish_run(run, "done")
    return StoredDiff(
        run_id=run,
        db=str(db),
        trajectories=stored,
        only_real=survey.only_real,
        only_sim=survey.only_sim,
    )


def _record(real: Trajectory, sim: Trajectory, compared: list[DiffRow], real_path: str) -> Any:
    from fidelity.compare.base import StepComparison
    from fidelity.store import TimedObservation, TrajectoryRecord

    rows = {row.step: row for row in compared}
    depth = max(rows)
    real_obs = _observations(real, real_path, depth)
    sim_obs = [
        (sim.steps[n - 1].observation if n in rows else None)
        or Observation(error="NotPredicted: this turn was not predicted (only the evaluated one)")
        for n in range(1, depth + 1)
    ]
    comparisons = [
        StepComparison(
            score=rows[n].score,
            drift=rows[n].drift,
            infra_failure=rows[n].infra_failure,
            exit_match=rows[n].exit_match,
            hallucinations=rows[n].hallucinations,
            omissions=rows[n].omissions,
            stale=rows[n].stale,
            reasons=rows[n].reasons,
            metrics=rows[n].metrics,
            normalizations=rows[n].normalizations,
        )
        if n in rows
        else StepComparison(score=0.0, drift=False, infra_failure=True, reasons=["not predicted"])
        for n in range(1, depth + 1)
    ]
    trajectory = real.model_copy(update={"steps": real.steps[:depth]})
    return TrajectoryRecord(
        trajectory,
        [TimedObservation(o) for o in real_obs],
        [TimedObservation(o) for o in sim_obs],
        comparisons,
        _mode_label(sim),
        0.0,
        0.0,
    )


def diff_trajectories(
    real: Trajectory,
    sim: Trajectory,
    real_path: str,
    sim_path: str,
    config: CompareConfig | None = None,
) -> list[DiffRow]:
    """Compare the common steps of two recordings of the same action sequence."""
    if real.domain != sim.domain:
        raise UsageError(
            f"trajectory {real.id!r} is {real.domain.value} in {real_path} but {sim.domain.value} in {sim_path}"
        )
    pipeline.check_comparable(real.domain)
    depth = min(len(real.steps), len(sim.steps))
    for index in range(depth):
        action, other = real.steps[index].action, sim.steps[index].action
        if type(action) is type(other) and action.__dict__ == other.__dict__:
            continue  # the same action (the common case, without BaseModel.__eq__)
        if action != other:
            raise UsageError(
                f"trajectory {real.id!r} step {index + 1}: the actions differ between {real_path} "
                f"({real.steps[index].action.render()!r}) and {sim_path} "
                f"({sim.steps[index].action.render()!r}); diff needs replays of the same actions"
            )
    evaluated = _evaluated(sim, depth)
    real_obs = _observations(real, real_path, evaluated or depth)
    depth = evaluated or depth
    if evaluated:  # only this turn was predicted, after the real history
        sim_obs = [*real_obs[: depth - 1], *_observations(sim, sim_path, depth)[depth - 1 :]]
    else:
        sim_obs = _observations(sim, sim_path, depth)
    prefix = real.model_copy(update={"steps": real.steps[:depth]})
    mode = _mode(sim)
    shown = pipeline.shown_history(prefix, real_obs, sim_obs, mode)
    comparisons = pipeline.compare(prefix, real_obs, sim_obs, shown, config)
    rows = [
        DiffRow(
            trajectory_id=real.id,
            step=number,
            domain=real.domain.value,
            score=round(c.score, 6),
            drift=c.drift,
            hallucinations=(every_h := c.every_hallucination),
            omissions=(every_o := c.every_omission),
            hallucination_count=len(every_h),
            omission_count=len(every_o),
            stale=c.stale,
            exit_match=c.exit_match,
            infra_failure=c.infra_failure,
            action=prefix.steps[number - 1].action.render(),
            reasons=c.reasons,
            metrics={k: round(v, 6) for k, v in c.metrics.items()},
            normalizations=c.normalizations,
        )
        for number, c in enumerate(comparisons, start=1)
    ]
    return rows[depth - 1 :] if evaluated else rows


def _evaluated(sim: Trajectory, depth: int) -> int | None:
    """The one turn a simulated recording predicted (``meta.evaluated_turn``), within *depth*."""
    turn = sim.meta.get(EVALUATED_TURN)
    return turn if isinstance(turn, int) and 1 <= turn <= depth else None


def _observations(trajectory: Trajectory, path: str, depth: int) -> list[Observation]:
    observations = []
    start = _evaluated(trajectory, depth) or 1
    for number, step in enumerate(trajectory.steps[:depth], start=1):
        if number < start and step.observation is None:
            observations.append(Observation(error="not predicted"))
            continue
        if step.observation is None:
            raise InputFormatError(
                path,
                None,
                f"{trajectory.id}.steps.{number}.observation",
                "missing: nothing to compare",
            )
        observations.append(step.observation)
    return observations


def _mode_label(trajectory: Trajectory) -> str:
    mode = _mode(trajectory)
    return mode.value if mode is not None else Mode.teacher_forced.value


def _mode(trajectory: Trajectory) -> Mode | None:
    value = trajectory.meta.get("mode")
    try:
        return Mode(value) if value else None
    except ValueError:
        return None
