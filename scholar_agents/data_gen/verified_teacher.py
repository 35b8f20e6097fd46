"""The verified Crawler teacher (``data_gen crawler_sessions data_gen.teacher=verified``; ours): search
queries for a training user query that are *checked* against its gold papers with the crawl environment's own
search, instead of written blind by an LLM (PaSa Table 7, ``teacher=llm``).

Candidates, in this order (the order breaks ties):

0. ``topic`` (``topic_candidate``, ours, for questions asked as requests; off = the first verified teacher): the
   question's content without its request head ("Which papers propose X?" -> "propose X",
   ``request_forms.topic``). First, so a tie with the question itself keeps the topic:
   the one search that every request form of the question contains verbatim;
1. ``user_query``: the user query itself;
2. ``key_phrase``: YAKE key phrases of the user query (``yake``, up to ``key_phrases``, n-grams up to
   ``key_phrase_ngram`` words; YAKE's English stopwords plus the question boilerplate of AutoScholarQuery such as
   "papers", "study", "propose", which YAKE would otherwise keep in phrases like "papers study graph");
3. ``gold_title`` / ``gold_title_phrase`` (hindsight, ``hindsight``): each gold paper's title and its YAKE key
   phrases, kept when the user query *supports* them: at least ``hindsight_min_support`` (default 0.5) of the
   phrase's content words occur in the user query. Content words = lowercase alphanumeric tokens of >= 3
   characters that are not stopwords, compared with a trailing plural "s" removed. The crawler thus learns to
   phrase a search the way relevant papers are titled, from words the user gave it;
4. ``llm``: the teacher LLM's Table 7 queries (``llm_candidates: true``).

Each candidate is searched (``search_k`` hits, before the query's date unless ``crawler.env.search_date_filter``
is false: the environment's own rule). Greedy marginal gain: repeatedly keep the candidate whose hits add the most
gold papers not found by the queries already kept (ties: the earlier candidate), at most ``max_queries`` of them,
until no candidate adds one. The kept queries, in the order kept, are the session's answer
``[Search] q1 ... [Stop]``. When no candidate finds a gold paper the answer is the user query alone
(``fallback_raw_query``; counted; the topic instead when ``topic`` is a candidate) — else the query yields no
search session.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from scholar_agents.data_gen.request_forms import topic
from scholar_agents.papers.ids import norm_id
from scholar_agents.papers.key_phrases import QUERY_BOILERPLATE, content_words, key_phrases  # noqa: F401 (API)
from scholar_agents.pasa.actions import MISCASED_ACTION_RE

USER_QUERY, KEY_PHRASE, GOLD_TITLE, GOLD_TITLE_PHRASE, LLM, TOPIC = (
    "user_query", "key_phrase", "gold_title", "gold_title_phrase", "llm", "topic")


@dataclass
class Candidate:
    query: str
    source: str  # topic | user_query | key_phrase | gold_title | gold_title_phrase | llm


@dataclass
class Kept:
    query: str
    source: str
    added: list[str]  # gold papers this query adds to those of the queries kept before it
    marginal_recall: float  # len(added) / gold papers of the user query


@dataclass
class VerifiedQueries:
    kept: list[Kept]
    candidates: int  # distinct candidates searched
    teacher_recall: float  # gold papers found by the kept queries / gold papers
    raw_recall_at_k: float  # the user query alone, top search_k
    raw_recall_at_budget: float  # the user query alone, top search_k x max_queries (the teacher's paper budget)
    fallback: bool = False  # no candidate found a gold paper: the user query alone
    by_source: dict[str, int] = field(default_factory=dict)
    found: list[str] = field(default_factory=list)  # the kept searches' hits, round-robin by rank, de-duplicated

    @property
    def queries(self) -> list[str]:
        return [k.query for k in self.kept]


def support(phrase: str, user_query: str) -> float:
    """Share of the phrase's content words that occur in the user query (0 for a phrase without content words)."""
    words = content_words(phrase)
    if not words:
        return 0.0
    have = set(content_words(user_query))
    return sum(w in have for w in words) / len(words)


def hindsight_phrases(user_query: str, gold_titles: Sequence[str], min_support: float = 0.5,
                      per_title: int = 5, ngram: int = 3) -> list[tuple[str, str]]:
    """(phrase, source) from the gold titles that the user query supports: the title, then its key phrases."""
    out = []
    for title in gold_titles:
        title = " ".join(str(title or "").split()).strip(" .")
        if not title:
            continue
        if support(title, user_query) >= min_support:
            out.append((title, GOLD_TITLE))
        for kp in key_phrases(title, per_title, ngram):
            if support(kp, user_query) >= min_support:
                out.append((kp, GOLD_TITLE_PHRASE))
    return out


def candidate_queries(user_query: str, gold_titles: Sequence[str], llm_queries: Sequence[str] = (), *,
                      n_key_phrases: int = 5, ngram: int = 3, hindsight: bool = True, min_support: float = 0.5,
                      per_title: int = 5, max_chars: int = 200, topic_first: bool = False) -> list[Candidate]:
    """The candidates in priority order, de-duplicated case- and space-insensitively (the first source wins)."""
    raw = []
    if topic_first:
        raw.append((topic(user_query), TOPIC))
    raw.append((user_query, USER_QUERY))
    raw += [(kp, KEY_PHRASE) for kp in key_phrases(user_query, n_key_phrases, ngram)]
    if hindsight:
        raw += hindsight_phrases(user_query, gold_titles, min_support, per_title, ngram)
    raw += [(q, LLM) for q in llm_queries]
    out, seen = [], set()
    for q, src in raw:
        q = " ".join(str(q).split())
        key = q.lower()
        # an action token inside a query cannot be written in the Table 8 grammar
        if not q or len(q) > max_chars or key in seen or MISCASED_ACTION_RE.search(q):
            continue
        seen.add(key)
        out.append(Candidate(q, src))
    return out


def greedy_select(candidates: Sequence[Candidate], found: Sequence[Sequence[str]], gold: Sequence[str],
                  max_queries: int) -> list[Kept]:
    """Greedy marginal gain: keep the candidate adding the most not-yet-found gold papers (ties: the earlier one),
    at most ``max_queries``, until none adds one. ``found[i]``: the paper ids candidate i's search returned."""
    if len(found) != len(candidates):
        raise ValueError(f"{len(found)} result lists for {len(candidates)} candidates")
    want = {norm_id(g) for g in gold if str(g).strip()}
    if not want:
        return []
    hits = [{norm_id(p) for p in f} & want for f in found]
    covered: set[str] = set()
    kept: list[Kept] = []
    used: set[int] = set()
    while len(kept) < max_queries:
        best, gain = None, 0
        for i, h in enumerate(hits):
            g = len(h - covered)
            if i not in used and g > gain:
                best, gain = i, g
        if best is None:
            break
        added = sorted(hits[best] - covered)
        covered |= hits[best]
        used.add(best)
        kept.append(Kept(candidates[best].query, candidates[best].source, added, len(added) / len(want)))
    return kept


def _round_robin(rankings: Sequence[Sequence[str]]) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for rank in range(max((len(r) for r in rankings), default=0)):
        for r in rankings:
            if rank < len(r) and r[rank] not in seen:
                seen.add(r[rank])
                out.append(r[rank])
    return out


def verify_queries(search, users: Sequence, candidates: Sequence[list[Candidate]], befores: Sequence[str | None],
                   search_k: int, max_queries: int, fallback_raw_query: bool = True) -> list[VerifiedQueries]:
    """Search every candidate of every user query in one batch and select greedily (see the module docstring).
    ``users``: ScholarQuery-like objects (``question``, ``gold_ids``)."""
    flat, owner = [], []
    for i, cands in enumerate(candidates):
        for c in cands:
            flat.append(c.query)
            owner.append(i)
    budget = search_k * max_queries
    hits = search.search_batch(flat, k=search_k, before=[befores[i] for i in owner]) if flat else []
    # the user query alone at the teacher's paper budget (search_k x max_queries): the report's raw-query recall at
    # the same number of papers; its top search_k is the raw query at the environment's k
    raw = search.search_batch([u.question for u in users], k=budget, before=list(befores)) if users else []
    per_user: list[list[list[str]]] = [[] for _ in users]
    for i, hs in zip(owner, hits):
        per_user[i].append([h.paper_id for h in hs])
    out = []
    for i, (u, cands) in enumerate(zip(users, candidates)):
        gold = {norm_id(g) for g in u.gold_ids if str(g).strip()}
        n = max(len(gold), 1)
        raw_k = {norm_id(h.paper_id) for h in raw[i][:search_k]}
        raw_b = {norm_id(h.paper_id) for h in raw[i]}
        kept = greedy_select(cands, per_user[i], u.gold_ids, max_queries)
        fallback = not kept and fallback_raw_query
        if fallback:  # the topic when it is a candidate: the search every request form of the query contains
            first = cands[0] if cands and cands[0].source == TOPIC else Candidate(u.question, USER_QUERY)
            kept = [Kept(first.query, first.source, [], 0.0)]
        by_source: dict[str, int] = {}
        for k in kept:
            by_source[k.source] = by_source.get(k.source, 0) + 1
        hit_of = {c.query: h for c, h in zip(cands, per_user[i])}
        kept_hits = [hit_of.get(k.query, [h.paper_id for h in raw[i][:search_k]]) for k in kept]
        out.append(VerifiedQueries(
            kept=kept, candidates=len(cands), teacher_recall=sum(len(k.added) for k in kept) / n,
            raw_recall_at_k=len(raw_k & gold) / n, raw_recall_at_budget=len(raw_b & gold) / n, fallback=fallback,
            by_source=by_source, found=_round_robin(kept_hits)))
    return out
