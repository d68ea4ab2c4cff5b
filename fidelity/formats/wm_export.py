"""Corrective data for the world model: ``fidelity export wm-sft`` and ``wm-dpo``.

From a stored run (an audit, a ``diff --db`` or a dataset gate's verified sample), for every
compared step (an infrastructure failure is not one): the exact messages the world model was
given (:func:`fidelity.worldmodels.prompting.build_messages`: Qwen-AgentWorld's protocol, the
system prompt, the history, the action), and answers in the model's own answer format
(:func:`~fidelity.worldmodels.prompting.render_answer`: the ``<predicted_observation>`` block,
a terminal command's answer as its whole screen).

- ``wm-sft``: the messages and the **real** observation as the assistant's answer (TRL's
  conversational ``messages``). Samples of one step that share their prompt (every mode but
  open-loop, whose history is the model's own) give one row; it drifts when one of them did.
- ``wm-dpo``: the **drifting** steps as preference pairs in TRL's conversational form:
  ``prompt`` (the messages), ``chosen`` (the real observation) and ``rejected`` (the model's
  answer as fidelity parsed it, written back in the same format), one pair per sample. A pair
  whose two answers read the same in the chosen target (an exit code, which a screen does not
  show, was all that differed) is left out and counted.

The history is the real one, except in open-loop mode, where it is the model's own earlier
answers of the same sample (as it was asked). What the store does not keep, the trajectory's
instruction, system prompt and an imported AgentWorldBench record, comes from the suite the
run was given (its recorded path, or ``--suite``), matched by id; the instruction of a
trajectory naming a Terminal-Bench folder comes from its ``task.yaml``, a SWE-bench record's
from its ``problem_statement``. The prompts are the run's (its recorded prompts folder, or
``--prompts-dir``); when their hash is not the one the run recorded, the result says so.

``target="normalized"`` writes both answers with their volatile values as the comparator's
placeholders (:data:`VOLATILE_RULES`: timestamps, durations, PIDs, hex ids and git SHAs, UUIDs,
temporary paths, loopback ports, container host names, memory addresses, test seeds, tokens,
curl's progress meter); everything else is kept as printed (the order of lines, spacing, ANSI
escapes and carriage returns, length). The prompt is always the exact one.

Rows are written to a staged file renamed into place when complete (JSONL, or Parquet for a
``.parquet`` output), memory flat in the run's size: one trajectory in memory at a time.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from fidelity import store_queries as queries
from fidelity.analysis.causes import Drifting, cause_of
from fidelity.compare.normalize import Normalizer
from fidelity.compare.rules import DEFAULT_RULES, GIT_ID_RULE, PID_OUTPUT_RULE, Rule
from fidelity.errors import UsageError, writing
from fidelity.formats.jsonl import json_line, staged_file
from fidelity.formats.rl_export import arrow
from fidelity.store import Store, action_adapter, stored_observation
from fidelity.trajectory import (
    TASK_META,
    Control,
    Domain,
    EnvSpec,
    Observation,
    Step,
    Trajectory,
)
from fidelity.worldmodels.prompting import (
    AWB_META,
    Message,
    build_messages,
    prompt_hash,
    render_answer,
)

WmKind = Literal["wm-sft", "wm-dpo"]
WM_FORMATS: Final[tuple[WmKind, ...]] = ("wm-sft", "wm-dpo")

FORMATTING_RULES: Final = frozenset({"ansi", "crlf", "carriage_return"})
"""Rules that change how text is drawn, not a value: never applied to a normalized target."""
VOLATILE_RULES: Final[tuple[Rule, ...]] = tuple(
    rule for rule in DEFAULT_RULES if rule.name not in FORMATTING_RULES
)
"""The comparator's value rules (:data:`~fidelity.compare.rules.DEFAULT_RULES` less the
formatting ones), applied with the PIDs a command prints and short git ids; never the sorting
of unordered output nor the truncation."""
_NO_LIMIT: Final = 1 << 40
_OPEN_LOOP: Final = "open-loop"
_ROW_GROUP: Final = 512

META_FIELDS: Final = (
    "trajectory_id",
    "depth",
    "mode",
    "sample",
    "domain",
    "drift",
    "score",
    "cause",
    "run_id",
    "target",
)
"""The fields every row carries besides its messages."""


class WmExportOptions(BaseModel):
    """One world-model export of a stored run."""

    model_config = ConfigDict(extra="forbid")

    kind: WmKind
    db: Path
    output: Path
    run_id: str | None = Field(default=None, description="None: the latest run")
    domain: Domain | None = None
    only_drift: bool = Field(default=False, description="wm-dpo: always (pairs are drift)")
    max_depth: int | None = Field(default=None, ge=1)
    target: Literal["real", "normalized"] = "real"
    suite: Path | None = Field(
        default=None, description="the run's trajectories (default: the path the run recorded)"
    )
    prompts_dir: Path | None = Field(
        default=None, description="the prompts (default: those the run recorded)"
    )


class WmExportResult(BaseModel):
    """What an export wrote."""

    model_config = ConfigDict(extra="forbid")

    format: WmKind
    output: str
    run_id: str
    rows: int
    domains: dict[str, int] = Field(description="rows per domain")
    target: Literal["real", "normalized"]
    skipped: dict[str, int] = Field(
        default_factory=dict,
        description="compared steps left out, by why: identical (wm-dpo: the two answers read "
        "the same), history (an earlier observation of the history is missing)",
    )
    suite: str | None = Field(description="where the instructions came from (None: nowhere)")
    without_task: int = Field(description="trajectories exported without a task instruction")
    prompts_hash: str = Field(description="of the prompts the messages were built with")
    run_prompts_hash: str | None = Field(description="of the prompts the run recorded")


def export_world_model(options: WmExportOptions) -> WmExportResult:
    """Write *options.kind*'s rows of a stored run to *options.output*."""
    suffix = options.output.suffix.lower()
    if suffix not in (".jsonl", ".parquet"):
        raise UsageError(f"-o {options.output}: write .jsonl or .parquet")
    with Store(options.db, read_only=True) as store:
        run_id = store.require_run(options.run_id)
        compared = queries.row(store, "wm_compared", [run_id])
        if not compared or not compared[0]:
            raise UsageError(f"run {run_id!r} has no compared steps: nothing to export")
        run = queries.dicts(store, "summary_run", [run_id])[0]
        prompts, run_hash = _prompts(run, options.prompts_dir)
        listed = [
            (tid, domain, env)
            for tid, domain, env, _ in queries.rows(store, "wm_trajectories", [run_id, run_id])
            if options.domain is None or domain == options.domain.value
        ]
        tasks = _stored_tasks(store, run_id)
        missing = {tid for tid, _, _ in listed} - set(tasks)
        suite = options.suite if options.suite is not None else _recorded_suite(run["suite"])
        if missing and suite is not None:  # rows stored before the store kept the task
            tasks |= _tasks(suite, missing)
        writer = _Writer(options.output, options.kind, suffix == ".parquet")
        exported = _Exported(options, run_id, prompts)
        try:
            for tid, domain, env in listed:
                trajectory = _trajectory(store, run_id, tid, domain, env, tasks.get(tid))
                for data in exported.rows(store, trajectory):
                    writer.add(data)
            if writer.rows == 0:
                raise UsageError(_nothing(run_id, options))
            writer.close()
        except BaseException:
            writer.abort()
            raise
    return WmExportResult(
        format=options.kind,
        output=str(options.output),
        run_id=run_id,
        rows=writer.rows,
        domains=exported.domains,
        target=options.target,
        skipped=exported.skipped,
        suite=None if suite is None else str(suite),
        without_task=exported.without_task,
        prompts_hash=prompt_hash(prompts),
        run_prompts_hash=run_hash,
    )


def _nothing(run_id: str, options: WmExportOptions) -> str:
    filters = [
        f"--domain {options.domain.value}" if options.domain is not None else "",
        "--only-drift" if options.only_drift else "",
        f"--max-depth {options.max_depth}" if options.max_depth is not None else "",
    ]
    chosen = " ".join(f for f in filters if f)
    what = "drifting steps" if options.kind == "wm-dpo" else "compared steps"
    return f"run {run_id!r}: no {what} to export" + (f" ({chosen})" if chosen else "")


def _prompts(run: dict[str, Any], given: Path | None) -> tuple[Path | None, str | None]:
    """The prompts folder to build with (None: the bundled ones) and the hash the run recorded."""
    world_model = json.loads(run["world_model"]) if run["world_model"] else {}
    recorded = world_model.get("prompt_hash")
    if given is not None:
        if not given.is_dir():
            raise UsageError(f"--prompts-dir {given}: no such folder")
        return given, recorded
    kind, path = world_model.get("prompts_kind"), world_model.get("prompts_path")
    if kind in ("templates", "official") and isinstance(path, str):
        if not Path(path).is_dir():
            raise UsageError(
                f"run {run['run_id']!r} was prompted from {path}, which is gone: "
                "pass --prompts-dir with that prompt set"
            )
        return Path(path), recorded
    return None, recorded


def _recorded_suite(path: str) -> Path | None:
    """The suite the run recorded (a file, a folder or a glob of shards), when it is still
    there."""
    from fidelity.errors import NotFoundError
    from fidelity.formats.dataset import shards

    try:
        shards(path)
    except (NotFoundError, OSError):
        return None
    return Path(path)


class _Task(BaseModel):
    """What the store does not keep of a trajectory and its prompts need."""

    instruction: str | None
    system_prompt: str | None
    meta: dict[str, Any]


def _stored_tasks(store: Store, run_id: str) -> dict[str, _Task]:
    """The tasks the store kept with the run's trajectories (schema 7 on), by id."""
    rows = queries.rows(store, "wm_trajectories", [run_id, run_id])
    return {
        str(tid): _Task.model_validate_json(task) for tid, _, _, task in rows if task is not None
    }


def _tasks(suite: Path, wanted: set[str]) -> dict[str, _Task]:
    """The instruction, system prompt and prompt-relevant ``meta`` of the *wanted* trajectories
    of *suite* (any dataset form), by id."""
    from fidelity.formats.dataset import lines

    found: dict[str, _Task] = {}
    for line in lines(suite):
        trajectory = line.parse()
        if trajectory.id not in wanted:
            continue
        meta = {k: trajectory.meta[k] for k in (AWB_META, TASK_META) if k in trajectory.meta}
        found[trajectory.id] = _Task(
            instruction=trajectory.instruction,
            system_prompt=trajectory.system_prompt,
            meta=meta,
        )
    return found


def _trajectory(
    store: Store, run_id: str, tid: str, domain: str, env: str, task: _Task | None
) -> Trajectory:
    """The stored trajectory: its actions, controls and real observations, with its task."""
    adapter = action_adapter()
    steps = []
    for row in queries.rows(store, "wm_steps", [run_id, tid]):
        _, action, control, *real = row
        steps.append(
            Step(
                action=adapter.validate_json(action),
                observation=None if real[0] is None else stored_observation(*real),
                control=None if control is None else Control.model_validate_json(control),
            )
        )
    spec = EnvSpec.model_validate_json(env)
    trajectory = Trajectory(
        id=tid,
        domain=Domain(domain),
        env=spec,
        steps=steps,
        source="real",
        instruction=task.instruction if task else None,
        system_prompt=task.system_prompt if task else None,
        meta=task.meta if task else {},
    )
    if trajectory.task_instruction is None and spec.task is not None:
        instruction = _task_yaml(spec.task)
        if instruction is not None:
            trajectory = trajectory.model_copy(update={"instruction": instruction})
    return trajectory


def _task_yaml(folder: str) -> str | None:
    """A Terminal-Bench folder's instruction (None when the folder cannot be read now)."""
    from fidelity.errors import InputFormatError
    from fidelity.harnesses.terminal_bench import load_task

    try:
        return load_task(Path(folder)).config.instruction
    except (InputFormatError, OSError):
        return None


class _Exported:
    """Turns the compared steps of one trajectory at a time into rows."""

    def __init__(self, options: WmExportOptions, run_id: str, prompts: Path | None) -> None:
        self.options = options
        self.run_id = run_id
        self.prompts = prompts
        self.domains: dict[str, int] = {}
        self.skipped: dict[str, int] = {}
        self.without_task = 0
        self.normalizer = (
            Normalizer(
                VOLATILE_RULES, _NO_LIMIT, whole_text=frozenset({GIT_ID_RULE, PID_OUTPUT_RULE})
            )
            if options.target == "normalized"
            else None
        )

    def rows(self, store: Store, trajectory: Trajectory) -> Iterator[dict[str, Any]]:
        """The rows of *trajectory*'s compared steps that the options keep."""
        simulated: dict[tuple[str, int], dict[int, Observation]] = {}
        for mode, sample, depth, *fields in queries.rows(
            store, "wm_simulated", [self.run_id, trajectory.id]
        ):
            simulated.setdefault((mode, sample), {})[depth] = stored_observation(*fields)
        compared = self._kept(queries.rows(store, "wm_comparisons", [self.run_id, trajectory.id]))
        if compared and trajectory.task_instruction is None:
            self.without_task += 1
        for (
            mode,
            sample,
            depth,
            domain,
            score,
            drift,
            reasons,
            found,
            omitted,
            stale,
        ), any_drift in compared:
            sim = simulated.get((mode, sample), {})
            history = self._history(trajectory, mode, sim, depth)
            if history is None:
                self._skip("history")
                continue
            step = trajectory.steps[depth - 1]
            real, predicted = step.observation, sim.get(depth)
            if real is None or predicted is None:
                self._skip("history")
                continue
            messages = build_messages(trajectory, history, step.action, depth, self.prompts)
            cwd = _cwd_after(history)
            awb = AWB_META in trajectory.meta
            chosen = self._answer(real, step, cwd, domain, awb)
            drifted = bool(drift if self.options.kind == "wm-dpo" else any_drift)
            cause = cause_of(Drifting(reasons, found, omitted, stale))[0] if drift else None
            meta = {
                "trajectory_id": trajectory.id,
                "depth": depth,
                "mode": mode,
                "sample": sample,
                "domain": domain,
                "drift": drifted,
                "score": score,
                "cause": cause,
                "run_id": self.run_id,
                "target": self.options.target,
            }
            if self.options.kind == "wm-sft":
                data = {"messages": [*messages, _assistant(chosen)], **meta}
            else:
                rejected = self._answer(predicted, step, cwd, domain, awb)
                if rejected == chosen:
                    self._skip("identical")
                    continue
                data = {
                    "prompt": messages,
                    "chosen": [_assistant(chosen)],
                    "rejected": [_assistant(rejected)],
                    **meta,
                }
            self.domains[domain] = self.domains.get(domain, 0) + 1
            yield data

    def _kept(self, rows: list[tuple[Any, ...]]) -> list[tuple[tuple[Any, ...], bool]]:
        """The comparisons the options keep, each with whether a sample of its prompt drifted.

        wm-sft: one per prompt (every sample of a step outside open-loop shares it); wm-dpo:
        every drifting one."""
        options = self.options
        shown = [
            r
            for r in rows
            if (options.domain is None or r[3] == options.domain.value)
            and (options.max_depth is None or r[2] <= options.max_depth)
        ]
        if options.kind == "wm-dpo":
            return [(r, True) for r in shown if r[5]]
        drifted: dict[tuple[Any, ...], bool] = {}
        first: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        for r in shown:
            key = (r[0], r[1], r[2]) if r[0] == _OPEN_LOOP else (r[0], r[2])
            if r[5] and not drifted.get(key, False):
                first[key] = r  # the first drifting sample tells the step's cause
            drifted[key] = drifted.get(key, False) or bool(r[5])
            first.setdefault(key, r)
        kept = [(first[key], drifted[key]) for key in drifted]
        return [(r, d) for r, d in kept if d or not options.only_drift]

    def _history(
        self, trajectory: Trajectory, mode: str, sim: dict[int, Observation], depth: int
    ) -> list[Step] | None:
        """The steps before *depth* as the model was shown them (None: one is missing)."""
        history = []
        for index, step in enumerate(trajectory.steps[: depth - 1], start=1):
            seen = sim.get(index) if mode == _OPEN_LOOP else step.observation
            if seen is None or seen.failed:
                return None
            history.append(Step(action=step.action, observation=seen, control=step.control))
        return history

    def _answer(
        self, observation: Observation, step: Step, cwd: str | None, domain: str, awb: bool
    ) -> str:
        if self.normalizer is not None:
            text, _ = self.normalizer(observation.text, step.action.render())
            observation = observation.model_copy(update={"text": text})
        return render_answer(observation, step.action, cwd, domain, trim_block=awb)

    def _skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def _cwd_after(history: list[Step]) -> str | None:
    """The directory the shell is in after *history* (as the prompts' screens track it)."""
    cwd = None
    for step in history:
        if step.observation is not None:
            cwd = step.observation.cwd or cwd
    return cwd


def _assistant(content: str) -> Message:
    return {"role": "assistant", "content": content}


class _Writer:
    """Rows into a staged file beside the output, renamed into place by :meth:`close`."""

    def __init__(self, path: Path, kind: WmKind, parquet: bool) -> None:
        self.path = path
        self.kind = kind
        self.rows = 0
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, self.temp = staged_file(path, ".part")
        os.close(fd)
        self.pending: list[dict[str, Any]] = []
        self.parquet: Any = None
        self.handle: Any = None
        try:
            if parquet:
                self.pa, pq = arrow()
                self.schema = wm_schema(kind)
                self.parquet = pq.ParquetWriter(str(self.temp), self.schema)
            else:
                self.handle = self.temp.open("w", encoding="utf-8")
        except BaseException:
            self.temp.unlink(missing_ok=True)
            raise

    def add(self, data: dict[str, Any]) -> None:
        with writing(self.path):
            if self.parquet is None:
                self.handle.write(json_line(data) + "\n")
            else:
                self.pending.append(data)
                if len(self.pending) >= _ROW_GROUP:
                    self._flush()
        self.rows += 1

    def _flush(self) -> None:
        if self.pending:
            table = self.pa.Table.from_pylist(self.pending, schema=self.schema)
            self.parquet.write_table(table, row_group_size=len(self.pending))
        self.pending = []

    def close(self) -> None:
        with writing(self.path):
            if self.parquet is None:
                self.handle.close()
            else:
                self._flush()
                self.parquet.close()
            os.replace(self.temp, self.path)

    def abort(self) -> None:
        try:
            if self.parquet is not None:
                self.parquet.close()
            elif self.handle is not None:
                self.handle.close()
        finally:
            self.temp.unlink(missing_ok=True)


def wm_schema(kind: WmKind) -> Any:
    """The Arrow schema of *kind*'s rows."""
    pa, _ = arrow()
    message = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    meta = [
        ("trajectory_id", pa.string()),
        ("depth", pa.int32()),
        ("mode", pa.string()),
        ("sample", pa.int32()),
        ("domain", pa.string()),
        ("drift", pa.bool_()),
        ("score", pa.float64()),
        ("cause", pa.string()),
        ("run_id", pa.string()),
        ("target", pa.string()),
    ]
    if kind == "wm-sft":
        return pa.schema([("messages", message), *meta])
    return pa.schema([("prompt", message), ("chosen", message), ("rejected", message), *meta])
