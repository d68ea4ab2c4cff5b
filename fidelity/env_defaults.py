"""Environment defaults: a TOML file the operator names with ``--env-defaults``.

A team's data rarely names its world in every line: all of a dataset's trajectories run
in one image, or name WebArena sites by name only. The file says it once::

    image = "ghcr.io/acme/agent-runtime:2026.11"   # env.image of trajectories without one

    [sites.shopping]                                # env.sites names without a URL
    url = "http://shop.internal:7770"
    reset = "docker restart shopping"

    instances = "swe-gym.jsonl"                     # --instances (relative to this file)
    instance_images = "swe-gym"                     # --instance-images
    swebench_namespace = "registry.internal/swe-gym"  # --swebench-namespace

Layers, later ones win: BrowserGym's ``WA_*`` variables (sites only), this file, the
command's options (``--image``, ``--site``, ``--instances`` …), and a trajectory's own
``env`` over all of them.

The file is read only when ``--env-defaults`` names it. One that lies beside the data
(``fidelity-env.toml`` in the suite's or dataset's folder) came with the data, which is
untrusted: it could name a reset command or a site to reach, so it is not read on its
own (the command says so on stderr, :func:`unread_env_defaults`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final

from pydantic import BaseModel, ConfigDict, StringConstraints

from fidelity.formats.toml import load_toml_model
from fidelity.harnesses.swebench import ImageConvention
from fidelity.trajectory import IMAGE_REFERENCE, SITE_NAME, WebSite

DEFAULTS_FILE: Final = "fidelity-env.toml"
"""The name of the defaults file looked for beside a suite or in a dataset folder."""


class EnvDefaults(BaseModel):
    """What ``fidelity-env.toml`` may set (each field as the option of the same name)."""

    model_config = ConfigDict(extra="forbid")

    image: Annotated[str, StringConstraints(pattern=IMAGE_REFERENCE, max_length=255)] | None = None
    sites: dict[Annotated[str, StringConstraints(pattern=SITE_NAME)], WebSite] = {}
    instances: Path | None = None
    swebench_namespace: str | None = None
    instance_images: ImageConvention | None = None


def unread_env_defaults(source: Path | None) -> Path | None:
    """The ``fidelity-env.toml`` that lies beside *source* (a suite or dataset file: in its
    folder; a dataset folder: in it), or None: a file that came with the data, which a
    command reads only when ``--env-defaults`` names it."""
    if source is None:
        return None
    folder = source if source.is_dir() else source.parent
    candidate = folder / DEFAULTS_FILE
    return candidate if candidate.is_file() else None


def load_env_defaults(path: Path | None) -> EnvDefaults:
    """*path* read and checked (errors name the file and the field); empty defaults for None.

    ``instances`` is resolved against the file's folder, as a path in a suite is.
    """
    if path is None:
        return EnvDefaults()
    defaults = load_toml_model(path, EnvDefaults, "environment defaults")
    if defaults.instances is not None and not defaults.instances.is_absolute():
        defaults = defaults.model_copy(update={"instances": path.parent / defaults.instances})
    return defaults
