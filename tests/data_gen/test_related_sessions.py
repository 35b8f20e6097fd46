"""Imitation data for related expand sessions (data_gen crawler_sessions with crawler.env.related_expand): a related
search is selected when its hits add a gold paper the query's searches had not found; the prompt shows the paper
and its outline of related searches, never the gold; the response is in the expand grammar."""

import random
from collections import Counter

from scholar_agents.data_gen.crawler_sessions import related_expand_sessions
from scholar_agents.pasa.actions import parse_response
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from tests.fixtures.crawl import ZEBRA_PAPERS as PAPERS, ZEBRA_QUERY as Q, bm25_world


def test_a_related_search_that_adds_gold_is_the_positive(tmp_path):
    store, search = bm25_world(tmp_path, PAPERS)
    env = CrawlEnv(store, search, CrawlConfig(search_k=1, related_k=1, related_expand=True, max_actions=5,
                                              max_queue=50))
    stats = Counter()
    [row] = related_expand_sessions(env, search, [(Q, store.get("P1"), {"P1"})],
                                    lambda q, p: random.Random(0), 0.0, stats)
    meta = row["meta"]
    assert meta["related"] and meta["gold_sections"] == ["Key phrase: cryptic coloration evolution"]
    prompt, answer = row["messages"][0]["content"], row["messages"][-1]["content"]
    assert "Key phrase: cryptic coloration evolution" in prompt and "Title" in prompt
    assert "G1" not in prompt and "Cryptic coloration evolution in mammals" not in prompt  # never the gold
    parsed = parse_response(answer)
    assert [a.kind for a in parsed.actions] == ["expand", "stop"] and not parsed.errors
    assert stats["related_searches"] == len(env.outline(store.get("P1")))
    # the same search adds nothing when the query's searches had already found the gold paper
    [row] = related_expand_sessions(env, search, [(Q, store.get("P1"), {"P1", "G1"})],
                                    lambda q, p: random.Random(0), 0.0, Counter())
    assert row["meta"]["gold_sections"] == [] and row["messages"][-1]["content"].strip() == "[Stop]"
    store.close()


def _dg(**over):
    from omegaconf import OmegaConf

    from scholar_agents.data_gen.crawler_sessions import CrawlerSessionsConfig

    cfg = OmegaConf.structured(CrawlerSessionsConfig(teacher="verified", hindsight=False, other_section_prob=0.0,
                                                     papers_per_query=3, search_k=1))
    return OmegaConf.merge(cfg, over)


def test_gold_blind_related_sessions_follow_the_user_querys_hits(tmp_path):
    """related_found=user_query: the papers followed are the sectionless hits of the user's own words (what serving
    searches), and a related search is the positive when it adds gold to those hits, never to the teacher's."""
    from scholar_agents.data_gen.crawler_sessions import _user_query_related_jobs, sessions_for_shard

    store, search = bm25_world(tmp_path, PAPERS)
    env = CrawlEnv(store, search, CrawlConfig(search_k=1, related_k=1, related_expand=True, max_actions=5,
                                              max_queue=50))
    stats = Counter()
    jobs = _user_query_related_jobs(env, search, store, [Q], _dg(), 0, stats)
    assert [(q.qid, p.paper_id, found) for q, p, found in jobs] == [("z", "P1", {"P1"})]
    assert stats["user_query_hits"] == 1 and stats["user_query_hits_gold"] == 0
    rows, st = sessions_for_shard(None, env, search, store, [Q], _dg(related_found="user_query"), 0)
    related = [r for r in rows if r["meta"].get("related")]
    assert [r["meta"]["paper_id"] for r in related] == ["P1"]
    assert related[0]["meta"]["gold_sections"] == ["Key phrase: cryptic coloration evolution"]
    assert st["related_sessions_adding_gold"] == 1
    # without related expansion no related session is built, whatever related_found says
    plain = CrawlEnv(store, search, CrawlConfig(search_k=1, max_actions=5, max_queue=50))
    rows, _ = sessions_for_shard(None, plain, search, store, [Q], _dg(related_found="user_query"), 0)
    assert not [r for r in rows if r["meta"].get("related")]
    store.close()


def test_related_found_is_validated_in_one_line(tmp_path):
    import pytest
    from hydra import compose, initialize_config_dir

    from scholar_agents import hydra_app
    from scholar_agents.data_gen.crawler_sessions import crawler_sessions as run
    from scholar_agents.validation import UsageError

    from hydra.core.global_hydra import GlobalHydra

    hydra_app._register_resolvers()
    hydra_app.register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(hydra_app.CONF_DIR)):
        cfg = compose("data_gen_crawler_sessions", overrides=["data_gen.related_found=hindsight",
                                                              f"out_dir={tmp_path}/out"])
    with pytest.raises(UsageError, match="data_gen.related_found must be one of user_query, teacher"):
        run(cfg)
