"""Which Selector a config names (``selector.kind``): PaSa's decision-token LLM Selector (``pasa.selector``) or the
cross-encoder (``pasa.cross_encoder``, issue 37). Beside both, so neither imports the other."""

from __future__ import annotations

from scholar_agents.pasa.cross_encoder import CrossEncoderSelector
from scholar_agents.pasa.selector import Selector

SELECTOR_KINDS = ("llm", "cross_encoder")


def selector_kind(cfg) -> str:
    kind = str(cfg.get("kind", "llm") if hasattr(cfg, "get") else getattr(cfg, "kind", "llm"))
    if kind not in SELECTOR_KINDS:
        raise ValueError(f"selector.kind must be one of {SELECTOR_KINDS}, got {kind!r}")
    return kind


def build_selector(cfg, llm_factory=None):
    """The Selector ``cfg`` (a ``selector`` node) names: ``kind=llm`` scores with ``llm_factory()``'s LLM,
    ``kind=cross_encoder`` loads ``cfg.model`` and needs no LLM (``llm_factory`` is not called)."""
    if selector_kind(cfg) == "cross_encoder":
        return CrossEncoderSelector.from_config(cfg)
    if llm_factory is None:
        raise ValueError("selector.kind=llm needs an LLM")
    return Selector.from_config(llm_factory(), cfg)
