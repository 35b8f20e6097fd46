"""Which Selector a config names (``selector.kind``): PaSa's decision-token LLM Selector (``llm.py``), the
cross-encoder (``cross_encoder.py``), the embedding Selector (``embedding.py``) or the provenance Selector
(``provenance.py``: the embedding Selector, and the lexical one for dense hits; the last three are ours). Beside
them, so none imports another's builder."""

from __future__ import annotations

from pathlib import Path

from scholar_agents.pasa.selectors.cross_encoder import CrossEncoderSelector
from scholar_agents.pasa.selectors.embedding import BUNDLED_DIR, EmbeddingSelector, resolve_model_dir
from scholar_agents.pasa.selectors.lexical import BUNDLED_DIR as LEXICAL_DIR, resolve_lexical_dir
from scholar_agents.pasa.selectors.llm import Selector, check_mark_source
from scholar_agents.pasa.selectors.pair_judge import card_mark, read_meta
from scholar_agents.pasa.selectors.provenance import ProvenanceSelector

SELECTOR_KINDS = ("llm", "cross_encoder", "embedding", "provenance")
NO_LLM_KINDS = ("cross_encoder", "embedding", "provenance")  # these score without an LLM: callers build none


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
    if kind == "llm":
        if llm_factory is None:
            raise ValueError("selector.kind=llm needs an LLM")
        return Selector.from_config(llm_factory(), cfg)
    built = {"cross_encoder": CrossEncoderSelector, "embedding": EmbeddingSelector,
             "provenance": ProvenanceSelector}[kind].from_config(cfg)
    built.marks_selected = bool(cfg.get("marks_selected", True))
    built.mark_source = check_mark_source(cfg.get("mark", "threshold"))
    return built


def describe_selector(cfg, llm_model: str = "?") -> str:
    """One line on what decides "selected", read from the config and the model card without loading a model:
    which Selector, its threshold and where the threshold comes from, and its held-out figures where it has a card
    (what a reader must know before trusting the mark). ``llm_model``: the Selector LLM's model
    (``selector_llm.model``) for ``kind=llm``."""
    kind = selector_kind(cfg)
    threshold = cfg.get("threshold")
    if kind == "llm":
        t = 0.5 if threshold is None else threshold
        if not cfg.get("marks_selected", True):
            return (f"LLM Selector {llm_model} (decision token first, PaSa Table 15): ranks by P(True) and marks "
                    f"nothing selected (no card showing held-out precision above the base rate; "
                    f"selector.marks_selected=true applies PaSa's P(True) >= {t:g})")
        return (f"LLM Selector {llm_model} (decision token first, PaSa Table 15): selected = P(True) >= {t:g} "
                f"(PaSa §4.3; no card with held-out precision)")
    if kind in ("embedding", "provenance"):
        model_dir = resolve_model_dir(cfg.get("model"))
        name = "embedding Selector (MiniLM + query adapter)"
        where = ", bundled" if model_dir == BUNDLED_DIR else f" {model_dir}"
    else:
        model_dir = Path(str(cfg.get("model")))
        name, where = "cross-encoder Selector", f" {model_dir}"
    meta = read_meta(model_dir)
    fitted = meta.get("threshold")
    t = fitted if threshold is None else threshold
    if t is None:
        return f"{name}{where}: no threshold (no card in {model_dir})"
    source = "fitted on its dev split" if threshold is None else "set by selector.threshold"
    # provenance: the card's mark was fitted on its embedding head's scores only
    reader = card_mark(meta) if kind != "provenance" and cfg.get("mark", "threshold") == "card" else None
    if reader is not None and threshold is None and cfg.get("marks_selected", True):
        shown = "" if reader.threshold is None else f"selected = P(relevant) >= {reader.threshold:.3f}, "
        return (f"{name}{where}: {shown}{reader.note} (eval selector's F1 and PPO's reward decide at "
                f"{t:.3f}, the best F1 on built pairs)")
    line = f"{name}{where}: selected = P(relevant) >= {t:.3f} ({source})"
    routed = set(cfg.get("lexical_for") or []) if kind == "provenance" else set()
    line += _heldout(meta, skip=routed)  # a provenance Selector never judges those miners' hits with this head
    if kind == "provenance":
        lexical_dir = resolve_lexical_dir(cfg.get("lexical_model"))
        lmeta = read_meta(lexical_dir)
        routes = ", ".join(cfg.get("lexical_for") or []) or "no retriever"
        line = (f"provenance Selector: papers found by {routes} search judged by the lexical Selector"
                f"{', bundled' if lexical_dir == LEXICAL_DIR else f' {lexical_dir}'} (its fitted threshold "
                f"{lmeta.get('threshold', float('nan')):.3f} mapped onto the embedding Selector's){_heldout(lmeta)}; "
                f"every other paper by the {line}")
    return line


def _heldout(meta: dict, skip: set = frozenset()) -> str:
    """A card's held-out figures, original phrasing, one per negatives miner (but ``skip``'s), against the stronger
    zero-shot bar."""
    out = ""
    for r in (r for r in meta.get("heldout", []) if r.get("phrasing") == "original" and r.get("miner") not in skip):
        bar, bar_auc = max((("cosine", r["cosine_auc"]), ("BM25", r["bm25_auc"])), key=lambda x: x[1])
        out += (f"; held-out, {r['miner']}-mined negatives: precision {r['precision']:.2f}, recall "
                f"{r['recall']:.2f}, AUC {r['auc']:.3f} vs zero-shot {bar} {bar_auc:.3f}")
    return out
