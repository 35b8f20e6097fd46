"""The provenance Selector (ours; ``selector=provenance``): judge a paper by the evidence the retriever
that found it did NOT use. A crawl knows where each paper in its queue came from (``SelectorPair.found_by``: the
search backend's name, ``expand``, ``seed``); the papers a dense search returned go to the lexical Selector
(``pasa.selectors.lexical``), every other paper to the embedding Selector (``pasa.selectors.embedding``).

Why (docs/selector.md, "The provenance Selector"): a retriever's hits already agree with the query on the retriever's
own signal, so what still separates the gold hits from the rest is the other signal. Measured on held-out queries:
among BM25's hits meaning does (the embedding Selector above zero-shot cosine, BM25 at chance); among dense hits the
words do (the lexical head above BM25, cosine at chance). No single scorer we fitted is above both bars at once.

One threshold on one scale: each head's P(relevant) is shifted in logit space so that its own dev-fitted threshold
lands on the embedding Selector's (rankings within a head and every decision at the fitted thresholds are
unchanged); ``selector.threshold`` set to a number moves that common threshold.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from scholar_agents.pasa.selectors.embedding import EmbeddingSelector, resolve_model_dir
from scholar_agents.pasa.selectors.lexical import LexicalSelector, resolve_lexical_dir
from scholar_agents.pasa.selectors.llm import Judgement, PaperJudge, SelectorPair
from scholar_agents.pasa.selectors.pair_judge import PairJudge


def _logit(p: float) -> float:
    p = min(max(float(p), 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


class ProvenanceSelector(PaperJudge):
    """Routes each pair by ``found_by``: ``lexical_for`` retrievers to ``lexical``, the rest to ``default``."""

    normalize = False  # the score is already a probability (eval selector's report reads this)

    def __init__(self, default: PairJudge, lexical: PairJudge, lexical_for: Sequence[str] = ("dense",),
                 threshold: Optional[float] = None) -> None:
        self.default, self.lexical = default, lexical
        self.lexical_for = frozenset(str(x) for x in lexical_for)
        self.base_threshold = float(default.threshold)  # each head's fitted threshold maps here
        self.threshold = self.base_threshold if threshold is None else float(threshold)
        if not 0.0 <= self.threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {self.threshold}")
        self._shift = _logit(self.base_threshold) - _logit(lexical.threshold)
        self.max_abstract_chars = default.max_abstract_chars
        self.model_id = f"{default.model_id} + {lexical.model_id} for {', '.join(sorted(self.lexical_for))} hits"
        self.unparsed = 0
        fitted = {q for h in (default, lexical) for q in ((h.meta.get("train") or {}).get("qids") or [])}
        self.meta = {"kind": "provenance", "threshold": self.base_threshold,
                     "lexical_for": sorted(self.lexical_for),
                     "heads": {"default": default.meta, "lexical": lexical.meta},
                     "train": {"qids": sorted(fitted)}}  # eval selector leaves out the queries either head fitted on

    @classmethod
    def from_config(cls, cfg) -> "ProvenanceSelector":
        lexical_dir = resolve_lexical_dir(cfg.get("lexical_model"))
        kw = {"max_abstract_chars": cfg.max_abstract_chars, "memo_size": cfg.memo_size}
        default = EmbeddingSelector.load(resolve_model_dir(cfg.get("model")), threshold=None, **kw)
        lexical = LexicalSelector.load(lexical_dir, threshold=None, **kw)
        if lexical.max_abstract_chars != default.max_abstract_chars:
            raise ValueError("the two heads must read the same abstract cut")
        return cls(default, lexical, list(cfg.get("lexical_for") or []), threshold=cfg.get("threshold"))

    def routes(self, pairs: Sequence[SelectorPair]) -> np.ndarray:
        """True where the pair goes to the lexical head."""
        return np.array([p.found_by in self.lexical_for for p in pairs], dtype=bool)

    def _lexical_scale(self, p: np.ndarray) -> np.ndarray:
        p = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1 - 1e-12)
        return 1.0 / (1.0 + np.exp(-(np.log(p / (1 - p)) + self._shift)))

    def score(self, pairs: Sequence[SelectorPair], show_progress: bool = False) -> np.ndarray:
        """P(relevant) per pair from its route's head, on the common scale."""
        lex = self.routes(pairs)
        out = np.zeros(len(pairs), dtype=np.float64)
        if (~lex).any():
            out[~lex] = self.default.score([p for p, r in zip(pairs, lex) if not r], show_progress=show_progress)
        if lex.any():
            out[lex] = self._lexical_scale(self.lexical.score([p for p, r in zip(pairs, lex) if r]))
        return out

    def judge(self, pairs: Sequence[SelectorPair], max_new_tokens: Optional[int] = None) -> list[Judgement]:
        """Each pair's head's evidence, with the decision and score on the common scale (the ones the list used)."""
        del max_new_tokens
        lex = self.routes(pairs)
        scores = self.score(pairs)
        judged: dict[int, Judgement] = {}
        for head, mask in ((self.default, ~lex), (self.lexical, lex)):
            idx = [i for i in range(len(pairs)) if mask[i]]
            if idx:
                judged.update(zip(idx, head.judge([pairs[i] for i in idx])))
        out = []
        for i, pair in enumerate(pairs):
            s, decision = float(scores[i]), bool(scores[i] >= self.threshold)
            by = pair.found_by or "an unknown retriever"
            route = "lexical" if lex[i] else "embedding"
            rationale = f"Found by {by}, so judged by the {route} Selector. {judged[i].rationale}"
            head = f"{'True' if decision else 'False'} (P(relevant) {s:.2f}, threshold {self.threshold:.2f})."
            text = f"{head} {rationale}"
            out.append(Judgement(decision=decision, rationale=rationale, text=text, score=s))
        return out
