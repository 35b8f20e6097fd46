"""The agent's pieces that need no model: merging ensemble queues, its argument checks, the results table."""

import pytest

from scholar_agents.pasa.agent import AgentConfig, AgentResult, PaSaAgent, RankedPaper, merge_queues, results_table
from scholar_agents.pasa.crawler import Crawler, CrawlerConfig
from scholar_agents.pasa.trajectory import QueryTrajectory, QueueEntry


def traj(run, entries):
    return QueryTrajectory("q", "query", None, run=run, queue=[QueueEntry(p, d, "s", 0) for p, d in entries])


def test_merge_queues_is_a_union_in_crawl_order():
    merged = merge_queues([traj(0, [("a", 1), ("b", 2)]), traj(1, [("c", 1), ("b", 1), ("a", 3)])])
    assert list(merged) == ["a", "b", "c"]
    assert merged == {"a": (1, [0, 1]), "b": (1, [0, 1]), "c": (1, [1])}


def test_agent_rejects_a_greedy_ensemble_and_a_missing_selector(tiny_llm):
    with pytest.raises(ValueError, match="temperature"):
        PaSaAgent(None, Crawler(tiny_llm, CrawlerConfig(temperature=0.0)), None,
                  AgentConfig(ensemble=2, use_selector=False))
    with pytest.raises(ValueError, match="Selector"):
        PaSaAgent(None, Crawler(tiny_llm), None, AgentConfig(use_selector=True))


def test_results_table_and_queue_order():
    r = AgentResult("q", "which papers?", "2020-01-01",
                    [RankedPaper("b", "Title B | with bar", "2019", 0.9, True, 1, [0], "because"),
                     RankedPaper("a", "Title A", "2018", 0.2, False, 2, [0])],
                    [traj(0, [("a", 1), ("b", 2)])])
    assert r.queue_ids == ["a", "b"] and [p.paper_id for p in r.selected] == ["b"]
    table = results_table(r)
    assert "| 1 | 0.900 | yes | 2019 | b | Title B / with bar | because |" in table
    assert "2 papers crawled · 1 selected" in table
