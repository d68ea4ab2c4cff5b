"""The exports fed through the training stacks' own code, not a re-implementation of it.

- TRL (``trl`` 1.16.0, the test extra): ``SFTTrainer`` prepares ``--to sft`` rows (the cut
  ``messages``, and the pre-tokenized ``input_ids``/``assistant_masks`` whose labels keep only
  the trusted actions) and trains a step; ``DPOTrainer`` prepares ``fidelity export wm-dpo``
  pairs.
- verl (0.9.1, installed without its dependencies by the tests session: its dataset module
  needs only what the test extra has, plus tensordict and omegaconf): ``RLHFDataset`` reads
  ``--to verl`` rows and ``default_compute_score`` scores one by its ``data_source``.

A tiny Qwen3-shaped model and its tokenizer are built here (no download).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fidelity.formats.rl_export import ExportOptions, RLWriter, TrajectoryFidelity
from fidelity.trajectory import Outcome, Trajectory
from tests.conftest import require_module

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_module("transformers", "pip install 'fidelity[test]'")
    from tests.worldmodels.tiny_qwen import build_tiny_qwen

    return build_tiny_qwen(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "1")
    monkeypatch.setenv("WANDB_DISABLED", "true")


def _shell() -> Trajectory:
    return Trajectory.model_validate(
        {
            "id": "t-shell",
            "domain": "terminal",
            "instruction": "Count the files.",
            "system_prompt": "You are a shell agent.",
            "steps": [
                {"action": {"type": "command", "command": "ls"}, "observation": {"text": "a\nb\n"}},
                {"action": {"type": "command", "command": "wc -l"}, "observation": {"text": "2"}},
                {"action": {"type": "command", "command": "rm -r /"}, "observation": {"text": ""}},
            ],
        }
    )


def _load(path: Path, tmp_path: Path) -> Any:
    datasets = require_module("datasets", "pip install 'fidelity[test]'")
    kind = "parquet" if path.suffix == ".parquet" else "json"
    return datasets.load_dataset(  # type: ignore[attr-defined]
        kind, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf")
    )


def _sft_rows(tmp_path: Path, tokenizer: Path | None) -> Path:
    path = tmp_path / "admitted.sft.parquet"
    fidelity = TrajectoryFidelity(trust_horizon=2, verified=True)
    with RLWriter(path, ExportOptions(format="sft", tokenizer=tokenizer)) as writer:
        writer.write(_shell(), fidelity)
    return path


def _trl_config(tmp_path: Path, name: str, **fields: Any) -> Any:
    trl = require_module("trl", "pip install 'fidelity[test]'")
    config = getattr(trl, name)
    return config(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        **fields,
    )


def test_trl_trains_only_the_trusted_actions_of_the_whole_trajectory(
    tmp_path: Path, model_dir: Path
) -> None:
    transformers = require_module("transformers", "pip install 'fidelity[test]'")
    trl = require_module("trl", "pip install 'fidelity[test]'")
    rows = _load(_sft_rows(tmp_path, model_dir), tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)  # type: ignore[attr-defined]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)  # type: ignore[attr-defined]
    trainer = trl.SFTTrainer(  # type: ignore[attr-defined]
        model=model,
        args=_trl_config(tmp_path, "SFTConfig"),
        train_dataset=rows.select_columns(["input_ids", "assistant_masks"]),
        processing_class=tokenizer,
    )
    prepared = trainer.train_dataset[0]
    trained = [
        i
        for i, label in zip(prepared["input_ids"], prepared["labels"], strict=True)
        if label != -100
    ]
    assert tokenizer.decode(trained) == "ls<|im_end|>\nwc -l<|im_end|>\n"  # not "rm -r /"
    whole = tokenizer.decode(prepared["input_ids"])
    assert whole.startswith(
        "<|im_start|>system\nYou are a shell agent.<|im_end|>\n<|im_start|>user\nCount"
    )
    assert "rm -r /" in whole  # still the context of nothing: it is out of the loss
    assert trainer.train().training_loss > 0


def test_trl_reads_the_cut_messages_as_a_conversation(tmp_path: Path, model_dir: Path) -> None:
    transformers = require_module("transformers", "pip install 'fidelity[test]'")
    trl = require_module("trl", "pip install 'fidelity[test]'")
    rows = _load(_sft_rows(tmp_path, None), tmp_path)
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)  # type: ignore[attr-defined]
    trainer = trl.SFTTrainer(  # type: ignore[attr-defined]
        model=transformers.AutoModelForCausalLM.from_pretrained(model_dir),  # type: ignore[attr-defined]
        args=_trl_config(tmp_path, "SFTConfig"),
        train_dataset=rows.select_columns(["messages"]),
        processing_class=tokenizer,
    )
    text = tokenizer.decode(trainer.train_dataset[0]["input_ids"])
    assert text.endswith("<|im_start|>assistant\nwc -l<|im_end|>\n")  # cut at the horizon
    assert "rm -r /" not in text


def test_trl_prepares_the_world_model_preference_pairs(tmp_path: Path, model_dir: Path) -> None:
    transformers = require_module("transformers", "pip install 'fidelity[test]'")
    trl = require_module("trl", "pip install 'fidelity[test]'")
    pairs = tmp_path / "pairs.jsonl"
    prompt = [
        {"role": "system", "content": "You are a world model of a Linux terminal."},
        {"role": "user", "content": "### Turn 1\n\n**Action:**\n```json\n[]\n```"},
    ]
    row = {
        "prompt": prompt,
        "chosen": [
            {
                "role": "assistant",
                "content": "<predicted_observation>\nreal\n</predicted_observation>",
            }
        ],
        "rejected": [
            {
                "role": "assistant",
                "content": "<predicted_observation>\nsim\n</predicted_observation>",
            }
        ],
    }
    pairs.write_text(json.dumps(row) + "\n")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)  # type: ignore[attr-defined]
    trainer = trl.DPOTrainer(  # type: ignore[attr-defined]
        model=transformers.AutoModelForCausalLM.from_pretrained(model_dir),  # type: ignore[attr-defined]
        args=_trl_config(tmp_path, "DPOConfig", max_length=1024),
        train_dataset=_load(pairs, tmp_path),
        processing_class=tokenizer,
    )
    prepared = trainer.train_dataset[0]
    chosen = prepared.get("chosen_ids", prepared.get("chosen_input_ids"))
    rejected = prepared.get("rejected_ids", prepared.get("rejected_input_ids"))
    assert "\nreal\n" in tokenizer.decode(chosen) and "\nsim\n" in tokenizer.decode(rejected)


def test_verl_reads_the_rows_and_its_default_scorer_reads_the_ground_truth(
    tmp_path: Path, model_dir: Path
) -> None:
    rl_dataset = require_module("verl.utils.dataset.rl_dataset", "noxfile.py's tests session")
    omegaconf = require_module("omegaconf", "see noxfile.py's tests session")
    transformers = require_module("transformers", "pip install 'fidelity[test]'")
    path = tmp_path / "admitted.verl.parquet"
    fidelity = TrajectoryFidelity(trust_horizon=3, verified=True)
    with RLWriter(path, ExportOptions(format="verl", data_source="openai/gsm8k")) as writer:
        writer.write(_shell(), fidelity, Outcome(answer="2", claimed_by="dataset"))
    config = omegaconf.OmegaConf.create(  # type: ignore[attr-defined]
        {
            "prompt_key": "prompt",
            "max_prompt_length": 512,
            "filter_overlong_prompts": True,
            "return_raw_chat": True,
            "cache_dir": str(tmp_path / "verl"),
        }
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)  # type: ignore[attr-defined]
    dataset = rl_dataset.RLHFDataset(  # type: ignore[attr-defined]
        data_files=[str(path)], tokenizer=tokenizer, config=config
    )
    item = dataset[0]
    assert item["raw_prompt"] == [
        {"role": "system", "content": "You are a shell agent."},
        {"role": "user", "content": "Count the files."},
    ]
    assert item["data_source"] == "openai/gsm8k"
    assert item["reward_model"] == {"style": "rule", "ground_truth": "2"}
    assert list(item["extra_info"]["trust_mask"]) == [1, 1, 1]
    from verl.utils.reward_score import default_compute_score

    truth = item["reward_model"]["ground_truth"]
    assert default_compute_score(item["data_source"], "so #### 2", truth) == 1.0
    assert default_compute_score(item["data_source"], "so #### 3", truth) == 0.0
