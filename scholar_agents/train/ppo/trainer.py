"""Session-level PPO for the PaSa Crawler (PaSa §4.2, App. A.2, Table 9): the loop, in one file.

One PPO step, per process (``torchrun`` runs one per device; every process rolls out its own queries):

1. **rollout** (``timing_s/gen``): 4 queries -> search sessions, then 6 + 6 expand sessions (App. A.2), sampled from
   the current policy on the ONE crawl environment (:mod:`.rollout`);
2. **reward** (``timing_s/reward``): r = α·Σ I − c(a) per action (Eqs. 1–2), new papers judged gold-or-Selector in one
   batched Selector call;
3. **returns** (``timing_s/returns``): log π_θ^old and log π_sft of every response token (the per-token KL), V̂^old at
   every action's state and at the S_{q+p_j} states of the papers each action added; then R̂ (Eq. 3) and
   Â = R̂ − V̂ (Eq. 4) — or the official code's GAE (``ppo.estimator=gae``);
4. **update** (``timing_s/update``): ``ppo_epochs`` passes over the sessions in minibatches of
   ``forward_batch_size × grad_accum`` sessions; L = L_policy (Eq. 5) + η·L_value (Eqs. 6–7) (Eq. 8), each a mean
   over the minibatch's tokens (all forward batches, all processes: a token weighs the same however the minibatch
   is split). For the first
   ``policy_freeze_steps`` steps the policy is frozen (its learning rate is 0 and its forward pass is skipped) and
   only the value model learns (§5.1);
5. sync the rollout engine's weights, log (JSONL, wandb, ``training_curves.png``), checkpoint, poll for preemption.

Gradients are averaged over processes by hand (an all-reduce per minibatch) rather than by DDP: rollouts give each
process a different number of sessions, and DDP needs the same number of backward passes everywhere. Under
``ppo.deepspeed`` one DeepSpeed engine (ZeRO-2 or ZeRO-3) holds policy + value and reduces the gradients; every
process then pads its backward passes (and, under ZeRO-3, its forward passes: each one gathers parameters
collectively) to the same count with zero-weight or dummy batches.
"""

from __future__ import annotations

import json
import logging
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from scholar_agents.llm.precision import named_torch_dtype
from scholar_agents.runtime import collectives
from scholar_agents.train.ppo.checkpoint import (
    latest_checkpoint,
    load_optimizer_and_scheduler,
    load_rng,
    load_trainer_state,
    python_rng_from_json,
    python_rng_to_json,
    save_checkpoint,
)
from scholar_agents.train.ppo.config import PPOConfig, to_ppo_config
from scholar_agents.train.ppo.deepspeed_config import (
    fill_deepspeed_config,
    load_deepspeed_json,
    reference_config,
    zero3_init,
    zero_stage,
)
from scholar_agents.train.ppo.known_task import KnownTask
from scholar_agents.train.ppo.losses import explained_variance, masked_mean, policy_loss, total_loss, value_loss
from scholar_agents.train.ppo.rollout import (
    QuerySampler,
    RolloutEngine,
    SessionSample,
    build_samples,
    collect_sessions,
    gold_sets,
    reward_stats,
)
from scholar_agents.train.ppo.session_returns import advantages, gae, gae_token_rewards, session_returns
from scholar_agents.train.ppo.value_model import PolicyAndValue, build_value, sub_state

log = logging.getLogger(__name__)

# --------------------------------------------------------------------------------------------------------------
# tensors: sessions packed left-padded, responses right-aligned in a [B, R] grid


@dataclass
class Packed:
    input_ids: torch.Tensor  # [B, T], left-padded: every sequence ends in the last column
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    response_ids: torch.Tensor  # [B, R], right-aligned like the sequences
    response_mask: torch.Tensor  # [B, R]
    lengths: list[int]  # response lengths

    @property
    def width(self) -> int:
        return self.response_ids.shape[1]


def pack(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], pad_id: int, device) -> Packed:
    """(prompt ids, response ids) pairs -> one left-padded batch. With left padding the last R+1 positions hold
    the logits that predict every row's response, so ``logits_to_keep`` saves the rest of the vocabulary matrix."""
    T = max(len(p) + len(r) for p, r in pairs)
    R = max(len(r) for _, r in pairs)
    B = len(pairs)
    ids = torch.full((B, T), pad_id, dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    rids = torch.full((B, R), pad_id, dtype=torch.long)
    rmask = torch.zeros((B, R), dtype=torch.long)
    for i, (p, r) in enumerate(pairs):
        seq = list(p) + list(r)
        ids[i, T - len(seq):] = torch.tensor(seq, dtype=torch.long)
        mask[i, T - len(seq):] = 1
        if r:
            rids[i, R - len(r):] = torch.tensor(list(r), dtype=torch.long)
            rmask[i, R - len(r):] = 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    return Packed(ids.to(device), mask.to(device), pos.to(device), rids.to(device), rmask.to(device),
                  [len(r) for _, r in pairs])


def response_logprobs(logits: torch.Tensor, response_ids: torch.Tensor) -> torch.Tensor:
    """log π(token) of each response token, from the last R+1 positions' logits ``[B, R+1, V]`` -> ``[B, R]``."""
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, response_ids.unsqueeze(-1)).squeeze(-1)


def response_entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def response_values(values: torch.Tensor, width: int) -> torch.Tensor:
    """V̂ of the state before each response token: the value read at the previous position -> ``[B, R]``."""
    T = values.shape[1]
    return values[:, T - width - 1:T - 1].float()


def to_grid(rows: Sequence[np.ndarray], width: int, device, dtype=torch.float32) -> torch.Tensor:
    out = torch.zeros((len(rows), width), dtype=dtype)
    for i, r in enumerate(rows):
        if len(r):
            out[i, width - len(r):] = torch.as_tensor(np.asarray(r), dtype=dtype)
    return out.to(device)


def from_grid(t: torch.Tensor, lengths: Sequence[int]) -> list[np.ndarray]:
    t = t.detach().float().cpu().numpy()
    W = t.shape[1]
    return [t[i, W - n:].astype(np.float64) if n else np.zeros(0) for i, n in enumerate(lengths)]


# --------------------------------------------------------------------------------------------------------------
# returns and advantages of one session (Eqs. 3–4, or GAE)


@dataclass
class SessionTargets:
    advantages: np.ndarray  # per response token
    returns: np.ndarray  # per response token (paper_mc: R̂_t at the first token of action t)
    value_mask: np.ndarray  # positions that train V̂ (paper_mc: each action's first token; gae: every token)
    session_return: float  # R̂ at the session's start state
    kl: float  # Σ over the session's tokens of log π_old − log π_sft
    bootstrap: float  # γ1 · Σ_t Σ_j V̂(S_{q+p_j})


def session_targets(sample: SessionSample, logp_old: np.ndarray, logp_ref: np.ndarray, values_old: np.ndarray,
                    cfg: PPOConfig) -> SessionTargets:
    """Wire one session's actions, per-token log-probs and values into the estimator's targets."""
    n = len(sample.response_ids)
    steps = sample.steps
    token_kl = np.asarray(logp_old, dtype=np.float64) - np.asarray(logp_ref, dtype=np.float64)
    rewards = [s.reward for s in steps]
    child_values = [s.child_values for s in steps]
    value_mask = np.zeros(n)
    if cfg.estimator == "paper_mc":
        action_kl = [float(token_kl[s.start:s.end].sum()) for s in steps]
        R = session_returns(rewards, child_values, action_kl, cfg.gamma0, cfg.gamma1, cfg.beta)
        starts = [s.start for s in steps]
        A = advantages(R, values_old[starts])
        adv, ret = np.zeros(n), np.zeros(n)
        for s, a_t, r_t in zip(steps, A, R):
            adv[s.start:s.end] = a_t  # every token of action t shares Â(s_t, a_t)
            ret[s.start] = r_t
            value_mask[s.start] = 1.0
        start_return = float(R[0])
    else:
        tok_r = gae_token_rewards([s.n_tokens for s in steps], rewards, child_values, token_kl, cfg.gamma1, cfg.beta)
        adv, ret = gae(tok_r, values_old, gamma=cfg.gamma0, lam=cfg.gae_lambda)
        value_mask[:] = 1.0
        start_return = float(ret[0])
    return SessionTargets(adv, ret, value_mask, start_return, float(token_kl.sum()),
                          cfg.gamma1 * float(sum(child_values)))


# --------------------------------------------------------------------------------------------------------------
# helpers


def _dtype(name: str) -> torch.dtype:
    return named_torch_dtype(name, "ppo.model_dtype")


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % (2 ** 32))
    torch.manual_seed(seed)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _chunks(seq: Sequence, n: int) -> list:
    return [seq[i:i + n] for i in range(0, len(seq), n)]


def gather_in_rank_order(rows: list) -> list:
    """Every rank's ``rows`` concatenated in rank order (each rank's share of :func:`split_even`, so: the original
    order). One object all-gather; at world size 1, ``rows`` itself."""
    return [r for part in collectives.all_gather_object(rows) for r in part]


def split_even(items: Sequence, parts: int) -> list[list]:
    """``items`` in ``parts`` consecutive groups whose sizes differ by at most one (some may be empty)."""
    q, r = divmod(len(items), parts)
    out, i = [], 0
    for k in range(parts):
        size = q + (1 if k < r else 0)
        out.append(list(items[i:i + size]))
        i += size
    return out


# --------------------------------------------------------------------------------------------------------------
# the trainer


class PPOTrainer:
    """Built from the ``train crawler_ppo`` root config: ``ppo`` (PPOConfig), ``llm`` (the rollout backend; its
    ``model`` is replaced by the policy), ``selector_llm`` + ``selector`` (the reward model), ``crawler`` (the
    environment's rules and the evaluation's greedy sampling), ``papers``/``search``/``embedder``, ``queries``."""

    def __init__(self, cfg: DictConfig, run_dir: Path):
        from accelerate import Accelerator
        from accelerate.utils import InitProcessGroupKwargs

        from scholar_agents.llm.factory import resolve_model_path
        from scholar_agents.llm.precision import cpu_supports_bf16
        from scholar_agents.pasa.commands import Resources, load_queries
        from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
        from scholar_agents.pasa.crawler import CrawlerConfig
        from scholar_agents.runtime.cluster import ClusterConfig

        self.cfg = cfg
        self.pcfg = p = to_ppo_config(cfg.ppo)
        self.run_dir = Path(run_dir)
        self.ckpt_dir = Path(p.checkpoint_dir) if p.checkpoint_dir else self.run_dir / "checkpoints"
        use_cpu = not torch.cuda.is_available()
        self.init_path = resolve_model_path(p.policy_model)
        self.ref_path = resolve_model_path(p.ref_model) if p.ref_model else self.init_path
        self.ds_config = self._deepspeed_config()  # None without DeepSpeed
        self.deepspeed = self.ds_config is not None
        self.zero3 = self.deepspeed and zero_stage(self.ds_config) == 3
        # accelerate gives us the processes (torch.distributed, gloo on CPU); DeepSpeed engines are built with
        # DeepSpeed's own API below, the same on CPU and GPU (accelerate ignores a DeepSpeed plugin with cpu=True).
        # The group's timeout is how long a rank may wait in a collective while another works alone (a checkpoint
        # write, the end-of-run evaluation's slowest share): cluster.dist_timeout_minutes, not NCCL's 10-minute default.
        timeout_min = float((cfg.get("cluster") or {}).get("dist_timeout_minutes")
                            or ClusterConfig.dist_timeout_minutes)
        # (no backend= here: accelerate would take any backend as "distributed", one process too; it picks gloo on CPU,
        # NCCL on GPUs)
        backend = "gloo" if use_cpu else "nccl"
        # The paper store and search indexes are built BEFORE the process group exists, so no rank waits in a
        # collective (NCCL's watchdog) while another builds: every rank opens them, the first builds under the
        # store's and each index's file lock (papers/corpus.py, papers/index.py) and the others wait on that lock,
        # then load the finished build read-only. The rank's GPU is selected first so that an embedder lands on it.
        if not use_cpu and "LOCAL_RANK" in os.environ:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % max(torch.cuda.device_count(), 1))
        t_build = time.perf_counter()
        self.res = Resources(cfg)
        self.search = self.res.search()
        log.info("paper store and search index ready in %.1f s (built or loaded before the process group)",
                 time.perf_counter() - t_build)
        self.accelerator = Accelerator(cpu=use_cpu, kwargs_handlers=[
            InitProcessGroupKwargs(timeout=collectives.timeout(timeout_min))])
        if self.deepspeed:
            import deepspeed

            if "RANK" not in os.environ:
                # one process started without torchrun: DeepSpeed still wants a (one-process) group and a launcher's
                # variables
                os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                                  MASTER_PORT=str(_free_port()))
            # DeepSpeed's comm layer adopts the process group accelerate started (zero.Init and the engines use it)
            deepspeed.init_distributed(dist_backend=backend, auto_mpi_discovery=False,
                                       timeout=collectives.timeout(timeout_min))
        acc = self.accelerator
        self.rank, self.world = acc.process_index, acc.num_processes
        self.device = acc.device
        log.info("process group: %s; models on %s", collectives.describe(timeout_min), self.device)
        # bf16 autocast where the hardware computes it natively (AMX / AVX512-BF16 CPUs, Ampere+ GPUs)
        native_bf16 = cpu_supports_bf16() if use_cpu else torch.cuda.is_bf16_supported()
        self.bf16 = native_bf16 if p.bf16 is None else bool(p.bf16)
        self.step_callbacks: list[Callable[[int, dict], None]] = []

        for switch in ("fallback_search", "search_user_query"):  # the environment's searches, not sampled actions
            if cfg.crawler.env.get(switch):
                raise ValueError(f"crawler.env.{switch}=true cannot be used for PPO: a search of the user's query by "
                                 "the environment is not an action of the policy (no tokens, no log-prob). Train "
                                 f"with crawler.env.{switch}=false")
        # ---- resume point
        self.resume_from = latest_checkpoint(self.ckpt_dir) if p.resume else None
        if not p.resume and latest_checkpoint(self.ckpt_dir) is not None:
            raise ValueError(f"{self.ckpt_dir} holds checkpoints; pass ppo.resume=true to continue them or choose "
                             f"another ppo.checkpoint_dir (nothing is deleted for you)")
        state = load_trainer_state(self.resume_from) if self.resume_from else {}
        self.start_step = int(state.get("step", 0))
        set_seed(p.seed + 1000 * self.rank)

        # ---- data, environment, reward model (the store and indexes were built before the process group: above)
        self.train_queries = load_queries(cfg.queries.train)
        self.eval_queries = [q for q in load_queries(cfg.queries.eval) if q.gold_ids]
        overlap = {q.qid for q in self.train_queries} & {q.qid for q in self.eval_queries}
        if overlap:
            raise ValueError(f"{len(overlap)} queries are both training and held-out queries (e.g. "
                             f"{sorted(overlap)[:3]}): set queries.train / queries.eval to disjoint ranges")
        self.gold = gold_sets(self.train_queries)
        self.known_task = KnownTask.load(p.known_task) if p.known_task else None
        self.selector = self.res.selector() if p.use_selector else None
        self.env_cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(CrawlConfig), cfg.crawler.env))
        self.eval_policy = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(CrawlerConfig),
                                                               cfg.crawler.policy))
        self.rollout_policy = CrawlerConfig(
            max_new_tokens=p.max_new_tokens or self.eval_policy.max_new_tokens, temperature=p.temperature,
            top_p=p.top_p, seed=p.seed, logprobs=True, batch_sessions=self.eval_policy.batch_sessions,
            constrained=self.eval_policy.constrained,  # refused with logprobs: PPO runs unconstrained
            search=self.eval_policy.search)

        # ---- models
        self.tokenizer = self._tokenizer()
        # Every rank must start from the same weights, LoRA's random A included: one seed for all ranks while the
        # models are built (ZeRO-3 would otherwise stitch a parameter together from different ranks' draws).
        with torch.random.fork_rng(devices=[]), zero3_init(self.ds_config) if self.zero3 else nullcontext():
            torch.manual_seed(p.seed)
            self.model = self._build_models()
        self.ref = self._build_ref()
        self.optimizer, self.scheduler = self._build_optimizer()
        if self.deepspeed:
            import deepspeed

            # One engine for policy + value (one optimizer, Eq. 8's one loss). Our LambdaLR stays outside the engine
            # and steps once per PPO step on the optimizer's parameter groups, which ZeRO reads at every step.
            self.model, self.optimizer, _, _ = deepspeed.initialize(model=self.model, optimizer=self.optimizer,
                                                                    config=self.ds_config)
            if self.resume_from is not None:
                self.model.load_checkpoint(str(self.resume_from / "deepspeed"), load_module_strict=True)
        if self.resume_from is not None:
            load_optimizer_and_scheduler(self.resume_from, None if self.deepspeed else self.optimizer,
                                         self.scheduler)

        # ---- rollouts: the engine starts from the starting checkpoint and gets the current weights right away
        llm_cfg = OmegaConf.to_container(cfg.llm, resolve=True)
        llm_cfg["model"] = self.init_path
        llm_cfg["init"] = p.policy_init  # random: the engine's own draw is replaced by the policy's right below
        self.engine = RolloutEngine(llm_cfg, self.run_dir, sync=p.rollout_sync, sleep=p.rollout_sleep)
        if self.resume_from is not None or p.policy_init == "random":
            self.engine.sync(self._policy_weights(), self.tokenizer)
        self.env = CrawlEnv(self.res.store, self.search, self.env_cfg, tokenizer=self.engine.tokenizer)
        self.sampler = QuerySampler(len(self.train_queries), p.seed)
        self.expand_rng = random.Random(p.seed * 7919 + self.rank)
        if self.resume_from is not None:
            self.sampler.load_state_dict(state["sampler"])
            extra = load_rng(self.resume_from, self.rank)
            python_rng_from_json(self.expand_rng, extra["expand_rng"])
        self.history: dict[str, Any] = state.get("history", {})

        from scholar_agents.train.ppo.run_log import RunLog

        self.logger = RunLog(self.run_dir, enabled=acc.is_main_process,
                             wandb_cfg=(cfg.get("logging") or {}).get("wandb"),
                             config=OmegaConf.to_container(cfg, resolve=True), resume_step=self.start_step,
                             wandb_id=state.get("wandb_id"), run_name=f"crawler_ppo_alpha{p.alpha}")
        log.info("PPO: rank %d/%d on %s, bf16 autocast %s, %d training / %d held-out queries, start at step %d%s",
                 self.rank, self.world, self.device, self.bf16, len(self.train_queries), len(self.eval_queries),
                 self.start_step, f" (resumed from {self.resume_from})" if self.resume_from else "")

    # ---- set-up ----

    def _deepspeed_config(self) -> dict | None:
        """``ppo.deepspeed``'s JSON with every "auto" filled (see :mod:`.deepspeed_config`)."""
        p = self.pcfg
        if p.ref_offload and not p.deepspeed:
            raise ValueError("ppo.ref_offload=true offloads the reference's ZeRO-3 shards: set "
                             "ppo.deepspeed=${sa_pkg:}/conf/deepspeed/zero3.json, or ppo.ref_offload=false")
        if not p.deepspeed:
            return None
        try:
            import deepspeed  # noqa: F401
        except ImportError as e:
            raise ImportError("ppo.deepspeed needs DeepSpeed: pip install 'scholar-agents[deepspeed]' (CPU) or "
                              "'scholar-agents[gpu]'") from e
        from transformers import AutoConfig

        ds = load_deepspeed_json(p.deepspeed)
        if p.ref_offload and zero_stage(ds) != 3:
            raise ValueError(f"ppo.ref_offload=true needs ZeRO-3; {p.deepspeed} is stage {zero_stage(ds)}")
        hidden = AutoConfig.from_pretrained(str(self.init_path)).hidden_size
        return fill_deepspeed_config(ds, p, hidden, world_size=int(os.environ.get("WORLD_SIZE", "1")))

    def _tokenizer(self):
        from transformers import AutoTokenizer

        saved = self.resume_from / "policy" if self.resume_from else None
        path = saved if saved is not None and (saved / "tokenizer_config.json").exists() else self.init_path
        tok = AutoTokenizer.from_pretrained(str(path))
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        return tok

    def _load_causal_lm(self, path, init: str = "pretrained"):
        from scholar_agents.llm.model_init import load_causal_lm

        kwargs = {"dtype": _dtype(self.pcfg.model_dtype)}
        if self._attn_implementation():
            kwargs["attn_implementation"] = self._attn_implementation()
        return load_causal_lm(path, init, seed=self.pcfg.seed, **kwargs)  # init: ppo.policy_init

    def _attn_implementation(self) -> str | None:
        """ppo.attn_implementation resolved (``auto``: flash attention where it imports, else sdpa; logged once)."""
        from scholar_agents.llm.attention import resolve_attn_implementation

        return resolve_attn_implementation(self.pcfg.attn_implementation, "ppo.attn_implementation")

    def _build_models(self) -> PolicyAndValue:
        from scholar_agents.llm.factory import resolve_model_path

        p = self.pcfg
        saved = self.resume_from
        if p.lora.enabled:
            from peft import LoraConfig, PeftModel, get_peft_model

            base = self._load_causal_lm(self.init_path, p.policy_init)
            if saved is not None:
                policy = PeftModel.from_pretrained(base, str(saved / "policy"), is_trainable=True)
            else:
                t = p.lora.target_modules
                policy = get_peft_model(base, LoraConfig(r=p.lora.r, lora_alpha=p.lora.alpha,
                                                         lora_dropout=p.lora.dropout,
                                                         target_modules=t if isinstance(t, str) else list(t),
                                                         task_type="CAUSAL_LM"))
        else:
            policy = (self._load_causal_lm(saved / "policy") if saved is not None
                      else self._load_causal_lm(self.init_path, p.policy_init))
        value_init = resolve_model_path(p.value_model) if p.value_model else self.init_path
        model = build_value(p.value_head, policy, value_init, _dtype(p.model_dtype), seed=p.seed,
                            saved_dir=saved / "value" if saved is not None else None,
                            attn_implementation=self._attn_implementation(), init=p.policy_init)
        if p.gradient_checkpointing:
            policy.gradient_checkpointing_enable()
            if model.value is not None:
                model.value.backbone.gradient_checkpointing_enable()
        # ZeRO-3: the parameters are already partitioned on their device by zero.Init
        return model if self.zero3 else model.to(self.device)

    def _build_ref(self):
        """π_sft, frozen. With LoRA it is the policy with its adapter disabled (see :meth:`_ref_logits`). Under
        ZeRO-3 it is sharded too, in an inference-only DeepSpeed engine (no optimizer; TRL's ``prepare_deepspeed``),
        its shards in CPU memory with ``ppo.ref_offload``; otherwise a whole copy on every device."""
        if self.pcfg.lora.enabled and self.ref_path == self.init_path:
            return None
        if not self.zero3:
            ref = self._load_causal_lm(self.ref_path, self.pcfg.policy_init).to(self.device)
            ref.eval()
            ref.requires_grad_(False)
            return ref
        import deepspeed

        ref_cfg = reference_config(self.ds_config, offload=self.pcfg.ref_offload)
        with zero3_init(ref_cfg):  # zero.Init reads offload_param: the shards are created in CPU memory
            ref = self._load_causal_lm(self.ref_path, self.pcfg.policy_init)
        ref.requires_grad_(False)
        engine = deepspeed.initialize(model=ref, config=ref_cfg)[0]
        engine.eval()
        offload = engine.zero_offload_param()  # the engine's own reading of the config
        log.info("reference π_sft: ZeRO-%d inference engine, parameter shards %s", engine.zero_optimization_stage(),
                 f"offloaded to {offload.device} memory" if offload else f"on {self.device}")
        return engine

    def _build_optimizer(self):
        p = self.pcfg
        model = self.model
        policy_params = [q for q in model.policy.parameters() if q.requires_grad]
        value_params = list(model.value.parameters() if model.value is not None else model.value_head.parameters())
        self.policy_params, self.value_params = policy_params, value_params
        opt = torch.optim.AdamW([
            {"params": policy_params, "lr": p.lr, "name": "policy"},
            {"params": value_params, "lr": p.value_lr or p.lr, "name": "value"},
        ], lr=p.lr, weight_decay=p.weight_decay)
        freeze, warm = p.policy_freeze_steps, p.warmup_steps

        def policy_lr(step: int) -> float:  # §5.1: the policy is frozen while the value model warms up
            if step < freeze:
                return 0.0
            return min(1.0, (step - freeze + 1) / warm) if warm else 1.0

        def value_lr(step: int) -> float:
            return min(1.0, (step + 1) / warm) if warm else 1.0

        sched = torch.optim.lr_scheduler.LambdaLR(opt, [policy_lr, value_lr])
        return opt, sched

    def _policy(self):
        return self.accelerator.unwrap_model(self.model).policy

    def _policy_weights(self):
        """(HF name, full tensor) pairs of the current policy for the rollout engine (LoRA merged). Under ZeRO-3
        they are gathered module by module (a collective: every rank syncs its engine after every update)."""
        if self.zero3:
            from scholar_agents.train.ppo.policy_weights import gathered_policy_weights

            return gathered_policy_weights(self._policy())
        from scholar_agents.train.ppo.rollout import merged_policy_weights

        return merged_policy_weights(self._policy())

    def _forward_rounds(self, n_local: int) -> int:
        """How many forward passes this rank runs for ``n_local`` of its own: under ZeRO-3 every forward all-gathers
        each layer's parameters, a collective, so every rank runs as many as the busiest rank (the extra ones on
        :meth:`_dummy_batch`, their outputs dropped)."""
        return max(collectives.all_gather_int(n_local)) if self.zero3 else n_local

    def _dummy_batch(self) -> Packed:
        pad = self.tokenizer.pad_token_id
        return pack([([pad], [pad])], pad, self.device)

    def _autocast(self):
        if not self.bf16:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    # ---- scoring (no grad): π_old, π_sft, V̂_old ----

    @torch.no_grad()
    def _score(self, samples: list[SessionSample], frozen: bool) -> tuple[list, list, list]:
        """Per session: log π_old and log π_sft of each response token and V̂_old before each token. While the
        policy is frozen it IS π_sft: the KL is exactly 0 and neither log-prob is needed."""
        p = self.pcfg
        model = self.accelerator.unwrap_model(self.model)
        model.eval()
        order = sorted(range(len(samples)), key=lambda i: len(samples[i].prompt_ids) + len(samples[i].response_ids))
        logp_old: list = [None] * len(samples)
        logp_ref: list = [None] * len(samples)
        values: list = [None] * len(samples)
        chunks = _chunks(order, p.score_batch_size)
        for r in range(self._forward_rounds(len(chunks))):
            idx = chunks[r] if r < len(chunks) else []
            b = pack([(samples[i].prompt_ids, samples[i].response_ids) for i in idx], self.tokenizer.pad_token_id,
                     self.device) if idx else self._dummy_batch()
            with self._autocast():
                logits, v = model(b.input_ids, b.attention_mask, b.position_ids, n_logits=b.width + 1,
                                  with_policy=not frozen, with_value=True)
                ref_logits = self._ref_logits(b) if not frozen else None
            if not idx:
                continue
            vs = from_grid(response_values(v, b.width), b.lengths)
            lo = from_grid(response_logprobs(logits, b.response_ids), b.lengths) if not frozen else None
            lr = from_grid(response_logprobs(ref_logits, b.response_ids), b.lengths) if not frozen else None
            for k, i in enumerate(idx):
                values[i] = vs[k]
                logp_old[i] = lo[k] if lo is not None else np.zeros(b.lengths[k])
                logp_ref[i] = lr[k] if lr is not None else logp_old[i]
        return logp_old, logp_ref, values

    def _ref_logits(self, b: Packed) -> torch.Tensor:
        if self.ref is not None:
            return self.ref(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids,
                            use_cache=False, logits_to_keep=b.width + 1).logits
        policy = self._policy()
        with policy.disable_adapter():
            return policy(input_ids=b.input_ids, attention_mask=b.attention_mask, position_ids=b.position_ids,
                          use_cache=False, logits_to_keep=b.width + 1).logits

    @torch.no_grad()
    def _child_values(self, samples: list[SessionSample]) -> int:
        """Σ_j V̂^old(S_{q+p_j}) for every action (Eq. 3's bootstrap), one value forward per distinct start state."""
        model = self.accelerator.unwrap_model(self.model)
        keys = sorted({(s.record.user_query, pid) for s in samples for st in s.steps for pid in st.children})
        prompts = {k: self.engine.llm.prompt_token_ids(self.env.state_messages(k[0], k[1])) for k in keys}
        value_of: dict = {}
        order = sorted(keys, key=lambda k: len(prompts[k]))
        chunks = _chunks(order, self.pcfg.score_batch_size)
        for r in range(self._forward_rounds(len(chunks))):
            chunk = chunks[r] if r < len(chunks) else []
            b = pack([(prompts[k], []) for k in chunk], self.tokenizer.pad_token_id, self.device) if chunk \
                else self._dummy_batch()
            with self._autocast():
                _, v = model(b.input_ids, b.attention_mask, b.position_ids, n_logits=1, with_policy=False,
                             with_value=True)
            for k, val in zip(chunk, v[:, -1].float().cpu().tolist()):
                value_of[k] = val
        for s in samples:
            for st in s.steps:
                st.child_values = float(sum(value_of[(s.record.user_query, pid)] for pid in st.children))
        return len(keys)

    # ---- one PPO step ----

    def rollout(self, step: int) -> tuple[list[SessionSample], dict]:
        p = self.pcfg
        idx = self.sampler.next(p.queries_per_step * self.world)
        mine = idx[self.rank * p.queries_per_step:(self.rank + 1) * p.queries_per_step]
        queries = [self.train_queries[i] for i in mine]
        self.rollout_policy.seed = p.seed + 100_003 * step + 7 * self.rank
        crawler = self.engine.crawler(self.rollout_policy)
        env_t0 = sum(self.env.timing.values())
        records, counts = collect_sessions(self.env, crawler, queries, [int(n) for n in p.expand_sessions],
                                           self.expand_rng)
        t1 = time.perf_counter()
        samples = build_samples(records, self.env, self.gold, self.selector, p.reward_config(), p.bootstrap_all_papers)
        t_reward = time.perf_counter() - t1
        gen_tokens = sum(len(r.response_token_ids) for r in records)
        m = {
            "rollout/sessions": len(records),
            "rollout/search_sessions": counts.get("sessions_round0", 0),
            "rollout/expand_sessions": len(records) - counts.get("sessions_round0", 0),
            "rollout/response_tokens": gen_tokens / max(len(records), 1),
            "rollout/grammar_errors_per_session": sum(len(r.grammar_errors) for r in records) / max(len(records), 1),
            "rollout/truncated": sum(r.finish_reason == "length" for r in records) / max(len(records), 1),
            "timing_s/gen": crawler.timing["gen"],
            "timing_s/env": sum(self.env.timing.values()) - env_t0,
            "timing_s/reward": t_reward,
            "perf/gen_tokens_per_s": gen_tokens / max(crawler.timing["gen"], 1e-9),
            **reward_stats(samples, p.reward_config().cost),
        }
        if self.known_task is not None:
            m.update(self.known_task.metrics(records))
        return samples, m

    def compute_targets(self, samples: list[SessionSample], frozen: bool,
                        init_value: bool = False) -> tuple[list[SessionTargets], dict, dict]:
        t0 = time.perf_counter()
        n_children = self._child_values(samples)
        logp_old, logp_ref, values = self._score(samples, frozen)
        targets = [session_targets(s, lo, lr, v, self.pcfg)
                   for s, lo, lr, v in zip(samples, logp_old, logp_ref, values)]
        if init_value:  # every rank, sessions or not: the shift and the re-scoring are collectives
            self._shift_value_bias(targets, values)
            n_children = self._child_values(samples)
            logp_old, logp_ref, values = self._score(samples, frozen)
            targets = [session_targets(s, lo, lr, v, self.pcfg)
                       for s, lo, lr, v in zip(samples, logp_old, logp_ref, values)]
        if self.pcfg.normalize_advantages and targets:
            allv = np.concatenate([t.advantages for t in targets])
            mu, sd = allv.mean(), allv.std() + 1e-8
            for t in targets:
                t.advantages = (t.advantages - mu) / sd
        vm = [t.value_mask.astype(bool) for t in targets]
        rets = np.concatenate([t.returns[m] for t, m in zip(targets, vm)]) if targets else np.zeros(0)
        vals = np.concatenate([v[m] for v, m in zip(values, vm)]) if targets else np.zeros(0)
        ntok = sum(len(t.advantages) for t in targets)
        m = {
            "rollout/session_return": float(np.mean([t.session_return for t in targets])) if targets else 0.0,
            "reward/kl_penalty": -self.pcfg.beta * float(np.mean([t.kl for t in targets])) if targets else 0.0,
            "reward/bootstrap": float(np.mean([t.bootstrap for t in targets])) if targets else 0.0,
            "actor/kl_to_sft": float(sum(t.kl for t in targets) / max(ntok, 1)),
            "critic/returns_mean": float(rets.mean()) if len(rets) else 0.0,
            "critic/values_mean": float(vals.mean()) if len(vals) else 0.0,
            "critic/advantages_mean": float(np.mean(np.concatenate([t.advantages for t in targets])))
            if targets else 0.0,
            "critic/vf_explained_var": explained_variance(torch.tensor(vals), torch.tensor(rets))
            if len(rets) > 1 else float("nan"),
            "rollout/child_states_valued": n_children,
            "timing_s/returns": time.perf_counter() - t0,
        }
        batch = {"logp_old": logp_old, "values_old": values}
        return targets, batch, m

    def _shift_value_bias(self, targets: list[SessionTargets], values: list[np.ndarray]) -> None:
        """``ppo.init_value_to_mean_return``: add (mean R̂ − mean V̂) over all processes to the value head's bias."""
        vm = [t.value_mask.astype(bool) for t in targets]
        diff = np.concatenate([t.returns[m] - v[m] for t, v, m in zip(targets, values, vm)]) if targets else np.zeros(0)
        # sums and counts, not per-process means: processes hold different numbers of value tokens, and the shift
        # must be what one process holding the whole global batch would compute
        tot = collectives.mean_over_processes({"diff_sum": float(diff.sum()), "count": float(len(diff))})
        gap = tot["diff_sum"] / max(tot["count"], 1.0)
        model = self.accelerator.unwrap_model(self.model)
        bias = (model.value_head if model.shared else model.value.head).bias
        if not self.deepspeed:
            with torch.no_grad():
                bias.add_(gap)
        else:
            # DeepSpeed steps fp32 master copies of the weights (ZeRO-3: partitioned, like the module's): shift both,
            # or the next optimizer step writes the old bias back.
            import deepspeed
            from deepspeed.utils import safe_set_full_fp32_param, safe_set_local_fp32_param

            with deepspeed.zero.GatheredParameters([bias], modifier_rank=0), torch.no_grad():
                bias.add_(gap)  # every rank adds the same gap; rank 0's result is re-partitioned on exit
            if self.zero3:
                # this rank's (padded) partition as it now is; DeepSpeed's full-tensor setter cannot address a
                # 1-element parameter split over 2+ ranks
                safe_set_local_fp32_param(bias, bias.ds_tensor.detach().float())
            else:
                safe_set_full_fp32_param(bias, bias.detach().float())
        log.info("value head bias shifted by %.3f to the first batch's mean return", gap)

    def update(self, samples: list[SessionSample], targets: list[SessionTargets], batch: dict, step: int,
               frozen: bool) -> dict:
        """``ppo_epochs`` passes of clipped PPO over the sessions (Eqs. 5–8), in minibatches of at most
        ``forward_batch_size × grad_accum`` sessions. Every process runs the same number of minibatches (the largest
        any process needs). Each minibatch's loss is a mean over ALL its tokens, wherever they ran: the policy loss
        over its response tokens, the value loss over its value-target tokens, both counted over every forward batch
        and every process (one all-reduce per epoch) — so a token weighs the same whatever ``forward_batch_size``,
        ``grad_accum`` and the number of processes, and the gradient is what one process holding the whole global
        batch in one forward batch would compute."""
        p = self.pcfg
        self.model.train()
        n_local = len(samples)
        counts = collectives.all_gather_int(n_local)
        n_mb = max(1, max(math.ceil(c / (p.forward_batch_size * p.grad_accum)) for c in counts))
        sums: dict[str, float] = {}
        n_terms = 0
        grad_norms = []
        for epoch in range(p.ppo_epochs):
            g = torch.Generator().manual_seed(p.seed * 1_000_003 + step * 101 + epoch * 7 + self.rank)
            perm = torch.randperm(n_local, generator=g).tolist()
            minibatches = split_even(perm, n_mb)
            tokens = self._minibatch_tokens(minibatches, samples, targets)
            for k, mb in enumerate(minibatches):
                n_tokens, n_value_tokens = tokens[k]
                micros = [(m, 1.0) for m in _chunks(mb, p.forward_batch_size)]
                if self.deepspeed:
                    # DeepSpeed counts backward passes to find its accumulation boundary: every process runs exactly
                    # grad_accum of them, padding with zero-weight repeats (a dummy batch on a process with no
                    # session in this minibatch); it divides by world × grad_accum, which the weight undoes (each
                    # loss is already divided by the minibatch's global token counts).
                    scale = float(self.world * p.grad_accum)
                    pad = micros[0][0] if micros else []
                    micros = [(m, scale) for m, _ in micros] + [(pad, 0.0)] * (p.grad_accum - len(micros))
                for micro, weight in micros:
                    if not micro:
                        loss, d = self._dummy_loss(frozen), {}
                    else:
                        loss, d = self._micro_loss([samples[i] for i in micro], [targets[i] for i in micro],
                                                   [batch["logp_old"][i] for i in micro],
                                                   [batch["values_old"][i] for i in micro], frozen,
                                                   n_tokens=n_tokens, n_value_tokens=n_value_tokens)
                    if self.deepspeed:
                        # DeepSpeed's own API (accelerate's backward would mark every pass as a boundary): backward
                        # scales by 1/grad_accum, step() steps the optimizer every grad_accum-th pass
                        self.model.backward(loss * weight)
                        self.model.step()
                    else:
                        loss.backward()  # summed over processes in _sync_and_step
                    if weight:
                        for key, val in d.items():
                            sums[key] = sums.get(key, 0.0) + val
                        n_terms += 1
                grad_norms.append(self._sync_and_step(frozen))
        stats = {k: v / max(n_terms, 1) for k, v in sums.items()}
        stats["actor/grad_norm"] = float(np.mean(grad_norms)) if grad_norms else 0.0
        stats["actor/frozen"] = float(frozen)
        stats["actor/lr"] = self.optimizer.param_groups[0]["lr"]
        stats["critic/lr"] = self.optimizer.param_groups[1]["lr"]
        stats["update/minibatches"] = n_mb * p.ppo_epochs
        return stats

    def _minibatch_tokens(self, minibatches: list[list[int]], samples: list[SessionSample],
                          targets: list[SessionTargets]) -> list[tuple[float, float]]:
        """(response tokens, value-target tokens) of each minibatch, summed over every process: the divisors of
        its policy and value losses. One all-reduce for all of an epoch's minibatches."""
        local = [[float(sum(len(samples[i].response_ids) for i in mb)),
                  float(sum(targets[i].value_mask.sum() for i in mb))] for mb in minibatches]
        t = torch.tensor(local, dtype=torch.float64, device=self.device).reshape(len(minibatches), 2)
        collectives.all_reduce(t)
        return [(float(a), float(b)) for a, b in t.tolist()]

    def _micro_loss(self, samples, targets, logp_old, values_old, frozen: bool, n_tokens: float | None = None,
                    n_value_tokens: float | None = None) -> tuple[torch.Tensor, dict]:
        """Eq. 8 on one forward batch. ``n_tokens`` / ``n_value_tokens``: the minibatch's response / value-target
        tokens over all processes (the losses are sums over this batch's tokens divided by them); ``None`` = this
        batch's own means. The logged losses are this batch's means either way."""
        p = self.pcfg
        b = pack([(s.prompt_ids, s.response_ids) for s in samples], self.tokenizer.pad_token_id, self.device)
        W = b.width
        adv = to_grid([t.advantages for t in targets], W, self.device)
        ret = to_grid([t.returns for t in targets], W, self.device)
        vmask = to_grid([t.value_mask for t in targets], W, self.device)
        v_old = to_grid(values_old, W, self.device)
        mask = b.response_mask.float()
        with self._autocast():
            logits, v = self.model(b.input_ids, b.attention_mask, b.position_ids, n_logits=W + 1,
                                   with_policy=not frozen, with_value=True, freeze_shared_backbone=frozen)
        values = response_values(v, W)
        # the share of the minibatch's tokens this batch holds: turns the normalised losses back into batch means
        v_share = 1.0 if n_value_tokens is None else float(vmask.sum()) / max(n_value_tokens, 1.0)
        share = 1.0 if n_tokens is None else float(mask.sum()) / max(n_tokens, 1.0)
        l_value, vd = value_loss(values, v_old, ret, vmask, p.value_clip_eps, n_tokens=n_value_tokens)
        d = {"critic/vf_loss": l_value.item() / max(v_share, 1e-12), "critic/vf_clipfrac": vd["vf_clipfrac"].item()}
        if frozen:
            return p.eta * l_value, d
        logp = response_logprobs(logits, b.response_ids)
        l_policy, pd = policy_loss(logp, to_grid(logp_old, W, self.device), adv, mask, p.clip_eps, n_tokens=n_tokens)
        ent = masked_mean(response_entropy(logits.detach() if p.entropy_coef == 0 else logits), mask, n_tokens)
        loss = total_loss(l_policy, l_value, p.eta) - p.entropy_coef * ent  # Eq. 8
        pg, ent_mean = l_policy.item() / max(share, 1e-12), ent.item() / max(share, 1e-12)
        d.update({"actor/pg_loss": pg, "actor/approx_kl": pd["approx_kl"].item(), "actor/clipfrac": pd["clipfrac"].item(),
                  "actor/entropy": ent_mean, "loss/total": pg + p.eta * d["critic/vf_loss"] - p.entropy_coef * ent_mean})
        return loss, d

    def _dummy_loss(self, frozen: bool) -> torch.Tensor:
        """A zero loss through the same modules as :meth:`_micro_loss`: the backward pass a process without a session
        in this minibatch runs so that DeepSpeed's collectives (ZeRO-3 gathers, gradient reduction) line up."""
        b = self._dummy_batch()
        with self._autocast():
            logits, v = self.model(b.input_ids, b.attention_mask, b.position_ids, n_logits=b.width + 1,
                                   with_policy=not frozen, with_value=True, freeze_shared_backbone=frozen)
        return 0.0 * (v.float().sum() + (logits.float().sum() if logits is not None else 0.0))

    def _sync_and_step(self, frozen: bool) -> float:
        """Sum the gradients over processes (each was already divided by the global count), clip, step. While
        frozen the policy's gradients are dropped, so AdamW keeps no state for it (its learning rate is 0 too)."""
        if self.deepspeed:
            if frozen:
                self._drop_frozen_policy_optimizer_state()
            norm = self.model.get_global_grad_norm()
            return float(norm) if norm is not None else 0.0
        if frozen:
            for q in self.policy_params:
                q.grad = None
        params = self.value_params if frozen else self.policy_params + self.value_params
        if self.world > 1:
            grads = [q.grad if q.grad is not None else torch.zeros_like(q) for q in params]
            flat = collectives.all_reduce(torch.cat([g.reshape(-1).float() for g in grads]))
            i = 0
            for q, gr in zip(params, grads):
                n = gr.numel()
                q.grad = flat[i:i + n].view_as(q).to(q.dtype)
                i += n
        norm = torch.nn.utils.clip_grad_norm_([q for q in params if q.grad is not None], self.pcfg.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)

    def _drop_frozen_policy_optimizer_state(self) -> None:
        """DeepSpeed steps the policy's parameter group with zero gradients while it is frozen (learning rate 0, so the
        weights stay put), but AdamW counts those steps and its bias correction would then shrink the first real
        updates. Dropping the group's state makes the first co-trained step start AdamW afresh, as without
        DeepSpeed. The fp32 master partitions of parameter group 0 (the policy) are found in DeepSpeed's ZeRO
        optimizer: ``fp32_partitioned_groups_flat`` per sub-group (ZeRO-3), ``single_partition_of_fp32_groups``
        (ZeRO-1/2)."""
        zero = self.model.optimizer
        if hasattr(zero, "fp32_partitioned_groups_flat"):
            masters = [t for t, g in zip(zero.fp32_partitioned_groups_flat, zero.sub_group_to_group_id) if g == 0]
        else:
            masters = [zero.single_partition_of_fp32_groups[0]]
        for t in masters:
            zero.optimizer.state.pop(t, None)

    def train_step(self, step: int) -> dict:
        from scholar_agents.runtime.cuda_memory import peak_metrics, reset_peak

        p = self.pcfg
        t0 = time.perf_counter()
        frozen = step < p.policy_freeze_steps
        reset_peak(self.device)  # per-phase CUDA peaks (perf/max_memory_*_gb/<phase>): what `scholar plan` estimates
        samples, m = self.rollout(step)
        mem = peak_metrics(self.device, "rollout")
        t_rollout = time.perf_counter() - t0
        self.engine.sleep()  # ppo.rollout_sleep: the engine's GPU memory goes to scoring and the update
        init_value = p.init_value_to_mean_return and step == 0
        reset_peak(self.device)
        targets, batch, m2 = self.compute_targets(samples, frozen, init_value=init_value)
        mem.update(peak_metrics(self.device, "score"))
        t1 = time.perf_counter()
        reset_peak(self.device)
        m3 = self.update(samples, targets, batch, step, frozen)
        mem.update(peak_metrics(self.device, "update"))
        t_update = time.perf_counter() - t1
        self.scheduler.step()
        # weights awake, the push, then the KV cache (TRL's order; the engine's method)
        t_sync = self.engine.wake_up_and_sync(None if frozen else self._policy_weights(), self.tokenizer)
        tokens = sum(len(s.prompt_ids) + len(s.response_ids) for s in samples)
        dt = time.perf_counter() - t0
        metrics = {**m, **m2, **m3, **mem, "timing_s/rollout": t_rollout, "timing_s/update": t_update,
                   "timing_s/sync": t_sync, "timing_s/step": dt, "perf/throughput": tokens / max(dt, 1e-9)}
        return collectives.mean_over_processes(metrics)

    # ---- evaluation: crawler recall on held-out queries through the eval harness ----

    def evaluate(self, tag: str) -> dict:
        """Greedy crawls of the held-out queries with the current policy, scored by ``eval pasa``'s code: crawler
        recall (gold papers in the queue) and crawler actions ([Search] + [Expand], Table 6). Every rank crawls its
        consecutive share of the queries (:func:`split_even`) on its own engine; rank 0 gathers the per-query rows in
        query order and summarises them — the same rows and metrics as one process crawling them all, in a
        ``world``-th of the time, and no rank waits alone for the whole split."""
        from scholar_agents.eval.pasa import agent_rows, gold_in_store, summarize
        from scholar_agents.pasa.agent import AgentConfig, PaSaAgent
        from scholar_agents.pasa.crawl_env import CrawlEnv

        if not self.eval_queries:
            return {}
        t0 = time.perf_counter()
        mine = split_even(self.eval_queries, self.world)[self.rank]
        rows: list[dict] = []
        trajs: list[dict] = []
        if mine:
            env = CrawlEnv(self.res.store, self.search, self.env_cfg, tokenizer=self.engine.tokenizer)
            agent = PaSaAgent(env, self.engine.crawler(self.eval_policy), None, AgentConfig(use_selector=False))
            results = agent.run(mine, progress=False)
            rows = agent_rows(results, mine, gold_in_store(mine, self.res.store))
            trajs = [t.to_dict() for r in results for t in r.trajectories]
        rows = gather_in_rank_order(rows)
        trajs = gather_in_rank_order(trajs)
        out: dict = {}
        if self.accelerator.is_main_process:
            s = summarize({"crawler": rows})["crawler"]
            out = {"crawler_recall": s.get("crawler_recall"), "crawler_actions": s.get("actions"),
                   "sessions": s.get("sessions"), "queue": s.get("n_queue"), "queries": s.get("queries"),
                   "seconds": round(time.perf_counter() - t0, 1)}
            (self.run_dir / f"eval_{tag}.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
            # the crawls themselves, for `pasa serve`'s trees (issue 27): the same records as eval pasa's
            (self.run_dir / f"trajectories_eval_{tag}.jsonl").write_text(
                "".join(json.dumps(t, ensure_ascii=False, default=str) + "\n" for t in trajs))
            log.info("eval %s: crawler recall %.4f, actions %.2f on %d held-out queries (%d ranks)", tag,
                     out["crawler_recall"] or 0.0, out["crawler_actions"] or 0.0, len(self.eval_queries), self.world)
        collectives.barrier()
        return out

    # ---- checkpoints ----

    def save(self, step: int) -> Path:
        p = self.pcfg
        model = self.accelerator.unwrap_model(self.model)
        # ZeRO-3: full weights from the shards, gathered by DeepSpeed on every rank (a collective) into rank 0's
        # memory — what HF Trainer and accelerate call to save ZeRO-3 models; otherwise every rank holds them whole.
        full = self.model._zero3_consolidated_16bit_state_dict() if self.zero3 else None

        def write_models(d: Path) -> None:
            policy_state = sub_state(full, "policy.")
            model.policy.save_pretrained(str(d / "policy"), state_dict=policy_state, safe_serialization=True)
            self.tokenizer.save_pretrained(str(d / "policy"))
            model.save_value(d / "value", state_dict=full)

        state = {"step": step, "sampler": self.sampler.state_dict(), "wandb_id": self.logger.wandb_id,
                 "history": self.history, "config": asdict(p)}
        engine_write = (lambda d: self.model.save_checkpoint(str(d / "deepspeed"))) if self.deepspeed else None
        return save_checkpoint(self.ckpt_dir, step, write_models, None if self.deepspeed else self.optimizer,
                               self.scheduler, state, {"expand_rng": python_rng_to_json(self.expand_rng)},
                               rank=self.rank, barrier=collectives.barrier, keep_last=p.keep_last,
                               collective_write=engine_write)

    # ---- the loop ----

    def train(self) -> dict:
        from tqdm.auto import tqdm

        from scholar_agents.runtime.preemption import PreemptionHandler

        p = self.pcfg
        handler = PreemptionHandler.install()
        try:
            if p.eval_at_start and "eval_start" not in self.history:
                self.history["eval_start"] = self.evaluate("start")
            bar = tqdm(range(self.start_step, p.total_steps), desc="ppo", unit="step",
                       disable=not self.accelerator.is_main_process, initial=self.start_step, total=p.total_steps)
            for step in bar:
                metrics = self.train_step(step)
                if p.eval_every > 0 and (step + 1) % p.eval_every == 0 and step + 1 < p.total_steps:
                    ev = self.evaluate(f"step{step + 1:06d}")
                    metrics.update({f"eval/{k}": v for k, v in ev.items() if k in ("crawler_recall", "crawler_actions")})
                self.logger.log(step + 1, metrics)
                # a step whose prompts were all rejected has no losses: show what there is
                bar.set_postfix(ret=f"{metrics.get('rollout/session_return', float('nan')):.3f}",
                                vf=f"{metrics.get('critic/vf_loss', float('nan')):.3f}")
                for cb in self.step_callbacks:
                    cb(step + 1, metrics)
                stop = handler.should_stop()
                last = step + 1 == p.total_steps  # ppo.save_final=false: no checkpoint after the last step
                if stop or (last and p.save_final) or (not last and (step + 1) % p.save_every == 0):
                    t0 = time.perf_counter()
                    path = self.save(step + 1)
                    log.info("checkpoint %s (%.1f s)", path, time.perf_counter() - t0)
                if stop:
                    log.warning("preemption signal (%s): checkpointed step %d, leaving for requeue",
                                ",".join(handler.received), step + 1)
                    self.logger.close()
                    handler.exit_for_requeue()
            if p.eval_at_end:
                self.history["eval_end"] = self.evaluate("end")
            return self.finish()
        finally:
            handler.uninstall()

    def finish(self) -> dict:
        """metrics.json (what ``scholar sweep report`` reads) and the training curves."""
        p = self.pcfg
        rows = self.logger.rows()
        returns = [r.get("rollout/session_return") for r in rows]
        rewards = [r.get("reward/session_reward") for r in rows]
        k = max(1, len(rows) // 3)
        summary = {
            "eval": self.history.get("eval_end", {}),
            "eval_start": self.history.get("eval_start", {}),
            # ppo.eval_every: the held-out figure along the run (start and end above)
            "eval_curve": [{"step": r["step"], "crawler_recall": r["eval/crawler_recall"],
                            "crawler_actions": r.get("eval/crawler_actions")}
                           for r in rows if r.get("eval/crawler_recall") is not None],
            "train": {
                "steps": len(rows),
                "session_return_first": returns[0] if returns else None,
                "session_return_last": returns[-1] if returns else None,
                f"session_return_mean_first_{k}": float(np.mean(returns[:k])) if returns else None,
                f"session_return_mean_last_{k}": float(np.mean(returns[-k:])) if returns else None,
                f"session_reward_mean_first_{k}": float(np.mean(rewards[:k])) if rewards else None,
                f"session_reward_mean_last_{k}": float(np.mean(rewards[-k:])) if rewards else None,
                "seconds_per_step": float(np.mean([r["timing_s/step"] for r in rows])) if rows else None,
            },
            "ppo": {"alpha": p.alpha, "beta": p.beta, "estimator": p.estimator, "policy_freeze_steps":
                    p.policy_freeze_steps, "total_steps": p.total_steps},
            "checkpoint": str(latest_checkpoint(self.ckpt_dir) or ""),
        }
        if self.accelerator.is_main_process:
            (self.run_dir / "metrics.json").write_text(json.dumps(summary, indent=2, default=str))
            self.logger.plot(self.run_dir / "training_curves.png", smoothing=p.plot_smoothing)
        self.logger.close()
        return summary

    def close(self) -> None:
        self.engine.close()
        self.logger.close()
