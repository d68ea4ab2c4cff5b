"""The Docker backend's settings (:class:`DockerConfig`): image, limits, warm pool, tmux
terminal, SWE-bench-family instances and which images may be pulled."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from fidelity.harnesses.swebench import ImageConvention
from fidelity.sandboxes.config import ShellLimits
from fidelity.sandboxes.images import PullPolicy, normal_registry


class DockerConfig(ShellLimits):
    """Settings of the Docker backend (limits: :class:`ShellLimits`)."""

    type: Literal["docker"] = "docker"
    image: str | None = Field(
        default=None, description="default: the domain's image, built on first use"
    )
    domain: str = Field(default="terminal", description="whose image recipe to build")
    cpus: float = Field(default=1.0, gt=0, description="CPU limit (cores)")
    cap_add: list[str] = Field(default_factory=list, description="capabilities a recipe needs back")
    run_label: str = Field(default="", description="value of the fidelity.run label")
    warm: int = Field(
        default=0, ge=0, description="pool: containers kept started ahead of need (0: none)"
    )
    terminal: Literal["shell", "tmux"] = Field(
        default="shell",
        description="keystrokes go to the persistent bash, or to a tmux pane read with capture-pane",
    )
    tmux_size: tuple[int, int] = Field(default=(160, 40), description="tmux columns, rows")
    settle_reads: int = Field(
        default=3, ge=1, description="tmux: unchanged captures that end a step"
    )
    settle_interval_s: float = Field(
        default=0.1, gt=0, description="tmux: seconds between captures"
    )
    instances: Path | None = Field(
        default=None, description="SWE-bench-family instance records (env.instance ids)"
    )
    swebench_namespace: str | None = Field(
        default=None,
        description="namespace of instance images (default: the record's image, else the "
        "convention's: swebench, xingyaoww; none: local names)",
    )
    instance_images: ImageConvention = Field(
        default="swebench",
        description="how an instance id names its image: swebench's ImageSpec or SWE-Gym's",
    )
    pull: bool = Field(
        default=False,
        description="pull an env.image that is not here (--pull); without it such a "
        "trajectory is unverifiable",
    )
    pull_registries: list[str] = Field(
        default_factory=list,
        description="with pull: only images of these registries are pulled (--pull-registry; "
        "name and user/name are docker.io's)",
    )

    @field_validator("pull_registries")
    @classmethod
    def _registry_hosts(cls, hosts: list[str]) -> list[str]:
        return [normal_registry(host) for host in hosts]

    def pull_policy(self) -> PullPolicy:
        """Which images this backend may pull (none unless ``pull``)."""
        return PullPolicy(pull=self.pull, registries=tuple(self.pull_registries))
