"""Figures about the simulated side of a stored run: sample spread and controllability.

Both are read back from the store (so a resumed run counts every trajectory,
not only the last attempt's) and computed per mode with the functions of
:mod:`fidelity.worldmodels.metrics`, the same ones ``fidelity simulate`` uses.
"""

from __future__ import annotations

import json
from collections import defaultdict

from fidelity import store_queries as queries
from fidelity.analysis.models import ModeSimulation
from fidelity.store import Store
from fidelity.trajectory import Control, Observation
from fidelity.worldmodels.metrics import (
    SampleSpread,
    sample_spread,
    summarize_controls,
    summarize_spread,
)


def simulation_figures(store: Store, run_id: str) -> list[ModeSimulation]:
    """Per mode: the samples' spread against their distance to real, and controllability."""
    samples = _samples_per_mode(store, run_id)
    controls = _control_outcomes(store, run_id)
    return [
        ModeSimulation(
            mode=mode,
            sampling=_spread(store, run_id, mode) if samples[mode] > 1 else None,
            controllability=summarize_controls(controls[mode]) if controls.get(mode) else None,
        )
        for mode in sorted(samples)
    ]


def _samples_per_mode(store: Store, run_id: str) -> dict[str, int]:
    rows = queries.rows(store, "simulation_samples_per_mode", [run_id])
    return {mode: int(count) for mode, count in rows}


def _spread(store: Store, run_id: str, mode: str) -> SampleSpread:
    """:class:`SampleSpread` of *mode*, step by step over the run's trajectories."""
    rows = queries.rows(store, "simulation_spread", [run_id, mode])
    draws: dict[tuple[str, int], list[Observation]] = defaultdict(list)
    real: dict[tuple[str, int], Observation] = {}
    for trajectory_id, depth, _sample, text, error, real_text, real_error in rows:
        draws[trajectory_id, depth].append(Observation(text=text, error=error))
        real[trajectory_id, depth] = Observation(text=real_text, error=real_error)
    spreads: list[float] = []
    distances: list[float] = []
    n_samples = max((len(d) for d in draws.values()), default=0)
    for key, drawn in draws.items():
        s, d = sample_spread([[o] for o in drawn], [real[key]])
        spreads += s
        distances += d
    return summarize_spread(n_samples, spreads, distances)


def _control_outcomes(store: Store, run_id: str) -> dict[str, list[bool | None]]:
    """For each mode, whether each prediction of a controlled step obeyed its control."""
    rows = queries.rows(store, "simulation_control_outcomes", [run_id])
    outcomes: dict[str, list[bool | None]] = defaultdict(list)
    for mode, control, text, exit_code, error in rows:
        observation = Observation(text=text, exit_code=exit_code, error=error)
        outcomes[mode].append(Control.model_validate(json.loads(control)).obeyed(observation))
    return outcomes
