"""The rows records add to the store, built by column (:class:`_Batch`), and the bulk inserts
that hand them to DuckDB: per batch, one insert per table scanning NumPy columns; entity
lists travel as JSON text."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import duckdb

from fidelity.store.records import TimedObservation, TrajectoryRecord, action_adapter
from fidelity.store.schema import COLUMNS, WRITTEN

if TYPE_CHECKING:
    import numpy

    from fidelity.compare.base import StepComparison
    from fidelity.outcomes import RealOutcome
    from fidelity.trajectory import Trajectory


class _Batch:
    """The rows some records add to the store, held by table and column.

    Columns are built directly (no row tuples to transpose) and travel to DuckDB
    as NumPy arrays, one scan per table; the run id, the same on every row, is a
    query parameter rather than a column.
    """

    def __init__(self) -> None:
        self.tables: dict[str, dict[str, list[Any]]] = {
            table: {name: [] for name in COLUMNS[table] if name != "run_id"} for table in WRITTEN
        }

    def add_record(self, record: TrajectoryRecord, now: datetime) -> None:
        """Every row of *record*: steps, observations, comparisons, its trajectory row last."""
        trajectory = record.trajectory
        self.add_steps(trajectory)
        self.add_observations(trajectory.id, "real", "real", 0, record.real)
        for variant in record.variants():
            if not variant.sim and not variant.comparisons:
                continue  # a replay-only record simulated nothing
            self.add_observations(trajectory.id, "sim", variant.mode, variant.sample, variant.sim)
            self.add_comparisons(trajectory, variant.mode, variant.sample, variant.comparisons)
        self.add_outcome(trajectory, record.outcome)
        status = "failed" if record.error else "done"
        self.add_trajectory(
            trajectory, status, record.error, record.real_seconds, record.sim_seconds, now
        )

    def add_steps(self, trajectory: Trajectory) -> None:
        """The rows of ``steps``: one per action."""
        columns = self.tables["steps"]
        n = len(trajectory.steps)
        columns["trajectory_id"] += [trajectory.id] * n
        columns["depth"] += range(1, n + 1)
        for step in trajectory.steps:
            action_json = step.action.model_dump_json()
            columns["action_type"].append(step.action.type)
            columns["action_name"].append(_action_name(action_json))
            columns["action"].append(step.action.render())
            columns["action_json"].append(action_json)
            control = step.control
            columns["control"].append(control.model_dump_json() if control is not None else None)

    def add_observations(
        self,
        trajectory_id: str,
        side: str,
        mode: str,
        sample: int,
        observed: list[TimedObservation],
    ) -> None:
        """The rows of ``observations`` for one side (real, or one simulation) of a trajectory."""
        columns = self.tables["observations"]
        n = len(observed)
        columns["trajectory_id"] += [trajectory_id] * n
        columns["depth"] += range(1, n + 1)
        columns["side"] += [side] * n
        columns["mode"] += [mode] * n
        columns["sample"] += [sample] * n
        for timed in observed:
            obs = timed.observation
            columns["text"].append(obs.text)
            columns["exit_code"].append(obs.exit_code)
            columns["cwd"].append(obs.cwd)
            columns["timed_out"].append(obs.timed_out)
            columns["truncated"].append(obs.truncated)
            columns["error"].append(obs.error)
            columns["latency_ms"].append(timed.latency_ms)
            columns["state"].append(_sorted_json(obs.state) if obs.state is not None else None)

    def add_comparisons(
        self, trajectory: Trajectory, mode: str, sample: int, comparisons: list[StepComparison]
    ) -> None:
        """The rows of ``comparisons`` for one simulation of a trajectory."""
        columns = self.tables["comparisons"]
        n = len(comparisons)
        columns["trajectory_id"] += [trajectory.id] * n
        columns["depth"] += range(1, n + 1)
        columns["mode"] += [mode] * n
        columns["sample"] += [sample] * n
        columns["domain"] += [trajectory.domain.value] * n
        for c in comparisons:
            columns["score"].append(c.score)
            columns["drift"].append(c.drift)
            columns["infra_failure"].append(c.infra_failure)
            columns["exit_match"].append(c.exit_match)
            columns["metrics"].append(_sorted_json(c.metrics))
            every_h, every_o = c.every_hallucination, c.every_omission  # all, in rank order
            columns["hallucinations"].append(_json_list(every_h))
            columns["omissions"].append(_json_list(every_o))
            columns["hallucination_count"].append(len(every_h))
            columns["omission_count"].append(len(every_o))
            columns["stale"].append(_json_list(c.stale))
            columns["normalizations"].append(_sorted_json(c.normalizations))
            columns["reasons"].append(_json_list(c.reasons))

    def add_outcome(self, trajectory: Trajectory, real: RealOutcome | None) -> None:
        """The trajectory's ``outcomes`` row: its claimed and its real outcome (none when
        it has neither)."""
        claimed = trajectory.outcome
        if claimed is None and real is None:
            return
        values = (
            trajectory.id,
            None if claimed is None else claimed.success,
            None if claimed is None else claimed.reward,
            None if claimed is None else claimed.claimed_by,
            None if real is None else real.status,
            None if real is None else real.reason,
            None if real is None else real.exit_code,
            None if real is None else real.seconds,
            None if real is None else real.output,
        )
        for cells, value in zip(self.tables["outcomes"].values(), values, strict=True):
            cells.append(value)

    def add_trajectory(
        self,
        trajectory: Trajectory,
        status: str,
        error: str | None,
        real_seconds: float | None,
        sim_seconds: float | None,
        now: datetime,
    ) -> None:
        """The trajectory's own row (its status: ``done``, ``failed`` or ``replayed``)."""
        columns = self.tables["trajectories"]
        values = (
            trajectory.id,
            trajectory.domain.value,
            trajectory.env.model_dump_json(),
            len(trajectory.steps),
            status,
            error,
            real_seconds,
            sim_seconds,
            now,
            _task_json(trajectory),
        )
        for cells, value in zip(columns.values(), values, strict=True):
            cells.append(value)

    def insert(self, tx: duckdb.DuckDBPyConnection, run_id: str) -> None:
        """Insert every held row of run *run_id*, ``trajectories`` last."""
        for table in WRITTEN:
            _insert_columns(tx, table, self.tables[table], {"run_id": run_id})

    def rows(self, run_id: str) -> dict[str, list[tuple[Any, ...]]]:
        """The held rows as tuples in :data:`COLUMNS` order (the row-by-row way, for comparison)."""
        tables = {
            table: {
                name: [json.loads(cell) if cell else [] for cell in cells]
                if name in _LISTS
                else cells
                for name, cells in columns.items()
            }
            for table, columns in self.tables.items()
        }
        return {
            table: [(run_id, *row) for row in zip(*columns.values(), strict=True)]
            for table, columns in tables.items()
        }


def _insert_rows(tx: duckdb.DuckDBPyConnection, table: str, rows: Sequence[Sequence[Any]]) -> None:
    """Insert *rows* (in :data:`COLUMNS` order) into *table* by column name, in one statement.

    One row is bound as parameters (registering its columns as arrays costs more than the
    row, and loads numpy: an audit's run row is written before its first sandbox starts).
    """
    columns = COLUMNS[table]
    if len(rows) == 1:
        values = ", ".join(_DECODE_LIST.format("?") if name in _DECODE else "?" for name in columns)
        tx.execute(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values})", list(rows[0]))
    elif rows:
        _insert_columns(
            tx,
            table,
            {
                name: list(cells)
                for name, cells in zip(columns, zip(*rows, strict=True), strict=True)
            },
            {},
        )


def _insert_columns(
    tx: duckdb.DuckDBPyConnection,
    table: str,
    columns: dict[str, list[Any]],
    constants: dict[str, Any],
) -> None:
    """Insert the rows held by *columns* (name -> cells) into *table* by column name, in one
    statement; *constants* fill the columns that hold one value on every row.

    The columns travel as NumPy arrays that DuckDB scans in bulk (numbers natively,
    text as Python objects); parameterised ``VALUES`` or ``executemany`` cost a
    statement per row.
    """
    if not columns or not next(iter(columns.values())):
        return
    view = f"_fidelity_rows_{table}"
    names = [*constants, *columns]
    selected = [*("?" for _ in constants), *(_DECODE.get(name, name) for name in columns)]
    tx.register(view, {name: _array(cells) for name, cells in columns.items()})
    tx.execute(
        f"INSERT INTO {table} ({', '.join(names)}) SELECT {', '.join(selected)} FROM {view}",
        list(constants.values()),
    )
    # only after a success: in a transaction a failed insert aborted, unregistering fails too
    # and would hide the insert's own error; a view left behind is replaced by the next
    # register of its name, or goes with the connection
    tx.unregister(view)


_LISTS = ("hallucinations", "omissions", "stale", "reasons")
"""The list columns of ``comparisons``: they travel as JSON text, NULL when empty (DuckDB
converts a Python list cell by cell, several times slower than it parses JSON)."""

_DECODE_LIST = "coalesce(from_json({}, '[\"VARCHAR\"]'), [])"
"""The SQL that turns a list column's JSON text (see :data:`_LISTS`) back into a list."""
_DECODE = {name: _DECODE_LIST.format(name) for name in _LISTS}


def _json_list(items: list[str]) -> str | None:
    """*items* as the JSON that :data:`_DECODE` turns back into a list (None: empty)."""
    return _JSON_LIST(items) if items else None


_JSON_LIST = json.JSONEncoder().encode


def _array(cells: list[Any]) -> numpy.ndarray[Any, Any]:
    """Numbers and booleans without NULLs as a native array; anything else as Python objects
    (``fromiter``: a list of lists stays one object per cell, never a 2-D array)."""
    import numpy  # only writers need it: reading commands (``fidelity runs``) start faster

    if isinstance(cells[0], bool | int | float) and None not in cells:
        return numpy.array(cells)
    return numpy.fromiter(cells, dtype=object, count=len(cells))


@functools.lru_cache(maxsize=65_536)
def _action_name(action_json: str) -> str:
    """An action's name, by its JSON (parsing a command line is slow; agents repeat commands)."""
    name: str = action_adapter().validate_json(action_json).name
    return name


_SORTED_JSON = json.JSONEncoder(sort_keys=True).encode
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)
# CPython's C encoder built once with json.dumps(sort_keys=True)'s settings (JSONEncoder.encode
# builds one per call, half the cost of encoding a small dict); no circular-reference markers:
# these values are parsed JSON or flat dicts, never self-referencing.
_C_SORTED_JSON = (
    _C_MAKE_ENCODER(
        None,
        json.JSONEncoder().default,
        json.encoder.encode_basestring_ascii,
        None,
        ": ",
        ", ",
        True,
        False,
        True,
    )
    if _C_MAKE_ENCODER is not None
    else None
)


def _sorted_json(data: Any) -> str:
    """``json.dumps(data, sort_keys=True)``, without building an encoder per call."""
    if data == {}:
        return "{}"
    if _C_SORTED_JSON is not None and isinstance(data, dict):
        return "".join(_C_SORTED_JSON(data, 0))
    return _SORTED_JSON(data)


def _now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


TASK_KEYS = ("agentworldbench", "task_instruction")
"""``meta`` keys the world model's prompt reads (an imported AgentWorldBench record, the
task instruction older files hold): kept with the trajectory's task."""


def _task_json(trajectory: Trajectory) -> str | None:
    """What the store keeps of a trajectory's task: its instruction, system prompt and the
    meta the world model's prompt reads (None when it has none of them)."""
    meta = {key: trajectory.meta[key] for key in TASK_KEYS if key in trajectory.meta}
    if trajectory.instruction is None and trajectory.system_prompt is None and not meta:
        return None
    task = {
        "instruction": trajectory.instruction,
        "system_prompt": trajectory.system_prompt,
        "meta": meta,
    }
    return _sorted_json(task)
