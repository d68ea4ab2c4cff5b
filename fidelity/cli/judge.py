"""``fidelity judge``: a stored run's steps scored by an LLM judge."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from fidelity.cli.application import out
from fidelity.cli.bundles import ExecutorOptions
from fidelity.cli.options import DbOption, JsonOption, PromptsDir, SimTimeout, expand_bundles
from fidelity.cli.progress import progress_bars
from fidelity.defaults import DEFAULT_DB, JUDGE_CONCURRENCY, REQUEST_DEADLINE


@expand_bundles
def judge(
    judge_url: Annotated[
        str, typer.Option("--judge-url", help="OpenAI-compatible endpoint of the judge (…/v1).")
    ],
    judge_model: Annotated[str, typer.Option("--judge-model", help="Model name of the judge.")],
    db: DbOption = Path(DEFAULT_DB),
    run: Annotated[str | None, typer.Option("--run", help="Run id (default: the latest).")] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Judge at most N steps.")
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Concurrent judge requests.")
    ] = JUDGE_CONCURRENCY,
    prompts_dir: PromptsDir = None,
    sim_timeout: SimTimeout = REQUEST_DEADLINE,
    executor: ExecutorOptions = ExecutorOptions(),
    as_json: JsonOption = False,
) -> None:
    """Score a stored run's steps with an LLM judge (AgentWorldBench's five dimensions)."""
    from fidelity.executors import ExecutorConfig
    from fidelity.judge import JudgeConfig, judge_run
    from fidelity.worldmodels.cache import DEFAULT_CACHE

    config = JudgeConfig(
        url=judge_url,
        model=judge_model,
        limit=limit,
        concurrency=concurrency,
        prompts_dir=prompts_dir,
        cache=db.resolve().parent / DEFAULT_CACHE,
        deadline=sim_timeout,
    )
    where = ExecutorConfig(
        type=executor.choice(),
        threads=1,
        sim_concurrency=concurrency,
        ray_address=executor.ray_address,
    )
    with progress_bars(as_json, {"judge": "judged"}) as progress:
        result = judge_run(db, run, config, progress, where)
    if as_json:
        out.print_json(result.model_dump_json())
        return
    agreement = result.agreement
    rho = "-" if agreement.overall is None else f"{agreement.overall:+.3f}"
    out.print(
        f"run {result.run_id}: judged {result.judged}/{result.steps} steps "
        f"({result.failed} judge failures); Spearman(judge overall, score) {rho} "
        f"over n={agreement.n}"
    )
