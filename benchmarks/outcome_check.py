"""The cost of the outcome check (``env.check``) per trajectory, against the replay itself.

By default replays the bundled swe suite in Docker, each trajectory with its own check
(the repository's unittest suite, run in the container after the last step); with
``--domain terminal``, the bundled terminal suite in the local (bubblewrap) sandbox with
the check ``--check`` (default ``true``) on every trajectory. Prints per trajectory the
replay's wall time (lease, steps, check and release), the check's own seconds and their
ratio; then the medians and totals.

    python benchmarks/outcome_check.py [--domain swe|terminal] [--rounds 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

from fidelity.pipeline import load_suite, replay
from fidelity.resources import default_suite
from fidelity.sandboxes import sandbox_config
from fidelity.trajectory import EnvSpec, OutcomeCheck, Trajectory


def with_check(trajectory: Trajectory, command: str) -> Trajectory:
    """*trajectory* whose environment carries the check *command*."""
    env: EnvSpec = trajectory.env.model_copy(update={"check": OutcomeCheck(command=command)})
    return trajectory.model_copy(update={"env": env})


def main() -> None:
    """Replay the suite with its checks and print both costs."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--domain", choices=("swe", "terminal"), default="swe")
    parser.add_argument("--rounds", type=int, default=1, help="replays of the whole suite")
    parser.add_argument("--check", default="true", help="the terminal suite's check command")
    args = parser.parse_args()
    suite = load_suite(default_suite(args.domain), args.domain)
    if args.domain == "terminal":
        suite = [with_check(t, args.check) for t in suite]
    missing = [t.id for t in suite if t.env.check is None]
    if missing:
        raise SystemExit(f"no env.check on: {', '.join(missing)}")
    config = sandbox_config(args.domain, None, {}, "outcome-check-benchmark")
    replays: list[float] = []
    checks: list[float] = []
    print(f"{'trajectory':<34} {'replay ms':>10} {'check ms':>9} {'check/replay':>12}")
    for _ in range(args.rounds):
        for trajectory in suite:
            started = time.perf_counter()
            replayed = replay(trajectory, config)
            replays.append(time.perf_counter() - started)
            outcome = replayed.outcome
            if outcome is None or outcome.seconds is None or outcome.status != "success":
                raise SystemExit(f"{trajectory.id}: the check did not succeed: {outcome}")
            checks.append(outcome.seconds)
            print(
                f"{trajectory.id:<34} {replays[-1] * 1000:10.1f} {checks[-1] * 1000:9.1f} "
                f"{checks[-1] / replays[-1]:12.3f}"
            )
    print(f"trajectories replayed: {len(replays)} (suite of {len(suite)}, {args.rounds} rounds)")
    for name, values in (("replay (with check)", replays), ("check only", checks)):
        print(
            f"{name:>20}: median {statistics.median(values) * 1000:8.1f} ms, "
            f"total {sum(values):7.2f} s"
        )
    ratio = sum(checks) / sum(replays)
    print(f"check / replay: {ratio:.3f} ({ratio * 100:.1f}% of a trajectory's replay time)")


if __name__ == "__main__":
    main()
