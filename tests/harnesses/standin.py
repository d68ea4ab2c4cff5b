"""A stand-in SWE-bench instance image, built locally (no registry is reachable here).

It is **not** a SWE-bench image: it has SWE-bench's layout, made from a real package
source. ``/testbed`` is a git repository of idna 3.7 (the PyPI sdist the bundled swe image
already holds at ``/repos/idna``) at a pinned commit that plants an off-by-one bug in
``valid_label_length`` and drops the two boundary assertions of its test; ``/opt/miniconda3``
holds a plain Python environment (a venv, not conda) and a ``bin/activate`` that defines
``conda activate testbed`` over it. It is tagged with exactly the name the ``swebench``
package computes for :data:`INSTANCE_ID`, and :func:`record` writes that instance's record in
the swebench 5.x dataset's shape (``eval_script`` in SWE-bench's eval.sh form,
``log_parser`` ``parse_log_django``, which reads unittest's verbose lines).
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path
from typing import Any

from fidelity.harnesses.swebench import image_name
from fidelity.sandboxes.images import docker_client, ensure_image
from fidelity.trajectory import SweInstance

INSTANCE_ID = "kjd__idna-90001"
"""A stand-in instance id in the dataset's owner__repo-number shape (no such PR is meant)."""

TEST_FILE = "tests/test_idna.py"
F2P = ["test_valid_label_length (tests.test_idna.IDNATests.test_valid_label_length)"]
P2P = [
    "test_check_bidi (tests.test_idna.IDNATests.test_check_bidi)",
    "test_encode (tests.test_idna.IDNATests.test_encode)",
]

_DATES = "GIT_AUTHOR_DATE=2024-01-01T00:00:00+00:00 GIT_COMMITTER_DATE=2024-01-01T00:00:00+00:00"
DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
USER root
COPY activate /opt/miniconda3/bin/activate
RUN python3 -m venv --without-pip /opt/miniconda3/envs/testbed \\
 && cp -a /repos/idna /testbed && chown -R root:root /testbed && cd /testbed \\
 && sed -i 's/if len(label) > 63:/if len(label) > 64:/' idna/core.py \\
 && sed -i "/valid_label_length('a' \\\\* 64)/d; /idna.encode, 'a' \\\\* 64)/d" {TEST_FILE} \\
 && git add -A && {_DATES} git -c user.name=stand-in -c user.email=stand-in@fidelity.invalid \\
    commit -q -m 'stand-in base: label length off by one, its boundary tests dropped'
WORKDIR /testbed
CMD ["sleep", "infinity"]
"""
ACTIVATE = """\
# Stand-in for Miniconda's bin/activate (fidelity's tests; this is not Miniconda): sourcing
# it defines `conda activate ENV` over the plain Python environments under /opt/miniconda3/envs.
conda() {
  if [ "${1:-}" = activate ] && [ -d "/opt/miniconda3/envs/${2:-}" ]; then
    export CONDA_DEFAULT_ENV="$2" CONDA_PREFIX="/opt/miniconda3/envs/$2"
    export PATH="$CONDA_PREFIX/bin:$PATH"
  else
    echo "conda (stand-in): only 'conda activate ENV' of /opt/miniconda3/envs" >&2
    return 1
  fi
}
"""
EVAL_SCRIPT = """\
#!/bin/bash
set -uxo pipefail
source /opt/miniconda3/bin/activate
conda activate testbed
cd /testbed
git config --global --add safe.directory /testbed
cd /testbed
git status
git show
git -c core.fileMode=false diff {base}
source /opt/miniconda3/bin/activate
conda activate testbed
git checkout {base} {tests}
git apply -v - <<'EOF_114329324912'
{test_patch}
EOF_114329324912
: '>>>>> Start Test Output'
python -m unittest -v tests.test_idna
: '>>>>> End Test Output'
git checkout {base} {tests}
"""


def build(instance_id: str = INSTANCE_ID) -> str:
    """The stand-in image, tagged with swebench's name for *instance_id* (built when missing
    or when this recipe changed)."""
    import docker

    client = docker_client()
    tag = image_name(_bare(instance_id))
    recipe = hashlib.sha256((DOCKERFILE + ACTIVATE).encode()).hexdigest()[:12]
    try:
        if client.images.get(tag).labels.get("fidelity.standin") == recipe:
            return tag
    except docker.errors.ImageNotFound:
        pass  # built below
    with tempfile.TemporaryDirectory(prefix="fidelity-standin-") as folder:
        (Path(folder) / "Dockerfile").write_text(DOCKERFILE)
        (Path(folder) / "activate").write_text(ACTIVATE)
        client.images.build(
            path=folder,
            tag=tag,
            buildargs={"BASE": ensure_image("swe")},
            network_mode="none",
            rm=True,
            forcerm=True,
            labels={"fidelity.standin": recipe},
        )
    return tag


def record(tag: str, instance_id: str = INSTANCE_ID, **changes: Any) -> dict[str, Any]:
    """The instance's record in the dataset's shape, its commits and patches read from *tag*."""
    client = docker_client()
    script = (
        "cd /testbed && git rev-parse HEAD HEAD~1 && echo '@@@' && "
        f"git diff HEAD HEAD~1 -- {TEST_FILE} && echo '@@@' && git diff HEAD HEAD~1 -- idna/core.py"
    )
    output = client.containers.run(
        tag, ["bash", "-c", script], remove=True, network_mode="none"
    ).decode()
    commits, test_patch, patch = output.split("@@@\n")
    base, setup = commits.split()
    data: dict[str, Any] = {
        "repo": "kjd/idna",
        "instance_id": instance_id,
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "valid_label_length accepts a 64-character label (the limit is 63)",
        "hints_text": "",
        "created_at": "2024-04-11T00:00:00Z",
        "version": "3.7",
        "FAIL_TO_PASS": '["' + '", "'.join(F2P) + '"]',  # JSON-encoded, as the HF dataset stores
        "PASS_TO_PASS": '["' + '", "'.join(P2P) + '"]',
        "environment_setup_commit": setup,
        "split": "test",
        "image": tag,
        "log_parser": "parse_log_django",
        "eval_type": "pass_and_fail",
        "eval_script": EVAL_SCRIPT.format(base=base, tests=TEST_FILE, test_patch=test_patch),
    }
    return {**data, **changes}


def _bare(instance_id: str) -> SweInstance:
    return SweInstance(
        instance_id=instance_id,
        repo="kjd/idna",
        version="3.7",
        base_commit="-",
        environment_setup_commit="-",
        test_patch="",
        FAIL_TO_PASS=[],
        PASS_TO_PASS=[],
    )
