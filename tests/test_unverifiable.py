"""``env.image`` validation, and how a stored replay error says a trajectory is unverifiable."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from fidelity.pipeline import failed_replay, unverifiable_reason
from fidelity.sandboxes.images import EnvironmentUnavailableError
from fidelity.trajectory import CommandAction, EnvSpec, Step, Trajectory


@pytest.mark.parametrize(
    "image", ["python:3.11-slim", "ghcr.io/o/n:v1", "swe/testbed@sha256:" + "a" * 64]
)
def test_an_image_reference_is_accepted(image: str) -> None:
    assert EnvSpec(backend="docker", image=image).image == image


@pytest.mark.parametrize("image", ["", "has space", "-flag", "UPPER/case", "a\x00b"])
def test_a_malformed_image_reference_is_refused_naming_the_field(image: str) -> None:
    with pytest.raises(ValidationError, match="image"):
        EnvSpec(backend="docker", image=image)


def test_an_unset_image_leaves_the_digest_as_it_was() -> None:
    plain = EnvSpec(backend="docker", setup=["true"])
    assert plain.digest() == EnvSpec(backend="docker", setup=["true"], image=None).digest()
    assert plain.digest() != EnvSpec(backend="docker", setup=["true"], image="a:b").digest()


def test_an_unavailable_environment_is_unverifiable_with_its_reason() -> None:
    error = f"{EnvironmentUnavailableError.__name__}: image 'x:y' is not here"
    trajectory = Trajectory(
        id="t", domain="terminal", steps=[Step(action=CommandAction(command="ls"))]
    )
    assert unverifiable_reason(error) == "image 'x:y' is not here"
    assert unverifiable_reason("SandboxError: the container is gone") is None
    assert unverifiable_reason(None) is None
    assert failed_replay(trajectory, error).error == error
