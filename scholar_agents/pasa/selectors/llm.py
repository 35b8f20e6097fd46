"""The PaSa Selector (§4.3): does a paper (title + abstract) satisfy a scholar query?

The Selector answers with a decision token first ("True"/"False", Table 15), then a rationale. Because the
decision comes first, ONE forward pass gives P("True"), which both decides (``P >= threshold``) and ranks, and
lets the Selector act as a single-token reward model for Crawler PPO (Eq. 4's indicator). The rationale is only
generated when asked (:meth:`Selector.judge`), for users and for the official inference style.

Prompts go through ``llm.next_token_probs`` / ``llm.generate`` as chat messages, so every backend renders them
with the model's own chat template — the same rendering ``train selector_sft`` trains on. (The official code
trained with the chat template but scored raw text without it.)
"""

from __future__ import annotations

import abc
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np

from scholar_agents.llm.base import LLM, SamplingParams
from scholar_agents.papers.paper import Paper
from scholar_agents.pasa.prompts import SELECTOR_FALSE, SELECTOR_TRUE, selector_messages
from scholar_agents.runtime.progress import progress_bar

log = logging.getLogger(__name__)

DECISIONS = (SELECTOR_TRUE, SELECTOR_FALSE)


@dataclass
class SelectorConfig:
    """How the Selector decides. Presets: ``conf/selector/*.yaml``."""

    # llm = PaSa's decision-token Selector on ``llm`` / ``selector_llm`` (the default); cross_encoder = a fine-tuned
    # encoder with a 1-logit head read as P(relevant) (ours: ``pasa.selectors.cross_encoder``, no LLM),
    # from ``model``;
    # embedding = the embedder's cosine through a fitted query adapter and calibration (ours:
    # ``pasa.selectors.embedding``, no LLM), from ``model``.
    # provenance = the embedding Selector, except for papers a route names (found by a dense search): the lexical
    # Selector (ours: ``pasa.selectors.provenance``, no LLM).
    kind: str = "llm"
    model: Optional[str] = None  # cross_encoder / embedding / provenance: the directory `train selector_*` wrote
    # provenance: the lexical Selector's directory (`scholar train selector_lexical`; bundled = the package's) and
    # the retrievers whose papers it judges (SelectorPair.found_by); every other paper goes to the embedding Selector
    lexical_model: Optional[str] = None
    lexical_for: list = field(default_factory=lambda: ["dense"])
    max_length: int = 256  # cross_encoder: tokens of "query [SEP] title + abstract"
    # PaSa §4.3: select when P("True") >= 0.5. null: the cross-encoder's / embedding Selector's threshold fitted on its dev split
    # (selector_meta.json); the LLM Selector reads null as 0.5.
    threshold: Optional[float] = 0.5
    # Ours (switch): score = P("True") / (P("True") + P("False")), i.e. "True" beats "False". A fine-tuned Selector
    # puts ~all its mass on the two tokens, so both read the same there; on a base model the raw full-vocabulary
    # P("True") is tiny and would reject everything. false = the raw P("True").
    normalize: bool = True
    batch_size: int = 64  # pairs per LLM call (the backend batches within it); a progress bar ticks per call
    # Cut abstracts to this many characters at a word boundary (null = the full abstract, the paper's setting).
    # CPU presets cut them because the prompt dominates the cost; train and score with the SAME value.
    max_abstract_chars: Optional[int] = None
    rationale_max_new_tokens: int = 256  # judge(): decision + rationale generation
    # Remember this many (query, title, abstract) scores: PPO rollouts meet the same papers again and again.
    memo_size: int = 100_000
    # Ours: false = the agent ranks by the score but marks nothing "selected" (a Selector without a
    # card whose held-out precision beats the base rate: the base SmolLM2's `cpu` preset). PPO's reward (Eq. 4)
    # still reads the threshold.
    marks_selected: bool = True
    # Ours (the mark a reader sees): what the agent's lists mark "selected". threshold = the decision above (PaSa §4.3;
    # eval pasa's precision / recall, as PPO's reward and eval selector's F1); card = the mark the model card fitted
    # for a reader (selector_meta.json `mark`, scripts/selector_reader_threshold.py: the lowest threshold whose
    # precision on real crawls' hits reached a stated target; none where no threshold did, and then the list is
    # ranked with nothing marked and says why), the decision where the card has none. An explicit `threshold` number
    # marks at that number. `pasa search` and `pasa serve`: card.
    mark: str = "threshold"


@dataclass(frozen=True)
class SelectorPair:
    """One <user query, paper> pair; ``label`` where known (evaluation, training data)."""

    query: str
    title: str
    abstract: str = ""
    label: Optional[bool] = None
    qid: str = ""
    paper_id: str = ""
    # which retriever returned the paper: a search backend's name (bm25, dense, hybrid, ...), "expand" (a cited
    # paper), "seed", or "" (unknown). Only selector=provenance reads it; every other Selector ignores it.
    found_by: str = ""

    @classmethod
    def of(cls, query: str, paper: Paper, label: Optional[bool] = None, qid: str = "",
           found_by: str = "") -> "SelectorPair":
        return cls(query=query, title=paper.title, abstract=paper.abstract, label=label, qid=qid,
                   paper_id=paper.paper_id, found_by=found_by)


MARK_SOURCES = ("threshold", "card")


def check_mark_source(value) -> str:
    if str(value) not in MARK_SOURCES:
        raise ValueError(f"selector.mark must be one of {MARK_SOURCES}, got {value!r}")
    return str(value)


@dataclass(frozen=True)
class Mark:
    """What "selected" means where a reader sees it: the threshold the agent marks at (None: the list is ranked and
    nothing is marked) and one line saying what it was fitted for, or why there is none (empty: the decision
    threshold, nothing more to say)."""

    threshold: Optional[float]
    note: str = ""


@dataclass
class Judgement:
    """A generated Selector answer, parsed. ``decision`` is None when the text does not start with a decision."""

    decision: Optional[bool]
    rationale: str
    text: str
    # the rationale argues for the other decision (it opens with the opposite decision word, or, for a rationale
    # generated after a forced decision, says so in its first words): shown as such, never beside "yes"
    disagrees: bool = False
    score: Optional[float] = None  # the P(relevant) the decision was read from, where the judge scored it


def truncate_abstract(abstract: str, max_chars: Optional[int]) -> str:
    """Cut at the last word boundary before ``max_chars`` (no mid-word cuts, no marker: the text stays natural)."""
    abstract = " ".join((abstract or "").split())
    if max_chars is None or len(abstract) <= max_chars:
        return abstract
    cut = abstract[:max_chars + 1]  # one character more tells whether the cut falls between two words
    space = cut.rfind(" ")
    return abstract[:space] if space >= max_chars // 2 else abstract[:max_chars]


# "True\nReason: ...", "Decision: False. Reason: ...", "**True** because ..." -> the decision word that comes first.
_DECISION_RE = re.compile(r"^\W*(?:decision\W*)?(true|false)\b", re.IGNORECASE)
_REASON_RE = re.compile(r"^\W*reason(?:ing)?\s*:\s*", re.IGNORECASE)


_AGAINST_RE = re.compile(r"^\W*(?:false|no\b|not\s+(?:relevant|related|satisf|meet|match)|(?:the\s+)?paper\s+"
                         r"(?:is\s+not|does\s+not|doesn't)|irrelevant|unrelated)", re.IGNORECASE)
_FOR_RE = re.compile(r"^\W*(?:true|yes\b)", re.IGNORECASE)


def reason_disagrees(decision: bool, reason: str) -> bool:
    """Whether a reason written after ``decision`` opens by taking the other side (a first-words check, no
    model: it flags what a reader would see at once, not every subtle disagreement)."""
    return bool(_AGAINST_RE.match(reason)) if decision else bool(_FOR_RE.match(reason))


def parse_judgement(text: str) -> Judgement:
    """Split a generated answer into the decision (first word, Table 15 order) and the rationale."""
    m = _DECISION_RE.match(text)
    if not m:
        return Judgement(decision=None, rationale=text.strip(), text=text)
    rest = text[m.end():]
    rationale = _REASON_RE.sub("", re.sub(r"^[^\w(\"']+", "", rest), count=1).strip()
    return Judgement(decision=m.group(1).lower() == "true", rationale=rationale, text=text)


class PaperJudge(abc.ABC):
    """What every Selector offers its callers (the agent's ranking, ``accept_many`` in the PPO reward, ``eval
    selector``), built on one method, :meth:`score`: P(relevant) per pair, the decision AND the rank. The LLM
    Selector (below), the cross-encoder (``pasa.selectors.cross_encoder``) and the embedding Selector
    (``pasa.selectors.embedding``) implement it."""

    threshold: float
    marks_selected: bool = True  # SelectorConfig.marks_selected: whether the agent shows decisions at all
    mark_source: str = "threshold"  # SelectorConfig.mark: threshold | card

    @property
    def mark(self) -> Mark:
        """The agent's "selected": the decision threshold (a Selector with a model card overrides this where
        ``mark_source`` is ``card``: the mark fitted for a reader, ``pair_judge.card_mark``)."""
        if not self.marks_selected:
            return Mark(None, "ranked by P(relevant), nothing marked (selector.marks_selected=false)")
        return Mark(self.threshold)

    @abc.abstractmethod
    def score(self, pairs: Sequence[SelectorPair], show_progress: bool = False) -> np.ndarray:
        """P(relevant) per pair."""

    def probs(self, pairs: Sequence[SelectorPair], show_progress: bool = False) -> np.ndarray:
        """``[N, 2]`` = (P(relevant), 1 - P(relevant)): the shape ``eval selector`` reads (the LLM Selector
        overrides it with P("True"), P("False") of the decision token)."""
        p = self.score(pairs, show_progress=show_progress)
        return np.stack([p, 1.0 - p], axis=1) if len(p) else np.zeros((0, 2))

    def scores_from_probs(self, probs: np.ndarray) -> np.ndarray:
        return np.asarray(probs, dtype=np.float64)[:, 0]

    def decide(self, pairs: Sequence[SelectorPair], show_progress: bool = False) -> np.ndarray:
        """Selected (True) where the score reaches the threshold (PaSa §4.3)."""
        return self.score(pairs, show_progress=show_progress) >= self.threshold

    def accept(self, query: str, papers: Sequence[Paper]) -> list[bool]:
        """Reward-model mode for Crawler PPO (Eq. 4: Selector(q, p_i) = 1): one batched forward over the papers."""
        if not papers:
            return []
        return [bool(d) for d in self.decide([SelectorPair.of(query, p) for p in papers])]

    def accept_many(self, requests: Iterable[tuple]) -> list[list[bool]]:
        """:meth:`accept` for many sessions at once, in ONE batched call (PPO scores a whole rollout batch). Each
        request: ``(query, papers)`` or ``(query, papers, found_by)`` (the retriever that returned them)."""
        requests = [(r[0], r[1], r[2] if len(r) > 2 else "") for r in requests]
        flat = [SelectorPair.of(q, p, found_by=by) for q, papers, by in requests for p in papers]
        decided = self.decide(flat) if flat else np.zeros(0, dtype=bool)
        out, i = [], 0
        for _, papers, _ in requests:
            out.append([bool(d) for d in decided[i:i + len(papers)]])
            i += len(papers)
        return out

    def rank(self, query: str, papers: Sequence[Paper]) -> list[tuple[Paper, float]]:
        """Papers by descending P("True") (§4.3: the decision token's probability ranks search results)."""
        scores = self.score([SelectorPair.of(query, p) for p in papers]) if papers else np.zeros(0)
        order = np.argsort(-scores, kind="stable")
        return [(papers[i], float(scores[i])) for i in order]


class Selector(PaperJudge):
    """Batched P("True") scoring, thresholded decisions, ranking, and rationale generation on any LLM backend."""

    def __init__(self, llm: LLM, threshold: float = 0.5, normalize: bool = True, batch_size: int = 64,
                 max_abstract_chars: Optional[int] = None, rationale_max_new_tokens: int = 256,
                 memo_size: int = 100_000) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must be in [0, 1], got {threshold}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.llm = llm
        self.threshold = threshold
        self.normalize = normalize
        self.batch_size = batch_size
        self.max_abstract_chars = max_abstract_chars
        self.rationale_max_new_tokens = rationale_max_new_tokens
        self.memo_size = memo_size
        self._memo: OrderedDict[tuple[str, str, str], tuple[float, float]] = OrderedDict()
        self.unparsed = 0  # generated answers that did not start with a decision (judge)

    @classmethod
    def from_config(cls, llm: LLM, cfg) -> "Selector":
        sel = cls(llm, threshold=0.5 if cfg.threshold is None else cfg.threshold, normalize=cfg.normalize,
                  batch_size=cfg.batch_size, max_abstract_chars=cfg.max_abstract_chars,
                  rationale_max_new_tokens=cfg.rationale_max_new_tokens, memo_size=cfg.memo_size)
        sel.marks_selected = bool(cfg.get("marks_selected", True))
        sel.mark_source = check_mark_source(cfg.get("mark", "threshold"))
        return sel

    # ---- prompts ----

    def messages(self, pair: SelectorPair) -> list[dict[str, str]]:
        """Table 15 as a chat: the prompt the SFT data uses (``pasa.prompts.selector_messages``)."""
        return selector_messages(pair.query, pair.title, truncate_abstract(pair.abstract, self.max_abstract_chars))

    # ---- single-forward scoring ----

    def probs(self, pairs: Sequence[SelectorPair], show_progress: bool = False) -> np.ndarray:
        """Raw next-token probabilities ``[N, 2]`` of ("True", "False") over the full vocabulary, one forward pass
        per pair; repeated pairs are scored once (and remembered across calls up to ``memo_size``)."""
        keys = [(p.query, p.title, truncate_abstract(p.abstract, self.max_abstract_chars)) for p in pairs]
        todo = list(dict.fromkeys(k for k in keys if k not in self._memo))
        chunks = range(0, len(todo), self.batch_size)
        for start in progress_bar(chunks, desc="selector", unit="batch", disable=not show_progress or len(chunks) < 2):
            chunk = todo[start:start + self.batch_size]
            out = self.llm.next_token_probs([selector_messages(q, t, a) for q, t, a in chunk], DECISIONS)
            for key, row in zip(chunk, np.asarray(out, dtype=np.float64)):
                self._remember(key, (float(row[0]), float(row[1])))
        for k in keys:  # least-recently-used eviction
            self._memo.move_to_end(k)
        result = np.array([self._memo[k] for k in keys], dtype=np.float64).reshape(len(keys), 2)
        self._trim()
        return result

    def score(self, pairs: Sequence[SelectorPair], show_progress: bool = False) -> np.ndarray:
        """P("True") per pair (renormalised over the two decisions when ``normalize``): the decision AND rank."""
        return self.scores_from_probs(self.probs(pairs, show_progress=show_progress))

    def scores_from_probs(self, probs: np.ndarray) -> np.ndarray:
        probs = np.asarray(probs, dtype=np.float64)
        if not self.normalize:
            return probs[:, 0]
        mass = probs.sum(axis=1)
        # Both decision tokens at ~0 probability: no evidence either way.
        return np.where(mass > 0, probs[:, 0] / np.maximum(mass, 1e-300), 0.5)

    # ---- generation: decision + rationale ----

    def judge(self, pairs: Sequence[SelectorPair], max_new_tokens: Optional[int] = None,
              decision_first: bool = True) -> list[Judgement]:
        """The decision and its rationale (greedy). ``decision_first`` (default): the decision is
        the one the ranking used, P("True") >= threshold from the same single forward pass, written into the
        answer as PaSa's template begins it (``True\nReason:``), and the model generates only the reason after it,
        so "why?" can never show a rationale for a decision the list did not make. A reason whose first words take
        the other side ("False", "not relevant", ...) is marked ``disagrees``. ``decision_first=False``: the model
        writes the whole answer and it is parsed (answers that break the format are counted in ``self.unparsed``
        and logged, never raised)."""
        params = SamplingParams(max_new_tokens=max_new_tokens or self.rationale_max_new_tokens, temperature=0.0)
        out: list[Judgement] = []
        scores = self.score(pairs) if decision_first and pairs else None
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start:start + self.batch_size]
            if scores is None:
                gens = self.llm.generate([self.messages(p) for p in chunk], params)
                for pair, gen in zip(chunk, gens):
                    j = parse_judgement(gen.text)
                    if j.decision is None:
                        self.unparsed += 1
                        log.warning("selector answer without a leading decision (query %r, title %r): %r",
                                    pair.query[:60], pair.title[:60], gen.text[:120])
                    out.append(j)
                continue
            decided = [bool(s >= self.threshold) for s in scores[start:start + len(chunk)]]
            heads = [f"{SELECTOR_TRUE if d else SELECTOR_FALSE}\nReason:" for d in decided]
            prompts = [self.llm.render(self.messages(p)) + h for p, h in zip(chunk, heads)]
            gens = self.llm.generate(prompts, params)
            for d, h, s, gen in zip(decided, heads, scores[start:start + len(chunk)], gens):
                reason = gen.text.strip()
                out.append(Judgement(decision=d, rationale=reason, text=f"{h} {reason}",
                                     disagrees=reason_disagrees(d, reason), score=float(s)))
        return out

    # ---- memo ----

    def _remember(self, key: tuple[str, str, str], value: tuple[float, float]) -> None:
        # Stored even when memo_size == 0: the current call reads it back before _trim() drops it.
        self._memo[key] = value
        self._memo.move_to_end(key)

    def _trim(self) -> None:
        while len(self._memo) > max(self.memo_size, 0):
            self._memo.popitem(last=False)
