"""The world-model dev set as labelled steps for the drift risk (``fidelity.risk``).

Each labelled prediction of :mod:`devsets.wm.load` becomes the simulated trajectory the
world model had produced up to it: the history it was shown (the real steps,
teacher-forced, or its own earlier predictions, open-loop), then the action and its
prediction. The risk's features are read from that trajectory alone; the label is the
labellers' (drift when either says drift, :func:`devsets.wm.load.agreed_label`); the
source (repository or CTF category) is the hold-out unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from devsets.wm.load import WMPair, load_pairs
from fidelity.risk.features import StepFeatures, step_features
from fidelity.trajectory import Step, Trajectory


@dataclass(frozen=True)
class RiskStep:
    """One labelled prediction: its features, label, source and the run it came from."""

    task: str
    domain: str
    mode: str
    source: str
    run: str
    drift: bool
    features: StepFeatures
    naive: float
    trajectory: Trajectory


def simulated_trajectory(pair: WMPair) -> Trajectory:
    """The trajectory the world model had written up to *pair*'s prediction."""
    steps = [*pair.context.history, Step(action=pair.context.action, observation=pair.sim)]
    return Trajectory(id=pair.task, domain=pair.domain, steps=steps, source="sim")


def naive_novelty(trajectory: Trajectory) -> float:
    """The share of the last observation's whitespace tokens that nothing before it showed
    (the earlier actions and observations, raw, and its own action); 0 for an empty one."""
    *history, last = trajectory.steps
    shown: set[str] = set(last.action.render().split())
    for step in history:
        shown.update(step.action.render().split())
        if step.observation is not None:
            shown.update(step.observation.text.split())
    tokens = last.observation.text.split() if last.observation is not None else []
    return sum(t not in shown for t in tokens) / len(tokens) if tokens else 0.0


def risk_steps(pairs: Sequence[WMPair] | None = None) -> list[RiskStep]:
    """Every labelled prediction of the dev set with its risk features (the last step's)."""
    found = []
    for pair in load_pairs() if pairs is None else pairs:
        trajectory = simulated_trajectory(pair)
        found.append(
            RiskStep(
                task=pair.task,
                domain=pair.domain,
                mode=pair.mode,
                source=pair.group,
                run=pair.trajectory_id,
                drift=pair.drift,
                features=step_features(trajectory)[-1],
                naive=naive_novelty(trajectory),
                trajectory=trajectory,
            )
        )
    return found
