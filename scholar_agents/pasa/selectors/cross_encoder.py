"""A cross-encoder Selector (ours): "query [SEP] title. abstract" through a small encoder with a 1-logit
head, P(relevant) = sigmoid(logit). No LLM, no generation: it scores ~100x faster than the decision-token Selector
on CPU and is trained with BCE on labelled pairs (``train selector_cross_encoder``, fine-tuned from the embedded
all-MiniLM-L6-v2).

It has the interface callers use on :class:`~scholar_agents.pasa.selectors.llm.Selector` (``score``, ``decide``,
``rank``, ``accept``, ``accept_many``, ``judge``, ``probs`` / ``scores_from_probs`` for ``eval selector``,
``threshold``), so the agent, ``eval selector`` and PPO's reward take it unchanged via ``selector.kind=cross_encoder``.
A model directory holds an HF ``BertForSequenceClassification`` (``model.safetensors`` + ``config.json``), its
tokenizer, and ``selector_meta.json``: the decision threshold fitted on a dev split of the training queries, and
that split's precision / recall.

The memo, ``probs`` and ``judge`` (evidence sentences, no rationale) are
:class:`~scholar_agents.pasa.selectors.pair_judge.PairJudge`'s, shared with the embedding Selector.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from scholar_agents.pasa.selectors.pair_judge import PairJudge, read_meta
from scholar_agents.runtime.progress import progress_bar


class CrossEncoderSelector(PairJudge):
    """Batched P(relevant) from a sequence-classification encoder with one logit."""

    def __init__(self, model, tokenizer, threshold: Optional[float] = None, batch_size: int = 32,
                 max_length: int = 256, max_abstract_chars: Optional[int] = None, memo_size: int = 100_000,
                 model_id: str = "", meta: Optional[dict] = None) -> None:
        import torch  # lazy: the factory imports this module wherever a Selector is built; only this kind needs torch

        super().__init__(threshold, max_abstract_chars, memo_size, model_id, meta)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if getattr(model.config, "num_labels", 1) != 1:
            raise ValueError(f"a cross-encoder Selector needs a 1-logit head, got num_labels={model.config.num_labels}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self._device = next(model.parameters()).device
        self._torch = torch

    @classmethod
    def load(cls, model_dir: str | Path, threshold: Optional[float] = None, device: str = "cpu",
             **kwargs) -> "CrossEncoderSelector":
        """Load a directory written by ``train selector_cross_encoder`` (safetensors weights, tokenizer, meta)."""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer  # lazy, as torch above

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

    def pair_probabilities(self, queries: Sequence[str], texts: Sequence[str],
                           show_progress: bool = False) -> np.ndarray:
        """sigmoid(logit) per pair, in chunks of 8 forward batches (a progress bar ticks per chunk)."""
        chunk = max(self.batch_size * 8, 1)
        out = [self.logits(queries[start:start + chunk], texts[start:start + chunk])
               for start in progress_bar(range(0, len(queries), chunk), desc="cross-encoder selector", unit="chunk",
                                         disable=not show_progress or len(queries) <= chunk)]
        z = np.concatenate(out) if out else np.zeros(0)
        return 1.0 / (1.0 + np.exp(-z))
