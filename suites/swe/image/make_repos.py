"""Unpack each source distribution into /repos/<name> and commit it at a pinned hash.

Run at image build time as root. The commit has a fixed author, committer,
date and message, so its hash depends on the files only; a hash that differs
from the one pinned in sdists.toml fails the build. Files the ignore rules
cover (egg-info, bytecode) are removed, so a fresh checkout equals one reset
with ``git clean -fdx``.
"""

import os
import shutil
import site
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path("/repos")
EXCLUDE = "__pycache__/\n*.py[cod]\n*.egg-info/\n.eggs/\nbuild/\ndist/\n"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "fidelity",
    "GIT_AUTHOR_EMAIL": "fidelity@sandbox.invalid",
    "GIT_COMMITTER_NAME": "fidelity",
    "GIT_COMMITTER_EMAIL": "fidelity@sandbox.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_CONFIG_NOSYSTEM": "1",
    "HOME": "/nonexistent",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    argv = ["git", "-c", "safe.directory=*", "-C", str(repo), *args]
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result.stdout.strip()


def make_repo(entry: dict, context: Path) -> str:
    name, version = entry["name"], entry["version"]
    archive = context / "sdists" / f"{name}-{version}.tar.gz"
    repo = ROOT / name
    with tarfile.open(archive) as tar:
        tar.extractall(ROOT)  # checked against its sha256 on the host
    (ROOT / f"{name}-{version}").rename(repo)
    git(repo, "init", "-q", "-b", "main")
    (repo / ".git" / "info" / "exclude").write_text(EXCLUDE)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{name} {version} from its PyPI sdist")
    git(repo, "clean", "-fdxq")
    git(repo, "tag", "fidelity-pin")
    return git(repo, "rev-parse", "HEAD")


def main() -> int:
    context = Path(sys.argv[1])
    pins = tomllib.loads((context / "sdists.toml").read_text())["sdist"]
    ROOT.mkdir(exist_ok=True)
    paths = []
    for entry in pins:
        commit = make_repo(entry, context)
        print(f"{entry['name']} {entry['version']}: {commit}")
        if entry["commit"] and commit != entry["commit"]:
            print(f"pinned commit {entry['commit']} != {commit}", file=sys.stderr)
            return 1
        paths.append(str((ROOT / entry["name"] / entry["import_root"]).resolve()))
    packages = Path(site.getsitepackages()[0])
    packages.mkdir(parents=True, exist_ok=True)
    (packages / "fidelity-swe-repos.pth").write_text("\n".join(paths) + "\n")
    shutil.chown(ROOT, "agent", "agent")
    subprocess.run(["chown", "-R", "agent:agent", str(ROOT)], check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
