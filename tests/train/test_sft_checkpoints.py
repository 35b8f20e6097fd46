"""Atomic SFT checkpoints (train/sft_checkpoints.py): every checkpoint-N the Trainer saves gets its COMPLETE marker,
a folder without one counts only when its files are whole, and a requeued `train selector_sft` resumes from the
newest complete checkpoint, naming and moving aside the partial one a kill during a save left behind."""

import json
import logging
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from scholar_agents.hydra_app import compose
from scholar_agents.train.ppo.checkpoint import COMPLETE
from scholar_agents.train.selector.sft import selector_sft
from scholar_agents.train.sft_checkpoints import checkpoint_problem, last_checkpoint
from tests.fixtures.sft import sft_overrides, write_selector_pairs


def _truncate(path: Path, size: int) -> None:
    with path.open("r+b") as f:
        f.truncate(size)


def _fake_checkpoint(d: Path, step: int) -> Path:
    """The files the HF Trainer writes, small: weights (safetensors), optimizer (torch zip), trainer state last."""
    d.mkdir(parents=True)
    save_file({"w": torch.arange(256, dtype=torch.float32)}, str(d / "model.safetensors"))
    torch.save({"state": {0: torch.ones(256)}}, d / "optimizer.pt")
    (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return d


def test_a_folder_without_marker_counts_only_when_its_files_are_whole(tmp_path):
    old = _fake_checkpoint(tmp_path / "checkpoint-1", 1)
    assert checkpoint_problem(old) is None  # saved before markers existed: complete, usable
    size = (old / "model.safetensors").stat().st_size

    cases = {
        "data cut": lambda d: _truncate(d / "model.safetensors", size - 100),
        "header cut": lambda d: _truncate(d / "model.safetensors", 20),
        "optimizer cut": lambda d: _truncate(d / "optimizer.pt", (d / "optimizer.pt").stat().st_size // 2),
        "no trainer state": lambda d: (d / "trainer_state.json").unlink(),
        "shard missing": lambda d: (d / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"w": "model.safetensors", "v": "model-00002-of-00002.safetensors"}})),
    }
    expect = {"data cut": "model.safetensors", "header cut": "model.safetensors", "optimizer cut": "optimizer.pt",
              "no trainer state": "trainer_state.json", "shard missing": "model-00002-of-00002.safetensors"}
    for i, (name, damage) in enumerate(cases.items(), start=2):
        d = _fake_checkpoint(tmp_path / f"checkpoint-{i}", i)
        damage(d)
        problem = checkpoint_problem(d)
        assert problem is not None and expect[name] in problem, (name, problem)
        (d / COMPLETE).write_text(str(i))  # the marker vouches: written only after every file was
        assert checkpoint_problem(d) is None
        (d / COMPLETE).unlink()
    # the newest complete one, whatever the numbers above it hold; read-only (nothing moved)
    assert last_checkpoint(tmp_path) == str(old)
    assert len(list(tmp_path.glob("checkpoint-*"))) == 1 + len(cases)


def test_requeue_after_a_kill_during_a_save_resumes_from_the_last_complete_checkpoint(tiny_model_dir, tmp_path,
                                                                                     caplog):
    data = write_selector_pairs(tmp_path / "pairs.jsonl")
    overrides = [o for o in sft_overrides(tiny_model_dir, data, tmp_path / "ckpt", steps=4)
                 if not o.startswith("sft.save_steps=")]
    cfg = compose("train_selector_sft", [*overrides, "sft.save_steps=1", "logging.wandb.enabled=false"])
    cfg.paths.output_dir = str(tmp_path / "run")
    ckpt = tmp_path / "ckpt"

    assert selector_sft(cfg)["global_step"] == 4
    saved = sorted(d.name for d in ckpt.glob("checkpoint-*"))
    assert saved == ["checkpoint-3", "checkpoint-4"]  # save_total_limit=2
    assert all((ckpt / name / COMPLETE).read_text().strip() == name.split("-")[1] for name in saved)

    # The job was killed while saving checkpoint-4: its weights cut short, no marker, no final/.
    shutil.rmtree(ckpt / "final")
    shutil.rmtree(ckpt / "checkpoint-4")
    shutil.copytree(ckpt / "checkpoint-3", ckpt / "checkpoint-4")
    (ckpt / "checkpoint-4" / COMPLETE).unlink()
    weights = ckpt / "checkpoint-4" / "model.safetensors"
    _truncate(weights, weights.stat().st_size // 2)
    from transformers.trainer_utils import get_last_checkpoint

    assert get_last_checkpoint(str(ckpt)).endswith("checkpoint-4")  # what resume took before: a broken folder

    with caplog.at_level(logging.INFO, logger="scholar_agents.train.sft_checkpoints"):
        with caplog.at_level(logging.INFO, logger="scholar_agents.train.sft"):
            summary = selector_sft(cfg)  # the requeued job: the same command
    assert summary["resumed_from"] == str(ckpt / "checkpoint-3") and summary["global_step"] == 4
    assert f"resuming from {ckpt / 'checkpoint-3'}" in caplog.text
    skipped = [r.getMessage() for r in caplog.records if "skipping partial checkpoint" in r.getMessage()]
    assert len(skipped) == 1 and "checkpoint-4 (model.safetensors" in skipped[0], skipped
    moved = ckpt / "partial" / "checkpoint-4"
    assert str(moved) in skipped[0] and moved.is_dir()  # kept aside for a look, never loaded
    assert (ckpt / "checkpoint-4" / COMPLETE).is_file() and checkpoint_problem(ckpt / "checkpoint-4") is None
    assert (ckpt / "final" / "SFT_DONE.json").is_file()
    steps = [h["step"] for h in summary["log_history"] if "loss" in h]
    assert steps[-1] == 4
