"""Pass 3 of the dataset gate: every trajectory decided and written, staged, installed."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from fidelity import gate_outputs, pipeline
from fidelity.audit import code_version
from fidelity.errors import writing
from fidelity.executors.ray import map_on_cluster
from fidelity.formats.dataset import Line, shard_lines
from fidelity.formats.jsonl import PathConfiner
from fidelity.formats.rl_export import (
    FORMATS,
    ExportOptions,
    RLFormat,
    RLWriter,
    TrajectoryFidelity,
    join_parts,
    suffix,
)
from fidelity.gate.decide import decide
from fidelity.gate.evidence import Evidence, TrajectoryTally
from fidelity.gate.limits import admitted_bound, population_upper
from fidelity.gate.options import (
    AdmittedClaim,
    Counts,
    Decision,
    GateOptions,
    LimitClaim,
    Manifest,
    Scan,
    Verified,
)
from fidelity.gate.sample import per_shard
from fidelity.gate.scan import Counted
from fidelity.policy import Policy, Verdict

_OUTPUTS = gate_outputs.OUTPUTS


def output_paths(out: Path) -> list[Path]:
    """What a gate writes into *out*, in either layout (never read back as dataset shards),
    the RL formats' outputs included."""
    own = [out / f"{name}{end}" for name in _OUTPUTS for end in (".jsonl", "")]
    return own + rl_output_paths(out)


def replaced_paths(out: Path) -> list[Path]:
    """What a gate in *out* replaces: the manifest first, then :func:`output_paths`."""
    return [out / gate_outputs.MANIFEST, *output_paths(out)]


@dataclass(frozen=True)
class Sample:
    """What the replays showed: the evidence the verdict was decided on, and the counts of
    every replayed trajectory (each once), from which the admitted data's claim is made."""

    evidence: Evidence
    replayed: Sequence[TrajectoryTally]


def write(
    options: GateOptions,
    policy: Policy,
    scan: Scan,
    verified: Verified,
    verdict: Verdict,
    domain_horizon: int,
    run_id: str,
    progress: pipeline.ProgressCallback,
    sample: Sample,
) -> Manifest:
    """Pass 3: decide every trajectory and write it to its file as it is decided.

    Each shard is written to its own part files (here, or by a Ray task) in a
    hidden staging folder of the output folder; the joined layout concatenates
    them in shard order, the sharded layout keeps them as they are. The outputs
    and then the manifest are renamed into place only once every shard is
    written (:func:`fidelity.gate_outputs.install`: on an error or an interrupt,
    nothing new appears and the staging folder is removed), all under the output
    folder's lock, which a second gate writing there waits for.
    """
    out = options.output_dir
    out.mkdir(parents=True, exist_ok=True)
    with gate_outputs.output_lock(out):
        gate_outputs.recover(out)  # under the lock, every staging folder here is a dead gate's
        previous = replaced_paths(out)
        gate_outputs.refuse_to_replace(out, previous, options.dataset)  # as the folder is now
        parts = gate_outputs.new_staging(out)
        try:
            gate_outputs.pause("staged")
            manifest, staged = _stage(
                options, policy, scan, verified, verdict, domain_horizon, run_id, progress, parts,
                sample,
            )  # fmt: skip
            gate_outputs.pause("written")
            gate_outputs.install(out, parts, staged, previous)
            gate_outputs.pause("installed")
        finally:
            gate_outputs.remove_staging(parts)
    return manifest


def _stage(
    options: GateOptions,
    policy: Policy,
    scan: Scan,
    verified: Verified,
    verdict: Verdict,
    domain_horizon: int,
    run_id: str,
    progress: pipeline.ProgressCallback,
    parts: Path,
    sample: Sample,
) -> tuple[Manifest, list[Path]]:
    """Write every output and the manifest into the staging folder *parts*; returns the
    manifest and the staged outputs."""
    minimum = max(1, policy.for_domain(verdict.domain).min_trust_horizon or 0)
    for name in (*_OUTPUTS, *(rl_name(fmt) for fmt in options.to)):
        (parts / name).mkdir()
    calls = [
        (index, shard.path, parts, verified, verdict, domain_horizon, minimum, options, run_id)
        for index, shard, _ in per_shard(scan)
    ]
    progress("total:write", scan.trajectories)
    written = (
        [write_shard(*call, progress=progress) for call in calls]
        if options.executor != "ray"
        else map_on_cluster(
            write_shard,
            calls,
            options.ray_address,
            lambda shard: progress("write", shard.counts["trajectories"]),
        )
    )
    counts = _Tally()
    decided: list[Decision] = []
    for shard in written:
        counts.absorb(shard.counts)
        decided += shard.verified
    staged = {name: parts / name for name in _OUTPUTS}
    if options.layout == "joined":
        for name in _OUTPUTS:
            staged[name] = _join([shard.parts[name] for shard in written], parts, name)
    rl_staged = _stage_rl(options, parts, written)
    finals = {name: options.output_dir / path.name for name, path in staged.items()}
    manifest = Manifest(
        dataset=str(options.dataset),
        dataset_sha256=scan.sha256,
        run_id=run_id,
        db=str(options.db),
        world_models=scan.world_models,
        prompts_hashes=scan.prompts_hashes,
        code_version=code_version(),
        policy_path=str(options.policy_path),
        policy=policy.model_dump(mode="json"),
        thresholds=policy.for_domain(verdict.domain).model_dump(),
        warnings=policy.warnings_for(verdict.domain).model_dump(),
        sample=options.sample,
        max_replays=options.max_replays,
        seed=options.seed,
        cut_at_horizon=options.cut_at_horizon,
        domain_trust_horizon=domain_horizon,
        verdict=verdict,
        counts=counts.counts(),
        layout=options.layout,
        admitted_path=str(finals["admitted"]),
        quarantined_path=str(finals["quarantined"]),
        decisions_path=str(finals["decisions"]),
        rl_paths={fmt: str(options.output_dir / path.name) for fmt, path in rl_staged.items()},
        decisions=decided,
        confidence=verdict.confidence,
        replayed_trajectories=verdict.replayed_trajectories,
        draws=verdict.draws,
        limits=limit_claims(verdict),
        admitted_claim=_admitted_claim(options, scan, sample, counts.counts(), decided, verdict),
    )
    path = parts / gate_outputs.MANIFEST  # private folder: a plain file, mode as umask says
    with writing(path):
        path.write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return manifest, [staged[name] for name in _OUTPUTS] + list(rl_staged.values())


def rl_name(fmt: RLFormat) -> str:
    """The name of the admitted trajectories' output for *fmt* (``admitted.verl``)."""
    return f"admitted.{fmt}"


def rl_output_paths(out: Path) -> list[Path]:
    """The RL outputs a gate may have written into *out*, in either layout."""
    return [out / f"{rl_name(fmt)}{end}" for fmt in FORMATS for end in (suffix(fmt), "")]


def _stage_rl(
    options: GateOptions, parts: Path, written: Sequence[ShardWritten]
) -> dict[str, Path]:
    """The staged RL outputs per format: joined files, or the folders of parts."""
    staged: dict[str, Path] = {}
    for fmt in options.to:
        name = rl_name(fmt)
        if options.layout == "joined":
            target = parts / f"{name}{suffix(fmt)}"
            join_parts(fmt, [shard.parts[name] for shard in written], target)
            shutil.rmtree(parts / name)
            staged[fmt] = target
        else:
            staged[fmt] = parts / name
    return staged


class ShardWritten(BaseModel):
    """What pass 3 wrote for one shard: its part files, counts and verified decisions."""

    parts: dict[str, Path]
    counts: dict[str, int]
    verified: list[Decision]


def write_shard(
    index: int,
    path: Path,
    staging: Path,
    verified: Verified,
    verdict: Verdict,
    domain_horizon: int,
    minimum: int,
    options: GateOptions,
    run_id: str,
    progress: pipeline.ProgressCallback | None = None,
) -> ShardWritten:
    """Pass 3 over one shard: decide each trajectory, write it to this shard's part files.

    The parts are ``staging/{admitted,quarantined,decisions}/part-NNNNNN.jsonl``
    (NNNNNN: the shard's index). *progress* (here, not on a worker) hears
    ``("write", n)`` every few thousand lines. With ``options.to``, each admitted
    trajectory also goes to ``staging/admitted.<format>/part-NNNNNN.<suffix>``."""
    files = {name: staging / name / f"part-{index:06d}.jsonl" for name in _OUTPUTS}
    rl_files = {
        fmt: staging / rl_name(fmt) / f"part-{index:06d}{suffix(fmt)}" for fmt in options.to
    }
    counts = _Tally()
    decided: list[Decision] = []
    counted = Counted(progress, "write")
    with (
        _PartFile(files["admitted"]) as admitted,
        _PartFile(files["quarantined"]) as quarantined,
        _PartFile(files["decisions"]) as decisions,
        contextlib.ExitStack() as stack,
    ):
        writers = [
            stack.enter_context(RLWriter(file, ExportOptions(format=fmt, **dict(options.export))))
            for fmt, file in rl_files.items()
        ]
        tasks = PathConfiner(path, options.allowed_roots) if writers else None
        for line in shard_lines(index, path):
            counted.one()
            data = json.loads(line.text)
            steps = data.get("steps") or []
            risks = _risks(verified.risk, line)
            decision = decide(
                str(data["id"]), len(steps), verified, verdict, domain_horizon, minimum, options,
                None if risks is None else risks[1],
            )  # fmt: skip
            counts.add(decision)
            if decision.verified or decision.outcome == "unverifiable":
                decided.append(decision)
            decisions.write(decision.model_dump_json())
            meta = dict(data.get("meta") or {})
            if risks is not None:
                meta.update(risk=round(risks[1], 6), step_risks=[round(r, 6) for r in risks[0]])
            if decision.outcome == "admitted":
                meta.update(gate_run_id=run_id, gate_verified=decision.verified)
                for writer in writers:
                    _write_rl(writer, data, decision, verified, domain_horizon, run_id, line, tasks)
                if decision.steps_kept < decision.steps:
                    meta.update(cut_at=decision.steps_kept, original_steps=decision.steps)
                    data["steps"] = steps[: decision.steps_kept]
                admitted.write(_dump({**data, "meta": meta}))
            else:
                meta.update(quarantine_reason=decision.cause, quarantine_detail=decision.reason)
                quarantined.write(_dump({**data, "meta": meta}))
    counted.flush()
    parts = files | {rl_name(fmt): file for fmt, file in rl_files.items()}
    return ShardWritten(parts=parts, counts=counts.values, verified=decided)


def _risks(model: Any, line: Line) -> tuple[list[float], float] | None:
    """The drift risks of a line's steps and of its trajectory (None without a model)."""
    if model is None:
        return None
    from fidelity.risk import step_features, trajectory_risk
    from fidelity.risk.score import model_for

    trajectory = line.parse()
    risks = model_for(model, trajectory).score(step_features(trajectory))
    return risks, trajectory_risk(risks)


def _write_rl(
    writer: RLWriter,
    data: dict[str, Any],
    decision: Decision,
    verified: Verified,
    domain_horizon: int,
    run_id: str,
    line: Line,
    tasks: PathConfiner | None = None,
) -> None:
    """One admitted trajectory (its kept steps) as one row of *writer*'s RL format (with
    its Terminal-Bench folder's instruction, *tasks* resolving the folder)."""
    trajectory = line.parse()
    if tasks is not None:
        trajectory = tasks.with_instruction(trajectory, line.number)
    fidelity = TrajectoryFidelity(
        trust_horizon=decision.horizon if decision.horizon is not None else domain_horizon,
        verified=decision.verified,
        steps=verified.steps.get(decision.trajectory_id, []),
        gate_run_id=run_id,
        outcome_agreement=decision.outcome_agreement,
    )
    writer.write(
        trajectory, fidelity, trajectory.outcome, keep=decision.steps_kept, index=line.number
    )


class _PartFile:
    """A part file written a line at a time; an error that names no file (a full disk's)
    names this one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        with writing(path):
            self.handle = path.open("w", encoding="utf-8")

    def write(self, line: str) -> None:
        """Append *line* and a newline."""
        with writing(self.path):
            self.handle.write(line + "\n")

    def __enter__(self) -> _PartFile:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with writing(self.path):
            self.handle.close()


def _join(parts: Sequence[Path], staging: Path, name: str) -> Path:
    """``staging/NAME.jsonl`` made of *parts* in order (the one part renamed, when one)."""
    joined = staging / f"{name}.jsonl"
    if len(parts) == 1:
        os.replace(parts[0], joined)
        return joined
    with writing(joined), joined.open("wb") as handle:
        for part in parts:
            with part.open("rb") as source:
                shutil.copyfileobj(source, handle, 1 << 20)
    return joined


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


class _Tally:
    """The manifest's counts, added up one decision at a time."""

    def __init__(self) -> None:
        self.values = dict.fromkeys(Counts.model_fields, 0)

    def add(self, d: Decision) -> None:
        v = self.values
        v["trajectories"] += 1
        v["sampled"] += d.verified or d.outcome == "unverifiable"
        v["steps"] += d.steps
        if d.outcome != "admitted":
            v["quarantined"] += 1
            v["unverifiable"] += d.outcome == "unverifiable"
            return
        v["admitted"] += 1
        v["admitted_whole"] += d.verified and d.steps_kept == d.steps
        v["admitted_cut"] += d.steps_kept < d.steps
        v["admitted_unverified"] += not d.verified
        v["steps_admitted"] += d.steps_kept
        v["steps_admitted_unverified"] += 0 if d.verified else d.steps_kept

    def absorb(self, values: dict[str, int]) -> None:
        for key, value in values.items():
            self.values[key] += value

    def counts(self) -> Counts:
        return Counts(**self.values)


def limit_claims(verdict: Verdict) -> list[LimitClaim]:
    """Every check of *verdict* as the manifest states it."""
    return [
        LimitClaim(
            domain=verdict.domain,
            limit=check.name,
            severity=check.severity,
            estimate=check.value,
            lower=check.lower,
            upper=check.upper,
            decision=check.decision,
            passed=check.passed,
            more=check.more,
        )
        for check in verdict.checks
    ]


def _admitted_claim(
    options: GateOptions,
    scan: Scan,
    sample: Sample,
    counts: Counts,
    decided: Sequence[Decision],
    verdict: Verdict,
) -> AdmittedClaim:
    """Upper bounds on drift and hallucination among every admitted step."""
    alpha = 1 - verdict.confidence
    kept = {d.trajectory_id: d.steps_kept for d in decided if d.outcome == "admitted"}
    bounds: dict[str, float | None] = {}
    for name, count in (("drift", _drift), ("hallucination", _hallucinated)):
        upper = population_upper(sample.evidence, count, alpha)
        bounds[name] = admitted_bound(
            upper,
            int(sum(scan.lengths)),
            sample.replayed,
            count,
            kept,
            counts.steps_admitted,
            counts.steps_admitted_unverified,
            kept_is_clean=name == "drift",
        )
    drift, hallucination = bounds["drift"], bounds["hallucination"]
    statement = (
        f"admitted {counts.admitted:,} of {counts.trajectories:,} trajectories "
        f"({counts.steps_admitted:,} steps); "
        + (
            f"drift among them at most {drift:.1%}, hallucination at most "
            f"{hallucination or 0:.1%}, at {verdict.confidence:.0%} confidence"
            if drift is not None
            else "nothing admitted"
        )
        + f"; {verdict.replayed_trajectories:,} real replays"
    )
    return AdmittedClaim(
        trajectories=counts.admitted,
        steps=counts.steps_admitted,
        drift_bound=drift,
        hallucination_bound=hallucination,
        statement=statement,
    )


def _drift(t: TrajectoryTally) -> int:
    return t.drift


def _hallucinated(t: TrajectoryTally) -> int:
    return t.hallucinated
