"""An embedding Selector (ours): P(relevant) = sigmoid(a · cos(W·e(query), e(title. abstract)) + b) with
the embedded MiniLM's vectors ``e``, a linear query adapter ``W`` (identity = the zero-shot cosine) and a calibration
(a, b), all fitted by ``scholar train selector_embedding`` on labelled pairs. No LLM, no generation.

Why this design (docs/selector.md, "Embedding Selector"): on held-out queries zero-shot MiniLM cosine (AUC 0.697)
beat every Selector we had trained, the 135M LLM (0.678) and a cross-encoder fine-tuned from the same MiniLM with a
fresh head (0.55): ~1k labelled pairs are too few to teach a new head, and too few to move a whole encoder without
losing what it knows. A query adapter starts AT the zero-shot ranking (W = I) and moves only as far as a by-query dev
split says helps, with 147k parameters (0.6 MB) that ship in the repo. Only queries are mapped, so the documents'
vectors, and a dense index built from them, stay as they are.

With ``train.encoder.steps > 0`` the embedder itself is fine-tuned first (LoRA, contrastive,
``train/selector/encoder_lora.py``) and its delta ships beside the adapter (``encoder_lora.safetensors``), merged into
a Selector-owned copy of the embedder at load; the documents' vectors then are the fine-tuned encoder's, not a shared
dense index's.

The model directory: ``adapter.safetensors`` (``W`` [dim, dim], ``a``, ``b``; float32) and ``selector_meta.json``
(the embedder it was fitted on, the threshold fitted on dev, dev precision / recall / F1 / AUC, the training
record). The memo, ``probs`` and ``judge`` (evidence sentences nearest the adapted query, no generated text) are
:class:`~scholar_agents.pasa.selectors.pair_judge.PairJudge`'s, shared with the cross-encoder.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from safetensors.numpy import load_file, save_file

from scholar_agents.llm.config import EmbedderConfig
from scholar_agents.llm.embedder import build_embedder
from scholar_agents.llm.lora_delta import LORA_FILE, apply_encoder_lora
from scholar_agents.pasa.selectors.pair_judge import META_FILE, PairJudge, read_meta


ADAPTER_FILE = "adapter.safetensors"
# What `selector=embedding` loads by default (selector.model=bundled): fitted by scripts/selector_embedding.sh SHIP=1,
# its card (README.md) holds the held-out table.
BUNDLED = "bundled"
BUNDLED_DIR = Path(__file__).resolve().parents[2] / "assets" / "selector_embedding"


def resolve_model_dir(model: Optional[str]) -> Path:
    return BUNDLED_DIR if model in (None, "", BUNDLED) else Path(model)


def unit_rows(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


def save_adapter(out_dir: str | Path, W: np.ndarray, a: float, b: float, meta: dict) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file({"W": np.ascontiguousarray(W, dtype=np.float32), "a": np.array([a], dtype=np.float32),
               "b": np.array([b], dtype=np.float32)}, str(out / ADAPTER_FILE))
    (out / META_FILE).write_text(json.dumps(meta, indent=2))
    return out


def load_adapter(model_dir: str | Path) -> tuple[np.ndarray, float, float, dict]:
    model_dir = Path(model_dir)
    if not (model_dir / ADAPTER_FILE).is_file():
        raise FileNotFoundError(f"selector.model: no embedding Selector at {model_dir} ({ADAPTER_FILE} missing); "
                                "train one with `scholar train selector_embedding` (selector.model=bundled: the one "
                                "the package ships)")
    t = load_file(str(model_dir / ADAPTER_FILE))
    meta = read_meta(model_dir)
    W = t["W"]
    if W.ndim != 2 or W.shape[0] != W.shape[1]:
        raise ValueError(f"{model_dir / ADAPTER_FILE}: W must be square, got shape {W.shape}")
    return W, float(t["a"][0]), float(t["b"][0]), meta


class EmbeddingSelector(PairJudge):
    """Batched P(relevant) from an embedder, a query adapter and a calibration."""

    def __init__(self, embedder, W: Optional[np.ndarray] = None, a: float = 1.0, b: float = 0.0,
                 threshold: Optional[float] = None, max_abstract_chars: Optional[int] = None,
                 memo_size: int = 100_000, model_id: str = "", meta: Optional[dict] = None) -> None:
        super().__init__(threshold, max_abstract_chars, memo_size, model_id, meta)
        self.embedder = embedder
        dim = int(embedder.dim)
        self.W = np.eye(dim, dtype=np.float32) if W is None else np.asarray(W, dtype=np.float32)
        if self.W.shape != (dim, dim):
            raise ValueError(f"the adapter is {self.W.shape[0]}-d, the embedder {embedder.model_id!r} is {dim}-d: "
                             f"score with the embedder it was fitted on ({self.meta.get('embedder', '?')})")
        self.a, self.b = float(a), float(b)
        self._qmemo: dict[str, np.ndarray] = {}

    @classmethod
    def load(cls, model_dir: str | Path, embedder=None, threshold: Optional[float] = None,
             **kwargs) -> "EmbeddingSelector":
        W, a, b, meta = load_adapter(model_dir)
        fine_tuned = (Path(model_dir) / LORA_FILE).is_file()
        if embedder is None or fine_tuned:  # a fine-tuned encoder is the Selector's own: never merged into a shared one
            embedder = build_embedder(EmbedderConfig(model=meta.get("embedder", "embedded:minilm")))
            apply_encoder_lora(embedder, model_dir)
        return cls(embedder, W, a, b, threshold=threshold, model_id=str(model_dir), meta=meta, **kwargs)

    @classmethod
    def from_config(cls, cfg) -> "EmbeddingSelector":
        return cls.load(resolve_model_dir(cfg.get("model")), threshold=cfg.threshold,
                        max_abstract_chars=cfg.max_abstract_chars, memo_size=cfg.memo_size)

    # ---- scoring ----

    def query_vectors(self, queries: Sequence[str]) -> np.ndarray:
        """Adapted, unit-norm query vectors (``W`` applied to the embedder's unit vector)."""
        todo = [q for q in dict.fromkeys(queries) if q not in self._qmemo]
        if todo:
            if len(self._qmemo) + len(todo) > max(self.memo_size, len(todo)):  # bounded like the pair memo
                self._qmemo.clear()
            v = unit_rows(unit_rows(self.embedder.encode(todo, kind="query")) @ self.W)
            self._qmemo.update(zip(todo, v))
        return np.stack([self._qmemo[q] for q in queries]) if queries else np.zeros((0, self.W.shape[0]))

    def similarities(self, queries: Sequence[str], docs: Sequence[str]) -> np.ndarray:
        """cos(W·e(q), e(d)) per (query, doc); every distinct text encoded once."""
        if not docs:
            return np.zeros(0)
        uniq = list(dict.fromkeys(docs))
        dv = unit_rows(self.embedder.encode(uniq, kind="doc"))
        di = {d: i for i, d in enumerate(uniq)}
        qv = self.query_vectors(list(queries))
        return np.einsum("ij,ij->i", qv, dv[[di[d] for d in docs]]).astype(np.float64)

    def probability(self, sims: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(self.a * np.asarray(sims, dtype=np.float64) + self.b)))

    def pair_probabilities(self, queries: Sequence[str], texts: Sequence[str],
                           show_progress: bool = False) -> np.ndarray:
        del show_progress  # one encode call: sentence-transformers batches it
        return self.probability(self.similarities(queries, texts))
