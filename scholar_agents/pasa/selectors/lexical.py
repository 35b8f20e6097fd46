"""The lexical Selector (ours): P(relevant) of a <query, paper> pair from the words they share, no
embedder and no LLM — a logistic regression over eight features that ``scholar train selector_lexical`` fits on
labelled pairs:

- BM25 of the query against title + abstract and against the title alone (Lucene BM25, k1 = 1.5, b = 0.75, as
  ``search=bm25``; the BM25 search's tokenizer: lower case, ``\\w\\w+``, English stop words dropped);
- the IDF-weighted share of the query's terms found in title + abstract, and in the title;
- shared query bigrams in each; the IDF of the rarest query term the paper contains;
- log(1 + the paper's terms).

Why it exists (docs/results/selector_embedding.md, "Which features separate gold papers from each miner's negatives"): among the papers
a DENSE search returned for a query, meaning no longer separates the gold ones — the search already ranked by it
(held-out AUC of zero-shot MiniLM cosine 0.502, of the embedding Selector 0.559) — while the words do (BM25 0.650),
and this head, fitted on dense-mined training queries, does better than BM25 on held-out ones. On BM25's own hits it
is near chance: it is the route ``selector=provenance`` takes for papers a dense search found, not a Selector on its
own.

The model directory: ``lexical_head.safetensors`` (the standardiser's mean and scale, the logistic weights and
intercept), ``terms.json`` (the document frequencies the IDF reads, fixed at fitting time so a feature means the
same at scoring time) and ``selector_meta.json`` (the card: threshold fitted on dev, dev / held-out figures).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
from safetensors.numpy import load_file, save_file

from scholar_agents.pasa.selectors.llm import Judgement, SelectorPair, truncate_abstract
from scholar_agents.pasa.selectors.pair_judge import META_FILE, PairJudge, pair_text, read_meta
from scholar_agents.runtime.jax_guard import import_bm25s  # bm25s imports JAX: import_bm25s keeps it on the CPU

HEAD_FILE = "lexical_head.safetensors"
TERMS_FILE = "terms.json"
FEATURES = ("bm25", "bm25_title", "idf_cover", "idf_cover_title", "bigrams", "bigrams_title", "rarest_hit",
            "log_length")
TOKEN = re.compile(r"(?u)\b\w\w+\b")  # bm25s's default token pattern: what our BM25 search splits on
BUNDLED_DIR = Path(__file__).resolve().parents[2] / "assets" / "selector_lexical"


def resolve_lexical_dir(model: Optional[str]) -> Path:
    """``selector.lexical_model``: null / "" / bundled = the head the package ships."""
    return BUNDLED_DIR if model in (None, "", "bundled") else Path(str(model))


def stop_words() -> frozenset:
    return frozenset(import_bm25s().stopwords.STOPWORDS_EN)


def tokens(text: str, stop: frozenset) -> list[str]:
    return [w for w in TOKEN.findall((text or "").lower()) if w not in stop]


class TermStats:
    """Document frequencies over a set of texts and BM25's IDF (the Lucene variant bm25s uses). Term-level, unlike
    ``eval.selector_baselines.bm25_scores`` (one score a pair): coverage and the rarest shared term need each term's
    IDF; a term never seen gets the IDF of a document frequency of 0 (the rarest there is)."""

    def __init__(self, df: dict[str, int], n: int, avg_len: float, stop: Optional[frozenset] = None):
        self.df, self.n, self.avg_len = dict(df), max(int(n), 1), float(avg_len) or 1.0
        self.stop = stop_words() if stop is None else stop

    @classmethod
    def of_texts(cls, texts: Sequence[str], stop: Optional[frozenset] = None) -> "TermStats":
        stop = stop_words() if stop is None else stop
        docs = [tokens(t, stop) for t in dict.fromkeys(texts)]  # each distinct text counts once
        return cls(Counter(w for d in docs for w in set(d)), len(docs),
                   sum(map(len, docs)) / len(docs) if docs else 1.0, stop)

    def idf(self, w: str) -> float:
        df = self.df.get(w, 0)
        return math.log(1 + (self.n - df + 0.5) / (df + 0.5))

    def bm25(self, q: list[str], d: list[str], k1: float = 1.5, b: float = 0.75) -> float:
        tf, norm = Counter(d), k1 * (1 - b + b * len(d) / self.avg_len)
        return sum(self.idf(w) * tf[w] * (k1 + 1) / (tf[w] + norm) for w in set(q) if w in tf)

    def cover(self, q: list[str], d: list[str]) -> float:
        total = sum(self.idf(w) for w in set(q))
        return sum(self.idf(w) for w in set(q) & set(d)) / total if total else 0.0

    def to_json(self) -> dict:
        return {"n": self.n, "avg_len": self.avg_len, "df": dict(sorted(self.df.items()))}


def pair_features(query: str, title: str, doc: str, stats: TermStats) -> list[float]:
    """The eight features (``FEATURES`` order) of a query against a paper's title and its ``title. abstract``."""
    q, t, d = tokens(query, stats.stop), tokens(title, stats.stop), tokens(doc, stats.stop)
    qb = set(zip(q, q[1:]))
    return [stats.bm25(q, d), stats.bm25(q, t), stats.cover(q, d), stats.cover(q, t),
            len(qb & set(zip(d, d[1:]))), len(qb & set(zip(t, t[1:]))),
            max([stats.idf(w) for w in set(q) & set(d)] or [0.0]), math.log1p(len(d))]


def feature_matrix(stats: TermStats, queries: Sequence[str], titles: Sequence[str],
                   abstracts: Sequence[str]) -> np.ndarray:
    """``[N, len(FEATURES)]``: each query against its paper's title and ``title. abstract``."""
    rows = [pair_features(q, t, pair_text(t, a), stats) for q, t, a in zip(queries, titles, abstracts)]
    return np.array(rows, dtype=np.float64).reshape(-1, len(FEATURES))


def save_lexical_head(out_dir: str | Path, mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: float,
                      stats: TermStats, meta: dict) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file({"mean": np.asarray(mean, dtype=np.float64), "scale": np.asarray(scale, dtype=np.float64),
               "coef": np.asarray(coef, dtype=np.float64), "intercept": np.array([intercept], dtype=np.float64)},
              str(out / HEAD_FILE))
    (out / TERMS_FILE).write_text(json.dumps(stats.to_json(), separators=(",", ":")))
    (out / META_FILE).write_text(json.dumps(meta, indent=2))
    return out


class LexicalSelector(PairJudge):
    """Batched P(relevant) = sigmoid(coef · standardised features + intercept)."""

    def __init__(self, stats: TermStats, mean: np.ndarray, scale: np.ndarray, coef: np.ndarray, intercept: float,
                 threshold: Optional[float] = None, max_abstract_chars: Optional[int] = None,
                 memo_size: int = 100_000, model_id: str = "", meta: Optional[dict] = None) -> None:
        super().__init__(threshold, max_abstract_chars, memo_size, model_id, meta)
        self.stats = stats
        self.mean, self.scale, self.coef = (np.asarray(x, dtype=np.float64).reshape(-1) for x in (mean, scale, coef))
        if not len(self.mean) == len(self.scale) == len(self.coef) == len(FEATURES):
            raise ValueError(f"{model_id or 'lexical head'}: expected {len(FEATURES)} weights ({', '.join(FEATURES)}), "
                             f"got mean {len(self.mean)}, scale {len(self.scale)}, coef {len(self.coef)}")
        self.intercept = float(intercept)

    @classmethod
    def load(cls, model_dir: str | Path, threshold: Optional[float] = None, **kwargs) -> "LexicalSelector":
        model_dir = Path(model_dir)
        missing = [f for f in (HEAD_FILE, TERMS_FILE) if not (model_dir / f).is_file()]
        if missing:
            raise FileNotFoundError(f"selector.lexical_model: no lexical Selector at {model_dir} ({', '.join(missing)} "
                                    "missing); fit one with `scholar train selector_lexical` (bundled: the one the "
                                    "package ships)")
        t = load_file(str(model_dir / HEAD_FILE))
        terms = json.loads((model_dir / TERMS_FILE).read_text())
        stats = TermStats(terms["df"], terms["n"], terms["avg_len"])
        return cls(stats, t["mean"], t["scale"], t["coef"], float(t["intercept"][0]), threshold=threshold,
                   model_id=str(model_dir), meta=read_meta(model_dir), **kwargs)

    def probabilities_of_features(self, x: np.ndarray) -> np.ndarray:
        z = ((x - self.mean) / self.scale) @ self.coef + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def key_probabilities(self, keys: Sequence[tuple[str, str, str]], show_progress: bool = False) -> np.ndarray:
        del show_progress  # microseconds a pair
        return self.probabilities_of_features(feature_matrix(self.stats, *zip(*keys)) if keys
                                              else np.zeros((0, len(FEATURES))))

    def pair_probabilities(self, queries: Sequence[str], texts: Sequence[str],
                           show_progress: bool = False) -> np.ndarray:
        """A (query, text) pair with no separate title: the text is read as an untitled abstract."""
        return self.key_probabilities([(q, "", t) for q, t in zip(queries, texts)])

    def judge(self, pairs: Sequence[SelectorPair], max_new_tokens: Optional[int] = None,
              n_evidence: int = 4) -> list[Judgement]:
        """The decision and its score, and as evidence what the score reads: the query's terms the paper contains,
        rarest first (with their IDF and where they occur), and the ones it lacks."""
        del max_new_tokens
        scores = self.score(pairs)
        out = []
        for pair, s in zip(pairs, scores):
            q = list(dict.fromkeys(tokens(pair.query, self.stats.stop)))
            title = set(tokens(pair.title, self.stats.stop))
            doc = set(tokens(pair_text(pair.title, truncate_abstract(pair.abstract, self.max_abstract_chars)),
                             self.stats.stop))
            hit = sorted((w for w in q if w in doc), key=self.stats.idf, reverse=True)
            miss = sorted((w for w in q if w not in doc), key=self.stats.idf, reverse=True)
            decision = bool(s >= self.threshold)
            head = f"{'True' if decision else 'False'} (P(relevant) {s:.2f}, threshold {self.threshold:.2f})."
            found = ", ".join(f'"{w}" (IDF {self.stats.idf(w):.1f}{", title" if w in title else ""})'
                              for w in hit[:n_evidence])
            rationale = (f"Evidence, the query's terms in the paper, rarest first: {found}" if hit
                         else "Evidence: the paper contains none of the query's terms")
            if miss:
                rationale += "; missing: " + ", ".join(f'"{w}"' for w in miss[:n_evidence])
            rationale += "."
            out.append(Judgement(decision=decision, rationale=rationale, text=f"{head} {rationale}", score=float(s)))
        return out
