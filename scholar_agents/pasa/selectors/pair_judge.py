"""What the Selectors that score a <query, paper> pair without generating text share: the cross-encoder
(``selectors/cross_encoder.py``) and the embedding Selector (``selectors/embedding.py``) differ only in how a batch of
(query, text) pairs becomes P(relevant), :meth:`PairJudge.pair_probabilities`. On top of it, once: the memo of
scored pairs, the threshold read from the model's card, and ``judge``
("why?"), which cannot write a rationale and shows as evidence the abstract's sentences the same scorer rates
highest against the query, with their scores, beside the decision and score the list used.
"""

from __future__ import annotations

import abc
import json
import re
from collections import OrderedDict
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from scholar_agents.pasa.selectors.llm import Judgement, Mark, PaperJudge, SelectorPair, truncate_abstract

META_FILE = "selector_meta.json"  # the card: threshold fitted on dev, dev / held-out figures, fitting queries
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'])")


def pair_text(title: str, abstract: str) -> str:
    """The paper side of the pair: ``title. abstract``."""
    title = " ".join((title or "").split()).rstrip(".")
    abstract = " ".join((abstract or "").split())
    return f"{title}. {abstract}".strip() if abstract else title


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_RE.split(" ".join((text or "").split())) if len(s.strip()) > 2]


def read_meta(model_dir: str | Path) -> dict:
    path = Path(model_dir) / META_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


def card_mark(meta: dict) -> Optional[Mark]:
    """The reader mark a card holds (``meta["mark"]``, written by scripts/selector_reader_threshold.py), or None
    where it holds none. Its note says what the mark was fitted for and what it left on held-out crawls, or why
    there is no mark."""
    card = meta.get("mark")
    if not card:
        return None
    target = float(card["target_precision"])
    if card.get("threshold") is None:
        return Mark(None, f"nothing marked: {card['why_none']}; the list is ranked by P(relevant)")
    held = (card.get("heldout") or {}).get("all") or {}
    figures = (f"; held-out crawls: precision {held['precision']:.2f}, recall {held['recall']:.2f}"
               if held.get("precision") is not None else "")
    return Mark(float(card["threshold"]), f"mark fitted for precision {target:.2f} on real crawls' hits{figures}")


class PairJudge(PaperJudge):
    """A Selector whose score is P(relevant) of a (query, text) pair, computed in batches, with no generation."""

    normalize = False  # the score is already a probability (eval selector's report reads this)

    def __init__(self, threshold: Optional[float], max_abstract_chars: Optional[int], memo_size: int,
                 model_id: str, meta: Optional[dict]) -> None:
        self.meta = dict(meta or {})
        self._threshold_from_card = threshold is None
        if threshold is None:  # selector.threshold=null: the one fitted on the model's dev split
            threshold = float(self.meta.get("threshold", 0.5))
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        self.threshold = threshold
        self.max_abstract_chars = max_abstract_chars
        self.memo_size = memo_size
        self.model_id = model_id
        self.unparsed = 0  # the LLM Selector's counter; a judgement here always has a decision
        self._memo: OrderedDict[tuple[str, str, str], float] = OrderedDict()

    @property
    def mark(self) -> Mark:
        """With ``mark_source`` card and the threshold read from the card: the card's reader mark where it has one.
        Otherwise the decision threshold."""
        fitted = card_mark(self.meta) if self.mark_source == "card" and self._threshold_from_card else None
        return fitted if fitted is not None and self.marks_selected else super().mark

    @abc.abstractmethod
    def pair_probabilities(self, queries: Sequence[str], texts: Sequence[str],
                           show_progress: bool = False) -> np.ndarray:
        """P(relevant) of each (query, text), no memo."""

    def key_probabilities(self, keys: Sequence[tuple[str, str, str]], show_progress: bool = False) -> np.ndarray:
        """P(relevant) of each (query, title, cut abstract), no memo: the paper as ``title. abstract`` text (the
        lexical Selector, which reads the title apart, overrides this)."""
        return self.pair_probabilities([q for q, _, _ in keys], [pair_text(t, a) for _, t, a in keys],
                                       show_progress=show_progress)

    def score(self, pairs: Sequence[SelectorPair], show_progress: bool = False) -> np.ndarray:
        """P(relevant) per pair; repeated pairs are scored once (memo up to ``memo_size``)."""
        keys = [(p.query, p.title, truncate_abstract(p.abstract, self.max_abstract_chars)) for p in pairs]
        todo = list(dict.fromkeys(k for k in keys if k not in self._memo))
        if todo:
            probs = self.key_probabilities(todo, show_progress=show_progress)
            for key, p in zip(todo, probs):
                self._memo[key] = float(p)
        for k in keys:
            self._memo.move_to_end(k)
        result = np.array([self._memo[k] for k in keys], dtype=np.float64)
        while len(self._memo) > max(self.memo_size, 0):
            self._memo.popitem(last=False)
        return result

    def judge(self, pairs: Sequence[SelectorPair], max_new_tokens: Optional[int] = None,
              n_evidence: int = 2) -> list[Judgement]:
        """The decision and its score, and as evidence the ``n_evidence`` abstract sentences this scorer rates
        highest against the query (with their P(relevant)). ``max_new_tokens``: the LLM Selector's signature."""
        del max_new_tokens
        scores = self.score(pairs)
        out = []
        for pair, s in zip(pairs, scores):
            sentences = split_sentences(truncate_abstract(pair.abstract, self.max_abstract_chars))
            decision = bool(s >= self.threshold)
            head = f"{'True' if decision else 'False'} (P(relevant) {s:.2f}, threshold {self.threshold:.2f})."
            if sentences:
                sp = self.pair_probabilities([pair.query] * len(sentences), sentences)
                top = np.argsort(-sp, kind="stable")[:n_evidence]
                # the number says what it is: the sentence alone scored against the query, not the paper's score
                evidence = " ".join(f'"{sentences[i]}" (this sentence alone: P(relevant) {sp[i]:.2f})' for i in top)
                rationale = f"Evidence, the abstract's sentences closest to the query: {evidence}"
            else:
                rationale = "No abstract: the decision reads the title alone."
            out.append(Judgement(decision=decision, rationale=rationale, text=f"{head} {rationale}", score=float(s)))
        return out
