"""Docker images without a registry: a debootstrap base, domain layers, tags by recipe hash.

The base image is a Debian root filesystem made with ``debootstrap
--variant=minbase`` (packages from ``sandboxes/base/image/packages``), given
an unprivileged ``agent`` user (uid 1000) and imported with ``docker import``.
Each domain layers its own ``sandboxes/<domain>/image/Dockerfile`` on it
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
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

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
    return data_dir("sandboxes") / "base" / "image"


def domain_recipe(domain: str) -> Path:
    """The folder of *domain*'s image recipe (``sandboxes/<domain>/image``)."""
    folder = data_dir("sandboxes") / domain / "image"
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
    root = data_dir("sandboxes")
    return sorted(p.parent.parent.name for p in root.glob("*/image/Dockerfile"))


class EnvironmentUnavailableError(SandboxError):
    """A trajectory's environment cannot be had (its image is missing and cannot be pulled):
    the trajectory is *unverifiable*, not failed, and the others go on."""


class ImageProfile(BaseModel):
    """What a container image says about how it is entered (``docker image inspect``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    reference: str
    workdir: str = Field(default="", description="its WORKDIR ('' = none)")
    user: str = Field(default="", description="its USER ('' = root)")
    env: dict[str, str] = Field(default_factory=dict, description="its ENV")


def resolve_image(client: Any, reference: str) -> ImageProfile:
    """*reference*'s profile, pulled first where it is not here.

    Raises :class:`EnvironmentUnavailableError` (one line) when the image is
    neither here nor pullable (no registry answers, no such image).
    """
    import docker

    try:
        image = client.images.get(reference)
    except docker.errors.ImageNotFound:
        try:
            image = client.images.pull(reference)
        except docker.errors.DockerException as exc:
            reason = " ".join(str(getattr(exc, "explanation", None) or exc).split())[:300]
            raise EnvironmentUnavailableError(
                f"image {reference!r} is not here and pulling it failed: {reason}"
            ) from exc
    config = image.attrs.get("Config") or {}
    pairs = (item.partition("=") for item in config.get("Env") or [])
    env = {name: value for name, _, value in pairs}
    return ImageProfile(
        reference=reference,
        workdir=config.get("WorkingDir") or "",
        user=config.get("User") or "",
        env=env,
    )
