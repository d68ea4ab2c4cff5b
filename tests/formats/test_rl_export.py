"""RL export: trusted trajectories as verl/SkyRL Parquet and OpenRLHF/slime JSONL rows.

Rows are read back with pyarrow, with Hugging Face ``datasets`` (what verl and SkyRL
load Parquet with) and with ``json``, and compared field by field with rows written
out by hand here.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from fidelity.errors import UsageError
from fidelity.formats.rl_export import (
    EXTRA_INFO_FIELDS,
    TURN_FIELDS,
    ExportOptions,
    Outcome,
    RLWriter,
    StepVerdict,
    TrajectoryFidelity,
    export,
    join_parts,
    parquet_schema,
    step_verdicts,
    suffix,
)
from fidelity.trajectory import Trajectory
from tests.conftest import require_module

LONG = "x" * 3_000_000 + "\nend\n"  # a very long observation (3 MB)
UNICODE = "naïve — 日本語 \u2028 🎉"


def _terminal() -> Trajectory:
    return Trajectory.model_validate(
        {
            "id": "t-terminal",
            "domain": "terminal",
            "instruction": "Count the files.",
            "system_prompt": "You are a shell agent.",
            "source": "sim",
            "env": {"initial_observation": "agent@box:/workspace$"},
            "steps": [
                {
                    "action": {"type": "command", "command": "ls"},
                    "observation": {"text": "a.txt\nb.txt\n", "exit_code": 0, "cwd": "/w"},
                },
                {
                    "action": {"type": "command", "command": "cat a.txt"},
                    "observation": {"text": "hello\n", "exit_code": 0},
                },
                {
                    "action": {"type": "command", "command": "rm c.txt"},
                    "observation": {"text": "rm: cannot remove\n", "exit_code": 1},
                },
            ],
            "meta": {"model": "wm"},
        }
    )


TOOLS = [{"name": "read_file", "inputSchema": {"type": "object"}}]


def _unicode() -> Trajectory:
    return Trajectory.model_validate(
        {
            "id": "t-ünïcode",
            "domain": "mcp",
            "source": "sim",
            "meta": {"task_instruction": "Read ü.txt."},  # the older files' key still reads
            "env": {"backend": "mcp", "description": f"files {UNICODE}", "tools": TOOLS},
            "steps": [
                {
                    "action": {"type": "tool", "tool": "read_file", "args": {"path": "ü.txt"}},
                    "observation": {"text": UNICODE, "state": {"ok": "ja ✓"}},
                }
            ],
        }
    )


def _long() -> Trajectory:
    return Trajectory.model_validate(
        {
            "id": "t-long",
            "domain": "terminal",
            "instruction": "Read the log.",
            "source": "sim",
            "steps": [
                {
                    "action": {"type": "command", "command": "cat big.log"},
                    "observation": {"text": LONG, "exit_code": 0},
                },
                {"action": {"type": "command", "command": "true"}, "observation": {"text": ""}},
            ],
        }
    )


GROUND_TRUTH = {"success": True, "reward": 1.0, "claimed_by": "dataset"}
TERMINAL_FIDELITY = TrajectoryFidelity(
    trust_horizon=2,
    verified=True,
    steps=[
        StepVerdict(score=1.0, drift=False),
        StepVerdict(score=0.95, drift=False),
        StepVerdict(score=0.25, drift=True),
    ],
    outcome_agreement=True,
    gate_run_id="run-1",
)
# trust horizon 0: nothing of this one is trusted
UNICODE_FIDELITY = TrajectoryFidelity(trust_horizon=0, verified=False)
LONG_FIDELITY = TrajectoryFidelity(
    trust_horizon=5, verified=True, steps=[StepVerdict(score=0.5, drift=False)]
)


def _writes(writer: RLWriter) -> None:
    """The trajectories every format test writes, in this order."""
    writer.write(_terminal(), TERMINAL_FIDELITY, Outcome(**GROUND_TRUTH))
    writer.write(_unicode(), UNICODE_FIDELITY)
    writer.write(_terminal(), TERMINAL_FIDELITY, keep=0, index=41)  # no step admitted
    writer.write(_long(), LONG_FIDELITY)


def _turn(depth: int, kind: str, action: str, seen: str, **rest: Any) -> dict[str, Any]:
    turn = {"depth": depth, "action_type": kind, "action": action, "observation": seen}
    return {**turn, "exit_code": None, "state": None, "score": None, "drift": None, **rest}


TERMINAL_ENV = (
    '{"backend":"local","setup":[],"env":{},"initial_observation":"agent@box:/workspace$"}'
)
TERMINAL_TURNS = [
    _turn(1, "command", "ls", "a.txt\nb.txt\n", exit_code=0, score=1.0, drift=False),
    _turn(2, "command", "cat a.txt", "hello\n", exit_code=0, score=0.95, drift=False),
    _turn(3, "command", "rm c.txt", "rm: cannot remove\n", exit_code=1, score=0.25, drift=True),
]


def _extra(**fields: Any) -> dict[str, Any]:
    base = {"gate_run_id": None, "outcome_agreement": None, "tools": None, "source": "sim"}
    base["outcome"] = None
    extra = {**base, **fields}
    assert list(sorted(extra)) == sorted(EXTRA_INFO_FIELDS)
    return {name: extra[name] for name in EXTRA_INFO_FIELDS}


EXTRAS = [
    _extra(
        index=0,
        trajectory_id="t-terminal",
        domain="terminal",
        gate_run_id="run-1",
        verified=True,
        trust_horizon=2,
        steps=3,
        original_steps=3,
        outcome_agreement=True,
        outcome={**GROUND_TRUTH, "answer": None},
        trust_mask=[1, 1, 0],
        turns=TERMINAL_TURNS,
        env=TERMINAL_ENV,
    ),
    _extra(
        index=1,
        trajectory_id="t-ünïcode",
        domain="mcp",
        verified=False,
        trust_horizon=0,
        steps=1,
        original_steps=1,
        trust_mask=[0],
        turns=[
            _turn(
                1,
                "tool",
                "read_file(path='ü.txt')",
                UNICODE,
                state='{"ok":"ja ✓"}',
            )
        ],
        env='{"backend":"mcp","setup":[],"env":{},"description":"files '
        + UNICODE.replace("\u2028", "\\u2028")  # json_line escapes it
        + '","tools":[{"name":"read_file","inputSchema":{"type":"object"}}]}',
        tools='[{"name":"read_file","inputSchema":{"type":"object"}}]',
    ),
    _extra(
        index=41,
        trajectory_id="t-terminal",
        domain="terminal",
        gate_run_id="run-1",
        verified=True,
        trust_horizon=2,
        steps=0,
        original_steps=3,
        outcome_agreement=True,
        trust_mask=[],
        turns=[],
        env=TERMINAL_ENV,
    ),
    _extra(
        index=3,
        trajectory_id="t-long",
        domain="terminal",
        verified=True,
        trust_horizon=5,
        steps=2,
        original_steps=2,
        trust_mask=[1, 1],
        turns=[
            _turn(1, "command", "cat big.log", LONG, exit_code=0, score=0.5, drift=False),
            _turn(2, "command", "true", ""),
        ],
        env='{"backend":"local","setup":[],"env":{}}',
    ),
]
TASK_PROMPT = [
    {"role": "system", "content": "You are a shell agent."},
    {"role": "user", "content": "Count the files.\n\nagent@box:/workspace$"},
]
PROMPTS = [
    TASK_PROMPT,
    [{"role": "user", "content": "Read ü.txt."}],  # meta.task_instruction: still read
    TASK_PROMPT,
    [{"role": "user", "content": "Read the log."}],
]
TRUTHS = ["1.0", None, None, None]  # the claimed reward, as the stacks' labels are text
DOMAINS = ["terminal", "mcp", "terminal", "terminal"]


def _expected(fmt: str) -> list[dict[str, Any]]:
    rows = []
    for domain, prompt, truth, extra in zip(DOMAINS, PROMPTS, TRUTHS, EXTRAS, strict=True):
        source = f"fidelity/{domain}"
        if fmt == "verl":
            rows.append(
                {
                    "data_source": source,
                    "prompt": prompt,
                    "ability": domain,
                    "reward_model": {"style": "rule", "ground_truth": truth},
                    "extra_info": extra,
                }
            )
        elif fmt == "skyrl":
            rows.append(
                {
                    "data_source": source,
                    "prompt": prompt,
                    "env_class": domain,
                    "reward_spec": {"method": "rule", "ground_truth": truth},
                    "extra_info": extra,
                }
            )
        elif fmt == "openrlhf":
            metadata = {"data_source": source, **extra}
            rows.append(
                {"prompt": prompt, "label": truth, "datasource": source, "metadata": metadata}
            )
        else:
            tools = TOOLS if domain == "mcp" else None
            metadata = {"data_source": source, "source_name": source, **extra}
            rows.append({"prompt": prompt, "label": truth, "tools": tools, "metadata": metadata})
    return rows


@pytest.fixture
def pq() -> Any:
    """``pyarrow.parquet`` (a dependency of the Parquet writers)."""
    return require_module("pyarrow.parquet", "pip install pyarrow")


@pytest.fixture
def hf_datasets(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Hugging Face ``datasets``, offline (it reads local files only here)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    return require_module("datasets", "pip install 'fidelity[test]'")


def _arrow_for(fmt: str) -> Any:
    """``pyarrow.parquet`` when *fmt* is written as Parquet (else None: not needed)."""
    if suffix(fmt) == ".parquet":
        return require_module("pyarrow.parquet", "pip install pyarrow")
    return None


def _write(path: Path, fmt: str, **options: Any) -> Path:
    with RLWriter(path, ExportOptions(format=fmt, **options)) as writer:
        _writes(writer)
    assert writer.rows == 4
    return path


@pytest.mark.parametrize("fmt", ["verl", "skyrl"])
def test_parquet_rows_read_back_with_pyarrow(tmp_path: Path, pq: Any, fmt: str) -> None:
    path = _write(tmp_path / f"train{suffix(fmt)}", fmt)
    table = pq.read_table(path)
    assert table.schema.equals(parquet_schema(fmt))
    assert table.to_pylist() == _expected(fmt)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no staged file left


@pytest.mark.parametrize("fmt", ["verl", "skyrl"])
def test_parquet_rows_load_with_hf_datasets(
    tmp_path: Path, pq: Any, hf_datasets: Any, fmt: str
) -> None:
    path = _write(tmp_path / "train.parquet", fmt)
    loaded = hf_datasets.load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert loaded.num_rows == 4
    assert list(loaded) == _expected(fmt)


@pytest.mark.parametrize("fmt", ["openrlhf", "slime"])
def test_jsonl_rows_read_back_with_json(tmp_path: Path, fmt: str) -> None:
    path = _write(tmp_path / "train.jsonl", fmt)
    lines = path.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""
    assert [json.loads(line) for line in lines[:-1]] == _expected(fmt)
    assert "\u2028" not in path.read_text(encoding="utf-8")  # escaped: one row per line


def test_jsonl_keys_are_the_users(tmp_path: Path) -> None:
    options = ExportOptions(
        format="slime",
        input_key="messages",
        label_key="answer",
        tool_key="functions",
        metadata_key="fidelity",
        data_source="my-dataset",
    )
    export(tmp_path / "s.jsonl", [(_unicode(), UNICODE_FIDELITY)], options)
    line = json.loads((tmp_path / "s.jsonl").read_text(encoding="utf-8"))
    assert list(line) == ["messages", "answer", "functions", "fidelity"]
    assert line["functions"] == TOOLS
    assert line["fidelity"]["data_source"] == line["fidelity"]["source_name"] == "my-dataset"
    assert line["fidelity"]["trust_mask"] == [0]


def test_duplicate_jsonl_keys_are_refused() -> None:
    with pytest.raises(ValidationError, match="keys must differ"):
        ExportOptions(format="openrlhf", input_key="x", label_key="x")


def test_verl_options_agent_name_data_source_reward_and_full_prompt(
    tmp_path: Path, pq: Any
) -> None:
    options = ExportOptions(
        format="verl",
        agent_name="tool_agent",
        data_source="sim-terminal-50k",
        reward="model",
        prompt="conversation",
        system_prompt="You are an agent.",  # for trajectories without a system prompt
    )
    export(tmp_path / "v.parquet", [(_terminal(), TERMINAL_FIDELITY)], options)
    table = pq.read_table(tmp_path / "v.parquet")
    assert table.schema.equals(parquet_schema("verl", agent_name=True))
    (got,) = table.to_pylist()
    assert got["agent_name"] == "tool_agent"
    assert got["data_source"] == "sim-terminal-50k"
    assert got["reward_model"] == {"style": "model", "ground_truth": None}
    assert got["prompt"] == [
        *TASK_PROMPT,  # the trajectory's own system prompt
        {"role": "assistant", "content": "ls"},
        {"role": "user", "content": "a.txt\nb.txt\n"},
        {"role": "assistant", "content": "cat a.txt"},
        {"role": "user", "content": "hello\n"},
        {"role": "assistant", "content": "rm c.txt"},
        {"role": "user", "content": "rm: cannot remove\n"},
    ]


def test_skyrl_reward_model_method(tmp_path: Path, pq: Any) -> None:
    options = ExportOptions(format="skyrl", reward="model")
    export(tmp_path / "s.parquet", [(_unicode(), UNICODE_FIDELITY)], options)
    (got,) = pq.read_table(tmp_path / "s.parquet").to_pylist()
    assert got["reward_spec"] == {"method": "reward_model", "ground_truth": None}


def test_a_cut_exports_only_the_kept_turns(tmp_path: Path) -> None:
    options = ExportOptions(format="openrlhf", prompt="conversation")
    with RLWriter(tmp_path / "o.jsonl", options) as writer:
        writer.write(_terminal(), TERMINAL_FIDELITY, keep=2)
    metadata = json.loads((tmp_path / "o.jsonl").read_text())["metadata"]
    assert metadata["turns"] == TERMINAL_TURNS[:2]
    assert (metadata["steps"], metadata["original_steps"], metadata["trust_mask"]) == (2, 3, [1, 1])


def test_row_groups_are_written_as_rows_arrive(tmp_path: Path, pq: Any) -> None:
    path = tmp_path / "v.parquet"
    with RLWriter(path, ExportOptions(format="verl", row_group_rows=2)) as writer:
        writer.write(_terminal(), TERMINAL_FIDELITY)
        empty = writer.temp.stat().st_size
        writer.write(_terminal(), TERMINAL_FIDELITY)  # a full group: on disk now
        assert writer.temp.stat().st_size > empty
        assert not path.exists()  # staged until closed
        for _ in range(3):
            writer.write(_unicode(), UNICODE_FIDELITY)
    source = pq.ParquetFile(path)
    assert [source.metadata.row_group(g).num_rows for g in range(source.num_row_groups)] == [
        2,
        2,
        1,
    ]
    assert source.metadata.num_rows == 5


def test_a_long_row_closes_its_row_group(tmp_path: Path, pq: Any) -> None:
    path = tmp_path / "v.parquet"
    with RLWriter(path, ExportOptions(format="skyrl", row_group_bytes=1 << 20)) as writer:
        writer.write(_terminal(), TERMINAL_FIDELITY)
        writer.write(_long(), LONG_FIDELITY)  # 3 MB of text: its group is closed
        writer.write(_unicode(), UNICODE_FIDELITY)
    source = pq.ParquetFile(path)
    groups = [source.metadata.row_group(g).num_rows for g in range(source.num_row_groups)]
    assert groups == [2, 1]
    assert source.read_row_group(0).to_pylist()[1]["extra_info"]["turns"][0]["observation"] == LONG


@pytest.mark.parametrize("fmt", ["verl", "slime"])
def test_an_error_leaves_the_earlier_file_as_it_was(tmp_path: Path, fmt: str) -> None:
    _arrow_for(fmt)
    path = tmp_path / f"out{suffix(fmt)}"
    path.write_bytes(b"the previous export")
    with (
        pytest.raises(UsageError, match=r"keep=9 outside 0\.\.3"),
        RLWriter(path, ExportOptions(format=fmt)) as writer,
    ):
        writer.write(_terminal(), TERMINAL_FIDELITY)
        writer.write(_terminal(), TERMINAL_FIDELITY, keep=9)
    assert path.read_bytes() == b"the previous export"
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_more_verdicts_than_steps_is_refused(tmp_path: Path) -> None:
    fidelity = TrajectoryFidelity(trust_horizon=1, verified=True, steps=[StepVerdict()] * 2)
    with pytest.raises(UsageError, match="'t-ünïcode': 2 step verdicts for 1 steps"):
        export(tmp_path / "o.jsonl", [(_unicode(), fidelity)], ExportOptions(format="openrlhf"))
    assert not (tmp_path / "o.jsonl").exists()


def test_missing_pyarrow_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    with pytest.raises(UsageError, match="writing Parquet needs pyarrow"):
        RLWriter(tmp_path / "v.parquet", ExportOptions(format="verl"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fmt", ["skyrl", "openrlhf"])
def test_parts_join_in_order(tmp_path: Path, fmt: str) -> None:
    pq = _arrow_for(fmt)
    ext = suffix(fmt)
    options = ExportOptions(format=fmt, row_group_rows=1)
    first = tmp_path / f"part-000000{ext}"
    second = tmp_path / f"part-000001{ext}"
    export(first, [(_terminal(), TERMINAL_FIDELITY), (_unicode(), UNICODE_FIDELITY)], options)
    export(second, [(_long(), LONG_FIDELITY)], options)
    joined = tmp_path / "out" / f"admitted{ext}"
    assert join_parts(fmt, [first, second], joined) == 3
    if ext == ".parquet":
        ids = [r["extra_info"]["trajectory_id"] for r in pq.read_table(joined).to_pylist()]
    else:
        lines = joined.read_text(encoding="utf-8").split("\n")[:-1]
        ids = [json.loads(line)["metadata"]["trajectory_id"] for line in lines]
    assert ids == ["t-terminal", "t-ünïcode", "t-long"]


def test_parts_with_another_schema_are_refused(tmp_path: Path, pq: Any) -> None:
    verl = tmp_path / "a.parquet"
    skyrl = tmp_path / "b.parquet"
    export(verl, [(_unicode(), UNICODE_FIDELITY)], ExportOptions(format="verl"))
    export(skyrl, [(_unicode(), UNICODE_FIDELITY)], ExportOptions(format="skyrl"))
    with pytest.raises(UsageError, match=r"b\.parquet: its Parquet schema differs"):
        join_parts("verl", [verl, skyrl], tmp_path / "joined.parquet")
    assert not (tmp_path / "joined.parquet").exists()


def test_step_verdicts_from_stored_comparisons() -> None:
    stored = [(1, 1.0, False, False), (3, 0.0, False, True), (4, 0.4, True, False)]
    assert step_verdicts(stored) == [
        StepVerdict(score=1.0, drift=False),
        StepVerdict(),  # no comparison: not verified
        StepVerdict(score=None, drift=True),  # an infrastructure failure counts as drift
        StepVerdict(score=0.4, drift=True),
    ]
    assert step_verdicts([]) == []


def test_turn_fields_are_the_schemas(pq: Any) -> None:
    extra = parquet_schema("skyrl").field("extra_info").type
    assert [extra.field(i).name for i in range(extra.num_fields)] == list(EXTRA_INFO_FIELDS)
    turn = extra.field("turns").type.value_type
    assert [turn.field(i).name for i in range(turn.num_fields)] == list(TURN_FIELDS)


@pytest.mark.parametrize(
    ("outcome", "truth"),
    [
        (Outcome(success=True, claimed_by="simulation"), "1.0"),
        (Outcome(success=False, claimed_by="dataset"), "0.0"),
        (Outcome(reward=0.25, success=True), "0.25"),  # the reward, when there is one
        (Outcome(answer="72", claimed_by="dataset"), "72"),  # a text answer, as gsm8k's
        (Outcome(claimed_by="dataset"), None),
        (None, None),
    ],
)
def test_the_ground_truth_is_a_string_the_stock_rewards_read(
    tmp_path: Path, outcome: Outcome | None, truth: str | None
) -> None:
    options = ExportOptions(format="openrlhf", data_source="openai/gsm8k")
    with RLWriter(tmp_path / "o.jsonl", options) as writer:
        writer.write(_terminal(), TERMINAL_FIDELITY, outcome)
    line = json.loads((tmp_path / "o.jsonl").read_text(encoding="utf-8"))
    assert line["label"] == truth
    assert line["datasource"] == "openai/gsm8k"  # OpenRLHF: data.get("datasource", "default")
    expected = None if outcome is None else {**outcome.model_dump(), "answer": outcome.answer}
    assert line["metadata"]["outcome"] == expected


def test_a_trajectory_without_its_task_is_refused_under_the_instruction_prompt(
    tmp_path: Path,
) -> None:
    untasked = _long().model_copy(update={"instruction": None})
    path = tmp_path / "o.jsonl"
    with (
        pytest.raises(UsageError, match="'t-long' has no instruction to prompt with"),
        RLWriter(path, ExportOptions(format="openrlhf")) as writer,
    ):
        writer.write(_terminal(), TERMINAL_FIDELITY)
        writer.write(untasked, LONG_FIDELITY)
    assert list(tmp_path.iterdir()) == []  # nothing half-written
    options = ExportOptions(format="openrlhf", prompt="conversation", system_prompt="Be brief.")
    export(path, [(untasked, LONG_FIDELITY)], options)
    prompt = json.loads(path.read_text(encoding="utf-8"))["prompt"]
    assert [m["role"] for m in prompt] == ["system", "assistant", "user", "assistant", "user"]
    assert prompt[0] == {"role": "system", "content": "Be brief."}  # the options' default


def test_the_data_source_is_the_options_then_the_trajectorys_then_the_domains(
    tmp_path: Path,
) -> None:
    own = _terminal().model_copy(update={"meta": {"data_source": "imported/set"}})
    sources = []
    for options in (
        ExportOptions(format="slime", data_source="mine"),
        ExportOptions(format="slime"),
    ):
        for trajectory in (own, _terminal()):
            export(tmp_path / "s.jsonl", [(trajectory, TERMINAL_FIDELITY)], options)
            line = json.loads((tmp_path / "s.jsonl").read_text(encoding="utf-8"))
            sources.append(line["metadata"]["source_name"])
    assert sources == ["mine", "mine", "imported/set", "fidelity/terminal"]
