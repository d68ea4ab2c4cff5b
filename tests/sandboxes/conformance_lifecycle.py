"""The lifecycle half of sandbox conformance, for every backend whatever its actions.

A backend's test module star-imports this module and defines the fixtures:

- ``sandbox``: a fresh, unstarted sandbox (the module closes it after the test);
- ``env``: an :class:`EnvSpec` it can reset to;
- ``ok_action`` / ``bad_action``: an action that succeeds, and a malformed one
  (a syntax error for a shell, an unparsable call for a browser);
- ``dirty_actions``: actions that change the environment's state, and
  ``probe_action``: an action whose observation shows that change;
- ``leftovers``: a function listing what a sandbox still holds (processes,
  folders), called after close.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from fidelity.errors import SandboxError
from fidelity.sandboxes.base import Sandbox
from fidelity.trajectory import Action, EnvSpec, Observation

Leftovers = Callable[[Sandbox], list[str]]


def test_lifecycle_reset_gives_an_observation(sandbox: Sandbox, env: EnvSpec) -> None:
    first = sandbox.reset(env)
    assert isinstance(first, Observation)
    assert first.error is None


def test_lifecycle_ok_action_succeeds(sandbox: Sandbox, env: EnvSpec, ok_action: Action) -> None:
    sandbox.reset(env)
    observation = sandbox.step(ok_action, timeout=20)
    assert observation.error is None and not observation.timed_out


def test_lifecycle_malformed_action_is_an_observation(
    sandbox: Sandbox, env: EnvSpec, ok_action: Action, bad_action: Action
) -> None:
    sandbox.reset(env)
    bad = sandbox.step(bad_action, timeout=20)
    assert isinstance(bad, Observation)
    assert bad.error is None  # the action failed, not the sandbox
    assert sandbox.step(ok_action, timeout=20).error is None


def test_lifecycle_close_is_idempotent(sandbox: Sandbox, env: EnvSpec) -> None:
    sandbox.reset(env)
    sandbox.close()
    sandbox.close()


def test_lifecycle_close_before_reset_is_safe(sandbox: Sandbox) -> None:
    sandbox.close()
    sandbox.close()


def test_lifecycle_step_after_close_fails_cleanly(
    sandbox: Sandbox, env: EnvSpec, ok_action: Action
) -> None:
    sandbox.reset(env)
    sandbox.close()
    started = time.monotonic()
    with pytest.raises(SandboxError):
        sandbox.step(ok_action, timeout=5)
    assert time.monotonic() - started < 5


def test_lifecycle_resources_are_gone_after_close(
    sandbox: Sandbox, env: EnvSpec, ok_action: Action, leftovers: Leftovers
) -> None:
    sandbox.reset(env)
    sandbox.step(ok_action, timeout=20)
    assert leftovers(sandbox), "the fixture must see the running sandbox's resources"
    sandbox.close()
    deadline = time.monotonic() + 5
    while leftovers(sandbox) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(sandbox) == []


def test_lifecycle_close_from_another_thread(
    sandbox: Sandbox, env: EnvSpec, ok_action: Action, leftovers: Leftovers
) -> None:
    """Ctrl-C closes sandboxes from the main thread while workers use them."""
    done = threading.Event()

    def use() -> None:
        sandbox.reset(env)
        sandbox.step(ok_action, timeout=20)
        done.set()

    worker = threading.Thread(target=use)
    worker.start()
    worker.join(60)
    assert done.is_set()
    sandbox.close()
    deadline = time.monotonic() + 5
    while leftovers(sandbox) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(sandbox) == []


def test_lifecycle_reset_twice_gives_a_fresh_state(
    sandbox: Sandbox, env: EnvSpec, dirty_actions: list[Action], probe_action: Action
) -> None:
    sandbox.reset(env)
    clean = sandbox.step(probe_action, timeout=20).text
    for action in dirty_actions:
        sandbox.step(action, timeout=20)
    assert sandbox.step(probe_action, timeout=20).text != clean, "dirty_actions changed nothing"
    sandbox.reset(env)
    assert sandbox.step(probe_action, timeout=20).text == clean
