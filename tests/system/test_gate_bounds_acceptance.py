"""The gate's bounds on datasets built from the bundled terminal suite's own real replays
(issue 41's "done when"): 3,600 trajectories, faithful copies and copies where a share of
trajectories derails from a step in their first half, gated with ``--sample auto``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from fidelity.batch import replay_suite
from fidelity.gate import GateOptions, gate_dataset, load_policy
from fidelity.resources import default_suite

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]

COPIES = 100  # 36 trajectories x 100 = 3,600


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, object]]:
    """One real replay of the bundled terminal suite (its observations are the data)."""
    from tests.conftest import require_binary

    require_binary("bwrap", "apt-get install bubblewrap")
    out = tmp_path_factory.mktemp("real") / "real.jsonl"
    replay_suite(default_suite("terminal"), out, concurrency=2)
    return [json.loads(line) for line in out.read_text().splitlines()]


def _dataset(
    folder: Path, real: list[dict[str, object]], share: float, seed: int
) -> tuple[Path, dict[str, int]]:
    """3,600 copies, *share* of them derailing from a step in their first half (every step
    from there on replaced by an invented failure); returns the file and, per derailed
    trajectory, its first drifting step (0-based)."""
    rng = random.Random(seed)
    derailed: dict[str, int] = {}
    path = folder / f"data-{share}.jsonl"
    with path.open("w") as out:
        for copy in range(COPIES):
            for trajectory in real:
                line = json.loads(json.dumps(trajectory))
                line.update(id=f"{line['id']}-{copy}", source="sim")
                steps = line["steps"]
                if rng.random() < share:
                    first = rng.randint(0, (len(steps) - 1) // 2)
                    for step in steps[first:]:
                        invented = rng.randint(0, 10**9)
                        step["observation"] = {
                            "text": f"fatal: error {invented}\n",
                            "exit_code": 128,
                        }
                    derailed[line["id"]] = first
                out.write(json.dumps(line) + "\n")
    return path, derailed


def _gate(tmp_path: Path, data: Path, name: str) -> tuple[object, Path]:
    policy = tmp_path / "policy.toml"
    policy.write_text("[default]\nmax_drift_rate = 0.10\n")
    options = GateOptions(
        dataset=data,
        policy_path=policy,
        output_dir=tmp_path / name,
        db=tmp_path / "gate.duckdb",
        run_id=name,
        sample="auto",
        allowed_roots=[Path(default_suite("terminal")).parent],
    )
    return gate_dataset(options, load_policy(policy)), tmp_path / name


def test_a_faithful_dataset_passes_with_few_replays_and_a_stated_bound(
    tmp_path: Path, real: list[dict[str, object]]
) -> None:
    data, _ = _dataset(tmp_path, real, 0.0, seed=1)
    manifest, _ = _gate(tmp_path, data, "faithful")
    assert manifest.verdict.status == "pass"  # type: ignore[attr-defined]
    assert manifest.replayed_trajectories <= 150  # type: ignore[attr-defined]
    claim = manifest.admitted_claim  # type: ignore[attr-defined]
    assert claim.trajectories == 3600 and claim.drift_bound <= 0.10


def test_a_dataset_where_thirty_percent_derail_fails_within_sixty_replays(
    tmp_path: Path, real: list[dict[str, object]]
) -> None:
    data, _ = _dataset(tmp_path, real, 0.30, seed=1)
    manifest, _ = _gate(tmp_path, data, "derail30")
    assert manifest.verdict.status == "fail"  # type: ignore[attr-defined]
    [drift] = [c for c in manifest.limits if c.limit.startswith("drift_rate")]  # type: ignore[attr-defined]
    assert drift.decision == "fail" and drift.lower > 0.10
    assert manifest.replayed_trajectories <= 60  # type: ignore[attr-defined]


def test_where_three_percent_derail_the_stated_bound_covers_the_admitted_drift(
    tmp_path: Path, real: list[dict[str, object]]
) -> None:
    data, derailed = _dataset(tmp_path, real, 0.03, seed=2)
    manifest, out = _gate(tmp_path, data, "derail3")
    assert manifest.verdict.status == "pass"  # type: ignore[attr-defined]
    drifting = steps = 0
    for line in map(json.loads, (out / "admitted.jsonl").read_text().splitlines()):
        kept = len(line["steps"])
        steps += kept
        if line["id"] in derailed:
            drifting += max(0, kept - derailed[line["id"]])
    claim = manifest.admitted_claim  # type: ignore[attr-defined]
    assert claim.steps == steps and 0 < drifting / steps <= claim.drift_bound <= 0.10
