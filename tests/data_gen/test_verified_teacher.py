"""The verified Crawler teacher: candidate searches checked against the gold papers with the crawl
environment's own search on a hand-made store; greedy marginal gain keeps the candidate adding gold first and stops
when nothing adds; the session is rendered like the LLM teacher's."""

import pytest

from scholar_agents.data_gen.verified_teacher import (
    GOLD_TITLE,
    GOLD_TITLE_PHRASE,
    KEY_PHRASE,
    USER_QUERY,
    Candidate,
    candidate_queries,
    content_words,
    greedy_select,
    hindsight_phrases,
    key_phrases,
    support,
    verify_queries,
)
from scholar_agents.papers.paper import Paper
from scholar_agents.pasa.queries import ScholarQuery
from tests.fixtures.crawl import bm25_world


def test_greedy_keeps_the_largest_marginal_gain_first_and_stops_when_nothing_adds():
    cands = [Candidate("q0", USER_QUERY), Candidate("q1", KEY_PHRASE), Candidate("q2", GOLD_TITLE),
             Candidate("q3", KEY_PHRASE), Candidate("q4", KEY_PHRASE)]
    found = [["g1", "n1"], ["g2", "g3", "n2"], ["g1", "g2"], ["n3"], ["g3v2", "g4"]]  # version suffix = same paper
    kept = greedy_select(cands, found, ["g1", "g2", "g3", "g4"], max_queries=5)
    # q1 adds 2 first; then q0 (g1) and q4 (g4) add 1 each: the earlier candidate wins the tie; q2 adds nothing new
    assert [k.query for k in kept] == ["q1", "q0", "q4"]
    assert [k.added for k in kept] == [["g2", "g3"], ["g1"], ["g4"]]
    assert [k.marginal_recall for k in kept] == [0.5, 0.25, 0.25]
    assert [k.query for k in greedy_select(cands, found, ["g1", "g2", "g3", "g4"], max_queries=2)] == ["q1", "q0"]
    assert greedy_select(cands, [["n"]] * 5, ["g1"], 3) == []  # nothing finds gold: nothing kept
    with pytest.raises(ValueError):
        greedy_select(cands, found[:2], ["g1"], 3)


def test_hindsight_phrases_are_the_gold_title_words_the_query_supports():
    q = "Which papers use graph neural networks to predict molecular properties?"
    assert content_words("Graph Neural Networks for the molecules") == ["graph", "neural", "network", "molecule"]
    assert support("graph neural networks", q) == 1.0 and support("protein folding", q) == 0.0
    got = hindsight_phrases(q, ["Molecular property prediction with graph neural networks",
                                "Protein folding by deep attention"])
    phrases = [p for p, _ in got]
    assert ("Molecular property prediction with graph neural networks", GOLD_TITLE) in got  # 4 of 5 words
    assert "graph neural networks" in phrases and not any("protein" in p.lower() for p in phrases)
    assert all(support(p, q) >= 0.5 for p in phrases)
    # YAKE key phrases of the question, without its boilerplate ("papers", "use")
    kps = key_phrases(q)
    assert kps and not any(w in kp.lower().split() for kp in kps for w in ("papers", "which"))
    cands = candidate_queries(q, ["Molecular property prediction with graph neural networks"], ["GNN molecules"])
    assert cands[0] == Candidate(q, USER_QUERY)
    sources = [c.source for c in cands]
    assert sources == sorted(sources, key=[USER_QUERY, KEY_PHRASE, GOLD_TITLE, GOLD_TITLE_PHRASE, "llm"].index)
    assert len({c.query.lower() for c in cands}) == len(cands)  # de-duplicated


def _papers():
    return [
        Paper("G1", "Message passing neural networks for quantum chemistry", "Molecules as graphs.", "2017-04-04"),
        Paper("G2", "Equivariant diffusion for molecule generation in 3D", "Generating molecules.", "2022-03-01"),
        Paper("G3", "Molecular property prediction with graph transformers", "Graph transformers.", "2019-05-05"),
        Paper("N1", "Graph neural networks for social recommendation", "Social graphs.", "2019-01-01"),
        Paper("N2", "Graph neural networks for traffic forecasting", "Roads.", "2019-02-01"),
        Paper("N3", "Neural networks for image recognition", "Images.", "2015-12-10"),
        Paper("L1", "Graph neural networks for quantum chemistry of molecules: a survey", "Later.", "2023-01-01"),
    ]


@pytest.fixture(scope="module")
def teacher_world(tmp_path_factory):
    """Three gold molecule papers among graph / vision distractors and one paper from after the query date."""
    store, search = bm25_world(tmp_path_factory.mktemp("verified_store"), _papers())
    yield store, search
    store.close()


def test_verify_queries_with_the_environments_search(teacher_world):
    _, search = teacher_world
    q = ScholarQuery("q1", "graph neural networks for molecules", before="2020-06-30",
                     gold_ids=["G1", "G2", "G3"],
                     gold_titles=["Message passing neural networks for quantum chemistry",
                                  "Equivariant diffusion for molecule generation in 3D",
                                  "Molecular property prediction with graph transformers"])
    cands = [[Candidate(q.question, USER_QUERY), Candidate("image recognition", KEY_PHRASE),
              Candidate("message passing quantum chemistry", GOLD_TITLE_PHRASE),
              Candidate("molecular property prediction graph transformers", GOLD_TITLE_PHRASE),
              Candidate("equivariant diffusion molecule generation", GOLD_TITLE_PHRASE)]]
    [v] = verify_queries(search, [q], cands, ["2020-06-30"], search_k=1, max_queries=3)
    # k=1 before 2020-06-30: the user query and the first title phrase both find G1 (the earlier candidate is
    # kept), the second title phrase adds G3; G2 is dated after the query and is never found
    assert v.queries == [q.question, "molecular property prediction graph transformers"]
    assert [k.added for k in v.kept] == [["G1"], ["G3"]]
    assert [k.source for k in v.kept] == [USER_QUERY, GOLD_TITLE_PHRASE]
    assert v.teacher_recall == pytest.approx(2 / 3) and [k.marginal_recall for k in v.kept] == [1 / 3, 1 / 3]
    assert not v.fallback and v.candidates == 5
    # the user query alone: G1 in its top 1 and its top 3 (G1, N2, N1)
    assert v.raw_recall_at_k == pytest.approx(1 / 3) and v.raw_recall_at_budget == pytest.approx(1 / 3)
    # the whole corpus (crawler.env.search_date_filter=false): the later survey L1 takes the user query's top hit
    # (no gain: not kept) and G2 becomes findable
    [w] = verify_queries(search, [q], cands, [None], search_k=1, max_queries=3)
    assert w.queries == ["message passing quantum chemistry", "molecular property prediction graph transformers",
                         "equivariant diffusion molecule generation"] and w.teacher_recall == 1.0
    assert w.raw_recall_at_k == 0.0
    # nothing finds gold: the user query alone (counted), or no session
    [f] = verify_queries(search, [q], [[Candidate("image recognition", KEY_PHRASE)]], ["2020-06-30"], 1, 3)
    assert f.fallback and f.queries == [q.question] and f.teacher_recall == 0.0
    [e] = verify_queries(search, [q], [[Candidate("image recognition", KEY_PHRASE)]], ["2020-06-30"], 1, 3,
                         fallback_raw_query=False)
    assert e.kept == []
