"""The options commands share, and their validators.

An option used by several commands is declared once here (its flag, help and panel);
the checks that turn raw option values into the library's configs live beside them.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

from fidelity.cli.application import err
from fidelity.defaults import REQUEST_DEADLINE

if TYPE_CHECKING:
    from fidelity.model import WebSite

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


def sim_config(
    url: str | None,
    model: str | None,
    data: Path | None,
    baseline: str,
    concurrency: int,
    deadline: float = REQUEST_DEADLINE,
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


def endpoint_options(
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


def executor_choice(value: str, ray_address: str | None) -> Any:
    """``--executor``: local or ray; ``--ray-address`` only with ray."""
    from fidelity.errors import UsageError

    if value not in ("local", "ray"):
        raise UsageError(f"--executor {value!r}: choose local or ray")
    if ray_address is not None and value != "ray":
        raise UsageError("--ray-address needs --executor ray")
    return value


def ray_results_options(executor: str, results: str, results_dir: Path | None) -> dict[str, Any]:
    """``--ray-results driver|parquet`` and ``--ray-results-dir``: only with ray (and parquet)."""
    from fidelity.errors import UsageError

    if results not in ("driver", "parquet"):
        raise UsageError(f"--ray-results {results!r}: choose driver or parquet")
    if results != "driver" and executor != "ray":
        raise UsageError("--ray-results needs --executor ray")
    if results_dir is not None and results != "parquet":
        raise UsageError("--ray-results-dir needs --ray-results parquet")
    return {"ray_results": results, "ray_results_dir": results_dir}


def modes(value: str) -> Any:
    """``--mode``: one mode, or both (``both``)."""
    from fidelity.worldmodels.base import Mode

    if value == "both":
        return [Mode.teacher_forced, Mode.open_loop]
    return mode_choice(value)


def mode_choice(value: str) -> Any:
    from fidelity.errors import UsageError
    from fidelity.worldmodels.base import Mode

    try:
        return Mode(value)
    except ValueError:
        raise UsageError(f"--mode {value!r}: choose teacher-forced, open-loop or both") from None


# -- commands ----------------------------------------------------------------------------


class World(NamedTuple):
    """The operator's world options: the default image, the backends' options, and what
    the data may do (:class:`~fidelity.trust.DatasetTrust`)."""

    image: str | None
    options: dict[str, Any]
    trust: Any


def world_options(
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
) -> World:
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
    return World(image or defaults.image, options, trust)


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


def serial_options(serial: str | None, sandbox: str | None) -> dict[str, Any]:
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


def compare_settings(path: Path | None) -> Any:
    """``--compare-config``: the comparison rules of a TOML file, or the defaults."""
    from fidelity.compare import load_compare_config

    return load_compare_config(path)
