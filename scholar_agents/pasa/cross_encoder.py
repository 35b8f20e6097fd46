"""A cross-encoder Selector (ours, issue 37): "query [SEP] title. abstract" through a small encoder with a 1-logit
head, P(relevant) = sigmoid(logit). No LLM, no generation: it scores ~100x faster than the decision-token Selector
on CPU and is trained with BCE on labelled pairs (``train selector_cross_encoder``, fine-tuned from the embedded
all-MiniLM-L6-v2).

It has the interface callers use on :class:`~scholar_agents.pasa.selector.Selector` (``score``, ``decide``,
``rank``, ``accept``, ``accept_many``, ``judge``, ``probs`` / ``scores_from_probs`` for ``eval selector``,
``threshold``), so the agent, ``eval selector`` and PPO's reward take it unchanged via ``selector.kind=cross_encoder``.
A model directory holds an HF ``BertForSequenceClassification`` (``model.safetensors`` + ``config.json``), its
tokenizer, and ``selector_meta.json``: the decision threshold fitted on a dev split of the training queries, and
that split's precision / recall.

``judge`` cannot write a rationale: it returns the decision with, as evidence, the 1-2 abstract sentences the same
cross-encoder scores highest against the query (issue 37 item 4).
"""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from scholar_agents.pasa.selector import Judgement, PaperJudge, SelectorPair, truncate_abstract

log = logging.getLogger(__name__)

META_FILE = "selector_meta.json"
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'])")


def pair_text(title: str, abstract: str) -> str:
    """The paper side of the pair: ``title. abstract`` (the query is the tokenizer's first segment)."""
    title = " ".join((title or "").split()).rstrip(".")
    abstract = " ".join((abstract or "").split())
    return f"{title}. {abstract}".strip() if abstract else title


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_RE.split(" ".join((text or "").split())) if len(s.strip()) > 2]


def read_meta(model_dir: str | Path) -> dict:
    path = Path(model_dir) / META_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


class CrossEncoderSelector(PaperJudge):
    """Batched P(relevant) from a sequence-classification encoder with one logit."""

    normalize = False  # the score is already a probability (eval selector's report reads this)

    def __init__(self, model, tokenizer, threshold: Optional[float] = None, batch_size: int = 32,
                 max_length: int = 256, max_abstract_chars: Optional[int] = None, memo_size: int = 100_000,
                 model_id: str = "", meta: Optional[dict] = None) -> None:
        import torch

        meta = dict(meta or {})
        if threshold is None:
            threshold = float(meta.get("threshold", 0.5))
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if getattr(model.config, "num_labels", 1) != 1:
            raise ValueError(f"a cross-encoder Selector needs a 1-logit head, got num_labels={model.config.num_labels}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.threshold = threshold
        self.batch_size = batch_size
        self.max_length = max_length
        self.max_abstract_chars = max_abstract_chars
        self.memo_size = memo_size
        self.model_id = model_id
        self.meta = meta
        self.unparsed = 0  # Selector's counter; a cross-encoder's judgement always has a decision
        self._memo: OrderedDict[tuple[str, str, str], float] = OrderedDict()
        self._device = next(model.parameters()).device
        self._torch = torch

    @classmethod
    def load(cls, model_dir: str | Path, threshold: Optional[float] = None, device: str = "cpu",
             **kwargs) -> "CrossEncoderSelector":
        """Load a directory written by ``train selector_cross_encoder`` (safetensors weights, tokenizer, meta)."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        model_dir = Path(model_dir)
        if not (model_dir / "config.json").is_file():
            raise FileNotFoundError(f"selector.model: no cross-encoder directory at {model_dir} (config.json missing)"
                                    "; train one with `scholar train selector_cross_encoder`")
        model = AutoModelForSequenceClassification.from_pretrained(str(model_dir), use_safetensors=True).to(device)
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        return cls(model, tokenizer, threshold=threshold, model_id=str(model_dir), meta=read_meta(model_dir),
                   **kwargs)

    @classmethod
    def from_config(cls, cfg) -> "CrossEncoderSelector":
        if not cfg.get("model"):
            raise ValueError("selector.kind=cross_encoder needs selector.model=<dir written by "
                             "`scholar train selector_cross_encoder`>")
        return cls.load(str(cfg.model), threshold=cfg.threshold, batch_size=cfg.batch_size,
                        max_length=cfg.max_length, max_abstract_chars=cfg.max_abstract_chars,
                        memo_size=cfg.memo_size)

    # ---- scoring ----

    def logits(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        """Raw logits, one forward per ``batch_size`` pairs (no memo)."""
        out = []
        with self._torch.inference_mode():
            for start in range(0, len(queries), self.batch_size):
                enc = self.tokenizer(list(queries[start:start + self.batch_size]),
                                     list(docs[start:start + self.batch_size]), truncation="only_second",
                                     max_length=self.max_length, padding=True, return_tensors="pt").to(self._device)
                out.append(self.model(**enc).logits[:, 0].float().cpu().numpy())
        return np.concatenate(out).astype(np.float64) if out else np.zeros(0)

    def score(self, pairs: Sequence[SelectorPair], show_progress: bool = False) -> np.ndarray:
        """P(relevant) = sigmoid(logit) per pair; repeated pairs are scored once (memo up to ``memo_size``)."""
        keys = [(p.query, p.title, truncate_abstract(p.abstract, self.max_abstract_chars)) for p in pairs]
        todo = list(dict.fromkeys(k for k in keys if k not in self._memo))
        if todo:
            from tqdm.auto import tqdm

            chunk = max(self.batch_size * 8, 1)
            for start in tqdm(range(0, len(todo), chunk), desc="cross-encoder selector", unit="chunk",
                              disable=not show_progress or len(todo) <= chunk):
                part = todo[start:start + chunk]
                z = self.logits([q for q, _, _ in part], [pair_text(t, a) for _, t, a in part])
                for key, p in zip(part, 1.0 / (1.0 + np.exp(-z))):
                    self._memo[key] = float(p)
        for k in keys:
            self._memo.move_to_end(k)
        result = np.array([self._memo[k] for k in keys], dtype=np.float64)
        while len(self._memo) > max(self.memo_size, 0):
            self._memo.popitem(last=False)
        return result

    def probs(self, pairs: Sequence[SelectorPair], show_progress: bool = False) -> np.ndarray:
        """``[N, 2]`` = (P(relevant), 1 - P(relevant)): the shape ``eval selector`` reads from the LLM Selector."""
        p = self.score(pairs, show_progress=show_progress)
        return np.stack([p, 1.0 - p], axis=1) if len(p) else np.zeros((0, 2))

    def scores_from_probs(self, probs: np.ndarray) -> np.ndarray:
        return np.asarray(probs, dtype=np.float64)[:, 0]

    # ---- "rationale": evidence sentences ----

    def judge(self, pairs: Sequence[SelectorPair], max_new_tokens: Optional[int] = None,
              n_evidence: int = 2) -> list[Judgement]:
        """The decision, and as its evidence the ``n_evidence`` abstract sentences the cross-encoder scores highest
        against the query (with their scores). ``max_new_tokens`` is accepted for the Selector's signature."""
        del max_new_tokens
        scores = self.score(pairs)
        out = []
        for pair, s in zip(pairs, scores):
            sentences = split_sentences(truncate_abstract(pair.abstract, self.max_abstract_chars))
            decision = bool(s >= self.threshold)
            head = f"{'True' if decision else 'False'} (P(relevant) {s:.2f}, threshold {self.threshold:.2f})."
            if sentences:
                z = self.logits([pair.query] * len(sentences), sentences)
                sp = 1.0 / (1.0 + np.exp(-z))
                top = np.argsort(-sp, kind="stable")[:n_evidence]
                evidence = " ".join(f'"{sentences[i]}" ({sp[i]:.2f})' for i in top)
                rationale = f"Evidence, the abstract's sentences closest to the query: {evidence}"
            else:
                rationale = "No abstract: the decision reads the title alone."
            out.append(Judgement(decision=decision, rationale=rationale, text=f"{head} {rationale}", score=float(s)))
        return out
