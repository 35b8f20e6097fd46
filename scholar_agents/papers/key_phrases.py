"""YAKE key phrases of a text, shared by the verified Crawler teacher (candidate searches from a request) and the
crawl environment's related expansion (searches derived from a sectionless paper's abstract).

YAKE's English stopwords are extended with the boilerplate of research requests and abstracts ("papers", "study",
"propose", ...), which YAKE would otherwise keep inside phrases such as "papers study graph".
"""

from __future__ import annotations

import re
from functools import lru_cache

# AutoScholarQuery questions ("Which papers study ...?", "Could you provide me some works proposing ...") wrap the
# topic in words that are no topic: YAKE would keep them inside phrases.
QUERY_BOILERPLATE = frozenset({
    "paper", "papers", "work", "works", "study", "studies", "studied", "studying", "research", "researches",
    "article", "articles", "literature", "provide", "propose", "proposed", "proposes", "proposing", "explore",
    "explored", "explores", "exploring", "investigate", "investigated", "investigates", "investigating", "discuss",
    "discussed", "discusses", "discussing", "introduce", "introduced", "introduces", "introducing", "focus",
    "focused", "focuses", "focusing", "address", "addressed", "addresses", "addressing", "examine", "examined",
    "examines", "examining", "mention", "mentioned", "could", "would", "give", "list", "show", "shown", "shows",
    "existing", "previous", "prior", "related",
})
_WORD = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=8)
def _extractor(n: int, top: int):
    import yake  # lazy: a pure-python dependency only the teacher and related expansion need

    base = yake.KeywordExtractor(lan="en")
    return yake.KeywordExtractor(lan="en", n=n, top=top, stopwords=set(base.stopword_set) | QUERY_BOILERPLATE)


@lru_cache(maxsize=1)
def stopwords() -> frozenset[str]:
    return frozenset(_extractor(1, 1).stopword_set)


def key_phrases(text: str, top: int = 5, ngram: int = 3) -> list[str]:
    """YAKE's best ``top`` key phrases of ``text`` (most relevant first; YAKE's score is lower = better)."""
    if top < 1 or not text.strip():
        return []
    return [kw for kw, _score in _extractor(ngram, top).extract_keywords(text)]


def content_words(text: str) -> list[str]:
    """Lowercase alphanumeric tokens of >= 3 characters that are not stopwords, a trailing plural "s" removed."""
    out = []
    for w in _WORD.findall(text.lower()):
        if len(w) < 3 or w in stopwords():
            continue
        out.append(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w)
    return out
