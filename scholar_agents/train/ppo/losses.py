"""PPO losses (PaSa Eqs. 5–8) and the diagnostics CleanRL/verl log, as pure tensor functions."""

from __future__ import annotations

import torch


def masked_mean(x: torch.Tensor, mask: torch.Tensor, n_tokens: float | None = None) -> torch.Tensor:
    """Σ x over the masked tokens / ``n_tokens`` — the tokens of the whole minibatch, wherever they are computed
    (other forward batches, other processes), so that a token's weight does not depend on how the minibatch is
    split; ``None`` = this batch's own masked tokens (a plain masked mean)."""
    mask = mask.to(x.dtype)
    denom = mask.sum().clamp_min(1.0) if n_tokens is None else max(float(n_tokens), 1.0)
    return (x * mask).sum() / denom


def policy_loss(
    logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, clip_eps: float = 0.2,
    n_tokens: float | None = None, kl_ref: tuple[torch.Tensor, float] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped surrogate (Eq. 5), per token: −min(ρ·Â, clip(ρ, 1−ε, 1+ε)·Â), ρ = π_θ/π_θ^old, summed over the
    masked tokens and divided by ``n_tokens`` (see :func:`masked_mean`; ``None`` = this batch's token mean).
    ``kl_ref = (log π_sft, β)``: + β · :func:`kl_to_ref` on every token (``ppo.kl_in_return=false``, grpo/rloo only).

    Returns the loss and diagnostics: ``approx_kl`` (the k3 estimator E[(ρ−1) − log ρ], see
    http://joschu.net/blog/kl-approx.html) and ``clipfrac`` (share of tokens where clipping was active), both means
    over this batch's tokens."""
    log_ratio = logp - logp_old
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    loss = masked_mean(-torch.min(unclipped, clipped), mask, n_tokens)
    if kl_ref is not None:
        loss = loss + kl_ref[1] * masked_mean(kl_to_ref(logp, kl_ref[0]), mask, n_tokens)
    with torch.no_grad():
        approx_kl = masked_mean((ratio - 1.0) - log_ratio, mask)
        clipfrac = masked_mean(((ratio - 1.0).abs() > clip_eps).float(), mask)
    return loss, {"approx_kl": approx_kl, "clipfrac": clipfrac}


def kl_to_ref(logp: torch.Tensor, logp_ref: torch.Tensor) -> torch.Tensor:
    """Per-token KL(π_θ‖π_sft) as a loss term, GRPO's estimator (Shao et al. 2024, DeepSeekMath Eq. 4; TRL's
    GRPOTrainer): π_sft/π_θ − log(π_sft/π_θ) − 1 (Schulman's k3: non-negative, unbiased), with gradient."""
    d = logp_ref - logp
    return torch.exp(d) - d - 1.0


def value_loss(
    values: torch.Tensor, values_old: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor, clip_eps: float = 0.2,
    n_tokens: float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped value loss (Eqs. 6–7): max((R̂ − V)², (R̂ − V^clip)²), V^clip = clip(V, V_old − ε, V_old + ε),
    summed over the value-target tokens and divided by ``n_tokens`` (``None`` = this batch's mean).
    No ½ factor: the paper's Eq. 6 has none (η = 10 in Eq. 8 is tuned for that)."""
    v_clipped = values_old + torch.clamp(values - values_old, -clip_eps, clip_eps)
    loss = masked_mean(torch.max((returns - values) ** 2, (returns - v_clipped) ** 2), mask, n_tokens)
    with torch.no_grad():
        vf_clipfrac = masked_mean(((values - values_old).abs() > clip_eps).float(), mask)
    return loss, {"vf_clipfrac": vf_clipfrac}


def total_loss(l_policy: torch.Tensor, l_value: torch.Tensor, eta: float = 10.0) -> torch.Tensor:
    """L_RL = L_policy + η · L_value  (Eq. 8; η = 10 in Table 9)."""
    return l_policy + eta * l_value


def explained_variance(values: torch.Tensor, returns: torch.Tensor) -> float:
    """1 − Var[R − V] / Var[R]: 1 is a perfect critic, ≤ 0 is no better than a constant (NaN if Var[R] = 0)."""
    var_r = torch.var(returns.double(), unbiased=False)
    if var_r.item() == 0.0:
        return float("nan")
    return float(1.0 - torch.var((returns - values).double(), unbiased=False) / var_r)
