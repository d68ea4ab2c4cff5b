"""The options commands share: each declared once, and the bundles they travel in.

A single option used by several commands is an ``Annotated`` alias here (its flag, help
and panel), as sqlite-utils' option decorators are. Options that always travel together
(the world model's, the user's world, the executor's) are an :class:`OptionBundle` (see
:mod:`fidelity.cli.bundles`): a frozen dataclass whose fields are options, and whose
methods check them and build the library's config, as inspect_ai's ``_cli/common.py``
does. A command declares a bundle as one parameter whose default is an instance (the
command's defaults); :func:`expand_bundles` hands Typer the fields as options in that
place and the command the filled instance.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import typing
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

if TYPE_CHECKING:
    from fidelity.compare.config import CompareConfig
    from fidelity.worldmodels.base import Mode

ENVIRONMENT = (
    "FIDELITY_DB",
    "FIDELITY_SIM_URL",
    "FIDELITY_SIM_MODEL",
    "FIDELITY_EXECUTOR",
    "FIDELITY_RAY_ADDRESS",
    "FIDELITY_DEBUG",
)
"""The environment variables recurring options are read from when not given: ``--db``,
``--sim-url``, ``--sim-model``, ``--executor``, ``--ray-address``, and the app's ``--debug``
(``FIDELITY_DEBUG=1``). An option given on the command line wins; ``diff --db`` (also store
a comparison) reads none."""

DbOption = Annotated[
    Path, typer.Option("--db", envvar="FIDELITY_DB", help="DuckDB file holding every run.")
]
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
        "--executor",
        envvar="FIDELITY_EXECUTOR",
        help="Where trajectory tasks run: local (threads) or ray (a Ray cluster).",
    ),
]
RayAddressOption = Annotated[
    str | None,
    typer.Option(
        "--ray-address",
        envvar="FIDELITY_RAY_ADDRESS",
        help="--executor ray: the cluster to join (default: start one).",
    ),
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
        envvar="FIDELITY_SIM_URL",
        help="OpenAI-compatible endpoint of the world model (…/v1).",
        rich_help_panel="World model",
    ),
]
SimModel = Annotated[
    str | None,
    typer.Option(
        "--sim-model",
        envvar="FIDELITY_SIM_MODEL",
        help="Model name served at --sim-url.",
        rich_help_panel="World model",
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


def finite(value: float | None) -> float | None:
    """The callback of every float option: NaN and infinity are refused (``nan`` passes every
    range check, so ``--max-risk nan`` reached the library), naming the option, exit 2."""
    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


SimTimeout = Annotated[
    float,
    typer.Option(
        "--sim-timeout",
        min=0.001,
        callback=finite,
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


class OptionBundle:
    """Options that travel together: subclasses are frozen dataclasses whose fields are
    options (annotated with the aliases above) with the bundle's defaults."""


_F = TypeVar("_F", bound=Callable[..., Any])
_SEPARATOR = "__"


def expand_bundles(command: _F) -> _F:
    """*command* as Typer should see it: each parameter whose default is an
    :class:`OptionBundle` becomes the bundle's fields, in its place, with that instance's
    values as defaults; the command is called with the bundle filled from them."""
    signature = inspect.signature(command, eval_str=True)
    parameters: list[inspect.Parameter] = []
    bundles: dict[str, type[OptionBundle]] = {}
    for parameter in signature.parameters.values():
        given = parameter.default
        if not isinstance(given, OptionBundle):
            parameters.append(parameter)
            continue
        kind = type(given)
        bundles[parameter.name] = kind
        hints = typing.get_type_hints(kind, include_extras=True)
        for field in dataclasses.fields(kind):  # type: ignore[arg-type]
            parameters.append(
                inspect.Parameter(
                    f"{parameter.name}{_SEPARATOR}{field.name}",
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    default=getattr(given, field.name),
                    annotation=hints[field.name],
                )
            )

    @functools.wraps(command)
    def expanded(**values: Any) -> Any:
        for name, kind in bundles.items():
            prefix = f"{name}{_SEPARATOR}"
            fields = {
                key[len(prefix) :]: values.pop(key)
                for key in list(values)
                if key.startswith(prefix)
            }
            values[name] = kind(**fields)
        return command(**values)

    expanded.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
    expanded.__annotations__ = {p.name: p.annotation for p in parameters}
    return typing.cast(_F, expanded)


# -- validators of single options -----------------------------------------------------------


def modes(value: str) -> Mode | list[Mode]:
    """``--mode``: one mode, or both (``both``)."""
    from fidelity.worldmodels.base import Mode

    if value == "both":
        return [Mode.teacher_forced, Mode.open_loop]
    return mode_choice(value)


def mode_choice(value: str) -> Mode:
    """``--mode``: one of the modes (``both`` is the caller's to handle)."""
    from fidelity.errors import UsageError
    from fidelity.worldmodels.base import Mode

    try:
        return Mode(value)
    except ValueError as exc:
        raise UsageError(f"--mode {value!r}: choose teacher-forced, open-loop or both") from exc


def serial_options(serial: str | None, sandbox: str | None) -> dict[str, Any]:
    """``--serial`` as the adb backend's option; a usage error with another backend."""
    if serial is None:
        return {}
    if sandbox != "adb":
        from fidelity.errors import UsageError

        raise UsageError("--serial names an adb device: use it with --sandbox adb")
    return {"serial": serial}


def compare_settings(path: Path | None) -> CompareConfig:
    """``--compare-config``: the comparison rules of a TOML file, or the defaults."""
    from fidelity.compare import load_compare_config

    return load_compare_config(path)
