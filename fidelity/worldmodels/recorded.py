"""A simulated dataset played back as a world model.

A team that generated trajectories with a world model (``source: sim``) can
audit them without the model: :class:`RecordedWorldModel` answers each
prediction with the observation recorded for the same trajectory id and depth.
"""

from __future__ import annotations

from fidelity.errors import NotFoundError, UsageError, WorldModelError
from fidelity.trajectory import Action, Observation, Step, Trajectory, stable_hash
from fidelity.worldmodels.base import WorldModel

_SHOWN = 80


class RecordingMismatchError(WorldModelError):
    """The action asked for is not the action recorded at that depth."""


def _error(error: Exception) -> Observation:
    return Observation(error=f"{type(error).__name__}: {error}")


def _clip(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…")


class RecordedWorldModel(WorldModel):
    """Plays back the observations of recorded (usually simulated) trajectories.

    ``path`` names the dataset in error messages and provenance. Predicting
    depth ``d`` of trajectory ``id`` returns the observation of step ``d`` of
    the recorded trajectory with that id, provided the action's rendered text
    matches the recorded one; otherwise an error observation says why. Raises
    :class:`~fidelity.errors.UsageError` when two trajectories share an id.
    """

    name = "recorded"

    def __init__(self, trajectories: list[Trajectory], path: str) -> None:
        self.path = path
        self._by_id: dict[str, Trajectory] = {}
        for trajectory in trajectories:
            if trajectory.id in self._by_id:
                raise UsageError(f"{path}: trajectory id {trajectory.id!r} appears twice")
            self._by_id[trajectory.id] = trajectory
        self._digest: str | None = None

    async def predict(
        self,
        trajectory: Trajectory,
        history: list[Step],
        action: Action,
        depth: int,
        sample: int = 0,
    ) -> Observation:
        """The recorded observation at *depth* of the trajectory with the same id."""
        where = f"{self.path}: trajectory {trajectory.id!r}"
        recorded = self._by_id.get(trajectory.id)
        if recorded is None:
            return _error(NotFoundError(f"{where} is not in the recorded dataset"))
        if not 1 <= depth <= len(recorded.steps):
            return _error(
                NotFoundError(f"{where} has {len(recorded.steps)} steps, no step {depth}")
            )
        step = recorded.steps[depth - 1]
        if step.action.render() != action.render():
            return _error(
                RecordingMismatchError(
                    f"{where} step {depth}: recorded action {_clip(step.action.render())} "
                    f"differs from the replayed action {_clip(action.render())}"
                )
            )
        if step.observation is None:
            return _error(NotFoundError(f"{where} step {depth} has no recorded observation"))
        return step.observation

    def describe(self) -> dict[str, str]:
        """Backend, dataset path, trajectory count and a content digest."""
        if self._digest is None:
            self._digest = stable_hash([t.model_dump(mode="json") for t in self._by_id.values()])
        return {
            "backend": self.name,
            "path": self.path,
            "trajectories": str(len(self._by_id)),
            "dataset_hash": self._digest,
        }
