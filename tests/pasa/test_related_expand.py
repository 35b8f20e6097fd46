"""Related expansion (crawler.env.related_expand, ours): a paper without sections gets an S_q+p session whose
outline is searches derived from it (its title, key phrases of its abstract). One outline per session feeds the
prompt, the constrained grammar and the executor; the papers it adds say they came from a related search; one
predicate decides which papers get a session, for the environment and PPO's rollout alike."""

import pytest

from scholar_agents.papers.paper import Paper
from scholar_agents.pasa.agent import queue_provenance
from scholar_agents.pasa.crawl_env import (
    KEY_PHRASE_SECTION, RELATED, TITLE_SECTION, CrawlConfig, CrawlEnv, gets_session, related_outline,
)
from scholar_agents.pasa.trajectory import S_QP
from scholar_agents.validation import UsageError
from tests.fixtures.crawl import QUERY, bm25_world, gen, run_session, toy_papers

RELATED_CFG = dict(search_k=1, related_expand=True, related_k=3, max_actions=20, max_queue=50)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    papers = toy_papers() + [
        Paper("G", "Equivariant message passing for molecular dynamics",
              "We propose equivariant graph networks that learn interatomic potentials for molecular dynamics "
              "simulations with message passing.", "2019-05-01"),
    ]
    store, search = bm25_world(tmp_path_factory.mktemp("related_store"), papers)
    yield store, search
    store.close()


def test_a_sectionless_paper_gets_a_session_only_under_the_switch(world):
    store, _ = world
    c, g = store.get("C"), store.get("G")  # no sections
    assert not gets_session(c, CrawlConfig())  # PaSa's rule here: no sections, no session
    assert gets_session(c, CrawlConfig(**RELATED_CFG)) and gets_session(store.get("A"), CrawlConfig())
    assert gets_session(c, CrawlConfig(skip_sectionless=False))
    assert not gets_session(None, CrawlConfig(**RELATED_CFG))
    outline = related_outline(g, CrawlConfig(**RELATED_CFG))
    assert outline[0].name == TITLE_SECTION and outline[0].query == g.title
    phrases = [o for o in outline if o.name.startswith(KEY_PHRASE_SECTION)]
    assert len(phrases) == 3 and all(o.query and o.query.lower() in g.abstract.lower() for o in phrases)
    assert all(o.related for o in outline)


def test_the_outline_feeds_prompt_grammar_and_executor(world):
    store, search = world
    env = CrawlEnv(store, search, CrawlConfig(**RELATED_CFG))
    [state] = env.reset([QUERY])
    sess = env.expand_session(state, "G", depth=1)
    names = [o.name for o in sess.outline]
    content = sess.prompt[0]["content"]
    assert all(f'"{n}"' in content for n in names)  # the prompt shows the outline's names as sections
    from scholar_agents.pasa.crawler import Crawler, CrawlerConfig

    grammar = Crawler(None, CrawlerConfig(constrained=True)).constraint(sess)
    assert all(n in str(grammar) for n in names)  # the grammar allows exactly those names
    [rec] = env.step([sess], [gen(f"[Expand] {TITLE_SECTION} [Expand] {names[1]} [Expand] Introduction [Stop]")])
    title, phrase, unknown, _ = rec.actions
    assert title.status == "executed" and title.found_by == RELATED and title.candidates == 3
    assert phrase.status == "executed" and phrase.found_by == RELATED
    assert unknown.status == "unknown_section"  # a heading the outline does not offer
    assert all(store.get(p).date < QUERY.before for a in (title, phrase) for p in a.added)  # the before-date holds
    assert rec.related  # the record says it was a related session (a [Stop]-only one adds nothing to show it)
    [stopped] = env.step([env.expand_session(state, "C", depth=1)], [gen("[Stop]")])
    assert stopped.related and not stopped.added
    prov = queue_provenance([state.traj], "bm25")
    assert prov and set(prov.values()) == {RELATED}
    # the trajectory round-trips with its provenance
    from scholar_agents.pasa.trajectory import QueryTrajectory

    again = QueryTrajectory.from_dict(state.traj.to_dict())
    assert again.sessions[0].actions[0].found_by == RELATED


def test_a_crawl_expands_sectionless_hits_and_batches_related_searches(world):
    store, search = world
    env = CrawlEnv(store, search, CrawlConfig(**{**RELATED_CFG, "search_k": 4}))
    [state] = env.reset([QUERY])
    run_session(env, [state], "[Search] graph neural networks molecules [Stop]")
    sessions = env.next_sessions([state], 8)
    assert sessions and all(s.start_state == S_QP for s in sessions)
    assert any(not s.paper.sections for s in sessions)  # sectionless hits now have sessions
    calls, searches = env.search_calls, env.searches
    outs = [gen(" ".join(f"[Expand] {o.name}" for o in s.outline[:2]) + " [Stop]") for s in sessions]
    recs = env.step(sessions, outs)
    related = [a for r in recs for a in r.actions if a.found_by == RELATED]
    assert len(related) >= 2
    assert env.search_calls - calls == 1  # every related search of the batch in ONE search_batch call
    assert env.searches - searches == len(related)
    # papers with sections still expand their references (found_by left to the action kind)
    refs = [a for r in recs for a in r.actions if a.kind == "expand" and a.status == "executed" and not a.found_by]
    assert all(store.get(r.paper_id).sections for r in recs if any(a in refs for a in r.actions))
    assert all(r.related == (not store.get(r.paper_id).sections) for r in recs)


def test_without_the_switch_nothing_changes(world):
    store, search = world
    env = CrawlEnv(store, search, CrawlConfig(search_k=4))
    [state] = env.reset([QUERY])
    run_session(env, [state], "[Search] graph neural networks molecules [Stop]")
    assert all(s.paper.sections for s in env.next_sessions([state], 8))


def test_unbounded_budgets_are_refused_in_one_line():
    with pytest.raises(UsageError, match="crawler.env.max_actions, crawler.env.max_queue"):
        CrawlConfig(related_expand=True)
    with pytest.raises(UsageError, match="related_k"):
        CrawlConfig(**{**RELATED_CFG, "related_k": 0})


def test_ppo_rollout_uses_the_same_predicate(world):
    from scholar_agents.train.ppo.rollout import starts_session

    store, search = world
    on = CrawlEnv(store, search, CrawlConfig(**RELATED_CFG))
    off = CrawlEnv(store, search, CrawlConfig())
    c = store.get("C")
    assert starts_session(on, 1, c) and not starts_session(off, 1, c)
    assert not starts_session(on, 3, c)  # the depth limit still holds


def test_the_users_words_are_searched_by_default_where_a_user_searches():
    """`pasa search`, `pasa serve` and eval pasa's default agent row always search the user's words; the presets
    (PPO, data generation) keep the learned policy alone."""
    from scholar_agents.hydra_app import compose

    for task in ("pasa_search", "pasa_serve"):
        assert compose(task, []).crawler.env.search_user_query is True
    rows = compose("eval_pasa", []).rows
    assert [r.get("search_user_query") for r in rows if r.name == "agent"] == [True]
    assert compose("train_crawler_ppo", []).crawler.env.search_user_query is False
