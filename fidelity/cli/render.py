"""How results print: one renderer per library result model."""

from __future__ import annotations

from typing import TYPE_CHECKING

from fidelity.cli.application import err, escape, out, plural

if TYPE_CHECKING:
    from fidelity.analysis.models import ModeSimulation
    from fidelity.audit import AuditResult
    from fidelity.batch import BatchResult
    from fidelity.diffing import DiffResult
    from fidelity.drift import DriftReport
    from fidelity.gate.options import Manifest
    from fidelity.policy import Verdict


def render_audit(result: AuditResult) -> None:
    """An audit's summary: run, figures, the most drifting actions, the gate's verdict."""
    from rich.table import Table

    totals = result.summary.totals
    if result.world_model_notice:
        err.print(f"[yellow]note:[/] {result.world_model_notice}")
    head = Table.grid(padding=(0, 2))
    head.add_row(
        "run",
        f"{result.run_id}"
        + (f" (resumed, {result.skipped} already stored)" if result.resumed else ""),
    )
    head.add_row("database", result.db)
    if result.report:
        head.add_row("report", result.report)
    head.add_row(
        "trajectories",
        f"{totals.trajectories} ({len(result.failed_trajectories)} failed to replay"
        + (f", {totals.unverifiable} unverifiable" if totals.unverifiable else "")
        + ")",
    )
    head.add_row(
        "steps compared",
        f"{totals.compared_steps} (+{totals.infra_failures} infrastructure failures)",
    )
    if totals.mode:
        head.add_row("headline mode", f"{totals.mode} (every mode: see the report's cells)")
    if totals.compared_steps == 0:  # no rate or horizon is a figure then
        for name in ("drift rate", "hallucination rate", "mean score", "trust horizon"):
            head.add_row(name, "— (nothing compared)")
    else:
        head.add_row("drift rate", f"{totals.drift_rate:.1%}")
        head.add_row("hallucination rate", f"{totals.hallucination_rate:.1%}")
        head.add_row("mean score", f"{totals.mean_score:.3f}")
        head.add_row(
            "trust horizon",
            f"depth {totals.trust_horizon} (drift ≤ {totals.horizon_limit:.0%} per depth)",
        )
    head.add_row("elapsed", f"{result.elapsed_s:.1f} s")
    out.print(head)
    for figure in result.summary.simulation:
        if figure.sampling or figure.controllability:
            out.print(f"[bold]{figure.mode}[/]:", end=" ")
            render_sim_figures(figure)
    worst = [row for row in result.summary.by_action if row.drift_rate > 0][:5]
    if worst:
        table = Table(
            "action", "steps", "drift", "halluc.", "score", title="most drifting action types"
        )
        for row in worst:
            table.add_row(
                escape(row.action_name),
                str(row.steps),
                f"{row.drift_rate:.0%}",
                f"{row.hallucination_rate:.0%}",
                f"{row.mean_score:.2f}",
            )
        out.print(table)
    if result.verdict:
        render_verdict(result.verdict)


def render_verdict(verdict: Verdict) -> None:
    """The gate's status and one line per check."""
    colour = {"pass": "green", "warn": "yellow"}.get(verdict.status, "red")
    out.print(
        f"gate: [bold {colour}]{verdict.status.upper()}[/] (run {verdict.run_id}, {verdict.domain}; "
        f"bounds at {verdict.confidence:.0%} confidence over "
        f"{plural(verdict.replayed_trajectories, 'trajectory', 'trajectories')})"
    )
    for check in verdict.checks:
        mark = "[green]✓[/]" if check.passed else "[red]✗[/]"
        if not check.passed and check.severity == "warning":
            mark = "[yellow]![/]"
        if check.decision == "undecided" and check.severity == "critical":
            mark = "[red]?[/]"
        label = " (warning)" if check.severity == "warning" else ""
        out.print(f"  {mark} {escape(check.sentence()).replace(':', label + ':', 1)}")


def render_manifest(manifest: Manifest) -> None:
    """What a dataset gate replayed, admitted and quarantined, and where it wrote them."""
    counts = manifest.counts
    out.print(
        f"dataset gate run {manifest.run_id}: {counts.sampled} of {counts.trajectories} "
        f"trajectories replayed; admitted {counts.admitted} ({counts.admitted_cut} cut, "
        f"{counts.admitted_unverified} unverified), quarantined {counts.quarantined}"
        + (f" ({counts.unverifiable} unverifiable)" if counts.unverifiable else "")
    )
    out.print(f"  {manifest.admitted_path}\n  {manifest.quarantined_path}")


def render_drift(result: DriftReport) -> None:
    """Two runs compared: the tests that changed, and the outcome lines."""
    from rich.table import Table

    out.print(
        f"baseline {result.baseline.run_id} → current {result.current.run_id}: "
        f"{result.regressions} regression(s), {result.improvements} improvement(s)"
    )
    for note in result.notes:
        out.print(f"  note: {escape(note)}")
    table = Table("domain", "mode", "depth", "metric", "baseline", "current", "h", "p (Holm)", "")
    colours = {"regression": "red", "improvement": "green", "inconclusive": "yellow"}
    for t in result.tests:
        if t.depth is not None and t.status in {"unchanged", "inconclusive"}:
            continue
        colour = colours.get(t.status, "default")
        table.add_row(
            t.domain,
            t.mode,
            "all" if t.depth is None else str(t.depth),
            t.metric.removesuffix("_rate"),
            f"{t.baseline_rate:.1%} ({t.baseline_steps})",
            f"{t.current_rate:.1%} ({t.current_steps})",
            f"{t.effect_size:+.2f}",
            f"{t.p_adjusted:.3g}",
            f"[{colour}]{t.status}[/]",
        )
    out.print(table)
    from fidelity.drift import outcome_lines

    for line in outcome_lines(result):
        out.print(line, markup=False, highlight=False)


def render_batch(result: BatchResult, as_json: bool, verb: str) -> None:
    """What a replay or a simulation wrote (*verb*: replayed, simulated), or its JSON."""
    if as_json:
        out.print_json(result.model_dump_json())
        return
    if result.world_model_notice:
        err.print(f"[yellow]note:[/] {result.world_model_notice}")
    out.print(
        f"{verb} {result.trajectories} trajectories ({result.steps} steps, "
        f"{result.failed_steps} failed) → {result.output}"
    )
    for trajectory_id, reason in (result.unverifiable or {}).items():
        out.print(f"unverifiable {escape(trajectory_id)}: {escape(reason)}")
    render_sim_figures(result)


def render_sim_figures(result: BatchResult | ModeSimulation) -> None:
    """Cache use, sample spread and controllability of a simulation, when there are any."""
    cache: dict[str, int] | None = getattr(result, "cache", None)  # a mode's figures have none
    if cache:
        out.print(f"response cache: {cache['hits']} hits, {cache['misses']} misses")
    spread = result.sampling
    if spread is not None and spread.spread is not None:
        distance = "n/a" if spread.distance_to_real is None else f"{spread.distance_to_real:.3f}"
        out.print(
            f"{spread.samples} samples/step: spread {spread.spread:.3f}, "
            f"distance to real {distance} over {spread.steps} steps"
        )
    control = result.controllability
    if control is not None:
        rate = "n/a" if control.rate is None else f"{control.rate:.1%}"
        out.print(
            f"controllability: {control.obeyed} of {control.judged} judged controls obeyed "
            f"({rate}; {control.controlled_steps} controlled predictions)"
        )


def render_diff(result: DiffResult) -> None:
    """Two recordings compared step by step, as a table and a drift line."""
    from rich.table import Table

    table = Table("trajectory", "step", "score", "drift", "why")
    for row in result.rows:
        why = "; ".join(row.reasons)
        table.add_row(
            escape(row.trajectory_id),
            str(row.step),
            f"{row.score:.3f}",
            "[red]drift[/]" if row.drift else "ok",
            escape(why),
        )
    out.print(table)
    compared = [r for r in result.rows if not r.infra_failure]
    out.print(
        f"{sum(r.drift for r in compared)} of {len(compared)} steps drifted ({result.drift_rate:.1%})"
    )
    for label, ids in (("only in REAL", result.only_real), ("only in SIM", result.only_sim)):
        if ids:
            out.print(f"{label}: {', '.join(ids)}")
