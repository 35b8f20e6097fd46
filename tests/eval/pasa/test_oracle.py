"""The gold-blind oracle (eval/pasa/oracle.py) on a world whose answer is known: the gold paper shares no word
with the request, but an abstract of a paper the request finds names it, so only following that paper (a related
search) reaches it; the oracle never reads the gold's title to write a search."""

import pytest

from scholar_agents.eval.pasa.oracle import gold_blind_oracle
from scholar_agents.pasa.crawl_env import CrawlConfig
from tests.fixtures.crawl import ZEBRA_PAPERS as PAPERS, ZEBRA_QUERY as Q, bm25_world

@pytest.fixture(scope="module")
def world(tmp_path_factory):
    store, search = bm25_world(tmp_path_factory.mktemp("oracle"), PAPERS)
    yield store, search
    store.close()


def test_only_following_a_found_paper_reaches_the_gold(world):
    store, search = world
    cfg = CrawlConfig(search_k=1, related_k=1, related_expand=True, max_actions=5, max_queue=50)
    [one] = gold_blind_oracle(search, store, [Q], [Q.before], cfg, max_searches=1)
    assert "G1" not in one.found  # one search: the request's candidates find P1, not the gold
    [two] = gold_blind_oracle(search, store, [Q], [Q.before], cfg, max_searches=2)
    # the request's search adds no gold but is kept so that P1 can be followed; P1's key phrase reaches G1
    assert two.searched == ["study zebra stripes", "cryptic coloration evolution"] and two.rounds == [1, 2]
    assert two.found == ["P1", "G1"]
    [blind] = gold_blind_oracle(search, store, [Q], [Q.before], cfg, max_searches=2, follow=0)
    assert "G1" not in blind.found and set(blind.rounds) == {1}  # following nothing: the request alone misses it
    assert "F1" not in two.found  # the before-date holds for related searches
    assert all("G1" != s for s in two.searched)


def test_a_budget_below_one_is_refused(world):
    store, search = world
    with pytest.raises(ValueError, match="max_searches"):
        gold_blind_oracle(search, store, [Q], [Q.before], CrawlConfig(), max_searches=0)


def test_eval_pasa_ceiling_and_rerank_rows(tmp_path, tmp_path_factory, tiny_model_dir):
    """The rows item by item in one run: the agent with related expansion and the user's words searched, the
    gold-blind oracle beside the hindsight teacher (the report says which is reachable), and "search, then Selector
    re-rank" at the agent's number of papers, paired with the agent's ranked top 10."""
    import json

    from scholar_agents.eval.pasa.command import pasa
    from scholar_agents.hydra_app import compose
    from tests.fixtures.pasa_eval import tiny_eval_overrides

    out = tmp_path / "out"
    rows = ('[{name: search_bm25, method: search, search: bm25}, '
            '{name: agent, method: agent, search_user_query: true, related_expand: true, instructed_prompts: true}, '
            '{name: teacher, method: verified_teacher}, '
            '{name: oracle, method: gold_blind_oracle, max_searches: 3}, '
            '{name: rerank, method: search_rerank, search: bm25, budget_of: agent}]')
    overrides = tiny_eval_overrides(tmp_path_factory, out, tiny_model_dir, rows, "queries.limit=2", "chunk_queries=2",
                                    "crawler.env.max_sessions=2", "crawler.policy.max_new_tokens=8")
    res = pasa(compose("eval_pasa", overrides))
    s = res["summary"]
    assert set(s) == {"search_bm25", "agent", "teacher", "oracle", "rerank"}
    agent = [json.loads(x) for x in (out / "per_query" / "agent.jsonl").read_text().splitlines()]
    rerank = [json.loads(x) for x in (out / "per_query" / "rerank.jsonl").read_text().splitlines()]
    assert all(a["user_query_searches"] == 1 for a in agent)  # the user's words were searched
    # the re-rank row searched as many papers as the agent's crawl held, query by query
    assert [r["n_queue"] for r in rerank] == [max(a["n_queue"], 1) for a in agent]
    oracle = [json.loads(x) for x in (out / "per_query" / "oracle.jsonl").read_text().splitlines()]
    assert all(1 <= len(o["searched"]) <= 3 and o["rounds"][0] == 1 for o in oracle)
    summary = json.loads((out / "summary.json").read_text())
    # the agent's top 10 against the plain search's own top 10 and against the re-rank
    assert [(p["row"], p["minus"], p["minus_kind"]) for p in summary["rerank_pairs"]] == [
        ("agent", "search_bm25", "search"), ("agent", "rerank", "search_rerank")]
    plain = summary["rerank_pairs"][0]
    search_rows = [json.loads(x) for x in (out / "per_query" / "search_bm25.jsonl").read_text().splitlines()]
    want = [sum(r <= 10 for r in s["gold_ranks"]) / s["n_gold_ids"] for s in search_rows]
    assert plain["recall_at_10"]["mean_b"] == pytest.approx(sum(want) / len(want))
    assert plain["rerank_papers_mean"] is None
    report = (out / "report.md").read_text()
    assert "search, then Selector re-rank" in report and "## Ceilings" in report
    assert "No policy that cannot read the gold can reach it" in report
    ident = json.loads((out / "per_query" / "oracle.row.json").read_text())
    assert "crawler.env" in json.dumps(ident)
