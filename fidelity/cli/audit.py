"""``fidelity audit``, ``replay`` and ``simulate``: real sandboxes, the world model, or both."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fidelity.cli.application import err, out
from fidelity.cli.bundles import ExecutorOptions, RayResultsOptions, SimOptions, WorldOptions
from fidelity.cli.options import (
    AllowRoot,
    CompareConfigOption,
    DbOption,
    JsonOption,
    ModeOption,
    SandboxOption,
    SerialOption,
    TurnsOption,
    compare_settings,
    expand_bundles,
    finite,
    mode_choice,
    modes,
    serial_options,
)
from fidelity.cli.progress import interrupt_hint, progress_bars
from fidelity.cli.render import render_audit, render_batch
from fidelity.defaults import (
    DEFAULT_DB,
    DEFAULT_REPORT,
    OBSERVATION_CAP,
    SANDBOX_CONCURRENCY,
    STEP_TIMEOUT,
)

if TYPE_CHECKING:
    from fidelity.audit import AuditResult


@expand_bundles
def audit(
    suite: Annotated[
        Path | None, typer.Argument(help="Suite JSONL (default: the bundled suite of --domain).")
    ] = None,
    domain: Annotated[
        str | None,
        typer.Option(
            "--domain", "-d", help="Domain to audit (default: the suite's, else terminal)."
        ),
    ] = None,
    sandbox: SandboxOption = None,
    serial: SerialOption = None,
    sim: SimOptions = SimOptions(),
    mode: ModeOption = "teacher-forced",
    db: DbOption = Path(DEFAULT_DB),
    allow_root: AllowRoot = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Resume this run (or name a new one).")
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write a self-contained HTML report here.")
    ] = Path(DEFAULT_REPORT),
    policy: Annotated[
        Path | None, typer.Option("--policy", help="Gate policy (TOML): exit 1 when it fails.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Audit only the first N trajectories.")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option("--concurrency", min=1, help="Concurrent sandboxes (default: cores)."),
    ] = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, callback=finite, help="Seconds per real step.")
    ] = STEP_TIMEOUT,
    observation_cap: Annotated[
        int,
        typer.Option(
            "--observation-cap",
            min=1,
            help="Characters stored and printed per observation, real and sim alike; "
            "the rest is cut (flagged truncated).",
        ),
    ] = OBSERVATION_CAP,
    as_json: JsonOption = False,
    compare_config: CompareConfigOption = None,
    executor: ExecutorOptions = ExecutorOptions(),
    ray: RayResultsOptions = RayResultsOptions(),
    world: WorldOptions = WorldOptions(),
) -> None:
    """Replay a suite for real and through the world model, compare, store, report."""
    from fidelity.audit import AuditConfig, new_run_id, run_audit
    from fidelity.pipeline import check_domain

    run_id = run_id or new_run_id()
    resolved = world.resolve(suite)
    config = AuditConfig(
        domain=check_domain(domain, sandbox) if domain is not None else None,
        suite=suite,
        sandbox=sandbox,
        sandbox_options={**serial_options(serial, sandbox), **resolved.options},
        trust=resolved.trust,
        step_timeout=timeout,
        allowed_roots=allow_root or [],
        sim=sim.config(db),
        mode="both" if mode == "both" else mode_choice(mode),
        db=db,
        run_id=run_id,
        report=report,
        policy=policy,
        limit=limit,
        compare=compare_settings(compare_config),
        observation_cap=observation_cap,
        executor=executor.choice(),
        ray_address=executor.ray_address,
        **ray.settings(executor.kind),
        **({"concurrency": concurrency} if concurrency else {}),
        image=resolved.image,
    )
    with (
        interrupt_hint(f"resume with: fidelity audit --run-id {run_id} --db {db}"),
        progress_bars(as_json) as progress,
    ):
        result = run_audit(config, progress)
    if as_json:
        out.print_json(result.model_dump_json())
    else:
        render_audit(result)
    raise typer.Exit(_audit_exit_code(result))


def _audit_exit_code(result: AuditResult) -> int:
    """The gate's exit code; without a gate, 3 (infrastructure) when steps were replayed but
    none could be compared (every world-model answer or sandbox failed), said in one line."""
    if result.verdict:
        return int(result.verdict.exit_code)
    totals = result.summary.totals
    lost = totals.infra_failures > totals.unverifiable_steps
    if totals.steps and totals.compared_steps == 0 and lost:
        from fidelity.errors import EXIT_INFRASTRUCTURE

        err.print(
            f"error: nothing was compared: {totals.infra_failures} of {totals.steps} steps failed "
            "(world model or sandbox); the run's failures are in the report and the database"
        )
        return EXIT_INFRASTRUCTURE
    return 0


@expand_bundles
def replay(
    suite: Annotated[
        Path, typer.Argument(help="Suite or dataset JSONL whose actions are replayed.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the real trajectories.")
    ],
    sandbox: SandboxOption = None,
    serial: SerialOption = None,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, callback=finite, help="Seconds per step.")
    ] = STEP_TIMEOUT,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = SANDBOX_CONCURRENCY,
    allow_root: AllowRoot = None,
    as_json: JsonOption = False,
    world: WorldOptions = WorldOptions(),
) -> None:
    """Replay actions in real sandboxes only; write trajectories with real observations."""
    from fidelity.batch import replay_suite

    resolved = world.resolve(suite)
    options = {**serial_options(serial, sandbox), **resolved.options}
    with progress_bars(as_json) as progress:
        result = replay_suite(
            suite,
            output,
            sandbox,
            options,
            timeout,
            concurrency,
            progress,
            allow_root or [],
            resolved.image,
            resolved.trust,
        )
    render_batch(result, as_json, "replayed")


@expand_bundles
def simulate(
    suite: Annotated[
        Path, typer.Argument(help="Suite JSONL (with real observations for teacher-forced).")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the simulated trajectories.")
    ],
    sim: SimOptions = SimOptions(baseline="copy"),
    mode: ModeOption = "open-loop",
    turns: TurnsOption = "all",
    as_json: JsonOption = False,
) -> None:
    """Predict observations with the world model only; write simulated trajectories."""
    from fidelity.batch import simulate_suite

    config = sim.config(output, turns)
    with progress_bars(as_json) as progress:
        result = simulate_suite(suite, output, config, modes(mode), progress)
    render_batch(result, as_json, "simulated")
