"""The PPO trainer's batches: sessions packed left-padded with their responses right-aligned in a ``[B, R]`` grid,
per-token log-probs / entropies / values read off that grid, and the splitting of work over minibatches and ranks."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

import numpy as np
import torch

from scholar_agents.runtime import collectives


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


@dataclass(frozen=True)
class Batcher:
    """How this process feeds sessions to its models: packed with the tokenizer's ``pad_id`` on ``device``, the
    forward passes under bf16 autocast where ``bf16`` (hardware that computes it natively)."""

    pad_id: int
    device: torch.device
    bf16: bool

    def pack(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> Packed:
        return pack(pairs, self.pad_id, self.device)

    def dummy(self) -> Packed:
        """A one-token batch: the forward pass a rank runs when it has nothing of its own, so that collectives
        inside the model (ZeRO-3 gathers) line up."""
        return pack([([self.pad_id], [self.pad_id])], self.pad_id, self.device)

    def grid(self, rows: Sequence[np.ndarray], width: int) -> torch.Tensor:
        return to_grid(rows, width, self.device)

    def autocast(self) -> AbstractContextManager:
        if not self.bf16:
            return nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)


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


def chunks(seq: Sequence, n: int) -> list:
    return [seq[i:i + n] for i in range(0, len(seq), n)]


def gather_to_main(rows: list) -> list:
    """Every process's ``rows`` concatenated in rank order on global rank 0; an empty list on the others."""
    parts = collectives.gather_object(rows, dst=0)
    return [r for part in parts for r in part] if parts is not None else []


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
