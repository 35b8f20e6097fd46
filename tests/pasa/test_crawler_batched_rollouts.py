"""Batched crawler rollouts with the tiny random model: many queries advance together, whatever the model writes
is counted and never crashes a batch, and the trajectory records agree with the token ids the model generated."""

import pytest

from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.pasa.crawler import Crawler, CrawlerConfig, crawl
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.trajectory import S_Q, QueryTrajectory
from tests.fixtures.crawl import QUERY

QUERIES = [QUERY, ScholarQuery("q2", "attention based sequence models", before="2019-01-01"),
           ScholarQuery("q3", "image recognition with convolutional networks", before=None)]


def rollout(store, search, llm, batch_sessions, logprobs=False):
    env = CrawlEnv(store, search, CrawlConfig(search_k=3, max_sessions=2), tokenizer=llm.tokenizer)
    crawler = Crawler(llm, CrawlerConfig(max_new_tokens=12, logprobs=logprobs, batch_sessions=batch_sessions))
    return env, crawler, crawl(env, crawler, QUERIES, progress=False)


def test_batched_rollout_records_are_consistent_with_token_ids(toy, tiny_llm):
    store, search = toy
    env, crawler, trajs = rollout(store, search, tiny_llm, batch_sessions=8, logprobs=True)
    assert [t.qid for t in trajs] == ["q1", "q2", "q3"]
    assert crawler.calls == 1  # the three S_q sessions went out in ONE generate call
    tok = tiny_llm.tokenizer
    for t in trajs:
        assert t.sessions and t.sessions[0].start_state == S_Q and t.gen_tokens > 0
        for s in t.sessions:
            assert s.prompt_token_ids == tiny_llm.prompt_token_ids(s.prompt)
            assert tok.decode(s.response_token_ids, skip_special_tokens=True) == s.response_text
            assert len(s.response_logprobs) == len(s.response_token_ids)
            assert all(lp <= 0 for lp in s.response_logprobs)
            for a in s.actions:  # a random model rarely writes an action; any it writes must align
                assert a.token_start is not None and a.token_end <= len(s.response_token_ids)
        # every parse problem is counted per code, and the counts match the records
        assert sum(t.grammar_errors.values()) == sum(len(s.grammar_errors) for s in t.sessions)
        assert QueryTrajectory.from_dict(t.to_dict()).to_dict() == t.to_dict()
    assert env.timing["env_other"] > 0 and crawler.timing["gen"] > 0


def test_batched_equals_one_session_at_a_time(toy, tiny_llm):
    store, search = toy
    _, _, batched = rollout(store, search, tiny_llm, batch_sessions=8)
    _, crawler, single = rollout(store, search, tiny_llm, batch_sessions=1)
    assert crawler.calls == sum(len(t.sessions) for t in single)
    for a, b in zip(batched, single):
        assert [s.response_token_ids for s in a.sessions] == [s.response_token_ids for s in b.sessions]
        assert a.paper_ids == b.paper_ids


def test_prompts_over_the_context_are_counted_not_raised(toy, tiny_llm):
    store, search = toy
    long_query = ScholarQuery("long", "graph " * 600, before=None)  # > the tiny model's 512-token context
    env = CrawlEnv(store, search, CrawlConfig(search_k=2, max_sessions=1), tokenizer=tiny_llm.tokenizer)
    crawler = Crawler(tiny_llm, CrawlerConfig(max_new_tokens=8))
    trajs = crawl(env, crawler, [long_query, QUERIES[1]], progress=False)
    assert crawler.failed_prompts == 1
    assert trajs[0].sessions[0].finish_reason == "error" and trajs[0].grammar_errors == {"no_action": 1}
    assert trajs[1].sessions[0].finish_reason in ("stop", "length")


def test_crawl_rejects_a_zero_batch(toy, tiny_llm):
    store, search = toy
    env = CrawlEnv(store, search)
    with pytest.raises(ValueError):
        crawl(env, Crawler(tiny_llm), QUERIES, batch_sessions=0, progress=False)


@pytest.mark.vllm
def test_crawl_with_a_vllm_served_model(toy, vllm_server):
    """The same rollout against a real `vllm serve` (SmolLM2) through the openai backend: records stay
    consistent with the token ids the server generated, and the batch never fails on what the model writes."""
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig

    store, search = toy
    llm = build_llm(LLMConfig(backend="openai", model=str(vllm_server.model_dir), base_url=vllm_server.base_url,
                              max_concurrency=4, timeout_s=300))
    try:
        env = CrawlEnv(store, search, CrawlConfig(search_k=3, max_sessions=2, instructed_prompts=True),
                       tokenizer=llm.tokenizer)
        trajs = crawl(env, Crawler(llm, CrawlerConfig(max_new_tokens=48, logprobs=True)), QUERIES, progress=False)
    finally:
        llm.close()
    for t in trajs:
        for s in t.sessions:
            assert s.prompt_token_ids and s.response_token_ids
            assert llm.tokenizer.decode(s.response_token_ids, skip_special_tokens=True) == s.response_text
            assert len(s.response_logprobs) == len(s.response_token_ids)
            assert s.token_spans_ok
