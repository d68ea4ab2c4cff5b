"""The real outcome of a replayed trajectory: the environment's own check, never fidelity's opinion.

A trajectory's ``env.check`` (:class:`~fidelity.trajectory.OutcomeCheck`) is a command run in
the sandbox after the last replayed step. Its exit code decides: 0 is success, a code in
``failure_codes`` is failure; a check that times out, is killed or crashes (a signal: 128
and above), cannot run (126, 127, a backend that runs no commands, a sandbox that failed)
or ends with any other code gives an **unverifiable** outcome with the reason. The claimed
outcome (:attr:`~fidelity.trajectory.Trajectory.outcome`) is compared with it by the analysis.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from fidelity.errors import SandboxError, SandboxUnavailableError
from fidelity.trajectory import CommandAction, Observation, Outcome, OutcomeCheck

if TYPE_CHECKING:  # the store imports this module: no sandbox code loads with it
    from fidelity.sandboxes.base import Sandbox

OUTPUT_KEPT = 2000
"""Characters of the check's output kept as evidence (its tail)."""

OutcomeStatus = Literal["success", "failure", "unverifiable"]


class RealOutcome(BaseModel):
    """What the environment's check said after the real replay."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    status: OutcomeStatus
    reason: str | None = Field(default=None, description="why it is unverifiable")
    exit_code: int | None = None
    seconds: float | None = Field(default=None, ge=0, description="the check's wall time")
    output: str = Field(default="", description="the tail of the check's output")

    @property
    def success(self) -> bool | None:
        """True/False when verified, None when unverifiable."""
        return None if self.status == "unverifiable" else self.status == "success"


def unverifiable(reason: str) -> RealOutcome:
    """An outcome no check could establish, with *reason* (one line)."""
    return RealOutcome(status="unverifiable", reason=" ".join(reason.split()))


def run_check(sandbox: Sandbox, check: OutcomeCheck) -> RealOutcome:
    """Run *check* in *sandbox* (after the last step) and read its verdict; never raises for
    the check's own failures (only a backend that is unavailable altogether raises)."""
    started = time.perf_counter()
    try:
        observation = sandbox.step(CommandAction(command=check.command), timeout=check.timeout)
    except SandboxUnavailableError:
        raise
    except SandboxError as exc:
        return unverifiable(f"the sandbox could not run the check: {type(exc).__name__}: {exc}")
    return classify(observation, check, time.perf_counter() - started)


def classify(observation: Observation, check: OutcomeCheck, seconds: float) -> RealOutcome:
    """The outcome *observation* (the check's) stands for under *check*'s exit-code rule."""
    code = observation.exit_code
    reason = _unverifiable_reason(observation, check)
    status: OutcomeStatus = (
        "unverifiable" if reason is not None else "success" if code == 0 else "failure"
    )
    return RealOutcome(
        status=status,
        reason=reason,
        exit_code=code,
        seconds=seconds,
        output=observation.text[-OUTPUT_KEPT:],
    )


def _unverifiable_reason(observation: Observation, check: OutcomeCheck) -> str | None:
    code = observation.exit_code
    if observation.timed_out:
        return f"the check timed out after {check.timeout:g}s"
    if observation.error is not None:
        return f"the check failed to run: {' '.join(observation.error.split())}"
    if code is None:
        return "the check ended without an exit code (killed)"
    if code >= 128:
        return f"the check was killed or crashed (exit {code}: signal {code - 128})"
    if code in (126, 127):
        return f"the check could not run (exit {code}: command not executable or not found)"
    if code != 0 and code not in check.failure_codes:
        codes = ", ".join(str(c) for c in check.failure_codes)
        return f"the check exited {code}, neither 0 (success) nor a failure code ({codes})"
    return None


Cell = Literal["agree_success", "false_success", "false_failure", "agree_failure"]


def cell(claimed: Outcome | None, real: RealOutcome | None) -> Cell | None:
    """Where a trajectory falls in the claimed × real table (None: either side unknown)."""
    if claimed is None or claimed.success is None or real is None or real.success is None:
        return None
    if claimed.success:
        return "agree_success" if real.success else "false_success"
    return "false_failure" if real.success else "agree_failure"
