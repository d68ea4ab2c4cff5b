"""The WorldModel interface every simulated backend implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from enum import StrEnum
from types import TracebackType
from typing import Self

from fidelity.trajectory import Action, Observation, Step, Trajectory


class Mode(StrEnum):
    """Which history the world model sees."""

    teacher_forced = "teacher-forced"  # the real history; one step predicted at a time
    open_loop = "open-loop"  # its own earlier predictions (compounding drift)


#: The ``meta`` key of a simulated recording that predicted only this 1-based turn.
EVALUATED_TURN = "evaluated_turn"


class WorldModel(ABC):
    """Predicts the observation that follows an action.

    ``predict`` never raises for a failed prediction of a single step: it
    returns an :class:`Observation` whose ``error`` says what went wrong, so a
    failed request is recorded as a failure and never as an empty observation.
    It raises only for errors that make every prediction impossible
    (unreachable endpoint, bad configuration).
    """

    name: str = "abstract"

    @abstractmethod
    async def predict(
        self,
        trajectory: Trajectory,
        history: list[Step],
        action: Action,
        depth: int,
        sample: int = 0,
    ) -> Observation:
        """Predict the observation after *action* at 1-based *depth*, given *history*.

        *sample* (0-based) tells apart several draws for the same step; a
        deterministic backend answers every sample the same.
        """

    def describe(self) -> dict[str, str]:
        """Provenance stored with a run (backend, model, prompt hash…)."""
        return {"backend": self.name}

    async def check(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Fail fast before a run (endpoint reachable, model served); no-op by default.

        Raises :class:`~fidelity.errors.EndpointUnreachableError` or
        :class:`~fidelity.errors.UsageError` when no prediction can succeed.
        """

    async def aclose(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Release connections."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
