"""The command line: parse options, call one library function, render the result.

Exit codes: 0 success (or gate pass), 1 gate fail or an unexpected failure,
2 usage or input error, 3 infrastructure or store error, 130 interrupted. The codes
come from :func:`fidelity.errors.exit_code_for`; :class:`_Group` turns every expected
error into one line, so no command prints a traceback for one.
"""

from __future__ import annotations

import copy
import json
import signal
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer
from rich.console import Console
from typer.core import TyperGroup
from typer.models import CommandInfo

from fidelity.errors import (
    EXIT_INTERRUPTED,
    FidelityError,
    describe_os_error,
    exit_code_for,
    is_database_error,
    missing_extra,
)

if TYPE_CHECKING:
    from fidelity.model import WebSite

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class _Group(TyperGroup):
    """Maps fidelity's exceptions to one-line errors and exit codes.

    The codes come from one place, :func:`fidelity.errors.exit_code_for`; OS and
    DuckDB errors that escape the library (disk full, an unwritable report) and a
    missing optional dependency end in one line too, never a traceback.
    """

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except FidelityError as exc:
            err.print(f"[bold red]error:[/] {_escape(str(exc))}")
            ctx.exit(exit_code_for(exc))
        except OSError as exc:
            err.print(f"[bold red]error:[/] {_escape(describe_os_error(exc))}")
            ctx.exit(exit_code_for(exc))
        except Exception as exc:
            missing = missing_extra(exc)  # an optional dependency: which extra installs it
            if missing is None and not is_database_error(exc):
                raise
            line = missing or f"database: {_first_line(exc)}"
            err.print(f"[bold red]error:[/] {_escape(line)}")
            ctx.exit(exit_code_for(exc))
        except KeyboardInterrupt as exc:
            stored = getattr(exc, "summary", None)
            err.print(f"[yellow]interrupted[/]: {stored or 'sandboxes stopped'}")
            ctx.exit(exit_code_for(exc))

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Click's own option errors (``--limit x``) as one line naming the option, exit 2."""
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except typer.Abort:
            if not standalone_mode:
                raise
            err.print("[yellow]aborted[/]")
            sys.exit(EXIT_INTERRUPTED)
        except Exception as exc:
            if not standalone_mode or not _is_click_error(exc):
                raise
            if type(exc).__name__ == "NoArgsIsHelpError":
                exc.show()  # type: ignore[attr-defined]
                sys.exit(0)
            context = getattr(exc, "ctx", None)
            command = f"{context.command_path}: " if context is not None else ""
            err.print(f"[bold red]error:[/] {_escape(command + exc.format_message())}")  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        if not standalone_mode:
            return code
        sys.exit(code if isinstance(code, int) else 0)


def _is_click_error(error: BaseException) -> bool:
    """A Click usage error (Typer may vendor Click, so the class is matched by shape)."""
    return type(error).__module__.split(".")[0] in {"click", "typer"} and all(
        hasattr(error, name) for name in ("format_message", "exit_code", "show")
    )


app = typer.Typer(
    cls=_Group,
    help="Audit how faithfully a language world model simulates real agent environments.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# -- shared options ------------------------------------------------------------------

DbOption = Annotated[Path, typer.Option("--db", help="DuckDB file holding every run.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
SandboxOption = Annotated[
    str | None,
    typer.Option(
        "--sandbox",
        help="Real backend: local (bubblewrap), docker, browser (Chromium, web), "
        "desktop (os), adb (android, your device). "
        "Default: the domain's own.",
    ),
]
ImageOption = Annotated[
    str | None,
    typer.Option(
        "--image",
        help="Container image of trajectories whose env.image is unset (docker/swe backends; "
        "a trajectory's own env.image wins). One that is not here and cannot be pulled "
        "makes its trajectories unverifiable.",
    ),
]
SiteOption = Annotated[
    list[str] | None,
    typer.Option(
        "--site",
        help="NAME=URL: the live base URL of the web site NAME that trajectories' env.sites "
        "name without a URL (repeatable; default: BrowserGym's WA_<NAME> variables).",
    ),
]
SiteResetOption = Annotated[
    list[str] | None,
    typer.Option(
        "--site-reset",
        help="NAME=COMMAND: a shell command run before each trajectory using site NAME "
        "(WebArena: restart its containers); repeatable.",
    ),
]
InstancesOption = Annotated[
    Path | None,
    typer.Option(
        "--instances",
        help="SWE-bench-family instance records (JSONL, JSON list or Parquet, as the HF "
        "dataset exports them) for trajectories whose env.instance names only an id.",
    ),
]
SwebenchNamespaceOption = Annotated[
    str | None,
    typer.Option(
        "--swebench-namespace",
        help="Registry namespace of instance images (default: the record's image, else the "
        "--instance-images convention's: swebench or xingyaoww, Docker Hub's); none: locally "
        "built names.",
    ),
]
InstanceImagesOption = Annotated[
    str | None,
    typer.Option(
        "--instance-images",
        help="How an env.instance id names its image: swebench (default: swebench's "
        "ImageSpec) or swe-gym (SWE-Gym's xingyaoww/sweb.eval.x86_64.<id, __ as _s_>).",
    ),
]
EnvDefaultsOption = Annotated[
    Path | None,
    typer.Option(
        "--env-defaults",
        help="TOML of environment defaults (image, sites, instances, swebench_namespace, "
        "instance_images) under the options given here; a fidelity-env.toml beside the data "
        "is read only when named here (see docs/environments.md).",
    ),
]
TrustCommandsOption = Annotated[
    bool,
    typer.Option(
        "--trust-dataset-commands",
        help="Run the host-side commands the data names (env.sites.<name>.reset, "
        "env.mcp_servers.<name>.command): MCP servers in bubblewrap, resets with a scrubbed "
        "environment, their output redacted. Without it such a line is refused (exit 2).",
    ),
]
PullOption = Annotated[
    bool,
    typer.Option(
        "--pull",
        help="Pull a container image that is not here (default: never; its trajectories are "
        "unverifiable).",
    ),
]
PullRegistryOption = Annotated[
    list[str] | None,
    typer.Option(
        "--pull-registry",
        help="With --pull: the only registries images may be pulled from (repeatable; "
        "docker.io for Docker Hub names).",
    ),
]
SerialOption = Annotated[
    str | None,
    typer.Option("--serial", help="adb device serial (--sandbox adb), e.g. emulator-5554."),
]
CompareConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--compare-config",
        help="TOML: \\[normalize] disable/rules, \\[thresholds] per domain, whitespace = "
        '"strict" to count line endings and trailing whitespace (see docs/comparing.md).',
    ),
]
ExecutorOption = Annotated[
    str,
    typer.Option(
        "--executor", help="Where trajectory tasks run: local (threads) or ray (a Ray cluster)."
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option("--ray-address", help="--executor ray: the cluster to join (default: start one)."),
]
RayResultsOption = Annotated[
    str,
    typer.Option(
        "--ray-results",
        help="--executor ray: records come back to this process (driver), or workers write "
        "Parquet shards that DuckDB merges here (parquet: very large runs).",
    ),
]
RayResultsDirOption = Annotated[
    Path | None,
    typer.Option(
        "--ray-results-dir",
        help="--ray-results parquet: where shards go, a folder every node sees at the same "
        "path (default: DB.parts next to the database).",
    ),
]
SimUrl = Annotated[
    str | None,
    typer.Option(
        "--sim-url",
        help="OpenAI-compatible endpoint of the world model (…/v1).",
        rich_help_panel="World model",
    ),
]
SimModel = Annotated[
    str | None,
    typer.Option(
        "--sim-model", help="Model name served at --sim-url.", rich_help_panel="World model"
    ),
]
SimData = Annotated[
    Path | None,
    typer.Option(
        "--sim-data",
        help="A recorded simulated dataset (JSONL) instead of an endpoint.",
        rich_help_panel="World model",
    ),
]
SimBaseline = Annotated[
    str,
    typer.Option(
        "--sim-baseline",
        help="Baseline used when no world model is given: copy | retrieval.",
        rich_help_panel="World model",
    ),
]
SimConcurrency = Annotated[
    int,
    typer.Option(
        "--sim-concurrency",
        min=1,
        help="Concurrent world-model requests.",
        rich_help_panel="World model",
    ),
]
SimCache = Annotated[
    Path | None,
    typer.Option(
        "--sim-cache",
        help="Response cache (DuckDB) of the endpoint: a rerun costs nothing "
        "[default: fidelity-cache.duckdb next to --db or --output].",
        rich_help_panel="World model",
    ),
]
NoSimCache = Annotated[
    bool,
    typer.Option("--no-sim-cache", help="Do not cache responses.", rich_help_panel="World model"),
]
MaxTokens = Annotated[
    int,
    typer.Option(
        "--max-tokens", min=1, help="Max tokens per answer.", rich_help_panel="World model"
    ),
]
TopK = Annotated[
    int,
    typer.Option(
        "--top-k",
        min=0,
        help="top_k sent in extra_body (0: not sent, for APIs that reject it).",
        rich_help_panel="World model",
    ),
]
PromptsDir = Annotated[
    Path | None,
    typer.Option(
        "--prompts-dir",
        help="Another prompt set: fidelity's template layout, or a checkout of the official "
        "repository's prompts/ folder (<domain>/system_prompt.txt).",
        rich_help_panel="World model",
    ),
]
SamplingOption = Annotated[
    str,
    typer.Option(
        "--sampling",
        help="recommended (model card: temperature 0.6, top_p 0.95, top_k 20) | agentworldbench "
        "(exactly what the reference script sends: temperature 0.6, max_tokens).",
        rich_help_panel="World model",
    ),
]
TurnsOption = Annotated[
    str,
    typer.Option(
        "--turns",
        help="all: predict every step | evaluated: only each sample's evaluated turn "
        "(AgentWorldBench's turn_idx), one request per sample after the real history.",
        rich_help_panel="World model",
    ),
]
SamplesOption = Annotated[
    int,
    typer.Option(
        "--samples",
        min=1,
        max=64,
        help="Predictions drawn per step.",
        rich_help_panel="World model",
    ),
]
SimTimeout = Annotated[
    float,
    typer.Option(
        "--sim-timeout",
        min=0.001,
        help="Total seconds one world-model request may take, retries and backoff included; "
        "past it the step is an infrastructure failure naming the deadline.",
        rich_help_panel="World model",
    ),
]
AllowRoot = Annotated[
    list[Path] | None,
    typer.Option(
        "--allow-root",
        help="A folder env.workdir and @setup files may come from, besides the suite's own "
        "folder (repeatable). Paths outside are refused: a dataset is untrusted input.",
    ),
]
ModeOption = Annotated[
    str,
    typer.Option(
        "--mode",
        help="teacher-forced (real history), open-loop (the model's own history), or both.",
    ),
]


def _sim_config(
    url: str | None,
    model: str | None,
    data: Path | None,
    baseline: str,
    concurrency: int,
    deadline: float = 300.0,
) -> Any:
    from pydantic import ValidationError

    from fidelity.errors import UsageError
    from fidelity.pipeline import SimConfig, world_model_from_flags

    try:
        return SimConfig(
            world_model=world_model_from_flags(url, model, data, baseline, deadline=deadline),
            concurrency=concurrency,
        )
    except ValidationError as exc:
        first = exc.errors()[0]
        raise UsageError(f"--sim-{first['loc'][-1]}: {first['msg']}") from None


def _endpoint_options(
    sim: Any,
    near: Path,
    cache: Path | None,
    no_cache: bool,
    max_tokens: int,
    top_k: int,
    prompts_dir: Path | None,
    samples: int = 1,
    sampling: str = "recommended",
    turns: str = "all",
) -> Any:
    """*sim* with the endpoint options set; the cache defaults to a file next to *near*."""
    from fidelity.errors import UsageError
    from fidelity.worldmodels.cache import DEFAULT_CACHE

    if sampling not in ("recommended", "agentworldbench"):
        raise UsageError(f"--sampling {sampling!r}: choose recommended or agentworldbench")
    if turns not in ("all", "evaluated"):
        raise UsageError(f"--turns {turns!r}: choose all or evaluated")
    if prompts_dir is not None and not prompts_dir.is_dir():
        raise UsageError(f"--prompts-dir {prompts_dir}: no such directory")
    if cache is not None and no_cache:
        raise UsageError("--sim-cache and --no-sim-cache are exclusive")
    world_model = sim.world_model
    if sim.kind == "endpoint":
        world_model = world_model.model_copy(
            update={
                "cache": None if no_cache else cache or near.resolve().parent / DEFAULT_CACHE,
                "max_tokens": max_tokens,
                "top_k": top_k or None,
                "prompts_dir": prompts_dir,
                "sampling": sampling,
            }
        )
    return sim.model_copy(update={"world_model": world_model, "samples": samples, "turns": turns})


def _executor(value: str, ray_address: str | None) -> Any:
    """``--executor``: local or ray; ``--ray-address`` only with ray."""
    from fidelity.errors import UsageError

    if value not in ("local", "ray"):
        raise UsageError(f"--executor {value!r}: choose local or ray")
    if ray_address is not None and value != "ray":
        raise UsageError("--ray-address needs --executor ray")
    return value


def _ray_results(executor: str, results: str, results_dir: Path | None) -> dict[str, Any]:
    """``--ray-results driver|parquet`` and ``--ray-results-dir``: only with ray (and parquet)."""
    from fidelity.errors import UsageError

    if results not in ("driver", "parquet"):
        raise UsageError(f"--ray-results {results!r}: choose driver or parquet")
    if results != "driver" and executor != "ray":
        raise UsageError("--ray-results needs --executor ray")
    if results_dir is not None and results != "parquet":
        raise UsageError("--ray-results-dir needs --ray-results parquet")
    return {"ray_results": results, "ray_results_dir": results_dir}


def _modes(value: str) -> Any:
    """``--mode``: one mode, or both (``both``)."""
    from fidelity.worldmodels.base import Mode

    if value == "both":
        return [Mode.teacher_forced, Mode.open_loop]
    return _mode(value)


def _mode(value: str) -> Any:
    from fidelity.errors import UsageError
    from fidelity.worldmodels.base import Mode

    try:
        return Mode(value)
    except ValueError:
        raise UsageError(f"--mode {value!r}: choose teacher-forced, open-loop or both") from None


# -- commands ----------------------------------------------------------------------------


@app.command()
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
    sim_url: SimUrl = None,
    sim_model: SimModel = None,
    sim_data: SimData = None,
    sim_baseline: SimBaseline = "retrieval",
    sim_concurrency: SimConcurrency = 16,
    sim_cache: SimCache = None,
    no_sim_cache: NoSimCache = False,
    max_tokens: MaxTokens = 32768,
    top_k: TopK = 20,
    prompts_dir: PromptsDir = None,
    samples: SamplesOption = 1,
    sim_timeout: SimTimeout = 300.0,
    mode: ModeOption = "teacher-forced",
    sampling: SamplingOption = "recommended",
    db: DbOption = Path("fidelity.duckdb"),
    allow_root: AllowRoot = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Resume this run (or name a new one).")
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Write a self-contained HTML report here.")
    ] = Path("report.html"),
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
        float, typer.Option("--timeout", min=0.1, help="Seconds per real step.")
    ] = 30.0,
    observation_cap: Annotated[
        int,
        typer.Option(
            "--observation-cap",
            min=1,
            help="Characters stored and printed per observation, real and sim alike; "
            "the rest is cut (flagged truncated).",
        ),
    ] = 64 * 1024,
    as_json: JsonOption = False,
    compare_config: CompareConfigOption = None,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    ray_results: RayResultsOption = "driver",
    ray_results_dir: RayResultsDirOption = None,
    image: ImageOption = None,
    site: SiteOption = None,
    site_reset: SiteResetOption = None,
    instances: InstancesOption = None,
    swebench_namespace: SwebenchNamespaceOption = None,
    instance_images: InstanceImagesOption = None,
    env_defaults: EnvDefaultsOption = None,
    trust_commands: TrustCommandsOption = False,
    pull: PullOption = False,
    pull_registry: PullRegistryOption = None,
) -> None:
    """Replay a suite for real and through the world model, compare, store, report."""
    from fidelity.audit import AuditConfig, new_run_id, run_audit
    from fidelity.compare import load_compare_config
    from fidelity.pipeline import check_domain

    run_id = run_id or new_run_id()
    world = _world_options(
        suite,
        env_defaults,
        image,
        site,
        site_reset,
        instances,
        swebench_namespace,
        instance_images,
        trust_commands,
        pull,
        pull_registry,
    )
    config = AuditConfig(
        domain=check_domain(domain, sandbox) if domain is not None else None,
        suite=suite,
        sandbox=sandbox,
        sandbox_options={**_serial_options(serial, sandbox), **world.options},
        trust=world.trust,
        step_timeout=timeout,
        allowed_roots=allow_root or [],
        sim=_endpoint_options(
            _sim_config(sim_url, sim_model, sim_data, sim_baseline, sim_concurrency, sim_timeout),
            db,
            sim_cache,
            no_sim_cache,
            max_tokens,
            top_k,
            prompts_dir,
            samples,
            sampling,
        ),
        mode="both" if mode == "both" else _mode(mode),
        db=db,
        run_id=run_id,
        report=report,
        policy=policy,
        limit=limit,
        compare=load_compare_config(compare_config),
        observation_cap=observation_cap,
        executor=_executor(executor, ray_address),
        ray_address=ray_address,
        **_ray_results(executor, ray_results, ray_results_dir),
        **({"concurrency": concurrency} if concurrency else {}),
        image=world.image,
    )
    with (
        _interrupt_hint(f"resume with: fidelity audit --run-id {run_id} --db {db}"),
        _progress(as_json) as progress,
    ):
        result = run_audit(config, progress)
    if as_json:
        out.print_json(result.model_dump_json())
    else:
        _render_audit(result)
    raise typer.Exit(_audit_exit_code(result))


def _audit_exit_code(result: Any) -> int:
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


class _World(NamedTuple):
    """The operator's world options: the default image, the backends' options, and what
    the data may do (:class:`~fidelity.trust.DatasetTrust`)."""

    image: str | None
    options: dict[str, Any]
    trust: Any


def _world_options(
    source: Path | None,
    defaults_file: Path | None,
    image: str | None,
    sites: list[str] | None,
    resets: list[str] | None,
    instances: Path | None,
    namespace: str | None,
    convention: str | None,
    trust_commands: bool = False,
    pull: bool = False,
    registries: list[str] | None = None,
) -> _World:
    """The default image, the sandbox options of the user's world and the data's trust: the
    options given, over the environment defaults (only a file ``--env-defaults`` names: one
    beside *source* came with the data), over BrowserGym's ``WA_*`` variables for sites."""
    from fidelity.env_defaults import load_env_defaults, unread_env_defaults
    from fidelity.trust import DatasetTrust

    if defaults_file is None and (beside := unread_env_defaults(source)) is not None:
        err.print(
            f"note: {beside} is not read (it came with the data); name it with "
            "--env-defaults to use it"
        )
    if registries and not pull:
        from fidelity.errors import UsageError

        raise UsageError("--pull-registry needs --pull")
    defaults = load_env_defaults(defaults_file)
    options = {
        **_site_options(sites, resets, defaults.sites),
        **_instance_options(
            instances or defaults.instances,
            namespace or defaults.swebench_namespace,
            convention or defaults.instance_images,
        ),
        "trust_commands": trust_commands,
        "pull": pull,
        "pull_registries": list(registries or []),
    }
    trust = DatasetTrust(commands=trust_commands, site_origins=_site_origins(options))
    return _World(image or defaults.image, options, trust)


def _site_origins(options: Mapping[str, Any]) -> frozenset[str]:
    """The origins of the operator's sites (what a dataset's ``env.sites`` URL may name)."""
    from fidelity.sandboxes.sites import webarena_sites
    from fidelity.trust import origin_of

    sites = options.get("sites")
    urls = (
        [site.get("url") for site in sites.values()]
        if sites is not None
        else [site.url for site in webarena_sites().values()]
    )
    return frozenset(origin_of(url) for url in urls if url)


def _instance_options(
    instances: Path | None, namespace: str | None, convention: str | None
) -> dict[str, Any]:
    """``--instances`` (read and checked now: a bad record exits 2 before any store opens),
    ``--swebench-namespace`` and ``--instance-images`` as the docker backend's options."""
    from fidelity.harnesses.swebench import IMAGE_CONVENTIONS

    options: dict[str, Any] = {}
    if convention is not None:
        if convention not in IMAGE_CONVENTIONS:
            from fidelity.errors import UsageError

            choices = " or ".join(IMAGE_CONVENTIONS)
            raise UsageError(f"--instance-images {convention!r}: choose {choices}")
        options["instance_images"] = convention
    if instances is not None:
        from fidelity.harnesses.swebench import load_instances

        load_instances(instances)
        options["instances"] = instances.resolve()
    if namespace is not None:
        options["swebench_namespace"] = namespace
    return options


def _serial_options(serial: str | None, sandbox: str | None) -> dict[str, Any]:
    """``--serial`` as the adb backend's option; a usage error with another backend."""
    if serial is None:
        return {}
    if sandbox != "adb":
        from fidelity.errors import UsageError

        raise UsageError("--serial names an adb device: use it with --sandbox adb")
    return {"serial": serial}


def _site_options(
    sites: list[str] | None, resets: list[str] | None, file_sites: Mapping[str, WebSite]
) -> dict[str, Any]:
    """``--site NAME=URL`` and ``--site-reset NAME=CMD`` as the browser backend's ``sites``,
    over *file_sites* (the environment defaults'), over BrowserGym's ``WA_*`` variables;
    nothing when none is given."""
    if not sites and not resets and not file_sites:
        return {}
    from pydantic import ValidationError

    from fidelity.errors import UsageError
    from fidelity.model import EnvSpec
    from fidelity.sandboxes.sites import webarena_sites

    given: dict[str, dict[str, str]] = {}
    for option, key, values in (("--site", "url", sites), ("--site-reset", "reset", resets)):
        for value in values or []:
            name, _, text = value.partition("=")
            if not text:
                raise UsageError(f"{option} {value!r}: write NAME={key.upper()}")
            given.setdefault(name.strip(), {})[key] = text.strip()
    try:
        checked = EnvSpec(sites=given).sites or {}
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"][1:] if part != "[key]")
        raise UsageError(f"--site {where}: {first['msg']}") from None
    layered = webarena_sites()
    for layer in (file_sites, checked):
        for name, site in layer.items():
            below = layered.get(name)
            layered[name] = (
                site
                if below is None
                else below.model_copy(update=site.model_dump(exclude_none=True))
            )
    return {"sites": {name: site.model_dump(exclude_none=True) for name, site in layered.items()}}


@app.command()
def replay(
    suite: Annotated[
        Path, typer.Argument(help="Suite or dataset JSONL whose actions are replayed.")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the real trajectories.")
    ],
    sandbox: SandboxOption = None,
    serial: SerialOption = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds per step.")] = 30.0,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 2,
    allow_root: AllowRoot = None,
    as_json: JsonOption = False,
    image: ImageOption = None,
    site: SiteOption = None,
    site_reset: SiteResetOption = None,
    instances: InstancesOption = None,
    swebench_namespace: SwebenchNamespaceOption = None,
    instance_images: InstanceImagesOption = None,
    env_defaults: EnvDefaultsOption = None,
    trust_commands: TrustCommandsOption = False,
    pull: PullOption = False,
    pull_registry: PullRegistryOption = None,
) -> None:
    """Replay actions in real sandboxes only; write trajectories with real observations."""
    from fidelity.batch import replay_suite

    world = _world_options(
        suite,
        env_defaults,
        image,
        site,
        site_reset,
        instances,
        swebench_namespace,
        instance_images,
        trust_commands,
        pull,
        pull_registry,
    )
    options = {**_serial_options(serial, sandbox), **world.options}
    with _progress(as_json) as progress:
        result = replay_suite(
            suite,
            output,
            sandbox,
            options,
            timeout,
            concurrency,
            progress,
            allow_root or [],
            world.image,
            world.trust,
        )
    _render_batch(result, as_json, "replayed")


@app.command()
def simulate(
    suite: Annotated[
        Path, typer.Argument(help="Suite JSONL (with real observations for teacher-forced).")
    ],
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write the simulated trajectories.")
    ],
    sim_url: SimUrl = None,
    sim_model: SimModel = None,
    sim_data: SimData = None,
    sim_baseline: SimBaseline = "copy",
    sim_concurrency: SimConcurrency = 16,
    sim_cache: SimCache = None,
    no_sim_cache: NoSimCache = False,
    max_tokens: MaxTokens = 32768,
    top_k: TopK = 20,
    prompts_dir: PromptsDir = None,
    samples: SamplesOption = 1,
    sim_timeout: SimTimeout = 300.0,
    mode: ModeOption = "open-loop",
    sampling: SamplingOption = "recommended",
    turns: TurnsOption = "all",
    as_json: JsonOption = False,
) -> None:
    """Predict observations with the world model only; write simulated trajectories."""
    from fidelity.batch import simulate_suite

    sim = _endpoint_options(
        _sim_config(sim_url, sim_model, sim_data, sim_baseline, sim_concurrency, sim_timeout),
        output,
        sim_cache,
        no_sim_cache,
        max_tokens,
        top_k,
        prompts_dir,
        samples,
        sampling,
        turns,
    )
    with _progress(as_json) as progress:
        result = simulate_suite(suite, output, sim, _modes(mode), progress)
    _render_batch(result, as_json, "simulated")


@app.command("import")
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
        out.print(f"repeated sample: {_escape(duplicate)}")


@app.command()
def export(
    fmt: Annotated[str, typer.Argument(help="agentworldbench | wm-sft | wm-dpo")],
    simulated: Annotated[
        Path | None,
        typer.Argument(help="agentworldbench: the simulated JSONL (from fidelity simulate)."),
    ] = None,
    output: Annotated[Path | None, typer.Option("--output", "-o", help="File to write.")] = None,
    db: DbOption = Path("fidelity.duckdb"),
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
                f"warning: run {_escape(result.run_id)} was prompted with prompt set "
                f"{result.run_prompts_hash}; these messages were built with {result.prompts_hash}"
            )
        if as_json:
            out.print_json(result.model_dump_json())
            return
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(result.skipped.items()))
        out.print(
            f"exported {result.rows} {fmt} rows of run {_escape(result.run_id)} "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(result.domains.items()))}; "
            f"target {result.target}) → {_escape(result.output)}"
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
    out.print(f"exported {_escape(str(result_model.model_dump()))}")


def _export_domain(value: str | None) -> str | None:
    """``--domain`` of an export: one of the seven."""
    from fidelity.errors import UsageError
    from fidelity.model import Domain

    known = [d.value for d in Domain]
    if value is not None and value not in known:
        raise UsageError(f"--domain {value!r}: choose {', '.join(known)}")
    return value


@app.command()
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
    from fidelity.compare import load_compare_config
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
    config = load_compare_config(compare_config)

    def write_rows(rows: list[DiffRow]) -> None:
        sys.stdout.write("".join(row.model_dump_json() + "\n" for row in rows))

    if store_db is not None:  # compared once: each pair is stored and its rows shown
        held: list[DiffRow] = []
        streamed = fmt == "jsonl" or (fmt == "json" and not _styled())
        text = JsonResultText()

        def write_json(rows: list[DiffRow]) -> None:
            sys.stdout.write("".join(text.row(row) for row in rows))

        on_rows = {"jsonl": write_rows, "json": write_json}[fmt] if streamed else held.extend
        stored = store_diff(real, sim, store_db, config, run, on_rows=on_rows, jobs=jobs)
        if fmt == "json" and streamed:
            sys.stdout.write(text.end(stored.only_real, stored.only_sim) + "\n")
        err.print(f"stored as run {stored.run_id} in {_escape(stored.db)}")
        if streamed:
            return
        result = DiffResult(rows=held, only_real=stored.only_real, only_sim=stored.only_sim)
    elif fmt == "jsonl":  # streamed: memory flat in the files' size
        sys.stdout.writelines(DiffStream(real, sim, config, jobs).rendered(jsonl_line))
        return
    elif fmt == "json" and not _styled():  # streamed too, the same bytes
        sys.stdout.writelines(json_chunks(DiffStream(real, sim, config, jobs)))
        sys.stdout.write("\n")
        return
    else:
        result = diff_files(real, sim, config, jobs)
    if fmt == "json":
        _print_json(result.model_dump_json())
    else:
        _render_diff(result)


@app.command()
def report(
    db: DbOption = Path("fidelity.duckdb"),
    run: Annotated[str | None, typer.Option("--run", help="Run id (default: the latest).")] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="HTML file to write.")] = Path(
        "report.html"
    ),
) -> None:
    """Write the self-contained HTML report of a stored run."""
    from fidelity.analysis.summary import summarize
    from fidelity.report.html import write_report
    from fidelity.store import Store

    with Store(db, read_only=True) as store:
        summary = summarize(store, run)
    path = write_report(summary, output)
    out.print(f"wrote {path} (run {summary.run.run_id})")


@app.command()
def gate(
    dataset: Annotated[
        Path | None,
        typer.Argument(help="Simulated dataset (JSONL) to verify; without it, gate a stored run."),
    ] = None,
    policy: Annotated[
        Path | None, typer.Option("--policy", help="Gate policy (TOML). Required.")
    ] = None,
    db: DbOption = Path("fidelity.duckdb"),
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
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds per step.")] = 30.0,
    concurrency: Annotated[int, typer.Option("--concurrency", min=1)] = 2,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write the verdict as JUnit XML here.")
    ] = None,
    allow_root: AllowRoot = None,
    as_json: JsonOption = False,
    compare_config: CompareConfigOption = None,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
    layout: Annotated[
        str | None,
        typer.Option(
            "--layout",
            help="joined (default): admitted.jsonl etc.; sharded: folders admitted/ etc. "
            "of one file per input shard (no join on the driver).",
        ),
    ] = None,
    ray_results: RayResultsOption = "driver",
    ray_results_dir: RayResultsDirOption = None,
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
    image: ImageOption = None,
    site: SiteOption = None,
    site_reset: SiteResetOption = None,
    instances: InstancesOption = None,
    swebench_namespace: SwebenchNamespaceOption = None,
    instance_images: InstanceImagesOption = None,
    env_defaults: EnvDefaultsOption = None,
    trust_commands: TrustCommandsOption = False,
    pull: PullOption = False,
    pull_registry: PullRegistryOption = None,
) -> None:
    """Decide whether a stored run or a simulated dataset passes a policy.

    Exit 0 pass (or warn), 1 fail, 2 usage error, 3 infrastructure or store error.
    """
    from fidelity.errors import UsageError
    from fidelity.policy import load_policy

    if policy is None:
        raise UsageError("--policy is required (a TOML gate policy)")
    rules = load_policy(policy)
    if dataset is None:
        _gate_usage(sample, replay_all, cut_at_horizon, allow_root, layout)
        if max_replays is not None or max_risk is not None:
            raise UsageError("--max-replays and --max-risk need a DATASET argument")
        if to:
            raise UsageError("--to needs a DATASET argument")
        if (prompt, data_source, sft_tokenizer) != (None, None, None):
            raise UsageError("--prompt, --data-source and --sft-tokenizer need a DATASET argument")
        if image is not None:
            raise UsageError("--image needs a DATASET argument")
        if site or site_reset:
            raise UsageError("--site and --site-reset need a DATASET argument")
        if (instances, swebench_namespace, instance_images, env_defaults) != (None,) * 4:
            raise UsageError(
                "--instances, --swebench-namespace, --instance-images and --env-defaults need "
                "a DATASET argument"
            )
        if trust_commands or pull or pull_registry:
            raise UsageError(
                "--trust-dataset-commands, --pull and --pull-registry need a DATASET argument"
            )
        verdict = _gate_run(db, run, rules)
        payload = verdict.model_dump_json()
    else:
        world = _world_options(
            dataset,
            env_defaults,
            image,
            site,
            site_reset,
            instances,
            swebench_namespace,
            instance_images,
            trust_commands,
            pull,
            pull_registry,
        )
        with _progress(as_json, _GATE_PHASES) as progress:
            manifest = _gate_dataset(
                dataset,
                policy,
                rules,
                db,
                run,
                _sample(sample, replay_all, max_replays),
                replay_all,
                cut_at_horizon,
                output_dir,
                seed,
                sandbox,
                timeout,
                concurrency,
                allow_root or [],
                {
                    "compare": _compare_config(compare_config),
                    "executor": _executor(executor, ray_address),
                    "ray_address": ray_address,
                    "layout": _layout(layout),
                    "to": _rl_formats(to or []),
                    "export": _export_settings(to or [], prompt, data_source, sft_tokenizer),
                    "image": world.image,
                    "sandbox_options": world.options,
                    "trust": world.trust,
                    **({"max_replays": max_replays} if max_replays is not None else {}),
                    "max_risk": max_risk,
                    **_ray_results(executor, ray_results, ray_results_dir),
                },
                progress,
            )
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
        _render_verdict(verdict)
        if dataset is not None:
            _render_manifest(manifest)
    for check in verdict.undecided:
        err.print(f"undecided: {_escape(check.sentence())}")
    raise typer.Exit(verdict.exit_code)


def _compare_config(path: Path | None) -> Any:
    from fidelity.compare import load_compare_config

    return load_compare_config(path)


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


def _plural(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"


def _claim_line(manifest: Any) -> str:
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
) -> Any:
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


def _gate_run(db: Path, run: str | None, rules: Any) -> Any:
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


def _gate_dataset(
    dataset: Path,
    policy: Path,
    rules: Any,
    db: Path,
    run: str | None,
    sample: int | str | None,
    replay_all: bool,
    cut_at_horizon: bool,
    output_dir: Path,
    seed: int,
    sandbox: str | None,
    timeout: float,
    concurrency: int,
    allow_root: list[Path],
    extra: dict[str, Any] | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> Any:
    from fidelity.gate.dataset import gate_dataset
    from fidelity.gate.options import GateOptions

    options = GateOptions(
        dataset=dataset,
        policy_path=policy,
        output_dir=output_dir,
        db=db,
        run_id=run,
        sample=sample,
        seed=seed,
        cut_at_horizon=cut_at_horizon,
        sandbox=sandbox,
        step_timeout=timeout,
        concurrency=concurrency,
        allowed_roots=allow_root,
        **(extra or {}),
    )
    return gate_dataset(options, rules, progress, getattr(progress, "bounds", None))


@app.command()
def drift(
    baseline: Annotated[str, typer.Option("--baseline", help="Run id of the reference run.")],
    current: Annotated[str, typer.Option("--current", help="Run id of the run under test.")],
    db: DbOption = Path("fidelity.duckdb"),
    alpha: Annotated[
        float, typer.Option("--alpha", help="Significance level (Holm-adjusted).")
    ] = 0.05,
    min_effect: Annotated[
        float, typer.Option("--min-effect", min=0, help="Smallest effect (Cohen's h) flagged.")
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
        _render_drift(result)
    raise typer.Exit(result.exit_code)


@app.command()
def risk(
    dataset: Annotated[Path, typer.Argument(help="Simulated dataset (JSONL, shards, Parquet).")],
    db: DbOption = Path("fidelity.duckdb"),
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
    err.print(f"risk model: {_escape(chosen.description)}")
    summary = RiskSummary()
    if fmt == "table" and not as_json:
        sys.stdout.write(table_header())
    for scored in score_dataset(dataset, chosen.model):
        summary.add(scored)
        if fmt == "jsonl":
            sys.stdout.writelines(jsonl_lines(scored))
        elif not as_json:
            sys.stdout.write(table_row(scored))
    if as_json:
        _print_json(summary.as_json(chosen.fitted, chosen.description, chosen.folds))
    elif fmt == "table":
        sys.stdout.write(summary.line() + "\n")


@app.command()
def judge(
    judge_url: Annotated[
        str, typer.Option("--judge-url", help="OpenAI-compatible endpoint of the judge (…/v1).")
    ],
    judge_model: Annotated[str, typer.Option("--judge-model", help="Model name of the judge.")],
    db: DbOption = Path("fidelity.duckdb"),
    run: Annotated[str | None, typer.Option("--run", help="Run id (default: the latest).")] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Judge at most N steps.")
    ] = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Concurrent judge requests.")
    ] = 8,
    prompts_dir: PromptsDir = None,
    sim_timeout: SimTimeout = 300.0,
    executor: ExecutorOption = "local",
    ray_address: RayAddressOption = None,
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
        type=_executor(executor, ray_address),
        threads=1,
        sim_concurrency=concurrency,
        ray_address=ray_address,
    )
    with _progress(as_json, {"judge": "judged"}) as progress:
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


@app.command()
def runs(db: DbOption = Path("fidelity.duckdb"), as_json: JsonOption = False) -> None:
    """List stored runs, newest first; a run whose owner process died shows as ``dead``."""
    from rich.table import Table

    from fidelity.store import Store

    with Store(db, read_only=True) as store:
        rows = store.list_runs()
    if as_json:
        out.print_json(json.dumps(rows, default=str))
        return
    table = Table(
        "run", "started", "status", "owner", "domain", "world model", "mode", "steps", "drift"
    )
    for row in rows:
        model = row["world_model"]
        owner = "-" if row["owner_pid"] is None else f"{row['owner_host']}:{row['owner_pid']}"
        table.add_row(
            row["run_id"],
            str(row["started_at"])[:19],
            row["status"],
            _escape(owner),
            row["domain"],
            _escape(str(model.get("model") or model.get("backend", "?"))),
            row["mode"],
            str(row["steps"]),
            "-" if row["drift_rate"] is None else f"{row['drift_rate']:.1%}",
        )
    out.print(table)


# -- rendering ------------------------------------------------------------------------------


sandbox_app = typer.Typer(
    cls=_Group, help="Docker images and leftovers of the real backends.", no_args_is_help=True
)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("build")
def sandbox_build(
    domain: Annotated[
        list[str] | None,
        typer.Option("--domain", "-d", help="Domain image to build (default: every recipe)."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Build the Docker images (debootstrap base + domain layers), the MCP servers or the
    search corpus; cached by recipe (or corpus) hash."""
    from fidelity.sandboxes.images import build, buildable_domains
    from fidelity.sandboxes.prepared import PREPARED, prepare

    log = lambda line: err.print(_escape(line))  # noqa: E731
    wanted = domain or buildable_domains()
    tags = prepare([d for d in wanted if d in PREPARED], log)
    images = [d for d in wanted if d not in PREPARED]
    tags.update(build(images, log=log) if images else {})
    if as_json:
        out.print_json(json.dumps(tags))
        return
    for name, tag in tags.items():
        out.print(f"{name}: {tag}")


@sandbox_app.command("sweep")
def sandbox_sweep(
    backend: Annotated[
        str, typer.Option("--sandbox", help="Backend whose leftovers to remove.")
    ] = "docker",
) -> None:
    """Remove containers (or folders) left by audits whose process is dead."""
    from fidelity.sandboxes import sweep

    out.print(f"removed {sweep(backend)} leftover sandbox(es)")


def _render_audit(result: Any) -> None:
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
            _render_sim_figures(figure)
    worst = [row for row in result.summary.by_action if row.drift_rate > 0][:5]
    if worst:
        table = Table(
            "action", "steps", "drift", "halluc.", "score", title="most drifting action types"
        )
        for row in worst:
            table.add_row(
                _escape(row.action_name),
                str(row.steps),
                f"{row.drift_rate:.0%}",
                f"{row.hallucination_rate:.0%}",
                f"{row.mean_score:.2f}",
            )
        out.print(table)
    if result.verdict:
        _render_verdict(result.verdict)


def _render_verdict(verdict: Any) -> None:
    colour = {"pass": "green", "warn": "yellow"}.get(verdict.status, "red")
    out.print(
        f"gate: [bold {colour}]{verdict.status.upper()}[/] (run {verdict.run_id}, {verdict.domain}; "
        f"bounds at {verdict.confidence:.0%} confidence over "
        f"{_plural(verdict.replayed_trajectories, 'trajectory', 'trajectories')})"
    )
    for check in verdict.checks:
        mark = "[green]✓[/]" if check.passed else "[red]✗[/]"
        if not check.passed and check.severity == "warning":
            mark = "[yellow]![/]"
        if check.decision == "undecided" and check.severity == "critical":
            mark = "[red]?[/]"
        label = " (warning)" if check.severity == "warning" else ""
        out.print(f"  {mark} {_escape(check.sentence()).replace(':', label + ':', 1)}")


def _render_manifest(manifest: Any) -> None:
    counts = manifest.counts
    out.print(
        f"dataset gate run {manifest.run_id}: {counts.sampled} of {counts.trajectories} "
        f"trajectories replayed; admitted {counts.admitted} ({counts.admitted_cut} cut, "
        f"{counts.admitted_unverified} unverified), quarantined {counts.quarantined}"
        + (f" ({counts.unverifiable} unverifiable)" if counts.unverifiable else "")
    )
    out.print(f"  {manifest.admitted_path}\n  {manifest.quarantined_path}")


def _render_drift(result: Any) -> None:
    from rich.table import Table

    out.print(
        f"baseline {result.baseline.run_id} → current {result.current.run_id}: "
        f"{result.regressions} regression(s), {result.improvements} improvement(s)"
    )
    for note in result.notes:
        out.print(f"  note: {_escape(note)}")
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


def _render_batch(result: Any, as_json: bool, verb: str) -> None:
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
        out.print(f"unverifiable {_escape(trajectory_id)}: {_escape(reason)}")
    _render_sim_figures(result)


def _render_sim_figures(result: Any) -> None:
    """Cache use, sample spread and controllability of a simulation, when there are any."""
    if getattr(result, "cache", None):
        out.print(f"response cache: {result.cache['hits']} hits, {result.cache['misses']} misses")
    spread = getattr(result, "sampling", None)
    if spread is not None and spread.spread is not None:
        distance = "n/a" if spread.distance_to_real is None else f"{spread.distance_to_real:.3f}"
        out.print(
            f"{spread.samples} samples/step: spread {spread.spread:.3f}, "
            f"distance to real {distance} over {spread.steps} steps"
        )
    control = getattr(result, "controllability", None)
    if control is not None:
        rate = "n/a" if control.rate is None else f"{control.rate:.1%}"
        out.print(
            f"controllability: {control.obeyed} of {control.judged} judged controls obeyed "
            f"({rate}; {control.controlled_steps} controlled predictions)"
        )


def _print_json(text: str) -> None:
    """``out.print_json(text)``: indented JSON; written directly, the same bytes, when unstyled.

    Rich highlights the text and renders it line by line (20 s and 1 GB for the
    rows of a 10,000-step diff); with no terminal and no colour there is nothing
    to style, and its output is ``json.dumps(..., indent=2, ensure_ascii=False)``.
    """
    if _styled():
        out.print_json(text)
        return
    sys.stdout.write(json.dumps(json.loads(text), indent=2, ensure_ascii=False) + "\n")


def _styled() -> bool:
    """True when rich would style stdout (a terminal, or colour forced)."""
    return out.is_terminal or out.color_system is not None


def _render_diff(result: Any) -> None:
    from rich.table import Table

    table = Table("trajectory", "step", "score", "drift", "why")
    for row in result.rows:
        why = "; ".join(row.reasons)
        table.add_row(
            _escape(row.trajectory_id),
            str(row.step),
            f"{row.score:.3f}",
            "[red]drift[/]" if row.drift else "ok",
            _escape(why),
        )
    out.print(table)
    compared = [r for r in result.rows if not r.infra_failure]
    out.print(
        f"{sum(r.drift for r in compared)} of {len(compared)} steps drifted ({result.drift_rate:.1%})"
    )
    for label, ids in (("only in REAL", result.only_real), ("only in SIM", result.only_sim)):
        if ids:
            out.print(f"{label}: {', '.join(ids)}")


# -- plumbing -------------------------------------------------------------------------------


_GATE_PHASES = {"scan": "read", "real": "replayed", "write": "decided"}
"""The progress bars of a dataset gate (its three passes)."""


@contextmanager
def _progress(
    quiet: bool, labels: dict[str, str] | None = None
) -> Iterator[Callable[[str, int], None]]:
    """A rich progress bar (on stderr) driven by the library's progress callback.

    *labels* maps the library's phases to bar titles (default: an audit's phases).
    ``("total", n)`` opens every bar with total *n*; ``("total:PHASE", n)`` opens
    one (``n == 0``: a total not known yet). The callback's ``bounds(verdict)`` shows each
    limit's current bound beside the replays (a dataset gate's rounds).
    """
    if quiet or not err.is_terminal:
        yield _Silent()
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(
        TextColumn("{task.description:>12}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.fields[note]}"),
        console=err,
        transient=True,
    ) as bar:
        yield _Bars(
            bar, labels or {"real": "real replay", "sim": "simulation", "compare": "compared"}
        )


class _Silent:
    """The progress callback of ``--json`` and non-terminal runs: says nothing."""

    def __call__(self, phase: str, n: int) -> None:
        """Nothing."""

    def bounds(self, verdict: Any) -> None:
        """Nothing."""


class _Bars:
    """Rich bars per phase; the replay bar also shows each limit's bound after a round."""

    def __init__(self, bar: Any, labels: dict[str, str]) -> None:
        self.bar = bar
        self.labels = labels
        self.tasks: dict[str, Any] = {}

    def __call__(self, phase: str, n: int) -> None:
        if phase == "total":
            for key, label in self.labels.items():
                self.tasks[key] = self.bar.add_task(label, total=n, note="")
        elif phase.startswith("total:") and phase[6:] in self.labels:  # one bar (0: unknown)
            key = phase[6:]
            self.tasks[key] = self.bar.add_task(self.labels[key], total=n or None, note="")
        elif phase in self.tasks:
            self.bar.advance(self.tasks[phase], n)

    def bounds(self, verdict: Any) -> None:
        """``drift_rate ≤ 0.083 pass · hallucination_rate ≤ 0.21 undecided`` on the replay bar."""
        if "real" not in self.tasks:
            return
        shown = [
            f"{c.name.split(' ')[0]} ≤ {c.upper:.3g} {c.decision}"
            for c in verdict.checks
            if c.severity == "critical" and c.decision is not None and c.upper is not None
        ]
        self.bar.update(self.tasks["real"], note=_escape(" · ".join(shown)))


@contextmanager
def _interrupt_hint(hint: str) -> Iterator[None]:
    try:
        yield
    except KeyboardInterrupt:
        err.print(f"[yellow]{hint}[/]")
        raise


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _sigterm(signum: int, frame: FrameType | None) -> None:
    """SIGTERM does what Ctrl-C does: inside an audit's event loop, asyncio's own SIGINT
    handler cancels the run cleanly (a KeyboardInterrupt raised at an arbitrary point of
    a task would be logged with a traceback instead)."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler):
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


def main() -> None:
    """Console entry point: SIGTERM cleans up like Ctrl-C."""
    signal.signal(signal.SIGTERM, _sigterm)
    named = _named_command(sys.argv[1:])
    if named is None:
        app()
    else:
        named()


def _named_command(args: list[str]) -> TyperGroup | None:
    """A group holding only the command (or subgroup) that *args* start with, if they do.

    Typer turns every command's signature into Click parameters (and pydantic
    validators) before it parses anything; one run needs only its own command's. Help,
    no argument or an unknown name (Click suggests close ones) get the whole app: None.
    """
    name = args[0] if args else None
    commands = [info for info in app.registered_commands if _command_name(info) == name]
    groups = [info for info in app.registered_groups if info.name == name]
    if not commands and not groups:
        return None
    one = copy.copy(app)
    one.registered_commands, one.registered_groups = commands, groups
    return typer.main.get_group(one)


def _command_name(info: CommandInfo) -> str:
    """The name Typer gives a registered command."""
    return info.name or typer.main.get_command_name(getattr(info.callback, "__name__", ""))
