"""Trajectory tasks as plain data, and the executors that run them (local threads, Ray)."""

from __future__ import annotations

import gzip
import inspect
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pydantic import ValidationError

from fakes.trajectories import command_trajectory
from fidelity.audit import AuditConfig, run_audit
from fidelity.compare import CompareConfig
from fidelity.compare.normalize import normalize
from fidelity.errors import InputFormatError, NotFoundError, UsageError
from fidelity.executors import ExecutorConfig
from fidelity.formats.jsonl import write_trajectories
from fidelity.gate import GateOptions, gate_dataset, load_policy
from fidelity.pipeline import SimConfig, load_suite, world_model_from_flags
from fidelity.resources import default_suite
from fidelity.sandboxes import REGISTRY, parse_sandbox_config, sandbox_config
from fidelity.sandboxes.docker import DockerConfig
from fidelity.sandboxes.local import LocalConfig
from fidelity.task import TrajectoryTask
from fidelity.trajectory import CommandAction, Observation, Step, Trajectory
from fidelity.worldmodels.config import BaselineConfig, EndpointConfig
from tests.conftest import require_binary, require_module

COMPARED = (
    "SELECT trajectory_id, depth, mode, sample, domain, score, drift, infra_failure, exit_match, "
    "metrics, hallucinations, omissions, stale, normalizations, reasons FROM comparisons "
    "ORDER BY trajectory_id, depth, mode, sample"
)


def test_a_task_is_plain_data_that_comes_back_whole() -> None:
    trajectory = load_suite(default_suite("terminal"))[0]
    task = TrajectoryTask.model_validate(
        {
            "trajectory": trajectory,
            "sandbox": sandbox_config("swe", run_id="r1"),
            "world_model": EndpointConfig(url="http://127.0.0.1:9/v1", model="m", timeout=5),
            "compare": CompareConfig(),
            "samples": 2,
        }
    )
    back = TrajectoryTask.model_validate_json(task.model_dump_json())
    assert back == task
    assert isinstance(back.sandbox, DockerConfig)
    assert (back.sandbox.domain, back.sandbox.run_label) == ("swe", "r1")
    assert back.world_model is not None and back.world_model.type == "endpoint"


def test_the_registry_types_every_backend_and_names_bad_options() -> None:
    for name, entry in REGISTRY.items():
        config = entry.config.model_validate({"type": name})
        assert parse_sandbox_config(config.model_dump_json()) == config
    assert isinstance(sandbox_config("terminal"), LocalConfig)
    with pytest.raises(UsageError, match="sandbox 'local': max_memry_mb: Extra inputs"):
        sandbox_config("terminal", "local", {"max_memry_mb": 10})
    with pytest.raises(UsageError, match="unknown sandbox backend 'vm'"):
        sandbox_config("terminal", "vm")
    with pytest.raises(UsageError, match="cannot replay domain 'web'"):
        sandbox_config("web", "local")


def test_every_sweeper_takes_the_dead_owner_its_reaper_names() -> None:
    """The reaper sweeps with ``owner=``: a sweeper without it would judge a zombie alive."""
    from fidelity.sandboxes import resolve_target

    for name, entry in REGISTRY.items():
        parameters = inspect.signature(resolve_target(entry.sweeper)).parameters
        assert "owner" in parameters, name
        assert parameters["owner"].default is None, name


def test_only_the_default_shard_root_is_removed_and_only_once_empty(tmp_path: Path) -> None:
    from fidelity.store import Store

    db = tmp_path / "f.duckdb"
    parquet = ExecutorConfig(type="ray", results="parquet")
    default_root = tmp_path / "f.duckdb.parts"
    (default_root / "other-run").mkdir(parents=True)
    with Store(db) as store:
        parquet.merge_left_over(store, db, "r1")
        assert (default_root / "other-run").is_dir()  # another run's shards wait there
        (default_root / "other-run").rmdir()
        parquet.merge_left_over(store, db, "r1")
        assert not default_root.exists()
        users = tmp_path / "mine"
        users.mkdir()
        parquet.model_copy(update={"results_dir": users}).merge_left_over(store, db, "r1")
        assert users.is_dir()


def test_sim_config_selects_its_world_model_by_type() -> None:
    assert SimConfig().world_model == BaselineConfig(name="retrieval")
    assert SimConfig(data=Path("x.jsonl")).kind == "recorded"
    with pytest.raises(UsageError, match="exclusive"):
        world_model_from_flags(url="http://h/v1", model="m", data=Path("x.jsonl"))
    with pytest.raises(ValidationError, match="needs --sim-model"):
        SimConfig(url="http://h/v1")
    again = SimConfig.model_validate_json(SimConfig(url="http://h/v1", model="m").model_dump_json())
    assert isinstance(again.world_model, EndpointConfig) and again.world_model.timeout == 120.0


# -- Ray: a real local cluster on loopback, a head and a second raylet ----------------------


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    require_module("ray", "pip install 'fidelity[ray]'")
    from ray.cluster_utils import Cluster

    small = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(
        initialize_head=True,
        head_node_args={**small, "include_dashboard": False},
    )
    cluster.add_node(**small)  # a second raylet: tasks cross processes as they cross nodes
    cluster.wait_for_nodes()
    try:
        yield str(cluster.address)
    finally:
        import ray

        ray.shutdown()
        cluster.shutdown()


def _compared(db: Path) -> list[tuple[Any, ...]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(COMPARED).fetchall()


@pytest.mark.slow
@pytest.mark.bwrap
def test_the_terminal_suite_on_ray_stores_exactly_the_local_comparisons(
    tmp_path: Path, ray_cluster: str
) -> None:
    require_binary("bwrap", "apt-get install bubblewrap")
    common: dict[str, Any] = {"sim": SimConfig(baseline="copy"), "report": None, "limit": 6}
    local = run_audit(AuditConfig(db=tmp_path / "local.duckdb", **common))
    ray = {"executor": "ray", "ray_address": ray_cluster}
    remote = run_audit(AuditConfig(db=tmp_path / "ray.duckdb", **ray, **common))
    sharded = run_audit(
        AuditConfig(db=tmp_path / "parquet.duckdb", ray_results="parquet", **ray, **common)
    )
    assert remote.failed_trajectories == local.failed_trajectories == []
    assert sharded.failed_trajectories == []
    assert remote.audited == local.audited == sharded.audited == 6
    rows = _compared(tmp_path / "ray.duckdb")
    assert len(rows) > 6 and rows == _compared(tmp_path / "local.duckdb")
    assert _compared(tmp_path / "parquet.duckdb") == rows
    assert _observed(tmp_path / "parquet.duckdb") == _observed(tmp_path / "local.duckdb")
    # every shard merged and deleted: the run's folder and the default <db>.parts are gone
    assert not (tmp_path / "parquet.duckdb.parts").exists()


OBSERVED = (
    "SELECT s.*, o.* EXCLUDE (run_id, trajectory_id, depth, latency_ms, text), o.text "
    "FROM steps s JOIN observations o USING (run_id, trajectory_id, depth) "
    "ORDER BY s.trajectory_id, s.depth, o.side, o.mode, o.sample"
)


def _observed(db: Path) -> list[tuple[Any, ...]]:
    """Every step and its observations (timings left out), run ids aside; each text as the
    comparator normalizes it (two runs a minute apart differ in ``ls -la``'s times)."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(OBSERVED).fetchall()
    return [(*row[1:-1], normalize(row[-1], row[5])[0]) for row in rows]


def _kill_one_worker(killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the first Ray worker seen running a trajectory task."""
    psutil = require_module("psutil", "installed with ray")
    while not stop.is_set() and not killed:
        for process in psutil.process_iter(["pid", "cmdline"]):  # type: ignore[attr-defined]
            if any("_run_remote" in part for part in process.info["cmdline"] or []):
                os.kill(process.info["pid"], signal.SIGKILL)
                killed.append(process.info["pid"])
                return
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.parametrize("results", ["driver", "parquet"])
def test_a_worker_killed_mid_run_loses_nothing(
    tmp_path: Path, ray_cluster: str, results: str
) -> None:
    require_binary("bwrap", "apt-get install bubblewrap")
    suite = tmp_path / "slow.jsonl"
    write_trajectories(
        suite,
        [command_trajectory(f"t{i}", "sleep 2", f"echo {i}") for i in range(3)],
    )
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_one_worker, args=(killed, stop))
    killer.start()
    try:
        result = run_audit(
            AuditConfig(
                suite=suite,
                db=tmp_path / "ray.duckdb",
                executor="ray",
                ray_address=ray_cluster,
                ray_results=results,
                sim=SimConfig(baseline="copy"),
                report=None,
            )
        )
    finally:
        stop.set()
        killer.join()
    assert killed, "no Ray worker was seen running a task"
    assert not (tmp_path / "ray.duckdb.parts").exists()
    assert result.audited == 3 and result.failed_trajectories == []
    with duckdb.connect(str(tmp_path / "ray.duckdb"), read_only=True) as con:
        rows = con.execute(
            "SELECT trajectory_id, count(*) FROM comparisons GROUP BY ALL ORDER BY 1"
        ).fetchall()
        done = con.execute("SELECT count(*) FROM trajectories WHERE status = 'done'").fetchone()
    assert rows == [("t0", 2), ("t1", 2), ("t2", 2)] and done == (3,)


# -- the dataset gate's passes over shards ------------------------------------------------------


def _sharded_dataset(folder: Path, bad: dict[str, int] | None = None) -> Path:
    """Three shards (one gzipped) of terminal trajectories; *bad* breaks shard: line."""
    folder.mkdir()
    ids = {"a.jsonl": range(0, 4), "b.jsonl.gz": range(4, 7), "c.jsonl": range(7, 10)}
    for name, numbers in ids.items():
        lines = [_simulated(i).model_dump_json() for i in numbers]
        for shard, line in (bad or {}).items():
            if shard == name:
                lines[line - 1] = '{"id": "broken", "domain": "terminal"'
        text = "".join(line + "\n" for line in lines)
        if name.endswith(".gz"):
            with gzip.open(folder / name, "wt") as handle:
                handle.write(text)
        else:
            (folder / name).write_text(text)
    return folder


def _simulated(number: int) -> Trajectory:
    """Two steps; the second simulated wrong in odd-numbered trajectories (cut at horizon 1)."""
    seen = ("same\n", "other\n")[number % 2]
    steps = [("echo t", "t\n"), ("echo same", seen)]
    return Trajectory(
        id=f"t{number}",
        domain="terminal",
        source="sim",
        steps=[
            Step(action=CommandAction(command=c), observation=Observation(text=t, exit_code=0))
            for c, t in steps
        ],
        meta={"model": "toy", "mode": "open-loop"},
    )


def _gate_options(tmp_path: Path, dataset: Path, name: str, **extra: Any) -> GateOptions:
    policy = tmp_path / "policy.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.9\n")
    return GateOptions(
        dataset=dataset,
        policy_path=policy,
        output_dir=tmp_path / name,
        db=tmp_path / f"{name}.duckdb",
        run_id="gate-run",
        sample=4,
        cut_at_horizon=True,
        **extra,
    )


@pytest.mark.slow
@pytest.mark.bwrap
def test_a_sharded_gate_on_ray_writes_the_files_of_a_local_gate(
    tmp_path: Path, ray_cluster: str
) -> None:
    """Each pass reads the shards in Ray tasks; outputs are byte for byte the local ones."""
    require_binary("bwrap", "apt-get install bubblewrap")
    dataset = _sharded_dataset(tmp_path / "data")
    local_options = _gate_options(tmp_path, dataset, "local")
    local = gate_dataset(local_options, load_policy(local_options.policy_path))
    ray_options = _gate_options(tmp_path, dataset, "ray", executor="ray", ray_address=ray_cluster)
    remote = gate_dataset(ray_options, load_policy(ray_options.policy_path))
    for name in ("admitted.jsonl", "quarantined.jsonl", "decisions.jsonl"):
        assert (tmp_path / "ray" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    assert remote.counts == local.counts and remote.counts.trajectories == 10
    assert remote.counts.sampled == remote.replayed_trajectories == local.replayed_trajectories
    assert 1 <= remote.counts.sampled <= 4 and remote.counts.admitted_cut > 0  # 4 draws
    assert remote.decisions == local.decisions and remote.verdict == local.verdict
    assert remote.dataset_sha256 == local.dataset_sha256
    compared = _compared(tmp_path / "local.duckdb")
    assert len(compared) >= 4 and _compared(tmp_path / "ray.duckdb") == compared
    # workers store their replays as Parquet shards that the driver's DuckDB merges
    parquet_options = ray_options.model_copy(
        update={
            "output_dir": tmp_path / "pq",
            "db": tmp_path / "pq.duckdb",
            "ray_results": "parquet",
        }
    )
    in_parquet = gate_dataset(parquet_options, load_policy(parquet_options.policy_path))
    assert in_parquet.counts == local.counts and in_parquet.decisions == local.decisions
    assert _compared(tmp_path / "pq.duckdb") == compared
    for name in ("admitted.jsonl", "quarantined.jsonl", "decisions.jsonl"):
        assert (tmp_path / "pq" / name).read_bytes() == (tmp_path / "local" / name).read_bytes()
    assert not (tmp_path / "pq.duckdb.parts").exists()
    assert sorted(p.name for p in (tmp_path / "ray").iterdir()) == [
        "admitted.jsonl",
        "decisions.jsonl",
        "manifest.json",
        "quarantined.jsonl",
    ]
    # the sharded layout into the same folder (the same run: nothing replayed again): each
    # shard's task writes its own part, the joined files are replaced, concatenated it matches
    sharded = ray_options.model_copy(update={"layout": "sharded"})
    split = gate_dataset(sharded, load_policy(sharded.policy_path))
    parts = [f"part-{i:06d}.jsonl" for i in range(3)]
    written = {p.relative_to(tmp_path / "ray").as_posix() for p in (tmp_path / "ray").rglob("*")}
    outputs = ("admitted", "quarantined", "decisions")
    assert written == {"manifest.json", *outputs, *(f"{n}/{p}" for n in outputs for p in parts)}
    for name in outputs:
        cut = b"".join((tmp_path / "ray" / name / part).read_bytes() for part in parts)
        assert cut == (tmp_path / "local" / f"{name}.jsonl").read_bytes()
    assert split.counts == local.counts and split.layout == "sharded"
    # a shard gone before pass 3 reads it: its task fails, nothing new, no staging folder
    before = _tree(tmp_path / "ray")

    def vanish(phase: str, n: int) -> None:
        if phase == "total:write":
            (dataset / "c.jsonl").unlink()

    with pytest.raises(NotFoundError, match=r"c\.jsonl: no such file"):
        gate_dataset(ray_options, load_policy(ray_options.policy_path), vanish)
    assert _tree(tmp_path / "ray") == before


def _tree(folder: Path) -> dict[str, bytes | None]:
    """Every path under *folder*, hidden ones too: a file's bytes, None for a folder."""
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() if p.is_file() else None
        for p in folder.rglob("*")
    }


@pytest.mark.slow
def test_a_sharded_scan_on_ray_raises_the_first_error_in_dataset_order(
    tmp_path: Path, ray_cluster: str
) -> None:
    """Shards b (line 2) and c (line 1) are both broken: b's error, as locally; nothing written."""
    dataset = _sharded_dataset(tmp_path / "data", bad={"b.jsonl.gz": 2, "c.jsonl": 1})
    for name, extra in (("local", {}), ("ray", {"executor": "ray", "ray_address": ray_cluster})):
        options = _gate_options(tmp_path, dataset, name, **extra)
        with pytest.raises(InputFormatError, match=r"b\.jsonl\.gz:2: invalid JSON"):
            gate_dataset(options, load_policy(options.policy_path))
        assert not options.output_dir.exists() and not options.db.exists()
