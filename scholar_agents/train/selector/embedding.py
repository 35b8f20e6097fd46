"""``scholar train selector_embedding``: fit the embedding Selector (ours; ``pasa/selectors/embedding.py``)
on labelled <query, paper> pairs (``pairs_train.jsonl`` of ``scripts/build_selector_eval_pairs.py``).

Every text is encoded once by the frozen embedder (the embedded MiniLM); what is fitted is the query adapter ``W``
(from the identity, with an L2 pull back to it: ``λ·||W − I||²``) and the calibration (a, b), by full-batch Adam on
the positive-weighted BCE of sigmoid(a·cos(W·q, d) + b). The TRAIN queries are split again by query: ``dev_fraction``
of them never enter the gradient; they choose λ among ``l2_grid`` — and ``identity`` (W = I, only a and b fitted: the
zero-shot cosine, calibrated) competes on the same footing, so the adapter ships only where it beats the zero-shot
ranking on dev — and then fit the decision threshold (best F1). Seconds on a CPU core.

``train.encoder.steps > 0`` first fine-tunes the embedder itself (LoRA, in-batch contrastive, ``encoder_lora.py``;
~6 s a step of 16 queries on two CPU cores), keeps its dev-best step, and fits the adapter on its vectors.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from scholar_agents.data_gen.request_forms import rewrite
from scholar_agents.eval.metrics import roc_auc
from scholar_agents.llm.config import EmbedderConfig
from scholar_agents.llm.embedder import build_embedder
from scholar_agents.llm.lora_delta import LORA_FILE
from scholar_agents.pasa.selectors.embedding import EmbeddingSelector, save_adapter, unit_rows
from scholar_agents.pasa.selectors.llm import SelectorPair, truncate_abstract
from scholar_agents.pasa.selectors.pair_judge import pair_text
from scholar_agents.train.selector.encoder_lora import CHECKPOINT_FILE, EncoderLoraConfig, finetune_encoder
from scholar_agents.train.selector.pair_fitting import fit_threshold, split_by_query, task_inputs

log = logging.getLogger(__name__)


@dataclass
class EmbeddingSelectorTrainConfig:
    embedder: str = "embedded:minilm"
    l2_grid: list = field(default_factory=lambda: [1.0, 0.1, 0.01, 0.001])  # λ candidates; dev AUC picks one
    include_identity: bool = True  # W = I (the zero-shot cosine, calibrated) competes with the adapters on dev
    steps: int = 300  # full-batch Adam steps
    learning_rate: float = 1e-2
    max_abstract_chars: Optional[int] = 600
    dev_fraction: float = 0.2  # of the TRAIN queries: model choice and threshold, never trained on
    pos_weight: Optional[float] = None  # BCE weight of positives; null = n_neg / n_pos
    seed: int = 0
    # Ours: every TRAIN pair also in these request forms (data_gen.request_forms), the query rewritten, the paper and
    # label the same: the adapter sees how people ask, not only AutoScholarQuery's phrasing. Dev stays as written.
    augment_forms: list = field(default_factory=list)
    # Ours: fine-tune the embedder itself first (LoRA, in-batch contrastive; encoder_lora.py beside this file) —
    # `steps: 0` keeps it frozen (the default). Its dev-best step competes with the zero-shot encoder on the same
    # dev split.
    encoder: dict = field(default_factory=dict)
    resume: bool = True  # an interrupted encoder fine-tune continues from its checkpoint in output_dir


def fit_adapter(q: np.ndarray, d: np.ndarray, y: np.ndarray, l2: Optional[float], steps: int, lr: float,
                pos_weight: float, seed: int = 0) -> tuple[np.ndarray, float, float, list[float]]:
    """(W, a, b, losses) minimising the weighted BCE of sigmoid(a·cos(W·q, d) + b) + l2·||W − I||² from W = I;
    ``l2=None`` keeps W = I and fits a and b only."""
    import torch  # lazy: heavy, only where an adapter is fitted

    torch.manual_seed(seed)
    dim = q.shape[1]
    eye = torch.eye(dim)
    qt, dt = torch.tensor(q, dtype=torch.float32), torch.tensor(d, dtype=torch.float32)
    yt = torch.tensor(y, dtype=torch.float32)
    W = torch.nn.Parameter(eye.clone(), requires_grad=l2 is not None)
    a, b = torch.nn.Parameter(torch.tensor(10.0)), torch.nn.Parameter(torch.tensor(-5.0))
    opt = torch.optim.Adam([W, a, b] if l2 is not None else [a, b], lr=lr)
    pw = torch.tensor(pos_weight)
    losses = []
    for _ in range(steps):
        sims = torch.nn.functional.cosine_similarity(qt @ W, dt)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(a * sims + b, yt, pos_weight=pw)
        if l2 is not None:
            loss = loss + l2 * ((W - eye) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return W.detach().numpy().astype(np.float32), a.item(), b.item(), losses


def _vectors(embedder, pairs: Sequence[SelectorPair], max_chars: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
    queries = list(dict.fromkeys(p.query for p in pairs))
    docs = [pair_text(p.title, truncate_abstract(p.abstract, max_chars)) for p in pairs]
    uniq = list(dict.fromkeys(docs))
    qv = unit_rows(embedder.encode(queries, kind="query", show_progress=len(queries) > 500))
    dv = unit_rows(embedder.encode(uniq, kind="doc", show_progress=len(uniq) > 500))
    qi, di = {x: i for i, x in enumerate(queries)}, {x: i for i, x in enumerate(uniq)}
    return qv[[qi[p.query] for p in pairs]], dv[[di[x] for x in docs]]


def train_embedding_selector(pairs: Sequence[SelectorPair], out_dir: str | Path, cfg: EmbeddingSelectorTrainConfig,
                             embedder=None) -> dict:
    """Fit on ``pairs`` (labelled), choose λ and the threshold on a by-query dev split; write ``out_dir``."""
    if not pairs:
        raise ValueError("no training pairs")
    if any(p.label is None for p in pairs):
        raise ValueError("every training pair needs a label")
    enc_cfg = EncoderLoraConfig(**cfg.encoder)
    if embedder is None or enc_cfg.steps > 0:  # a fine-tune changes the embedder: never a caller's shared one
        embedder = build_embedder(EmbedderConfig(model=cfg.embedder))
    train, dev = split_by_query(pairs, cfg.dev_fraction, cfg.seed)
    if cfg.augment_forms:
        train = train + [dataclasses.replace(p, query=rewrite(p.query, form))
                         for form in cfg.augment_forms for p in train]
    if not dev:
        raise ValueError("train.dev_fraction must leave at least one query for dev (it chooses λ and the threshold)")
    ytr = np.array([bool(p.label) for p in train], dtype=np.float32)
    ydev = np.array([bool(p.label) for p in dev])
    n_pos, n_neg = int(ytr.sum()), int(len(ytr) - ytr.sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"the training split needs both labels, got {n_pos} positive / {n_neg} negative")
    pos_weight = cfg.pos_weight if cfg.pos_weight is not None else n_neg / n_pos
    t0 = time.perf_counter()
    encoder = None
    if enc_cfg.steps > 0:
        encoder = finetune_encoder(embedder, train, dev, enc_cfg, cfg.max_abstract_chars, out_dir, cfg.resume)
    qtr, dtr = _vectors(embedder, train, cfg.max_abstract_chars)
    qdev, ddev = _vectors(embedder, dev, cfg.max_abstract_chars)
    encode_s = time.perf_counter() - t0
    # the frozen base embedder's cosine: with a fine-tuned encoder, its own step-0 dev AUC
    zero_shot_dev_auc = (encoder["dev_auc_zero_shot"] if encoder
                         else roc_auc(ydev, np.einsum("ij,ij->i", qdev, ddev)))
    candidates = ([None] if cfg.include_identity else []) + [float(x) for x in cfg.l2_grid]
    if not candidates:
        raise ValueError("train.l2_grid is empty and train.include_identity=false: nothing to fit")
    grid, best = [], None
    for l2 in candidates:
        W, a, b, losses = fit_adapter(qtr, dtr, ytr, l2, cfg.steps, cfg.learning_rate, pos_weight, cfg.seed)
        sims = np.einsum("ij,ij->i", unit_rows(qdev @ W), ddev)
        auc = roc_auc(ydev, sims)
        row = {"l2": l2, "dev_auc": auc, "final_loss": losses[-1]}
        grid.append(row)
        log.info("λ %s: dev AUC %.4f (zero-shot %.4f), loss %.4f", "identity" if l2 is None else f"{l2:g}", auc,
                 zero_shot_dev_auc, losses[-1])
        if best is None or auc > best[0]["dev_auc"] + 1e-12:
            best = (row, W, a, b)
    row, W, a, b = best
    selector = EmbeddingSelector(embedder, W, a, b, threshold=0.5, max_abstract_chars=cfg.max_abstract_chars)
    dev_fit = fit_threshold(ydev, selector.probability(np.einsum("ij,ij->i", unit_rows(qdev @ W), ddev)))
    meta = {
        "kind": "embedding",
        "embedder": cfg.embedder,
        "threshold": float(dev_fit["threshold"]),
        "adapter": "identity (zero-shot cosine, calibrated)" if row["l2"] is None else f"query adapter, λ {row['l2']:g}",
        "dev": {**dev_fit, "zero_shot_auc": zero_shot_dev_auc, "queries": len({p.qid or p.query for p in dev})},
        "grid": grid,
        "train": {"pairs": len(train), "positives": n_pos, "queries": len({p.qid or p.query for p in train}),
                  # every query whose pairs fitted something here (train and dev): evaluations exclude them
                  "qids": sorted({p.qid for p in pairs if p.qid}),
                  "pos_weight": pos_weight, "encode_seconds": encode_s,
                  "seconds": time.perf_counter() - t0},
        "config": asdict(cfg),
    }
    delta = encoder.pop("delta") if encoder else None
    if encoder:
        meta["encoder_lora"] = {**encoder, "kept": "zero-shot encoder (no fine-tuned step beat it on dev)"
                                if delta is None else f"step {encoder['kept_step']}"}
    out = save_adapter(out_dir, W, a, b, meta)
    lora_path = Path(out) / LORA_FILE
    if delta:
        from safetensors.torch import save_file  # lazy: imports torch

        save_file(delta, str(lora_path))
    elif lora_path.is_file():  # a previous fit's delta in the same directory must not be merged into this one
        lora_path.unlink()
    if encoder:
        (Path(out) / CHECKPOINT_FILE).unlink(missing_ok=True)
    log.info("embedding Selector -> %s: %s, threshold %.3f (dev AUC %.3f vs zero-shot %.3f; F1 %.3f, P %.3f, "
             "R %.3f)", out, meta["adapter"], meta["threshold"], dev_fit["auc"], zero_shot_dev_auc, dev_fit["f1"],
             dev_fit["precision"], dev_fit["recall"])
    return {"output_dir": str(out), **meta}


def selector_embedding(cfg) -> dict:
    """The Hydra task: ``train.train_file`` (pairs JSONL) -> ``train.output_dir``."""
    pairs, tcfg = task_inputs(cfg, EmbeddingSelectorTrainConfig)
    return train_embedding_selector(pairs, str(cfg.train.output_dir), tcfg)
