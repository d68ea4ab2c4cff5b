"""What the gate's confidence bounds count, per trajectory of a stored run.

The trajectory is the sampling unit: its steps are correlated (a world model that derails
at step 3 drifts at 4, 5 and 6 too), so every rate the gate decides on is bounded from
per-trajectory counts, never from steps as if they were independent
(:mod:`fidelity.gate.bounds`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fidelity import store_queries as queries
from fidelity.gate.evidence import TrajectoryTally, run_evidence
from fidelity.pipeline import UNVERIFIABLE

if TYPE_CHECKING:
    from fidelity.gate.evidence import Evidence
    from fidelity.store import Store

__all__ = ["TrajectoryTally", "read_tallies", "stored_run_evidence"]


def read_tallies(store: Store, run_id: str, mode: str | None = None) -> dict[str, TrajectoryTally]:
    """Every stored (not only replayed) trajectory of *run_id*, by id, counted over the
    comparisons of *mode* (every mode when None)."""
    rows = queries.rows(store, "gate_tallies", [mode, mode, run_id])
    return {
        str(tid): TrajectoryTally(
            trajectory_id=str(tid),
            steps=int(compared or n_steps or 0),
            drift=int(drift),
            hallucinated=int(halluc),
            infra=int(infra),
            unverifiable=bool(error) and str(error).startswith(UNVERIFIABLE),
            drift_depths=tuple(sorted(int(d) for d in drift_depths)),
            infra_depths=tuple(sorted(int(d) for d in infra_depths)),
            claimed=claimed,
            real=real,
        )
        for (
            tid, n_steps, error, compared, drift, halluc, infra, drift_depths, infra_depths,
            claimed, real,
        ) in rows
    }  # fmt: skip


def stored_run_evidence(store: Store, run_id: str, mode: str | None = None) -> Evidence:
    """A stored run's trajectories as the evidence a policy is decided on
    (:func:`fidelity.gate.evidence.run_evidence`)."""
    return run_evidence(list(read_tallies(store, run_id, mode).values()), run_id)
