"""``fidelity gate``, ``drift`` and ``risk``: verdicts on runs and datasets."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fidelity.cli.application import err, escape, out, print_json
from fidelity.cli.bundles import ExecutorOptions, RayResultsOptions, WorldOptions
from fidelity.cli.options import (
    AllowRoot,
    CompareConfigOption,
    DbOption,
    JsonOption,
    SandboxOption,
    compare_settings,
    expand_bundles,
    finite,
)
from fidelity.cli.progress import GATE_PHASES, progress_bars
from fidelity.cli.render import render_drift, render_manifest, render_verdict
from fidelity.defaults import DEFAULT_DB, SANDBOX_CONCURRENCY, STEP_TIMEOUT

if TYPE_CHECKING:
    from fidelity.formats.rl_export import ExportSettings
    from fidelity.gate.options import Manifest
    from fidelity.policy import Policy, Verdict


@expand_bundles
def gate(
    dataset: Annotated[
        Path | None,
        typer.Argument(help="Simulated dataset (JSONL) to verify; without it, gate a stored run."),
    ] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="Gate policy (TOML). Required.")
    ] = None,
    db: DbOption = Path(DEFAULT_DB),
    run: Annotated[
        str | None,
        typer.Option(
            "--run",
            help="Run id: the stored run to gate (default: the latest), "
            "or the run a dataset gate writes (default: a new id).",
        ),
    ] = None,
    sample: Annotated[
        str | None,
        typer.Option(
            "--sample",
            help="auto (default): replay rounds of drawn trajectories until every limit is "
            "decided; N: one sample of N draws.",
        ),
    ] = None,
    max_replays: Annotated[
        int | None,
        typer.Option(
            "--max-replays", help="--sample auto: replay at most N distinct trajectories (1000)."
        ),
    ] = None,
    max_risk: Annotated[
        float | None,
        typer.Option(
            "--max-risk",
            min=0.0,
            max=1.0,
            callback=finite,
            help="Quarantine every trajectory never replayed whose drift risk (fitted on the "
            "replays; every line carries meta.risk) is over R.",
        ),
    ] = None,
    replay_all: Annotated[bool, typer.Option("--all", help="Replay every trajectory.")] = False,
    cut_at_horizon: Annotated[
        bool,
        typer.Option("--cut-at-horizon", help="Admit drifting trajectories cut at their horizon."),
    ] = False,
    output_dir: Annotated[
        Path, typer.Option("--output-dir", "-o", help="Where admitted/quarantined/manifest go.")
    ] = Path("gate-out"),
    seed: Annotated[int, typer.Option("--seed", help="Seed of the sample's draws.")] = 0,
    sandbox: SandboxOption = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, callback=finite, help="Seconds per step.")
    ] = STEP_TIMEOUT,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = SANDBOX_CONCURRENCY,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write the verdict as JUnit XML here.")
    ] = None,
    allow_root: AllowRoot = None,
    as_json: JsonOption = False,
    compare_config: CompareConfigOption = None,
    executor: ExecutorOptions = ExecutorOptions(),
    layout: Annotated[
        str | None,
        typer.Option(
            "--layout",
            help="joined (default): admitted.jsonl etc.; sharded: folders admitted/ etc. "
            "of one file per input shard (no join on the driver).",
        ),
    ] = None,
    ray: RayResultsOptions = RayResultsOptions(),
    to: Annotated[
        list[str] | None,
        typer.Option(
            "--to",
            help="Also write the admitted data for an RL stack: verl, skyrl (Parquet), "
            "openrlhf, slime (JSONL); or whole trajectories for fine-tuning: sft (Parquet); "
            "repeatable. Needs a DATASET.",
        ),
    ] = None,
    prompt: Annotated[
        str | None,
        typer.Option(
            "--prompt",
            help="--to RL rows: instruction (default): the system prompt and the task; "
            "conversation: the recorded turns too.",
        ),
    ] = None,
    data_source: Annotated[
        str | None,
        typer.Option(
            "--data-source",
            help="--to: the rows' data_source (default: the trajectory's own, else "
            "fidelity/<domain>); verl's default reward dispatches on it.",
        ),
    ] = None,
    sft_tokenizer: Annotated[
        Path | None,
        typer.Option(
            "--sft-tokenizer",
            help="--to sft: a local tokenizer folder with a chat template; adds TRL's "
            "pre-tokenized input_ids and assistant_masks (untrusted turns masked).",
        ),
    ] = None,
    world: WorldOptions = WorldOptions(),
) -> None:
    """Decide whether a stored run or a simulated dataset passes a policy.

    Exit 0 pass (or warn), 1 fail, 2 usage error, 3 infrastructure or store error.
    """
    from fidelity.duckdb_files import refuse_replacing_database
    from fidelity.errors import UsageError
    from fidelity.policy import load_policy

    if policy is None:
        raise UsageError("--policy is required (a TOML gate policy)")
    if junit is not None:
        refuse_replacing_database(junit)  # before the gate, not after its replays
    rules = load_policy(policy)
    if dataset is None:
        _gate_usage(sample, replay_all, cut_at_horizon, allow_root, layout)
        if max_replays is not None or max_risk is not None:
            raise UsageError("--max-replays and --max-risk need a DATASET argument")
        if to:
            raise UsageError("--to needs a DATASET argument")
        if (prompt, data_source, sft_tokenizer) != (None, None, None):
            raise UsageError("--prompt, --data-source and --sft-tokenizer need a DATASET argument")
        world.refuse(needs="a DATASET argument")
        verdict = _gate_run(db, run, rules)
        payload = verdict.model_dump_json()
    else:
        from fidelity.gate.dataset import gate_dataset
        from fidelity.gate.options import GateOptions

        resolved = world.resolve(dataset)
        options = GateOptions(
            dataset=dataset,
            policy_path=policy,
            output_dir=output_dir,
            db=db,
            run_id=run,
            sample=_sample(sample, replay_all, max_replays),
            seed=seed,
            cut_at_horizon=cut_at_horizon,
            sandbox=sandbox,
            step_timeout=timeout,
            concurrency=concurrency,
            allowed_roots=allow_root or [],
            compare=compare_settings(compare_config),
            executor=executor.choice(),
            ray_address=executor.ray_address,
            layout=_layout(layout),
            to=_rl_formats(to or []),
            export=_export_settings(to or [], prompt, data_source, sft_tokenizer),
            image=resolved.image,
            sandbox_options=resolved.options,
            trust=resolved.trust,
            **({"max_replays": max_replays} if max_replays is not None else {}),
            max_risk=max_risk,
            **ray.settings(executor.kind),
        )
        with progress_bars(as_json, GATE_PHASES) as progress:
            manifest = gate_dataset(options, rules, progress, getattr(progress, "bounds", None))
        verdict = manifest.verdict
        err.print(_claim_line(manifest))
        payload = manifest.model_dump_json(exclude={"decisions"})
    if junit is not None:
        from fidelity.policy import junit_xml

        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(junit_xml(verdict), encoding="utf-8")
    if as_json:
        out.print_json(payload)
    else:
        render_verdict(verdict)
        if dataset is not None:
            render_manifest(manifest)
    for check in verdict.undecided:
        err.print(f"undecided: {escape(check.sentence())}")
    raise typer.Exit(verdict.exit_code)


def _sample(value: str | None, replay_all: bool, max_replays: int | None) -> int | str | None:
    """``--sample`` (auto, the default, or N >= 1) checked against ``--all`` and
    ``--max-replays``; None: every trajectory (``--all``)."""
    from fidelity.errors import UsageError

    if max_replays is not None and max_replays < 1:
        raise UsageError(f"--max-replays {max_replays}: give at least 1")
    if replay_all:
        if value is not None:
            which = "--sample auto" if value == "auto" else "--sample"
            raise UsageError(f"{which} and --all are exclusive: --all replays every trajectory")
        if max_replays is not None:
            raise UsageError("--max-replays and --all are exclusive: --all replays everything")
        return None
    if value is None or value == "auto":
        return "auto"
    if not value.isdigit() or int(value) < 1:
        raise UsageError(f"--sample {value!r}: give auto or a number of draws (at least 1)")
    if max_replays is not None:
        raise UsageError("--max-replays goes with --sample auto, not a fixed --sample N")
    return int(value)


def _claim_line(manifest: Manifest) -> str:
    """The gate's claim about what it admitted, in one line (stderr)."""
    return f"gate: {manifest.admitted_claim.statement}"


def _gate_usage(
    sample: str | None,
    replay_all: bool,
    cut_at_horizon: bool,
    allow_root: list[Path] | None,
    layout: str | None,
) -> None:
    from fidelity.errors import UsageError

    if sample is not None or replay_all or cut_at_horizon:
        raise UsageError("--sample, --all and --cut-at-horizon need a DATASET argument")
    if allow_root:
        raise UsageError("--allow-root needs a DATASET argument")
    if layout is not None:
        raise UsageError("--layout needs a DATASET argument")


def _rl_formats(values: list[str]) -> list[str]:
    """``--to``: each a format the export writes, once."""
    from fidelity.errors import UsageError
    from fidelity.formats.rl_export import FORMATS

    for value in values:
        if value not in FORMATS:
            raise UsageError(f"--to {value!r}: choose {', '.join(FORMATS)}")
    return list(dict.fromkeys(values))


def _export_settings(
    to: list[str], prompt: str | None, data_source: str | None, tokenizer: Path | None
) -> ExportSettings:
    """``--prompt``, ``--data-source`` and ``--sft-tokenizer``, checked against ``--to``."""
    from fidelity.errors import UsageError
    from fidelity.formats.rl_export import ExportSettings

    if not to and (prompt is not None or data_source is not None or tokenizer is not None):
        raise UsageError("--prompt, --data-source and --sft-tokenizer go with --to")
    if prompt not in (None, "instruction", "conversation"):
        raise UsageError(f"--prompt {prompt!r}: choose instruction or conversation")
    if prompt is not None and set(to) == {"sft"}:
        raise UsageError("--prompt is for the RL rows (--to verl|skyrl|openrlhf|slime), not sft")
    if tokenizer is not None and "sft" not in to:
        raise UsageError("--sft-tokenizer goes with --to sft")
    if data_source is not None and not data_source.strip():
        raise UsageError("--data-source: give a name")
    if tokenizer is not None:
        from fidelity.formats.sft_export import load_tokenizer

        load_tokenizer(tokenizer)  # a bad folder is refused before any replay
    return ExportSettings(
        prompt=prompt or "instruction", data_source=data_source, tokenizer=tokenizer
    )


def _layout(value: str | None) -> str:
    """``--layout``: joined (the default) or sharded."""
    from fidelity.errors import UsageError

    if value not in (None, "joined", "sharded"):
        raise UsageError(f"--layout {value!r}: choose joined or sharded")
    return value or "joined"


def _gate_run(db: Path, run: str | None, rules: Policy) -> Verdict:
    from fidelity.analysis.models import DEFAULT_HORIZON_LIMIT
    from fidelity.analysis.summary import summarize
    from fidelity.analysis.tallies import stored_run_evidence
    from fidelity.gate.limits import evaluate
    from fidelity.policy import horizon_limit
    from fidelity.store import Store

    with Store(db, read_only=True) as store:
        run_id = store.require_run(run)
        domain = summarize(store, run_id, worst=0, detail=False).run.domain
        summary = summarize(
            store,
            run_id,
            horizon_limit(rules, domain, DEFAULT_HORIZON_LIMIT),
            worst=0,
            detail=False,
        )
        evidence = stored_run_evidence(store, run_id, summary.totals.mode)
    return evaluate(summary, rules, evidence)


def drift(
    baseline: Annotated[str, typer.Option("--baseline", help="Run id of the reference run.")],
    current: Annotated[str, typer.Option("--current", help="Run id of the run under test.")],
    db: DbOption = Path(DEFAULT_DB),
    alpha: Annotated[
        float,
        typer.Option(
            "--alpha",
            min=1e-12,
            max=1.0,
            callback=finite,
            help="Significance level (Holm-adjusted).",
        ),
    ] = 0.05,
    min_effect: Annotated[
        float,
        typer.Option(
            "--min-effect",
            min=0,
            callback=finite,
            help="Smallest effect (Cohen's h) flagged.",
        ),
    ] = 0.2,
    min_steps: Annotated[
        int, typer.Option("--min-steps", min=1, help="Fewer compared steps per side: no test.")
    ] = 10,
    as_json: JsonOption = False,
) -> None:
    """Test whether fidelity changed between two runs: exit 1 on a regression, 0 otherwise."""
    from fidelity.drift import compare_runs
    from fidelity.store import Store

    with Store(db, read_only=True) as store:
        result = compare_runs(store, baseline, current, alpha, min_effect, min_steps)
    if as_json:
        out.print_json(result.model_dump_json())
    else:
        render_drift(result)
    raise typer.Exit(result.exit_code)


def risk(
    dataset: Annotated[Path, typer.Argument(help="Simulated dataset (JSONL, shards, Parquet).")],
    db: DbOption = Path(DEFAULT_DB),
    run: Annotated[
        str | None,
        typer.Option(
            "--run", help="Fit the risk on this stored run's comparisons (else the prior)."
        ),
    ] = None,
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | jsonl")] = "table",
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the table's summary as JSON instead.")
    ] = False,
) -> None:
    """Score a simulated dataset's drift risk without replaying it: each step and trajectory."""
    from fidelity.errors import UsageError
    from fidelity.risk.score import RiskSummary, jsonl_lines, table_header, table_row
    from fidelity.risk_data import risk_model, score_dataset

    if fmt not in {"table", "jsonl"}:
        raise UsageError(f"--format {fmt!r}: choose table or jsonl")
    if as_json and fmt == "jsonl":
        raise UsageError("--json summarizes the table; --format jsonl prints JSON lines already")
    chosen = risk_model(db, run)
    err.print(f"risk model: {escape(chosen.description)}")
    summary = RiskSummary()
    for scored in score_dataset(dataset, chosen.model):
        summary.add(scored)
        if fmt == "jsonl":
            sys.stdout.writelines(jsonl_lines(scored))
        elif not as_json:
            if summary.trajectories == 1:  # the header once there is a row to head
                sys.stdout.write(table_header())
            sys.stdout.write(table_row(scored))
    if as_json:
        print_json(summary.as_json(chosen.fitted, chosen.description, chosen.folds))
    elif fmt == "table":
        sys.stdout.write(summary.line() + "\n")
