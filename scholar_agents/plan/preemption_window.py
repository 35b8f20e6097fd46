"""One training step plus one checkpoint, in seconds: what a job warned of its time limit (or of a preemption) needs
to finish the step in flight, write a checkpoint of it and exit. ``scholar plan`` prints it next to the memory
plan; a training job under Slurm compares it with its signal lead at start-up (``commands.startup_window_check``,
``runtime/preemption.check_preemption_window``).

Estimates from stated inputs, not measurements: token counts from the run's config (the same sequence length the
memory plan assumes), parameter counts from the meta-built models, and three rates of the cluster preset
(``cluster.generation_tokens_per_s_per_gpu``, ``cluster.train_tokens_per_s_per_gpu``,
``cluster.checkpoint_write_gb_per_s_per_node``; ``conf/cluster/*.yaml`` cite the public figures they come from).

- **PPO step** (PaSa App. A.2, per GPU): ``ppo.queries_per_step`` search sessions + ``ppo.expand_sessions``
  expansion sessions, each at most ``seq_len`` tokens (prompt + response). Rollout: those tokens through the rollout
  engine. Training: ``ppo.ppo_epochs`` forward + backward passes of each trained model (policy, and the value model
  when separate) over them, plus the no-grad scoring forwards (log pi_old, log pi_sft, V_old), a forward counting a
  third of a forward + backward (2N of 6N FLOPs per token). Not counted: the Selector reward (a server on its own
  node), the environment's searches, collectives outside the passes.
  Under ``ppo.estimator=grpo|rloo``: ``ppo.queries_per_step x ppo.group_size`` whole crawls of at most the crawl
  budgets' sessions each (``crawler.env.max_sessions`` / ``max_queue``), and no value model (one trained model, two
  scoring forwards, nothing of it saved).
- **SFT step**: ``per_device_train_batch_size x gradient_accumulation_steps x max_length`` tokens per GPU through
  forward + backward.
- **Checkpoint**: the 16-bit weights of every saved model, gathered and written by global rank 0 at one node's
  bandwidth (ZeRO-3's consolidated state dict; PPO's policy/ + value/, the HF Trainer's model files), plus the
  optimizer state of the trainable parameters (fp32 master copy when the weights are 16-bit, Adam's two moments:
  12 B per parameter for bf16 weights) and, under ZeRO-3, the weight partitions: written by every rank at once
  under DeepSpeed (``nodes x`` one node's bandwidth), by rank 0 without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from scholar_agents.runtime.cluster import ClusterConfig

GB = 1e9
ADAM_BYTES = 8  # exp_avg + exp_avg_sq in fp32, per trainable parameter
MASTER_BYTES = 4  # the fp32 master copy mixed precision keeps of 16-bit weights
FORWARD_SHARE = 1 / 3  # a forward pass is 2N of the 6N FLOPs per token of forward + backward


@dataclass(frozen=True)
class Part:
    what: str
    amount: str  # the tokens or bytes, per GPU or in all, as computed
    seconds: float
    rate: str  # the config value it was divided by


@dataclass(frozen=True)
class WindowEstimate:
    step: tuple[Part, ...]
    checkpoint: tuple[Part, ...]
    note: str = ""  # what the estimate leaves out

    @property
    def step_s(self) -> float:
        return sum(p.seconds for p in self.step)

    @property
    def checkpoint_s(self) -> float:
        return sum(p.seconds for p in self.checkpoint)

    @property
    def total_s(self) -> float:
        return self.step_s + self.checkpoint_s

    def summary(self) -> str:
        return f"one step ~{self.step_s:.0f} s + one checkpoint ~{self.checkpoint_s:.0f} s = ~{self.total_s:.0f} s"


def _tokens(n: float) -> str:
    return f"{n:,.0f} tokens"


def _gb(b: float) -> str:
    return f"{b / GB:,.1f} GB"


def checkpoint_parts(cluster: ClusterConfig, saved_params: int, trainable_params: int, zero_stage: int,
                     model_dtype_bytes: int) -> tuple[Part, ...]:
    """The checkpoint's writes: rank 0's 16-bit weights of ``saved_params``, and the optimizer state (+ ZeRO-3's
    weight partitions) of ``trainable_params`` — spread over every node under DeepSpeed, rank 0's alone without."""
    node_bw = cluster.checkpoint_write_gb_per_s_per_node * GB
    rate = f"cluster.checkpoint_write_gb_per_s_per_node {cluster.checkpoint_write_gb_per_s_per_node:g}"
    weights = 2 * saved_params
    per_trainable = ADAM_BYTES + (MASTER_BYTES if model_dtype_bytes < 4 else 0)
    if zero_stage == 3:
        per_trainable += model_dtype_bytes
    state = trainable_params * per_trainable
    parts = [Part("checkpoint: 16-bit weights, written by rank 0", f"{_gb(weights)} ({saved_params:,} x 2 B)",
                  weights / node_bw, rate)]
    if zero_stage:
        nodes = max(1, cluster.nodes)
        what = "ZeRO-3 shards (weights + optimizer state)" if zero_stage == 3 else f"ZeRO-{zero_stage} optimizer shards"
        parts.append(Part(f"checkpoint: {what}, every rank at once", f"{_gb(state)} ({trainable_params:,} x "
                          f"{per_trainable} B) over {nodes} node{'s' if nodes > 1 else ''}", state / (nodes * node_bw),
                          f"{nodes} x {cluster.checkpoint_write_gb_per_s_per_node:g} GB/s"))
    else:
        parts.append(Part("checkpoint: optimizer state, written by rank 0", f"{_gb(state)} ({trainable_params:,} x "
                          f"{per_trainable} B)", state / node_bw, rate))
    return tuple(parts)


def ppo_window(cluster: ClusterConfig, *, sessions: int, seq_len: int, ppo_epochs: int, trained_models: int,
               scoring_forwards: int, saved_params: int, trainable_params: int, zero_stage: int,
               model_dtype_bytes: int, seq_len_source: str = "llm.max_model_len",
               sessions_counted: str = "") -> WindowEstimate:
    """PPO: rollout + training of one step on one GPU, then the checkpoint (module docstring). ``sessions_counted``
    says how ``sessions`` was counted where it is not App. A.2's fixed count (grpo / rloo: whole crawls)."""
    rollout = sessions * seq_len
    grad = ppo_epochs * trained_models * rollout
    fwd = scoring_forwards * rollout
    train = grad + FORWARD_SHARE * fwd
    counted = f"{sessions_counted} = " if sessions_counted else ""
    step = (
        Part("rollout: prompt + generated tokens per GPU", f"{counted}{sessions} sessions x {seq_len:,} "
             f"({seq_len_source}) = {_tokens(rollout)}", rollout / cluster.generation_tokens_per_s_per_gpu,
             f"cluster.generation_tokens_per_s_per_gpu {cluster.generation_tokens_per_s_per_gpu:,.0f}"),
        Part("training: forward + backward tokens per GPU", f"{ppo_epochs} epochs x {trained_models} model"
             f"{'s' if trained_models > 1 else ''} x {rollout:,} + {scoring_forwards} scoring forwards x {rollout:,}"
             f" / 3 = {_tokens(train)}", train / cluster.train_tokens_per_s_per_gpu,
             f"cluster.train_tokens_per_s_per_gpu {cluster.train_tokens_per_s_per_gpu:,.0f}"),
    )
    return WindowEstimate(step, checkpoint_parts(cluster, saved_params, trainable_params, zero_stage,
                                                 model_dtype_bytes),
                          note="not counted: the Selector reward (its own server), searches, ZeRO-3's gather of the "
                               "weights before rank 0 writes them")


def sft_window(cluster: ClusterConfig, *, batch: int, grad_accum: int, seq_len: int, saved_params: int,
               trainable_params: int, zero_stage: int, model_dtype_bytes: int) -> WindowEstimate:
    """SFT: one optimizer step's forward + backward tokens on one GPU, then the Trainer's checkpoint."""
    tokens = batch * grad_accum * seq_len
    step = (Part("training: forward + backward tokens per GPU", f"{batch} x {grad_accum} accumulation x {seq_len:,} "
                 f"(sft.max_length) = {_tokens(tokens)}", tokens / cluster.train_tokens_per_s_per_gpu,
                 f"cluster.train_tokens_per_s_per_gpu {cluster.train_tokens_per_s_per_gpu:,.0f}"),)
    return WindowEstimate(step, checkpoint_parts(cluster, saved_params, trainable_params, zero_stage,
                                                 model_dtype_bytes),
                          note="sequences counted at sft.max_length; not counted: ZeRO-3's gather of the weights")


def format_window(est: WindowEstimate, cluster: ClusterConfig, lead_hint: str) -> str:
    """The table ``scholar plan`` prints, and whether ``cluster.shutdown_grace_s`` covers the estimate."""
    lines = [f"# Preemption window: {est.summary()} ({est.total_s / 60:.1f} min), estimated from the config and "
             f"cluster={cluster.name}'s assumed rates ({est.note})",
             "",
             "| part | amount | seconds | divided by |",
             "|---|---|---:|---|"]
    lines += [f"| {p.what} | {p.amount} | {p.seconds:.0f} | {p.rate} |" for p in (*est.step, *est.checkpoint)]
    lines.append("")
    grace = cluster.shutdown_grace_s
    if grace >= est.total_s:
        lines.append(f"cluster.shutdown_grace_s={grace} s covers it (torchrun's shutdown window; submitit's "
                     f"signal_delay_s). The Slurm signal lead must too: {lead_hint}.")
    else:
        lines.append(f"WARNING: cluster.shutdown_grace_s={grace} s is shorter than the estimate ({est.total_s:.0f} s): "
                     f"a warned job may lose the step in flight or its checkpoint. Raise it, and the Slurm signal "
                     f"lead ({lead_hint}), to at least {est.total_s:.0f} s.")
    return "\n".join(lines)


def sized_save_every(est: WindowEstimate, lead_s: float | None, save_every: int) -> tuple[int, str]:
    """(the ``ppo.save_every`` to run with, why). A warned job checkpoints the step in flight only if the signal
    lead covers one step + one checkpoint; where it does not, the newest checkpoint is all a warning leaves, so
    every step is checkpointed and a preemption loses at most the step in flight. Unknown lead: as configured."""
    cost = (f"a checkpoint costs ~{est.checkpoint_s:.0f} s, {100 * est.checkpoint_s / max(est.step_s, 1e-9):.0f} % "
            f"of the ~{est.step_s:.0f}-s step")
    if lead_s is None:
        return save_every, f"ppo.save_every={save_every}: no signal lead known"
    if lead_s >= est.total_s:
        return save_every, (f"ppo.save_every={save_every}: the {lead_s:.0f}-s signal lead covers one step + one "
                            f"checkpoint (~{est.total_s:.0f} s), so a warned job checkpoints the step in flight ({cost})")
    return 1, (f"ppo.save_every={save_every} -> 1: the {lead_s:.0f}-s signal lead is shorter than one step + one "
               f"checkpoint (~{est.total_s:.0f} s), so a warned job cannot checkpoint the step in flight and "
               f"every step is checkpointed ({cost})")
