"""scripts/selector_on_crawl_hits.py: every queued paper of an eval pasa run's trajectories, tagged with the retriever
that found it, labelled by the gold list and scored by each Selector, the zero-shot scorers and the crawl order. A real
SQLite store and trajectories written by the crawl's own writer; real MiniLM and the bundled heads."""

import json

import pytest

from scholar_agents.papers.paper import Paper
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.actions import EXPAND, SEARCH
from scholar_agents.pasa.trajectory import (ActionRecord, QueryTrajectory, QueueEntry, SessionRecord,
                                            write_trajectories)
from tests.fixtures.script_loader import load_script

TOPICS = ["protein folding", "speech recognition", "image segmentation", "machine translation"]


@pytest.fixture(scope="module")
def script():
    return load_script("selector_on_crawl_hits")


def _session(sid, kinds):
    return SessionRecord(session_id=sid, qid="q", user_query="u", before=None, start_state="S_q", paper_id=None,
                         depth=0, parent_session_id=None, parent_action_index=None, prompt=[], prompt_token_ids=[],
                         response_text="", response_token_ids=[], response_logprobs=None, finish_reason="stop",
                         actions=[ActionRecord(k, "arg", 0, 1) for k in kinds])


def test_crawl_hits_are_tagged_labelled_and_scored(script, tmp_path):
    papers, trajs, gold = [], [], []
    for i, topic in enumerate(TOPICS):
        g = [Paper(paper_id=f"240{i}.0000{j}", title=f"Deep learning for {topic}, part {j}",
                   abstract=f"We study {topic} with neural networks." if j == 0 else "") for j in range(2)]
        n = [Paper(paper_id=f"240{i}.0010{j}", title=f"A history of {['cooking', 'opera', 'sailing'][j]}",
                   abstract="An essay.") for j in range(3)]
        papers += g + n
        t = QueryTrajectory(qid=f"q{i}", user_query=f"Which papers study {topic}?", before=None, run=0)
        t.sessions = [_session("s0", [SEARCH]), _session("s1", [EXPAND])]
        t.queue = [QueueEntry(p.paper_id, 1, "s0", 0) for p in n[:2] + g] + [QueueEntry(n[2].paper_id, 2, "s1", 0)]
        trajs.append(t)
        gold.append({"qid": f"q{i}", "question": t.user_query, "answer_arxiv_id": [p.paper_id for p in g]})
    with PaperStore(tmp_path / "store.sqlite") as store:
        store.add(papers)
    write_trajectories(tmp_path / "run" / "trajectories" / "agent.jsonl", trajs)
    (tmp_path / "gold.jsonl").write_text("".join(json.dumps(g) + "\n" for g in gold))
    out = script.main([f"dense={tmp_path / 'run'}", "--out", str(tmp_path / "out"), "--store",
                       str(tmp_path / "store.sqlite"), "--queries", str(tmp_path / "gold.jsonl"), "--samples", "50"])
    r = out["dense crawl"]
    assert (r["pairs"], r["gold"], r["queries"]) == (20, 8, 4)
    assert r["found_by"] == {"dense": 16, "expand": 4}
    assert r["with_abstract"] == pytest.approx(16 / 20) and r["gold_with_abstract"] == pytest.approx(0.5)
    assert r["auc"]["embedding"] > 0.9  # the gold papers are about the query's topic, the rest are not
    assert r["auc"]["crawl order"] == pytest.approx(1 / 3)  # two negatives queued first, then the gold, then one more
    assert set(r["vs_embedding"]) == {"lexical", "provenance", "zero-shot cosine", "zero-shot BM25", "crawl order"}
    assert "found by dense 16, expand 4" in (tmp_path / "out" / "crawl_hits.md").read_text()
