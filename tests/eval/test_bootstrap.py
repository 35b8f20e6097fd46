"""Bootstrap intervals of `eval pasa`: the interval of a mean covers it and narrows with more queries;
the paired difference is tighter than the marginals when two methods move together; the equal-budget comparison
cuts the search ranking at the crawler's own queue size per query."""

import numpy as np
import pytest

from scholar_agents.eval.bootstrap import BootstrapConfig, mean_ci, paired_diff
from scholar_agents.eval.pasa.metrics import gold_ranks, recall_at_depth
from scholar_agents.eval.pasa.report import comparisons_table, crawler_pairs_table
from scholar_agents.eval.pasa.stats import comparisons, crawler_pairs, summarize


def test_mean_ci_covers_the_mean_narrows_with_n_and_is_reproducible():
    rng = np.random.default_rng(1)
    small, large = rng.uniform(size=20).tolist(), rng.uniform(size=400).tolist()
    lo, hi = mean_ci(small)
    assert lo < np.mean(small) < hi
    lo2, hi2 = mean_ci(large)
    assert (hi2 - lo2) < (hi - lo) / 2  # ~ 1/sqrt(n)
    assert mean_ci(small) == mean_ci(small)  # seeded
    assert mean_ci([0.5]) is None and mean_ci(small, BootstrapConfig(samples=0)) is None
    assert mean_ci([1.0, 1.0, 1.0]) == (1.0, 1.0)
    with pytest.raises(ValueError, match="level"):
        BootstrapConfig(level=1.5)


def test_paired_difference_sees_a_consistent_small_gain_the_marginals_cannot():
    rng = np.random.default_rng(0)
    b = rng.uniform(size=60)
    a = np.clip(b + 0.03, 0, 1)  # the same queries, 3 points better on each
    lo_a, hi_a = mean_ci(a.tolist())
    lo_b, hi_b = mean_ci(b.tolist())
    assert lo_a < hi_b  # the marginal intervals overlap ...
    d = paired_diff(a.tolist(), b.tolist())
    assert d.ci[0] > 0 and d.verdict == "above"  # ... the paired one does not
    assert paired_diff(b.tolist(), a.tolist()).verdict == "below"
    assert paired_diff(b.tolist(), b.tolist()).verdict.startswith("tie")
    with pytest.raises(ValueError, match="equal length"):
        paired_diff([1.0], [1.0, 2.0])


def test_equal_budget_cuts_the_search_at_the_crawlers_queue_size():
    ranking = ["x1", "g1v2", "x2", "x3", "g2", "x4"]
    ranks = gold_ranks(["g1", "g2", "g3"], ranking)
    assert ranks == [2, 5]
    assert recall_at_depth(ranks, 3, 4) == pytest.approx(1 / 3) and recall_at_depth(ranks, 3, 5) == pytest.approx(2 / 3)
    search = [{"qid": f"q{i}", "recall_at_20": 0.5, "gold_ranks": [2, 30], "n_gold_ids": 2, "n_returned": 100}
              for i in range(10)]
    # the crawler finds both gold papers with a queue of 40 per query: above search@20 (0.5), tied with the
    # search at the same budget (both within the top 40)
    agent = [{"qid": f"q{i}", "crawler_recall": 1.0, "n_queue": 40, "actions": 3, "recall_at_20": 0.5}
             for i in range(10)]
    small = [{**a, "n_queue": 10, "crawler_recall": 0.5} for a in agent]  # a 10-paper queue vs search@10 = 0.5
    comps = comparisons({"search_bm25": search, "agent": agent, "agent_small": small,
                         "search_bm25@whole_corpus": search})
    by = {(c["crawler"], c["search"]): c for c in comps}
    assert set(by) == {("agent", "search_bm25"), ("agent_small", "search_bm25")}  # settings are never mixed
    c = by[("agent", "search_bm25")]
    assert c["crawler_recall_vs_recall_at_k"]["diff"] == pytest.approx(0.5)
    assert c["crawler_recall_vs_recall_at_k"]["verdict"] == "above"
    assert c["equal_budget"]["mean_b"] == pytest.approx(1.0) and c["equal_budget"]["diff"] == 0
    assert by[("agent_small", "search_bm25")]["equal_budget"]["mean_b"] == pytest.approx(0.5)
    assert c["actions_mean"] == 3 and c["queue_mean"] == 40 and c["budget_capped_queries"] == 0
    table = comparisons_table(comps, {"agent": "Agent"})
    assert "| Agent | search_bm25 | 10 | 3.0 / 3 | 40.0 |" in table and "Equal budget" in table


def test_summary_carries_an_interval_per_metric():
    rows = {"search": [{"qid": str(i), "recall_at_20": i / 10, "recall_at_50": 1.0, "recall_at_100": 1.0}
                       for i in range(11)]}
    s = summarize(rows)["search"]
    assert s["recall_at_20"] == pytest.approx(0.5)
    lo, hi = s["recall_at_20_ci"]
    assert lo < 0.5 < hi and s["recall_at_50_ci"] == [1.0, 1.0]
    assert "crawler_recall_ci" not in s


def test_crawler_rows_are_paired_against_each_other_within_a_setting():
    sft = [{"qid": f"q{i}", "crawler_recall": 0.5} for i in range(8)]
    ppo = [{"qid": f"q{i}", "crawler_recall": 0.5 + (0.5 if i < 2 else 0.0)} for i in range(8)]
    search = [{"qid": f"q{i}", "recall_at_20": 0.5, "gold_ranks": [1], "n_gold_ids": 2} for i in range(8)]
    pairs = crawler_pairs({"agent_sft": sft, "search": search, "agent_ppo": ppo,
                           "agent_sft@whole_corpus": sft, "agent_ppo@whole_corpus": sft[:4]})
    assert [(p["row"], p["minus"], p["queries"]) for p in pairs] == [
        ("agent_ppo", "agent_sft", 8), ("agent_ppo@whole_corpus", "agent_sft@whole_corpus", 4)]
    d = pairs[0]["crawler_recall"]
    assert d["diff"] == pytest.approx(0.125) and d["ci"][0] >= 0
    table = crawler_pairs_table(pairs, {"agent_ppo": "PPO", "agent_sft": "SFT"})
    assert "| PPO | SFT | 8 | 0.625 vs 0.500: **+0.125**" in table
