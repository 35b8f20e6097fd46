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
