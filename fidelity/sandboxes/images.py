"""Docker images without a registry: a debootstrap base, domain layers, tags by recipe hash.

The base image is a Debian root filesystem made with ``debootstrap
--variant=minbase`` (packages from ``suites/base/image/packages``), given
an unprivileged ``agent`` user (uid 1000) and imported with ``docker import``.
Each domain layers its own ``suites/<domain>/image/Dockerfile`` on it
(``FROM`` the build argument ``BASE``). Tags carry the hash of the recipe
files, so an image is rebuilt only when its recipe changes; the debootstrap
tarball is cached under ``~/.cache/fidelity`` by the same hash.

A recipe may list source distributions in ``sdists.toml`` (name, version,
sha256): they are downloaded from PyPI on the host with ``pip download``
(containers have no network), checked against their hash, cached under
``~/.cache/fidelity/sdists`` and put under ``sdists/`` in a copy of the
recipe that serves as the build context.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, field_validator

from fidelity.errors import NotFoundError, SandboxError, SandboxUnavailableError
from fidelity.resources import data_dir

BASE_REPOSITORY = "fidelity-base"
MIRROR = os.environ.get("FIDELITY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
AGENT_UID = 1000
_BASE_ENV = [
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
]

Log = Callable[[str], None]


def cache_dir() -> Path:
    """Where debootstrap tarballs are kept (``$XDG_CACHE_HOME/fidelity``)."""
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "fidelity"


def recipe_hash(folder: Path, extra: str = "") -> str:
    """Hash of every file under *folder* (names and bytes) plus *extra*: 12 hex digits."""
    digest = hashlib.sha256(extra.encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def base_recipe() -> Path:
    """The folder of the base recipe."""
    return data_dir("suites") / "base" / "image"


def domain_recipe(domain: str) -> Path:
    """The folder of *domain*'s image recipe (``suites/<domain>/image``)."""
    folder = data_dir("suites") / domain / "image"
    if not (folder / "Dockerfile").is_file():
        raise NotFoundError(f"no Docker image recipe for domain {domain!r} (looked for {folder})")
    return folder


def base_tag() -> str:
    """``fidelity-base:<recipe hash>``."""
    return f"{BASE_REPOSITORY}:{recipe_hash(base_recipe(), MIRROR)}"


def domain_tag(domain: str) -> str:
    """``fidelity-<domain>:<hash of the recipe and the base tag>``."""
    return f"fidelity-{domain}:{recipe_hash(domain_recipe(domain), base_tag())}"


def docker_client() -> Any:
    """A Docker SDK client whose daemon answers; SandboxUnavailableError with a fix otherwise."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - a dependency of fidelity
        raise SandboxUnavailableError(
            "the Docker SDK for Python is missing: pip install docker"
        ) from exc
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except docker.errors.DockerException as exc:
        raise no_daemon(str(exc)) from exc
    return client


def no_daemon(reason: str) -> SandboxUnavailableError:
    """The error for a Docker daemon that does not answer (*reason*: why), with the fix."""
    return SandboxUnavailableError(
        f"no Docker daemon answers ({reason}). Install and start one, e.g. as root: "
        "apt-get install docker.io && dockerd --storage-driver=overlay2 --iptables=false "
        "--bridge=none &  (or use --sandbox local)"
    )


@contextlib.contextmanager
def _build_lock() -> Iterator[None]:
    """One builder at a time across processes (audits build on first use)."""
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _has_image(client: Any, tag: str) -> bool:
    import docker

    try:
        client.images.get(tag)
    except docker.errors.ImageNotFound:
        return False
    return True


def ensure_image(domain: str, log: Log | None = None) -> str:
    """The tag of *domain*'s image, building the base and the domain layer when missing."""
    log = log or (lambda message: None)
    client = docker_client()
    tag = domain_tag(domain)
    if _has_image(client, tag):
        return tag
    with _build_lock():
        if _has_image(client, tag):
            return tag
        base = ensure_base(client, log)
        log(f"building {tag} from {domain_recipe(domain)}")
        with _build_context(domain_recipe(domain), log) as context:
            _docker_build(client, context, tag, base, domain)
    return tag


def _docker_build(client: Any, context: Path, tag: str, base: str, domain: str) -> None:
    import docker

    try:
        client.images.build(
            path=str(context),
            tag=tag,
            buildargs={"BASE": base},
            network_mode="none",
            rm=True,
            forcerm=True,
            labels={"fidelity.recipe": domain},
        )
    except docker.errors.BuildError as exc:
        lines = [str(item.get("stream") or item.get("error") or "") for item in exc.build_log]
        tail = "".join(lines).strip().splitlines()[-5:]
        raise SandboxError(f"building {tag} failed: {exc}: {' | '.join(tail)}") from exc


@contextlib.contextmanager
def _build_context(recipe: Path, log: Log) -> Iterator[Path]:
    """*recipe* itself, or a temporary copy with the sdists of its ``sdists.toml`` added."""
    pins = recipe / "sdists.toml"
    if not pins.is_file():
        yield recipe
        return
    with tempfile.TemporaryDirectory(prefix="fidelity-context-") as tmp:
        context = Path(tmp) / "context"
        shutil.copytree(recipe, context)
        (context / "sdists").mkdir(exist_ok=True)
        for entry in tomllib.loads(pins.read_text()).get("sdist", []):
            archive = fetch_sdist(entry["name"], entry["version"], entry["sha256"], log)
            shutil.copy(archive, context / "sdists" / archive.name)
        yield context


def fetch_sdist(name: str, version: str, sha256: str, log: Log) -> Path:
    """``<name>-<version>.tar.gz`` from PyPI (cached), checked against *sha256*."""
    folder = cache_dir() / "sdists"
    target = folder / f"{name}-{version}.tar.gz"
    if not target.is_file() or _sha256(target) != sha256:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="fidelity-sdist-", dir=folder) as tmp:
            log(f"pip download {name}=={version} (source distribution)")
            _run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                 "--no-binary", ":all:", "--dest", tmp, f"{name}=={version}"]
            )  # fmt: skip
            found = sorted(Path(tmp).glob("*.tar.gz"))
            if len(found) != 1:
                raise SandboxError(f"pip download {name}=={version} gave {found or 'no sdist'}")
            got = _sha256(found[0])
            if got != sha256:
                raise SandboxError(
                    f"{found[0].name}: sha256 {got} does not match the pinned {sha256}"
                )
            found[0].replace(target)
    return target


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ensure_base(client: Any, log: Log) -> str:
    """The base image tag, importing the cached (or freshly made) debootstrap tarball."""
    tag = base_tag()
    if _has_image(client, tag):
        return tag
    tarball = cache_dir() / f"rootfs-{tag.split(':')[1]}.tar"
    if not tarball.is_file():
        make_rootfs(tarball, log)
    log(f"importing {tarball} as {tag}")
    repository, version = tag.split(":")
    client.api.import_image_from_file(
        str(tarball),
        repository=repository,
        tag=version,
        changes=[f"ENV {item}" for item in _BASE_ENV] + ['CMD ["bash"]'],
    )
    return tag


def make_rootfs(tarball: Path, log: Log) -> None:
    """debootstrap a minbase Debian into a tarball (needs root, debootstrap and a mirror)."""
    if os.geteuid() != 0:
        raise SandboxUnavailableError(
            "building the base image runs debootstrap, which needs root (or import an image "
            f"yourself and tag it {base_tag()})"
        )
    if shutil.which("debootstrap") is None:
        raise SandboxUnavailableError(
            "debootstrap is missing: apt-get install debootstrap (it builds the base image)"
        )
    recipe = base_recipe()
    packages = [
        line.strip()
        for line in (recipe / "packages").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    release = (recipe / "release").read_text().strip()
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="fidelity-rootfs-", dir=tarball.parent) as tmp:
        root = Path(tmp) / "rootfs"
        log(f"debootstrap {release} ({', '.join(packages)}) from {MIRROR}")
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(packages)}",
                release,
                str(root),
                MIRROR,
            ]
        )
        _add_agent_user(root)
        for folder in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / folder).glob("*"):
                if entry.is_file():
                    entry.unlink()
        partial = tarball.with_suffix(".partial")
        _run(["tar", "-C", str(root), "--numeric-owner", "-cf", str(partial), "."])
        partial.replace(tarball)


def _add_agent_user(root: Path) -> None:
    uid = AGENT_UID
    with open(root / "etc/passwd", "a") as handle:
        handle.write(f"agent:x:{uid}:{uid}:agent:/home/agent:/bin/bash\n")
    with open(root / "etc/group", "a") as handle:
        handle.write(f"agent:x:{uid}:\n")
    with open(root / "etc/shadow", "a") as handle:
        handle.write("agent:*:19000:0:99999:7:::\n")
    for folder in ("home/agent", "workspace"):
        (root / folder).mkdir(parents=True, exist_ok=True)
        os.chown(root / folder, uid, uid)
    (root / "run/fidelity").mkdir(parents=True, exist_ok=True)


def _run(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        tail = " | ".join((result.stderr or result.stdout).strip().splitlines()[-5:])
        raise SandboxError(f"{argv[0]} failed with exit code {result.returncode}: {tail}")


def build(domains: list[str], log: Log | None = None) -> dict[str, str]:
    """Build (or find) the images of *domains*; ``{domain: tag}``."""
    return {domain: ensure_image(domain, log) for domain in domains}


def buildable_domains() -> list[str]:
    """Domains that have an image recipe."""
    root = data_dir("suites")
    return sorted(p.parent.parent.name for p in root.glob("*/image/Dockerfile"))


class EnvironmentUnavailableError(SandboxError):
    """A trajectory's environment cannot be had (its image is missing and may not be pulled,
    or pulling it failed): the trajectory is *unverifiable*, not failed, and the others go on."""


DEFAULT_REGISTRY = "docker.io"
"""The registry of a reference that names none (``name``, ``user/name``), as Docker reads it."""

_LEGACY_REGISTRY = "index.docker.io"


def normal_registry(host: str) -> str:
    """*host* as a registry is compared: lower case, ``index.docker.io`` read as ``docker.io``.

    ValueError (one line) for what is not a registry host (a URL, a path, an empty name)."""
    text = host.strip().lower()
    if not re.fullmatch(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?", text):
        raise ValueError(
            f"{host!r} is not a registry host (e.g. ghcr.io, registry.example:5000): "
            "no scheme, path or spaces"
        )
    return DEFAULT_REGISTRY if text == _LEGACY_REGISTRY else text


def registry_of(reference: str) -> str:
    """The registry Docker pulls *reference* from (its ``splitDockerDomain``): the first path
    component when it has a ``.`` or ``:``, is ``localhost`` or has a capital letter, else
    ``docker.io`` (``name`` and ``user/name`` are Docker Hub's)."""
    name = reference.split("@", 1)[0]
    first, slash, _ = name.partition("/")
    if not slash or (
        not any(mark in first for mark in ".:") and first != "localhost" and first.lower() == first
    ):
        return DEFAULT_REGISTRY
    return DEFAULT_REGISTRY if first.lower() == _LEGACY_REGISTRY else first.lower()


class PullPolicy(BaseModel):
    """Which images fidelity may pull: none unless the operator says ``--pull``; with
    ``--pull-registry HOST`` only those whose registry (:func:`registry_of`) is named."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pull: bool = False
    registries: tuple[str, ...] = ()

    @field_validator("registries")
    @classmethod
    def _hosts(cls, hosts: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(normal_registry(host) for host in hosts)

    @classmethod
    def of(cls, config: object) -> PullPolicy:
        """The policy a backend config carries (``pull``, ``pull_registries``); none pulls."""
        registries = getattr(config, "pull_registries", None) or ()
        return cls(pull=bool(getattr(config, "pull", False)), registries=tuple(registries))

    def refusal(self, reference: str) -> str | None:
        """Why *reference* (not here) is not pulled, one line; None when it may be."""
        if not self.pull:
            return f"image {reference!r} is not here and is not pulled: --pull pulls it"
        if self.registries:
            allowed = sorted(set(self.registries))
            registry = registry_of(reference)
            if registry not in allowed:
                return (
                    f"image {reference!r} is not here and is not pulled: its registry "
                    f"{registry} is not one --pull-registry names ({', '.join(allowed)})"
                )
        return None


def local_or_pulled(client: Any, reference: str, policy: PullPolicy) -> Any:
    """The image *reference* as the daemon has it, pulled first only where *policy* allows.

    Raises :class:`EnvironmentUnavailableError` (one line) when it is not here and may not
    be pulled, or pulling it failed (no registry answers, no such image): no pull is asked
    of the daemon unless *policy* allows it.
    """
    import docker

    try:
        return client.images.get(reference)
    except docker.errors.ImageNotFound:
        pass  # not here: pulled below, where the operator allowed it
    except docker.errors.APIError as exc:  # a name the daemon cannot parse, ...
        reason = " ".join(str(getattr(exc, "explanation", None) or exc).split())[:300]
        raise EnvironmentUnavailableError(f"image {reference!r}: {reason}") from exc
    refusal = policy.refusal(reference)
    if refusal is not None:
        raise EnvironmentUnavailableError(refusal)
    try:
        return client.images.pull(reference)
    except docker.errors.DockerException as exc:
        reason = " ".join(str(getattr(exc, "explanation", None) or exc).split())[:300]
        raise EnvironmentUnavailableError(
            f"image {reference!r} is not here and pulling it failed: {reason}"
        ) from exc


_SHELL_HOOKS: Final = frozenset(
    {
        # bash runs code: on start (BASH_ENV, ENV), around every interactive command
        # (PROMPT_COMMAND, PS0-PS4 with $(...)), under xtrace (PS4), through readline (INPUTRC)
        "BASH_ENV", "ENV", "PROMPT_COMMAND", "PS0", "PS1", "PS2", "PS3", "PS4", "INPUTRC",
        # bash options, loadable builtins and traces set from outside
        "SHELLOPTS", "BASHOPTS", "BASH_COMPAT", "BASH_LOADABLES_PATH", "BASH_XTRACEFD",
        "POSIXLY_CORRECT",
        # how bash finds, expands and reports commands; files it writes; when it exits
        "CDPATH", "GLOBIGNORE", "GLOBSORT", "EXECIGNORE", "HISTFILE", "MAIL", "MAILPATH",
        "TMOUT",
        # the C library loads code: iconv modules, tunables
        "GCONV_PATH", "GLIBC_TUNABLES",
    }
)  # fmt: skip


def withheld_variable(name: str) -> bool:
    """Whether an image's ``ENV`` variable *name* is kept from the sandbox: it makes bash or the
    dynamic loader run code (``BASH_ENV``, ``PROMPT_COMMAND``, exported ``BASH_FUNC_*``
    functions, ``LD_PRELOAD``, ``LD_AUDIT``...) or changes how bash finds, expands or prints
    commands, without the agent asking. ``LD_LIBRARY_PATH``, ``PATH``, conda's and the locale's
    variables are the image's own world and pass."""
    if name in _SHELL_HOOKS or name.startswith("BASH_FUNC_"):
        return True
    return name.startswith("LD_") and name != "LD_LIBRARY_PATH"


class ImageProfile(BaseModel):
    """What a container image says about how it is entered (``docker image inspect``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reference: str
    workdir: str = Field(default="", description="its WORKDIR ('' = none)")
    user: str = Field(default="", description="its USER ('' = root)")
    env: dict[str, str] = Field(
        default_factory=dict, description="its ENV, less the withheld variables"
    )
    withheld: tuple[str, ...] = Field(
        default=(), description="its ENV variables the sandbox blanks (withheld_variable)"
    )


def resolve_image(client: Any, reference: str, policy: PullPolicy | None = None) -> ImageProfile:
    """*reference*'s profile; an image that is not here is pulled only where *policy* allows
    (default: never).

    Raises :class:`EnvironmentUnavailableError` (one line) when the image is not here and
    may not be pulled, or pulling it failed.
    """
    image = local_or_pulled(client, reference, policy or PullPolicy())
    config = image.attrs.get("Config") or {}
    pairs = [item.partition("=") for item in config.get("Env") or []]
    return ImageProfile(
        reference=reference,
        workdir=config.get("WorkingDir") or "",
        user=config.get("User") or "",
        env={name: value for name, _, value in pairs if not withheld_variable(name)},
        withheld=tuple(sorted({name for name, _, _ in pairs if withheld_variable(name)})),
    )
