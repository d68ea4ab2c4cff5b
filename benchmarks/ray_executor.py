"""Ray against local threads on the same suite: identical results, overhead per trajectory.

Audits the bundled terminal suite (real bubblewrap replays, the copy baseline)
four times in the same run: twice with the local thread executor, and with
``--executor ray`` on a real local Ray cluster (a head and a second raylet
on loopback, one CPU each, small object stores), records coming back to the
driver and ``--ray-results parquet`` (workers write Parquet shards that the
driver's DuckDB merges). Prints the wall times, the overhead per trajectory,
and which trajectories' stored comparisons differ from the first local run,
for a second local run (the suite's own nondeterminism) and for each Ray run.

    python benchmarks/ray_executor.py [--limit N]
"""

from __future__ import annotations

import argparse
import importlib.util
import tempfile
import time
from pathlib import Path
from typing import Any

import duckdb

from fidelity.audit import AuditConfig, run_audit
from fidelity.pipeline import SimConfig

COMPARED = (
    "SELECT trajectory_id, depth, mode, sample, score, drift, infra_failure, hallucinations, "
    "omissions FROM comparisons ORDER BY ALL"
)


def compared(db: Path) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(COMPARED).fetchall()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="first N trajectories only")
    args = parser.parse_args()
    if importlib.util.find_spec("ray") is None:
        print("ray executor: skipped, Ray is not installed (pip install 'fidelity[ray]')")
        return
    import ray
    from ray.cluster_utils import Cluster

    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args={**small, "include_dashboard": False})
    cluster.add_node(**small)
    cluster.wait_for_nodes()
    try:
        with tempfile.TemporaryDirectory() as folder:
            root = Path(folder)
            common: dict[str, Any] = {
                "sim": SimConfig(baseline="copy"),
                "report": None,
                "limit": args.limit,
                "concurrency": 2,
            }
            times, audited = {}, 0
            for way, extra in (
                ("local", {}),
                ("local2", {}),
                ("ray", {"executor": "ray", "ray_address": cluster.address}),
                (
                    "ray-parquet",
                    {
                        "executor": "ray",
                        "ray_address": cluster.address,
                        "ray_results": "parquet",
                    },
                ),
            ):
                started = time.perf_counter()
                result = run_audit(AuditConfig(db=root / f"{way}.duckdb", **common, **extra))
                times[way] = time.perf_counter() - started
                audited = result.audited
                print(
                    f"{way:>11}: {result.audited} trajectories in {times[way]:6.1f} s "
                    f"({times[way] / result.audited:5.2f} s each), "
                    f"{len(result.failed_trajectories)} failed"
                )
            local, again, remote, sharded = (
                compared(root / f"{w}.duckdb") for w in ("local", "local2", "ray", "ray-parquet")
            )
            for way in ("ray", "ray-parquet"):
                overhead = (times[way] - times["local"]) / max(1, audited)
                print(
                    f"{way}/local wall ratio {times[way] / times['local']:.2f}, overhead "
                    f"{overhead:+.2f} s per trajectory (2 workers each)"
                )
            for name, other in (
                ("local again", again),
                ("ray", remote),
                ("ray-parquet", sharded),
            ):
                differing = sorted({a[0] for a, b in zip(local, other, strict=False) if a != b})
                print(
                    f"comparisons local vs {name}: {len(local)} vs {len(other)} rows, "
                    f"{len(differing)} trajectories differ {differing[:6]}"
                )
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
