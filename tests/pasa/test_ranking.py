"""agent.ranking: the Selector's order, the crawl's, their reciprocal-rank fusion; and the
recall@10 / nDCG@10 of each order that `eval pasa` pairs against the crawl order."""

import math

import pytest

from scholar_agents.eval.bootstrap import BootstrapConfig
from scholar_agents.eval.pasa.metrics import ndcg_at_k, top_metrics
from scholar_agents.eval.pasa.report import ranking_table
from scholar_agents.eval.pasa.rows import orderings_metrics
from scholar_agents.eval.pasa.stats import ranking_pairs
from scholar_agents.hydra_app import compose
from scholar_agents.pasa.agent import AgentConfig, AgentResult, RankedPaper
from scholar_agents.pasa.ranking import RRF_K, order
from scholar_agents.pasa.trajectory import QueryTrajectory, QueueEntry
from scholar_agents.validation import UsageError


def test_orders():
    scores = [0.1, 0.9, 0.5, 0.9]
    assert order(scores, "crawl") == [0, 1, 2, 3]
    assert order(scores, "selector") == [1, 3, 2, 0]  # ties keep crawl order
    fused = order(scores, "fusion")
    # by hand: 1/(60 + selector rank) + 1/(60 + crawl rank)
    rrf = {i: 1 / (RRF_K + [4, 1, 3, 2][i]) + 1 / (RRF_K + i + 1) for i in range(4)}
    assert fused == sorted(range(4), key=lambda i: -rrf[i]) == [1, 0, 3, 2]
    # a paper the crawl found first keeps the top against a later one the Selector scores a hair higher
    assert order([0.50, 0.51, 0.0], "selector")[0] == 1 and order([0.50, 0.51, 0.0], "fusion")[0] == 0
    assert order([None, None], "selector") == [0, 1]  # no Selector: crawl order
    with pytest.raises(UsageError, match="agent.ranking"):
        order([0.1], "best")


def test_ndcg_by_hand():
    gold = ["a", "b"]
    assert ndcg_at_k(gold, ["a", "b", "c"], 10) == pytest.approx(1.0)
    assert ndcg_at_k(gold, ["c", "a"], 10) == pytest.approx((1 / math.log2(3)) / (1 + 1 / math.log2(3)))
    assert ndcg_at_k(gold, ["c"] * 10 + ["a"], 10) == 0.0
    assert top_metrics(gold, ["c", "a"]) == {"recall_at_10": 0.5, "ndcg_at_10": pytest.approx(0.3869, abs=1e-4)}
    with pytest.raises(ValueError, match="without gold"):
        ndcg_at_k([], ["a"], 10)


def result(scores_in_crawl_order: list[float]) -> AgentResult:
    ids = [f"p{i}" for i in range(len(scores_in_crawl_order))]
    papers = [RankedPaper(pid, pid, "2020", s, s >= 0.5, 1, [0]) for pid, s in zip(ids, scores_in_crawl_order)]
    papers.sort(key=lambda p: -p.score)
    traj = QueryTrajectory("q", "query", None, run=0, queue=[QueueEntry(pid, 1, "s", 0) for pid in ids])
    return AgentResult("q", "query", None, papers, [traj])


def test_each_order_is_measured_on_the_same_crawl():
    # 12 papers; gold p11 is last in the crawl but scored highest: the Selector's order finds it in the top 10
    r = result([0.1] * 11 + [0.9])
    m = orderings_metrics(["p11"], r)
    assert m["crawl_recall_at_10"] == 0.0 and m["selector_recall_at_10"] == 1.0 and m["selector_ndcg_at_10"] == 1.0
    assert set(m) == {f"{h}_{k}" for h in ("selector", "crawl", "fusion") for k in ("recall_at_10", "ndcg_at_10")}
    rows = {"agent": [dict(qid=f"q{i}", **orderings_metrics(["p11"], r)) for i in range(5)]}
    pairs = ranking_pairs(rows, BootstrapConfig(samples=100))
    assert [(p["ranking"], p["queries"]) for p in pairs] == [("selector", 5), ("fusion", 5)]
    assert pairs[0]["recall_at_10"]["diff"] == 1.0
    assert "| agent | selector | 5 |" in ranking_table(pairs, {})
    assert orderings_metrics(["p11"], AgentResult("q", "q", None, [RankedPaper("p", "t", "", None, True, 1)],
                                                  [])) == {}  # no Selector scores: nothing to order


def test_the_switch_composes_everywhere():
    for name in ("pasa_search", "pasa_serve", "eval_pasa"):
        cfg = compose(name, ["agent.ranking=fusion"])
        assert cfg.agent.ranking == "fusion"
    assert AgentConfig().ranking == "selector"  # PaSa §4.3
