"""The option bundles: options that travel together, and the checks that turn them into
the library's configs.

- :class:`SimOptions`: the world model (``--sim-url`` … ``--sampling``): audit, simulate;
- :class:`WorldOptions`: the user's world (``--image``, ``--site`` … ``--pull-registry``):
  audit, replay, gate;
- :class:`ExecutorOptions`: where tasks run (``--executor``, ``--ray-address``): audit,
  gate, judge;
- :class:`RayResultsOptions`: how Ray's records come back (``--ray-results``,
  ``--ray-results-dir``): audit, gate.

A command takes one as a parameter whose default is an instance (its own defaults, e.g.
``SimOptions(baseline="copy")``), wrapped by :func:`~fidelity.cli.options.expand_bundles`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from fidelity.cli.application import err
from fidelity.cli.options import (
    EnvDefaultsOption,
    ExecutorOption,
    ImageOption,
    InstanceImagesOption,
    InstancesOption,
    MaxTokens,
    NoSimCache,
    OptionBundle,
    PromptsDir,
    PullOption,
    PullRegistryOption,
    RayAddressOption,
    RayResultsDirOption,
    RayResultsOption,
    SamplesOption,
    SamplingOption,
    SimBaseline,
    SimCache,
    SimConcurrency,
    SimData,
    SimModel,
    SimTimeout,
    SimUrl,
    SiteOption,
    SiteResetOption,
    SwebenchNamespaceOption,
    TopK,
    TrustCommandsOption,
)
from fidelity.defaults import MAX_TOKENS, REQUEST_DEADLINE, SIM_CONCURRENCY, TOP_K

if TYPE_CHECKING:
    from fidelity.pipeline import SimConfig
    from fidelity.trajectory import WebSite
    from fidelity.trust import DatasetTrust


@dataclass(frozen=True)
class SimOptions(OptionBundle):
    """The world model that simulates, and how it is asked (the "World model" panel)."""

    url: SimUrl = None
    model: SimModel = None
    data: SimData = None
    baseline: SimBaseline = "retrieval"
    concurrency: SimConcurrency = SIM_CONCURRENCY
    cache: SimCache = None
    no_cache: NoSimCache = False
    max_tokens: MaxTokens = MAX_TOKENS
    top_k: TopK = TOP_K
    prompts_dir: PromptsDir = None
    samples: SamplesOption = 1
    timeout: SimTimeout = REQUEST_DEADLINE
    sampling: SamplingOption = "recommended"

    def config(self, near: Path, turns: str = "all") -> SimConfig:
        """The simulation these options name; the endpoint's response cache defaults to a
        file next to *near* (the database or the output). UsageError when they contradict."""
        from pydantic import ValidationError

        from fidelity.errors import UsageError
        from fidelity.pipeline import SimConfig, world_model_from_flags
        from fidelity.worldmodels.cache import DEFAULT_CACHE

        try:
            sim = SimConfig(
                world_model=world_model_from_flags(
                    self.url, self.model, self.data, self.baseline, deadline=self.timeout
                ),
                concurrency=self.concurrency,
            )
        except ValidationError as exc:
            first = exc.errors()[0]
            raise UsageError(f"--sim-{first['loc'][-1]}: {first['msg']}") from exc
        if self.sampling not in ("recommended", "agentworldbench"):
            raise UsageError(f"--sampling {self.sampling!r}: choose recommended or agentworldbench")
        if turns not in ("all", "evaluated"):
            raise UsageError(f"--turns {turns!r}: choose all or evaluated")
        if self.prompts_dir is not None and not self.prompts_dir.is_dir():
            raise UsageError(f"--prompts-dir {self.prompts_dir}: no such directory")
        if self.cache is not None and self.no_cache:
            raise UsageError("--sim-cache and --no-sim-cache are exclusive")
        world_model = sim.world_model
        if sim.kind == "endpoint":
            cache = None if self.no_cache else self.cache or near.resolve().parent / DEFAULT_CACHE
            world_model = world_model.model_copy(
                update={
                    "cache": cache,
                    "max_tokens": self.max_tokens,
                    "top_k": self.top_k or None,
                    "prompts_dir": self.prompts_dir,
                    "sampling": self.sampling,
                }
            )
        return sim.model_copy(
            update={"world_model": world_model, "samples": self.samples, "turns": turns}
        )


@dataclass(frozen=True)
class ExecutorOptions(OptionBundle):
    """Where trajectory tasks run."""

    kind: ExecutorOption = "local"
    ray_address: RayAddressOption = None

    def choice(self) -> Literal["local", "ray"]:
        """``--executor``: local or ray; ``--ray-address`` only with ray."""
        from fidelity.errors import UsageError

        if self.kind not in ("local", "ray"):
            raise UsageError(f"--executor {self.kind!r}: choose local or ray")
        if self.ray_address is not None and self.kind != "ray":
            raise UsageError("--ray-address needs --executor ray")
        return "ray" if self.kind == "ray" else "local"


@dataclass(frozen=True)
class RayResultsOptions(OptionBundle):
    """How a Ray run's records come back: to this process, or as Parquet shards."""

    results: RayResultsOption = "driver"
    results_dir: RayResultsDirOption = None

    def settings(self, executor: str) -> dict[str, Any]:
        """``ray_results`` and ``ray_results_dir`` of an audit's or a gate's config: only
        with ray (and parquet)."""
        from fidelity.errors import UsageError

        if self.results not in ("driver", "parquet"):
            raise UsageError(f"--ray-results {self.results!r}: choose driver or parquet")
        if self.results != "driver" and executor != "ray":
            raise UsageError("--ray-results needs --executor ray")
        if self.results_dir is not None and self.results != "parquet":
            raise UsageError("--ray-results-dir needs --ray-results parquet")
        return {"ray_results": self.results, "ray_results_dir": self.results_dir}


class World(NamedTuple):
    """The operator's world: the default image, the backends' options, and what the data
    may do."""

    image: str | None
    options: dict[str, Any]
    trust: DatasetTrust


@dataclass(frozen=True)
class WorldOptions(OptionBundle):
    """The user's world: images, sites, SWE-bench instances, and what the data may run."""

    image: ImageOption = None
    site: SiteOption = None
    site_reset: SiteResetOption = None
    instances: InstancesOption = None
    swebench_namespace: SwebenchNamespaceOption = None
    instance_images: InstanceImagesOption = None
    env_defaults: EnvDefaultsOption = None
    trust_commands: TrustCommandsOption = False
    pull: PullOption = False
    pull_registry: PullRegistryOption = None

    def resolve(self, source: Path | None) -> World:
        """The default image, the sandbox options of the user's world and the data's trust:
        the options given, over the environment defaults (only a file ``--env-defaults``
        names: one beside *source* came with the data), over BrowserGym's ``WA_*``
        variables for sites."""
        from fidelity.env_defaults import load_env_defaults, unread_env_defaults
        from fidelity.trust import DatasetTrust

        if self.env_defaults is None and (beside := unread_env_defaults(source)) is not None:
            err.print(
                f"note: {beside} is not read (it came with the data); name it with "
                "--env-defaults to use it"
            )
        if self.pull_registry and not self.pull:
            from fidelity.errors import UsageError

            raise UsageError("--pull-registry needs --pull")
        defaults = load_env_defaults(self.env_defaults)
        options = {
            **_site_options(self.site, self.site_reset, defaults.sites),
            **_instance_options(
                self.instances or defaults.instances,
                self.swebench_namespace or defaults.swebench_namespace,
                self.instance_images or defaults.instance_images,
            ),
            "trust_commands": self.trust_commands,
            "pull": self.pull,
            "pull_registries": list(self.pull_registry or []),
        }
        trust = DatasetTrust(commands=self.trust_commands, site_origins=_site_origins(options))
        return World(self.image or defaults.image, options, trust)

    def refuse(self, needs: str) -> None:
        """UsageError when any of these options is given: they *needs* (a gate of a stored
        run replays nothing)."""
        from fidelity.errors import UsageError

        if self.image is not None:
            raise UsageError(f"--image needs {needs}")
        if self.site or self.site_reset:
            raise UsageError(f"--site and --site-reset need {needs}")
        given = (self.instances, self.swebench_namespace, self.instance_images, self.env_defaults)
        if given != (None,) * 4:
            raise UsageError(
                "--instances, --swebench-namespace, --instance-images and --env-defaults need "
                + needs
            )
        if self.trust_commands or self.pull or self.pull_registry:
            raise UsageError(f"--trust-dataset-commands, --pull and --pull-registry need {needs}")


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
    from fidelity.sandboxes.sites import webarena_sites
    from fidelity.trajectory import EnvSpec

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
        raise UsageError(f"--site {where}: {first['msg']}") from exc
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
