"""``scholar train selector_cross_encoder``: fine-tune a cross-encoder Selector (ours) with BCE on labelled
<query, paper> pairs (``pairs_train.jsonl`` of ``scripts/build_selector_eval_pairs.py``).

The encoder starts from the embedded all-MiniLM-L6-v2 (``embedded:minilm``, from the installed wheel: nothing is
downloaded) with a fresh 1-logit head. The TRAIN queries are split again by query: ``dev_fraction`` of them are held
out of the gradient and used to fit the decision threshold (best F1 on dev), stored with the dev precision / recall /
AUC in ``selector_meta.json`` beside ``model.safetensors``, ``config.json`` and the tokenizer.
:class:`~scholar_agents.pasa.selectors.cross_encoder.CrossEncoderSelector` loads the directory (``selector=cross_encoder
selector.model=<dir>``).
"""

from __future__ import annotations

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from scholar_agents.llm.embedder import resolve_embedder_path
from scholar_agents.pasa.selectors.cross_encoder import CrossEncoderSelector
from scholar_agents.pasa.selectors.llm import SelectorPair, truncate_abstract
from scholar_agents.pasa.selectors.pair_judge import META_FILE, pair_text
from scholar_agents.train.selector.pair_fitting import fit_threshold, split_by_query, task_inputs

log = logging.getLogger(__name__)


@dataclass
class CrossEncoderTrainConfig:
    base_model: str = "embedded:minilm"  # an HF encoder dir / name; embedded:minilm = the bundled MiniLM
    epochs: float = 1.0
    max_steps: Optional[int] = None  # stop after this many optimizer steps (null = epochs)
    batch_size: int = 16
    learning_rate: float = 3e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    max_length: int = 256
    max_abstract_chars: Optional[int] = 600
    dev_fraction: float = 0.2  # of the TRAIN queries: threshold fitting, never trained on
    pos_weight: Optional[float] = None  # BCE weight of positives; null = n_neg / n_pos (balances the loss)
    seed: int = 0
    log_every: int = 20


def load_base(base_model: str, device: str = "cpu"):
    """A 1-logit sequence-classification model + tokenizer from an encoder dir (the head is freshly initialised)."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer  # lazy: heavy, only where a model loads

    path = resolve_embedder_path(base_model)
    model = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1).to(device)
    tokenizer = AutoTokenizer.from_pretrained(path)
    return model, tokenizer


def train_cross_encoder(pairs: Sequence[SelectorPair], out_dir: str | Path, cfg: CrossEncoderTrainConfig,
                        model=None, tokenizer=None) -> dict:
    """BCE fine-tuning on ``pairs`` (labelled), threshold fitted on a by-query dev split; writes ``out_dir``.
    ``model`` / ``tokenizer``: start from these instead of ``cfg.base_model`` (tests pass a tiny one)."""
    import torch  # lazy: heavy, only where a model trains

    if not pairs:
        raise ValueError("no training pairs")
    if any(p.label is None for p in pairs):
        raise ValueError("every training pair needs a label")
    torch.manual_seed(cfg.seed)
    rng = random.Random(cfg.seed)
    if model is None:
        model, tokenizer = load_base(cfg.base_model)
    train, dev = split_by_query(pairs, cfg.dev_fraction, cfg.seed)
    n_pos = sum(bool(p.label) for p in train)
    n_neg = len(train) - n_pos
    if n_pos == 0 or n_neg == 0:
        raise ValueError(f"the training split needs both labels, got {n_pos} positive / {n_neg} negative")
    pos_weight = cfg.pos_weight if cfg.pos_weight is not None else n_neg / n_pos
    steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
    total = cfg.max_steps if cfg.max_steps is not None else max(1, int(math.ceil(cfg.epochs * steps_per_epoch)))
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
    warmup = int(cfg.warmup_ratio * total)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(warmup, 1) if s < warmup else max(0.0, (total - s) / max(total - warmup, 1)))
    loss_fn = torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pos_weight))
    device = next(model.parameters()).device
    texts = [(p.query, pair_text(p.title, truncate_abstract(p.abstract, cfg.max_abstract_chars))) for p in train]
    labels = [float(bool(p.label)) for p in train]
    log.info("cross-encoder: %d train pairs (%d positive, pos_weight %.2f), %d dev pairs (%d queries held out), "
             "%d steps of batch %d", len(train), n_pos, pos_weight, len(dev), len({p.qid or p.query for p in dev}),
             total, cfg.batch_size)
    model.train()
    step, losses, t0, order = 0, [], time.perf_counter(), []
    history = []
    while step < total:
        if not order:
            order = list(range(len(train)))
            rng.shuffle(order)
        idx, order = order[:cfg.batch_size], order[cfg.batch_size:]
        enc = tokenizer([texts[i][0] for i in idx], [texts[i][1] for i in idx], truncation="only_second",
                        max_length=cfg.max_length, padding=True, return_tensors="pt").to(device)
        logits = model(**enc).logits[:, 0]
        loss = loss_fn(logits, torch.tensor([labels[i] for i in idx], device=device))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        losses.append(loss.item())
        if step % cfg.log_every == 0 or step == total:
            mean = float(np.mean(losses[-cfg.log_every:]))
            history.append({"step": step, "loss": mean})
            log.info("step %d/%d loss %.4f (%.1f s/step)", step, total, mean, (time.perf_counter() - t0) / step)
    model.eval()
    seconds = time.perf_counter() - t0
    selector = CrossEncoderSelector(model, tokenizer, threshold=0.5, batch_size=max(cfg.batch_size, 32),
                                    max_length=cfg.max_length, max_abstract_chars=cfg.max_abstract_chars)
    if dev:
        dev_scores = selector.score(dev)
        dev_fit = fit_threshold(np.array([bool(p.label) for p in dev]), dev_scores)
    else:
        dev_fit = {"threshold": 0.5, "note": "no dev split (dev_fraction=0): the threshold is 0.5"}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    meta = {
        "kind": "cross_encoder",
        "threshold": float(dev_fit["threshold"]),
        "dev": dev_fit,
        "train": {"pairs": len(train), "positives": n_pos, "queries": len({p.qid or p.query for p in train}),
                  "steps": step, "seconds": seconds, "final_loss": float(np.mean(losses[-cfg.log_every:])),
                  "pos_weight": pos_weight, "history": history},
        "config": asdict(cfg),
    }
    (out / META_FILE).write_text(json.dumps(meta, indent=2))
    log.info("cross-encoder Selector -> %s: threshold %.3f (dev F1 %.3f, P %s, R %s, AUC %s)", out,
             meta["threshold"], dev_fit.get("f1", float("nan")), dev_fit.get("precision"), dev_fit.get("recall"),
             dev_fit.get("auc"))
    return {"output_dir": str(out), **meta}


def selector_cross_encoder(cfg) -> dict:
    """The Hydra task: ``train.train_file`` (pairs JSONL) -> ``train.output_dir``."""
    pairs, tcfg = task_inputs(cfg, CrossEncoderTrainConfig)
    return train_cross_encoder(pairs, str(cfg.train.output_dir), tcfg)
