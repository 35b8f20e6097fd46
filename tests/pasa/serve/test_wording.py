"""The page's crawl log in words (``pasa.serve.wording``), from real sessions of the hand-made crawl world (fixture
`toy`: the store whose answers are known) turned into the summaries the page streams."""

from scholar_agents.pasa.serve.service import action_summary
from scholar_agents.pasa.serve.wording import session_line
from tests.fixtures.crawl import QUERY, gen


def _line(rec, title=None):
    return session_line(rec.start_state, rec.paper_id, action_summary(rec),
                        [e.get("code") for e in rec.grammar_errors], title)


def test_sessions_of_a_real_crawl_read_as_sentences(toy):
    from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv

    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=1, max_sessions=10))
    [state] = env.reset([QUERY])
    [search_rec] = env.step(env.next_sessions([state], 1), [gen("[Search] molecule property prediction graph [Stop]")])
    [a] = search_rec.actions[:1]
    assert _line(search_rec) == (f"Searched \u201cmolecule property prediction graph\u201d: {a.candidates} paper"
                                 f"{'' if a.candidates == 1 else 's'}, {len(a.added)} new")
    [sess] = env.next_sessions([state], 1)
    title = store.get("A").title
    [expand_rec] = env.step([sess], [gen("[Expand] introduction [Expand] Conclusion [Stop]")])
    line = _line(expand_rec, title)
    assert line.startswith(f"Expanded \u201c{title[:59]}")
    intro = expand_rec.actions[0]
    assert f"\u201cintroduction\u201d cites {intro.candidates} papers, {len(intro.added)} new, " \
           f"{intro.dropped_by_date} after the date" in line
    assert "could not open \u201cConclusion\u201d (no such section in this paper)" in line
    [b] = env.next_sessions([state], 1)
    [again] = env.step([b], [gen("[Stop]")])
    assert _line(again) == f"Expanded {b.paper.paper_id}: stopped without opening a section"


def test_an_expansion_that_adds_nothing_and_a_search_of_nothing():
    read = [{"kind": "expand", "argument": "Related Work", "status": "executed", "added": 0, "candidates": 4}]
    assert session_line("S_q+p", "2405.15318", read) == \
        "Expanded 2405.15318: no section cited anything new (read \u201cRelated Work\u201d)"
    related = [dict(read[0], argument="Title", found_by="related")]
    assert session_line("S_q+p", "2405.15318", related) == \
        "Expanded 2405.15318: no related search found anything new (searched \u201cTitle\u201d)"
    assert session_line("S_q", None, [], ["missing_stop"]) == \
        "Read the question and searched nothing; its answer broke the action grammar (missing_stop)"
    fallback = [{"kind": "search", "argument": "q", "status": "executed", "added": 7, "candidates": 20,
                 "fallback": True}]
    assert session_line("S_q", None, fallback) == \
        "Searched your question as written (the Crawler wrote no valid search): 20 papers, 7 new"
