"""`eval pasa phrasings=[...]` end to end on the tiny model — every row on the queries rewritten into
request forms, the valid-search rate and the fallback counted per agent row and per query, crawling rows paired
with search-only on the same rewritten queries, and the per-form table in the report."""

import json

from scholar_agents.hydra_app import compose
from tests.fixtures.pasa_eval import tiny_eval_overrides


def test_eval_pasa_phrasings_count_valid_searches_and_fallbacks(tmp_path, tmp_path_factory, tiny_model_dir):
    from scholar_agents.eval.pasa.command import pasa

    out = tmp_path / "out"
    rows = ('[{name: search_bm25, method: search, search: bm25}, '
            '{name: agent, method: agent, expand: false, use_selector: false, fallback_search: true}, '
            '{name: policy, method: agent, expand: false, use_selector: false}]')
    overrides = tiny_eval_overrides(
        tmp_path_factory, out, tiny_model_dir, rows, "phrasings=[original,imperative,looking_for]",
        "queries.limit=3", "chunk_queries=3", "bootstrap.samples=50",
        # 6 tokens cannot hold "[Search] <query> [Stop]": every first search is cut off, so the fallback must act
        "crawler.env.max_sessions=1", "crawler.policy.max_new_tokens=6")
    summary = pasa(compose("eval_pasa", overrides))["summary"]
    assert set(summary) == {f"{r}{f}" for r in ("search_bm25", "agent", "policy")
                            for f in ("", "~imperative", "~looking_for")}
    for form in ("", "~imperative", "~looking_for"):
        a, p = summary[f"agent{form}"], summary[f"policy{form}"]
        assert a["valid_search"] == 0.0 and a["fallback_queries"] == 3  # counted: every query fell back
        assert a["crawler_recall"] is not None and a["actions"] == 1.0  # the fallback search is the one action
        assert p["valid_search"] == 0.0 and p.get("fallback_queries") is None and p["actions"] == 0.0
        assert p["crawler_recall"] == 0.0
    per_query = [json.loads(x) for x in (out / "per_query" / "agent~imperative.jsonl").read_text().splitlines()]
    assert len(per_query) == 3 and all(r["fallback"] is True and r["fallback_searches"] == 1 for r in per_query)
    assert all(json.loads(x)["fallback"] is None
               for x in (out / "per_query" / "policy.jsonl").read_text().splitlines())
    # the rewritten question reached the Crawler (and its fallback searched it as written)
    trajs = [json.loads(x) for x in (out / "trajectories" / "agent~imperative.jsonl").read_text().splitlines()]
    assert all(t["user_query"].startswith("Give me papers") for t in trajs)
    fallbacks = [a for t in trajs for s in t["sessions"] for a in s["actions"] if a["fallback"]]
    assert [a["argument"] for a in fallbacks] == [t["user_query"] for t in trajs]
    # the same queries in every form: search-only rows pair with the crawling rows of their own form only
    comps = json.loads((out / "summary.json").read_text())["comparisons"]
    pairs = {(c["crawler"], c["search"]) for c in comps}
    assert ("agent~imperative", "search_bm25~imperative") in pairs and ("agent~imperative", "search_bm25") not in pairs
    assert len(pairs) == 6
    report = (out / "report.md").read_text()
    assert "## Phrasing robustness" in report and "| looking_for |" in report
    assert "Fallback (queries, rate)" in report and "3 (100%)" in report and "| off |" in report
