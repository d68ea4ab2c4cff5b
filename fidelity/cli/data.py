"""``fidelity import``, ``export`` and ``diff``: data in and out, and two recordings compared."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from fidelity.cli.application import err, escape, out, print_json, styled
from fidelity.cli.options import (
    CompareConfigOption,
    DbOption,
    JsonOption,
    PromptsDir,
    compare_settings,
)
from fidelity.cli.render import render_diff
from fidelity.defaults import DEFAULT_DB


def import_(
    fmt: Annotated[
        str,
        typer.Argument(
            help="agentworldbench | swe-agent | mini-swe-agent | verl | skyrl | openrlhf | slime"
        ),
    ],
    sources: Annotated[
        list[Path],
        typer.Argument(
            help="AgentWorldBench JSONL files or folders; .traj / .traj.json files; "
            "RL-stack rows (verl/SkyRL Parquet, OpenRLHF/slime JSONL)."
        ),
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="fidelity JSONL to write.")],
    as_json: JsonOption = False,
) -> None:
    """Convert AgentWorldBench samples, (mini-)SWE-agent runs or RL-stack rows to fidelity JSONL."""
    from fidelity.formats.convert import import_trajectories

    result = import_trajectories(fmt, sources, output)
    if as_json:
        out.print_json(result.model_dump_json())
        return
    domains = ", ".join(f"{k}: {v}" for k, v in sorted(result.domains.items()))
    out.print(
        f"imported {result.trajectories} trajectories ({result.steps} steps; {domains}) "
        f"→ {result.output}"
    )
    for duplicate in result.duplicates:
        out.print(f"repeated sample: {escape(duplicate)}")


def export(
    fmt: Annotated[str, typer.Argument(help="agentworldbench | wm-sft | wm-dpo")],
    simulated: Annotated[
        Path | None,
        typer.Argument(help="agentworldbench: the simulated JSONL (from fidelity simulate)."),
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write.")] = None,
    db: DbOption = Path(DEFAULT_DB),
    run: Annotated[
        str | None, typer.Option("--run", help="wm-*: the stored run (default: the latest).")
    ] = None,
    domain: Annotated[
        str | None, typer.Option("--domain", help="wm-*: only this domain's steps.")
    ] = None,
    only_drift: Annotated[
        bool, typer.Option("--only-drift", help="wm-sft: only drifting steps (wm-dpo: always).")
    ] = False,
    max_depth: Annotated[
        int | None, typer.Option("--max-depth", min=1, help="wm-*: only steps up to depth N.")
    ] = None,
    target: Annotated[
        str,
        typer.Option(
            "--target",
            help="wm-*: real (the observations as printed) or normalized (volatile values as "
            "the comparator's placeholders).",
        ),
    ] = "real",
    suite: Annotated[
        Path | None,
        typer.Option(
            "--suite",
            help="wm-*: the trajectories the run was given, for their instructions (default: "
            "the path the run recorded).",
        ),
    ] = None,
    prompts_dir: PromptsDir = None,
    as_json: JsonOption = False,
) -> None:
    """Write data in another format: simulated predictions for AgentWorldBench's judge (the gen
    field), or a stored run's compared steps as training data for the world model (wm-sft: the
    real observation as the answer; wm-dpo: drifting steps as preference pairs)."""
    from fidelity.errors import UsageError
    from fidelity.formats.convert import EXPORT_FORMATS

    if fmt not in EXPORT_FORMATS:
        raise UsageError(f"unknown export format {fmt!r}; formats: {', '.join(EXPORT_FORMATS)}")
    if output is None:
        raise UsageError("--output/-o is required: the file to write")
    if fmt in ("wm-sft", "wm-dpo"):
        if simulated is not None:
            raise UsageError(f"{fmt} reads a stored run (--db, --run), not a file argument")
        if target not in ("real", "normalized"):
            raise UsageError(f"--target {target!r}: choose real or normalized")
        from fidelity.formats.wm_export import WmExportOptions, export_world_model

        result = export_world_model(
            WmExportOptions.model_validate(
                {
                    "kind": fmt,
                    "db": db,
                    "output": output,
                    "run_id": run,
                    "domain": _export_domain(domain),
                    "only_drift": only_drift,
                    "max_depth": max_depth,
                    "target": target,
                    "suite": suite,
                    "prompts_dir": prompts_dir,
                }
            )
        )
        if result.run_prompts_hash is not None and result.run_prompts_hash != result.prompts_hash:
            err.print(
                f"warning: run {escape(result.run_id)} was prompted with prompt set "
                f"{result.run_prompts_hash}; these messages were built with {result.prompts_hash}"
            )
        if as_json:
            out.print_json(result.model_dump_json())
            return
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(result.skipped.items()))
        out.print(
            f"exported {result.rows} {fmt} rows of run {escape(result.run_id)} "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(result.domains.items()))}; "
            f"target {result.target}) → {escape(result.output)}"
            + (f"; left out: {skipped}" if skipped else "")
        )
        if result.without_task and result.suite is None:
            err.print(
                f"warning: {result.without_task} trajectories without their instruction: the "
                "store keeps none and the run's suite is not here (pass --suite)"
            )
        return
    wm_options = (run, domain, max_depth, suite, prompts_dir)
    if wm_options != (None,) * 5 or only_drift or target != "real":
        raise UsageError(
            "--run, --domain, --only-drift, --max-depth, --target, --suite and --prompts-dir "
            "go with wm-sft and wm-dpo"
        )
    if simulated is None:
        raise UsageError(f"{fmt} needs the simulated JSONL file argument")
    from fidelity.formats.convert import export_trajectories

    result_model = export_trajectories(fmt, simulated, output)
    if as_json:
        out.print_json(result_model.model_dump_json())
        return
    out.print(f"exported {escape(str(result_model.model_dump()))}")


def _export_domain(value: str | None) -> str | None:
    """``--domain`` of an export: one of the seven."""
    from fidelity.errors import UsageError
    from fidelity.trajectory import Domain

    known = [d.value for d in Domain]
    if value is not None and value not in known:
        raise UsageError(f"--domain {value!r}: choose {', '.join(known)}")
    return value


def diff(
    real: Annotated[Path, typer.Argument(help="JSONL with real observations.")],
    sim: Annotated[
        Path, typer.Argument(help="JSONL with simulated observations of the same actions.")
    ],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table | jsonl | json")] = "table",
    compare_config: CompareConfigOption = None,
    store_db: Annotated[
        Path | None,
        typer.Option("--db", help="Also store the comparison as a run here (for judge, report)."),
    ] = None,
    run: Annotated[
        str | None,
        typer.Option("--run", help="With --db: the run id to store it as (default: a new id)."),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs",
            "-j",
            min=1,
            help="Processes comparing steps (default: one per CPU for a simulated file "
            "of 1 MiB or more, else 1). Rows come in the same order either way.",
        ),
    ] = None,
) -> None:
    """Compare two recordings of the same actions step by step."""
    from fidelity.diffing import (
        DiffResult,
        DiffRow,
        DiffStream,
        JsonResultText,
        diff_files,
        json_chunks,
        jsonl_line,
        store_diff,
    )
    from fidelity.errors import UsageError

    if fmt not in {"table", "jsonl", "json"}:
        raise UsageError(f"--format {fmt!r}: choose table, jsonl or json")
    if run is not None and store_db is None:
        raise UsageError("--run names the run stored with --db: give --db too")
    config = compare_settings(compare_config)

    def write_rows(rows: list[DiffRow]) -> None:
        sys.stdout.write("".join(row.model_dump_json() + "\n" for row in rows))

    if store_db is not None:  # compared once: each pair is stored and its rows shown
        held: list[DiffRow] = []
        streamed = fmt == "jsonl" or (fmt == "json" and not styled())
        text = JsonResultText()

        def write_json(rows: list[DiffRow]) -> None:
            sys.stdout.write("".join(text.row(row) for row in rows))

        on_rows = {"jsonl": write_rows, "json": write_json}[fmt] if streamed else held.extend
        stored = store_diff(real, sim, store_db, config, run, on_rows=on_rows, jobs=jobs)
        if fmt == "json" and streamed:
            sys.stdout.write(text.end(stored.only_real, stored.only_sim) + "\n")
        err.print(f"stored as run {stored.run_id} in {escape(stored.db)}")
        if streamed:
            return
        result = DiffResult(rows=held, only_real=stored.only_real, only_sim=stored.only_sim)
    elif fmt == "jsonl":  # streamed: memory flat in the files' size
        sys.stdout.writelines(DiffStream(real, sim, config, jobs).rendered(jsonl_line))
        return
    elif fmt == "json" and not styled():  # streamed too, the same bytes
        sys.stdout.writelines(json_chunks(DiffStream(real, sim, config, jobs)))
        sys.stdout.write("\n")
        return
    else:
        result = diff_files(real, sim, config, jobs)
    if fmt == "json":
        print_json(result.model_dump_json())
    else:
        render_diff(result)
