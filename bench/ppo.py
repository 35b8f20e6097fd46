"""Where the time of one session-level PPO step goes: generation, reward (Selector), returns (old/reference
log-probs, values, bootstrap values, Eq. 3), update (2 epochs of Eq. 8), weight sync; and tokens per second.

The REAL trainer (``train crawler_ppo``'s config, ``ppo=cpu_smollm2`` by default) runs ``--steps`` steps in one
process. The baseline in the same run is step 1 with the policy frozen (PaSa's first 50 steps: rollout + value
model only); the ratio printed is what co-training the policy (π_old and π_sft forwards, policy backward,
rollout-weight sync) costs on top of it.

    nice -n 10 python bench/ppo.py --steps 3 > bench_ppo.log 2>&1
    nice -n 10 python bench/ppo.py --policy outputs/checkpoints/crawler_sft/final -- llm=smollm2_vllm
    python bench/ppo.py --from-metrics <ppo run dir>/metrics.jsonl   # the same table for a finished run's log

``--from-metrics`` reads the per-step timings ``train crawler_ppo`` logged (the trainer's own ``timing_s/*`` and
``perf/*``, the numbers this benchmark prints) instead of running steps: no model is loaded.

``--weight-sync N`` times the vLLM rollout engine's weight sync (``ppo.rollout_sync``) on the CPU twin: the SAME
engine and policy in the same process, ``inmemory`` (vLLM's ``reload_weights`` fed from memory) against ``disk``
(this rank's safetensors directory, then ``reload_weights`` from it), N timed pushes each after one warm-up; the
ratio disk / in-memory and each one's share of a PPO step. The step is the mean co-training step of the steps run
first (``--steps``, with a vLLM ``llm`` override), or of a recorded run with ``--from-metrics`` (then only the
engine and the policy are built):

    python bench/ppo.py --weight-sync 5 --steps 2 -- llm=smollm2_vllm
    python bench/ppo.py --weight-sync 5 --from-metrics <run>/metrics.jsonl --llm smollm2_vllm
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

PHASES = ("gen", "env", "reward", "returns", "update", "sync")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--policy", default="embedded:smollm2", help="the starting crawler (HF dir or embedded:smollm2)")
    ap.add_argument("--preset", default="cpu_smollm2", help="conf/ppo/<preset>.yaml")
    ap.add_argument("--steps", type=int, default=3, help="steps to time; the first is policy-frozen")
    ap.add_argument("--queries", type=int, default=4, help="queries per step (search sessions)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    ap.add_argument("--from-metrics", type=Path, default=None,
                    help="print the split of a finished run's metrics.jsonl instead of running steps")
    ap.add_argument("--weight-sync", type=int, default=0, metavar="N",
                    help="time N in-memory and N disk weight syncs of the vLLM rollout engine (see above)")
    ap.add_argument("--llm", default="smollm2_vllm",
                    help="conf/llm preset of the engine for --weight-sync with --from-metrics")
    ap.add_argument("overrides", nargs="*", help="extra Hydra overrides (after --)")
    args = ap.parse_args(argv)
    if args.weight_sync and args.from_metrics is not None:
        rows = [json.loads(line) for line in args.from_metrics.read_text().splitlines() if line.strip()]
        cotrain = [m for m in rows if not m.get("actor/frozen")]
        if not cotrain:
            ap.error(f"{args.from_metrics}: no co-training step to compare the sync with")
        weight_sync_bench(args, cotrain, f"recorded run {args.from_metrics}")
        return 0
    if args.from_metrics is not None:
        rows = [json.loads(line) for line in args.from_metrics.read_text().splitlines() if line.strip()]
        frozen = [m for m in rows if m.get("actor/frozen")]
        cotrain = [m for m in rows if not m.get("actor/frozen")]
        if not cotrain:
            ap.error(f"{args.from_metrics}: no co-training step (every logged step had the policy frozen)")
        report(frozen[0] if frozen else None, cotrain, f"recorded run {args.from_metrics}", args.json)
        return 0
    if args.steps < 2:
        ap.error("--steps must be >= 2 (one frozen baseline step, then co-training)")

    import torch

    from scholar_agents.hydra_app import compose, setup_environment
    from scholar_agents.train.ppo.trainer import PPOTrainer

    if args.threads:
        torch.set_num_threads(args.threads)
    setup_environment()
    run_dir = Path(tempfile.mkdtemp(prefix="bench_ppo_"))
    cfg = compose("train_crawler_ppo", [
        f"ppo={args.preset}", f"ppo.policy_model={args.policy}", f"ppo.queries_per_step={args.queries}",
        f"ppo.max_new_tokens={args.max_new_tokens}", "ppo.policy_freeze_steps=1", f"ppo.total_steps={args.steps}",
        "ppo.eval_at_start=false", "ppo.eval_at_end=false", "logging.wandb.mode=disabled",
        f"paths.output_dir={run_dir}", *args.overrides,
    ])
    t0 = time.perf_counter()
    trainer = PPOTrainer.from_config(cfg, run_dir)
    setup_s = time.perf_counter() - t0
    rows = []
    try:
        for step in range(args.steps):
            m = trainer.train_step(step)
            rows.append(m)
            print(f"step {step + 1} ({'policy frozen' if m['actor/frozen'] else 'co-training'}): "
                  f"{m['timing_s/step']:.1f} s, {int(m['rollout/sessions'])} sessions", flush=True)
        report(rows[0], rows[1:], f"{trainer.world} process, torch threads {torch.get_num_threads()}, policy "
               f"{args.policy}, {args.queries} queries, {args.max_new_tokens} new tokens; set-up {setup_s:.0f} s",
               None if args.weight_sync else args.json, {"setup_s": setup_s})
        if args.weight_sync:
            if trainer.rollout_engine.cfg.backend != "vllm":
                ap.error("--weight-sync times the vLLM rollout engine: add the override `-- llm=smollm2_vllm`")
            weight_sync_bench(args, rows[1:], f"the {args.steps - 1} co-training step(s) above",
                              engine=trainer.rollout_engine, weights=trainer.engine.policy_weights)
    finally:
        trainer.close()
    return 0


def weight_sync_bench(args, cotrain: list[dict], step_source: str, engine=None, weights=None) -> dict:
    """In-memory vs disk weight sync on one engine and one policy: mean / min seconds over ``args.weight_sync``
    pushes (after one warm-up each), the ratio, and each one's share of a co-training step whose other phases take
    what ``cotrain`` recorded (its own sync replaced by the mode's)."""
    import tempfile

    import torch

    own = engine is None
    if own:
        from omegaconf import OmegaConf
        from transformers import AutoModelForCausalLM

        from scholar_agents.hydra_app import compose, setup_environment
        from scholar_agents.llm.factory import resolve_model_path
        from scholar_agents.train.ppo.policy_weights import merged_policy_weights
        from scholar_agents.train.ppo.rollout_engine import RolloutEngine

        setup_environment()
        cfg = compose("train_crawler_ppo", [f"llm={args.llm}", "llm.cache_path=null", *args.overrides])
        path = resolve_model_path(args.policy)
        llm_cfg = {**OmegaConf.to_container(cfg.llm, resolve=True), "model": path}
        engine = RolloutEngine(llm_cfg, Path(tempfile.mkdtemp(prefix="bench_sync_")), sync="inmemory")
        policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)  # fp32 master weights
        weights = lambda: merged_policy_weights(policy)  # noqa: E731
    n_params = sum({t.data_ptr(): t.numel() for _, t in weights()}.values())  # a tied lm_head counted once
    rest = sum(m["timing_s/step"] - m.get("timing_s/sync", 0.0) for m in cotrain) / len(cotrain)
    times: dict[str, list[float]] = {}
    mode_before = engine.sync_mode
    try:
        for mode in ("inmemory", "disk"):
            engine.sync_mode = mode
            engine.sync(weights(), engine.tokenizer)  # warm-up (first disk write creates the directory)
            times[mode] = [engine.sync(weights(), engine.tokenizer) for _ in range(args.weight_sync)]
    finally:
        engine.sync_mode = mode_before
        if own:
            engine.close()
    mean = {k: sum(v) / len(v) for k, v in times.items()}
    ratio = mean["disk"] / mean["inmemory"]
    print(f"\nweight sync of the vLLM rollout engine ({engine.model_path}, {n_params / 1e6:.0f} M parameters, engine "
          f"{engine.cfg.dtype}, {args.weight_sync} pushes each; step without sync {rest:.2f} s from {step_source})")
    print(f"{'mode':10s} {'mean (s)':>9s} {'min (s)':>9s} {'share of step':>14s}")
    for mode, ts in times.items():
        print(f"{mode:10s} {mean[mode]:9.3f} {min(ts):9.3f} {mean[mode] / (rest + mean[mode]):14.2%}")
    print(f"disk / in-memory: {ratio:.1f}x")
    out = {"weight_sync_s": times, "mean_s": mean, "ratio_disk_over_inmemory": ratio, "step_without_sync_s": rest,
           "params": n_params}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return out


def report(frozen: dict | None, cotrain: list[dict], what: str, json_path: Path | None, extra: dict | None = None):
    """Print the per-phase split (frozen step vs mean co-training step), tokens/s and the co-training cost."""

    def split(m: dict) -> dict:
        return {ph: m.get(f"timing_s/{ph}", 0.0) for ph in PHASES}

    co_mean = {ph: sum(split(m)[ph] for m in cotrain) / len(cotrain) for ph in PHASES}
    co_step = sum(m["timing_s/step"] for m in cotrain) / len(cotrain)
    print(f"\nPPO step time split ({what}; {len(cotrain)} co-training step(s))")
    print(f"{'phase':10s} {'frozen step (s)':>16s} {'co-training (s)':>16s} {'share':>7s}")
    for ph in PHASES:
        fz = f"{split(frozen)[ph]:16.2f}" if frozen else f"{'-':>16s}"
        print(f"{ph:10s} {fz} {co_mean[ph]:16.2f} {co_mean[ph] / co_step:7.1%}")
    print(f"{'step':10s} {frozen['timing_s/step'] if frozen else float('nan'):16.2f} {co_step:16.2f}")
    gen_tps = sum(m["perf/gen_tokens_per_s"] for m in cotrain) / len(cotrain)
    thr = sum(m["perf/throughput"] for m in cotrain) / len(cotrain)
    print(f"\ngeneration: {gen_tps:.1f} tokens/s; whole step: {thr:.1f} (prompt + response) tokens/s")
    ratio = co_step / frozen["timing_s/step"] if frozen else None
    if ratio is not None:
        print(f"co-training step / frozen (value-only) step: {ratio:.2f}x")
    if json_path:
        json_path.write_text(json.dumps({"frozen": frozen, "cotrain": cotrain, "ratio_cotrain_over_frozen": ratio,
                                         **(extra or {})}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
