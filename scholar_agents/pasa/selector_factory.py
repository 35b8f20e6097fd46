"""Which Selector a config names (``selector.kind``): PaSa's decision-token LLM Selector (``pasa.selector``), the
cross-encoder (``pasa.cross_encoder``) or the embedding Selector (``pasa.embedding_selector``; both issue 37). Beside
them, so none imports another's builder."""

from __future__ import annotations

from scholar_agents.pasa.cross_encoder import CrossEncoderSelector
from scholar_agents.pasa.embedding_selector import EmbeddingSelector
from scholar_agents.pasa.selector import Selector

SELECTOR_KINDS = ("llm", "cross_encoder", "embedding")
NO_LLM_KINDS = ("cross_encoder", "embedding")  # these score without an LLM: callers build none


def needs_llm(cfg) -> bool:
    return selector_kind(cfg) not in NO_LLM_KINDS


def selector_kind(cfg) -> str:
    kind = str(cfg.get("kind", "llm") if hasattr(cfg, "get") else getattr(cfg, "kind", "llm"))
    if kind not in SELECTOR_KINDS:
        raise ValueError(f"selector.kind must be one of {SELECTOR_KINDS}, got {kind!r}")
    return kind


def build_selector(cfg, llm_factory=None):
    """The Selector ``cfg`` (a ``selector`` node) names: ``kind=llm`` scores with ``llm_factory()``'s LLM,
    ``kind=cross_encoder`` / ``embedding`` load ``cfg.model`` and need no LLM (``llm_factory`` is not called)."""
    kind = selector_kind(cfg)
    if kind == "cross_encoder":
        return CrossEncoderSelector.from_config(cfg)
    if kind == "embedding":
        return EmbeddingSelector.from_config(cfg)
    if llm_factory is None:
        raise ValueError("selector.kind=llm needs an LLM")
    return Selector.from_config(llm_factory(), cfg)
