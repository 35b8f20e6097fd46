"""PaSa's metrics (§5.2) on hand-computed cases, and the report table."""

import pytest

from scholar_agents.eval.bootstrap import BootstrapConfig
from scholar_agents.eval.pasa.metrics import (
    agent_metrics, mean_metrics, precision, recall, recall_at_k,
)
from scholar_agents.eval.pasa.report import markdown_table
from scholar_agents.eval.pasa.stats import summarize

GOLD = ["1111.0001", "2222.0002v3", "3333.0003", "4444.0004"]


def test_recall_precision_and_version_suffixes():
    # 2 of 4 gold found (one written with a version suffix), plus 3 wrong papers
    found = ["2222.0002", "9.1", "1111.0001v1", "9.2", "9.3"]
    assert recall(GOLD, found) == pytest.approx(0.5)
    assert precision(GOLD, found) == pytest.approx(2 / 5)
    assert precision(GOLD, []) == 0.0
    with pytest.raises(ValueError):
        recall([], found)


def test_recall_at_k_counts_only_the_top_k():
    ranking = ["9.1", "1111.0001", "9.2", "3333.0003", "2222.0002"]
    assert recall_at_k(GOLD, ranking, 1) == 0.0
    assert recall_at_k(GOLD, ranking, 2) == pytest.approx(0.25)
    assert recall_at_k(GOLD, ranking, 4) == pytest.approx(0.5)
    assert recall_at_k(GOLD, ranking, 100) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        recall_at_k(GOLD, ranking, 0)


def test_agent_metrics_hand_computed():
    queue = ["9.1", "1111.0001", "9.2", "3333.0003", "2222.0002", "9.3"]  # crawler recall 3/4
    selected = ["1111.0001", "9.2"]  # precision 1/2, recall 1/4
    ranking = ["1111.0001", "9.2", "3333.0003", "9.1", "2222.0002", "9.3"]
    m = agent_metrics(GOLD, queue, selected, ranking)
    assert m["crawler_recall"] == pytest.approx(0.75)
    assert m["precision"] == pytest.approx(0.5)
    assert m["recall"] == pytest.approx(0.25)
    assert m["recall_at_20"] == m["recall_at_50"] == m["recall_at_100"] == pytest.approx(0.75)


def test_means_ignore_missing_metrics_and_table_shows_dashes():
    rows = [{"qid": "a", "recall_at_20": 0.5, "crawler_recall": None},
            {"qid": "b", "recall_at_20": 1.0, "crawler_recall": None}]
    assert mean_metrics(rows, ["recall_at_20", "crawler_recall"]) == {"recall_at_20": 0.75, "crawler_recall": None}
    summary = summarize({"search_bm25": rows})
    table = markdown_table(summary, {"search_bm25": "BM25"})
    line = [l for l in table.splitlines() if l.startswith("| BM25")][0]
    cells = [c.strip() for c in line.strip("|").split("|")]
    # the mean with its bootstrap 95 % interval over the two queries
    assert cells[1] == "-" and cells[6] == "0.750 (0.50–1.00)" and cells[-1] == "2"
    no_ci = markdown_table(summarize({"search_bm25": rows}, BootstrapConfig(samples=0)), {"search_bm25": "BM25"})
    assert "| 0.7500 |" in no_ci


def test_a_search_rows_top_10_from_its_gold_ranks_matches_the_ranked_metrics():
    """stats._search_top rebuilds recall@10 / nDCG@10 of a plain search from its gold ranks (all the per-query
    file keeps); it must equal the metrics computed on the ranking itself."""
    import pytest

    from scholar_agents.eval.pasa.metrics import gold_ranks, ndcg_at_k, recall_at_k
    from scholar_agents.eval.pasa.stats import _search_top

    gold = ["g1", "g2", "g3"]
    ranking = ["x1", "g2", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "g1", "x10", "g3"]
    row = {"gold_ranks": gold_ranks(gold, ranking), "n_gold_ids": 3}
    top = _search_top(row, 10)
    assert top["recall_at_10"] == pytest.approx(recall_at_k(gold, ranking, 10)) == pytest.approx(1 / 3)
    assert top["ndcg_at_10"] == pytest.approx(ndcg_at_k(gold, ranking, 10))
