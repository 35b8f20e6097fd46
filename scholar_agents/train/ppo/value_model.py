"""The value function V̂_φ of session-level PPO (PaSa Eqs. 3–7) and the policy+value module PPO optimises.

V̂_φ(s) is read at every position of a sequence: the value of the state *after* that token. PPO needs it at three
kinds of places: the start of each action (Eq. 4's V̂(s_t)), every response token (the GAE alternative) and the last
token of an S_{q+p} prompt (Eq. 3's cross-session bootstrap γ1·Σ_j V̂(S_{q+p_j})).

Two layouts, ``ppo.value_head``:

- ``separate`` (default, the paper's: a value *model*): its own transformer backbone (initialised from the SFT
  crawler, as is usual for a critic) and a linear scalar head;
- ``shared``: one linear head on the policy's last hidden states (half the memory; while the policy is frozen
  only the head trains, because training the shared backbone would move the policy).

:class:`PolicyAndValue` holds the policy and the value function in ONE ``nn.Module`` so that one optimizer, one
DDP/DeepSpeed wrapper and one backward implement the unified loss L_RL = L_policy + η·L_value (Eq. 8).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import torch
from torch import nn

from scholar_agents.llm.model_init import load_base_model
from scholar_agents.train.ppo.config import VALUE_HEADS

log = logging.getLogger(__name__)

HEAD_FILE = "value_head.safetensors"
META_FILE = "value_model.json"


def make_value_head(hidden_size: int, seed: int) -> nn.Linear:
    """A scalar head with small random weights and a zero bias, so that V̂ starts near 0 (the returns of an
    untrained crawler are small too) without every position getting exactly the same value."""
    head = nn.Linear(hidden_size, 1)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        head.weight.copy_(torch.randn(head.weight.shape, generator=gen) / (hidden_size ** 0.5) * 0.1)
        head.bias.zero_()
    return head


def _save_head(head: nn.Linear, out_dir: Path, meta: dict, state: dict | None = None) -> None:
    """``state``: the head's weights when the module's are ZeRO-3 shards (``{"weight", "bias"}``)."""
    from safetensors.torch import save_file

    state = state or {"weight": head.weight, "bias": head.bias}
    save_file({k: state[k].detach().float().cpu().contiguous() for k in ("weight", "bias")}, str(out_dir / HEAD_FILE))
    (out_dir / META_FILE).write_text(json.dumps(meta, indent=2))


def _load_head(path: Path, dtype: torch.dtype) -> nn.Linear:
    from safetensors.torch import load_file

    state = load_file(str(path / HEAD_FILE))
    head = nn.Linear(state["weight"].shape[1], 1)
    head.load_state_dict(state)
    return head.to(dtype)


def sub_state(state: dict | None, prefix: str) -> dict | None:
    """The entries of ``state`` under ``prefix``, the prefix removed (None stays None: use the module's own)."""
    if state is None:
        return None
    return {k.removeprefix(prefix): v for k, v in state.items() if k.startswith(prefix)}


class ValueModel(nn.Module):
    """A transformer backbone (no LM head) + a linear scalar head: ``forward`` -> values ``[B, T]``."""

    def __init__(self, backbone: nn.Module, head: nn.Linear):
        super().__init__()
        self.backbone = backbone
        self.head = head

    @classmethod
    def from_pretrained(cls, path: str | Path, dtype: torch.dtype = torch.float32, seed: int = 0,
                        attn_implementation: str | None = None, init: str = "pretrained") -> ValueModel:
        """A causal-LM or base-model checkpoint (a fresh head, seeded), or a directory written by
        :meth:`save_pretrained` (the saved head). ``init="random"``: the backbone drawn from ``path``'s config."""
        kwargs = {"dtype": dtype}
        if attn_implementation:
            kwargs["attn_implementation"] = attn_implementation
        backbone = load_base_model(path, init, seed=seed, **kwargs)
        if (Path(path) / HEAD_FILE).is_file():
            head = _load_head(Path(path), dtype)
        else:
            head = make_value_head(backbone.config.hidden_size, seed).to(dtype)
        return cls(backbone, head)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                position_ids: torch.Tensor | None = None) -> torch.Tensor:
        hidden = self.backbone(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                               use_cache=False).last_hidden_state
        return self.head(hidden).squeeze(-1)

    def save_pretrained(self, out_dir: str | Path, state_dict: dict | None = None) -> None:
        """``state_dict``: this module's full weights (``backbone.*``, ``head.*``) when its own are ZeRO-3 shards."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(str(out_dir), state_dict=sub_state(state_dict, "backbone."),
                                      safe_serialization=True)
        _save_head(self.head, out_dir, {"value_head": "separate", "hidden_size": self.head.in_features},
                   sub_state(state_dict, "head."))


class PolicyAndValue(nn.Module):
    """π_θ and V̂_φ as one module: ``forward`` returns the policy's logits on the last ``n_logits`` positions
    (those that predict the response tokens) and the values on every position."""

    def __init__(self, policy: nn.Module, value: ValueModel | None = None, head: nn.Linear | None = None,
                 critic: bool = True):
        super().__init__()
        if critic and (value is None) == (head is None):
            raise ValueError("give either a separate value model or a head on the policy's hidden states")
        if not critic and (value is not None or head is not None):
            raise ValueError("critic=False (ppo.estimator=grpo|rloo) takes no value model and no value head")
        self.policy = policy
        self.value = value
        self.value_head = head

    @property
    def critic(self) -> bool:
        """False for the critic-free estimators (grpo, rloo): no V̂ at all; forward returns values None."""
        return self.value is not None or self.value_head is not None

    @property
    def shared(self) -> bool:
        return self.value is None and self.value_head is not None

    @property
    def config(self):
        """The policy's HF config: what accelerate and DeepSpeed read (hidden size) from the module they wrap."""
        return self.policy.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                n_logits: int, with_policy: bool = True, with_value: bool = True,
                freeze_shared_backbone: bool = False) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        logits = values = None
        with_value = with_value and self.critic
        if self.shared:
            if with_policy or with_value:
                out = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                  use_cache=False, output_hidden_states=with_value,
                                  logits_to_keep=n_logits if with_policy else 1)
                logits = out.logits if with_policy else None
                if with_value:
                    hidden = out.hidden_states[-1]
                    # While the policy is frozen, only the head may learn (the backbone IS the policy).
                    values = self.value_head(hidden.detach() if freeze_shared_backbone else hidden).squeeze(-1)
            return logits, values
        if with_policy:
            logits = self.policy(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                 use_cache=False, logits_to_keep=n_logits).logits
        if with_value:
            values = self.value(input_ids, attention_mask, position_ids)
        return logits, values

    def save_value(self, out_dir: str | Path, state_dict: dict | None = None) -> None:
        """``state_dict``: the full weights of this whole module (``value.*`` / ``value_head.*`` are used) when its
        own are ZeRO-3 shards."""
        if not self.critic:
            return  # grpo / rloo: nothing to save
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        if self.shared:
            _save_head(self.value_head, out_dir, {"value_head": "shared", "hidden_size": self.value_head.in_features},
                       sub_state(state_dict, "value_head."))
        else:
            self.value.save_pretrained(out_dir, sub_state(state_dict, "value."))


def build_value(layout: str, policy: nn.Module, init_path: str, dtype: torch.dtype, seed: int,
                saved_dir: Path | None = None, attn_implementation: str | None = None,
                init: str = "pretrained") -> PolicyAndValue:
    """The policy+value module: ``layout`` separate (a value model from ``init_path`` or ``saved_dir``) or shared
    (a head on the policy; loaded from ``saved_dir`` when resuming)."""
    if layout not in VALUE_HEADS:
        raise ValueError(f"ppo.value_head must be one of {VALUE_HEADS}, got {layout!r}")
    if layout == "separate":
        value = ValueModel.from_pretrained(saved_dir or init_path, dtype=dtype, seed=seed,
                                           attn_implementation=attn_implementation,
                                           init="pretrained" if saved_dir is not None else init)
        return PolicyAndValue(policy, value=value)
    hidden = policy.config.hidden_size
    head = _load_head(saved_dir, dtype) if saved_dir is not None else make_value_head(hidden, seed).to(dtype)
    return PolicyAndValue(policy, head=head)
