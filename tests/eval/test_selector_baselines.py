"""Zero-shot rows of `eval selector`: MiniLM cosine and BM25 of the query against title + abstract,
next to the Selector with the same metrics (AUC, best-F1 threshold, F1 at 0.5)."""

import json

import numpy as np
import pytest

from scholar_agents.eval.selector_baselines import baseline_scores, bm25_scores, cosine_scores, min_max
from scholar_agents.hydra_app import compose
from scholar_agents.pasa.selectors.llm import SelectorPair

Q1 = "graph neural networks for predicting molecule properties"
Q2 = "reinforcement learning agents that play atari games"
PAIRS = [  # each query's relevant paper shares its words; the irrelevant one is about the other query's topic
    SelectorPair(Q1, "Molecular property prediction with graph neural networks",
                 "We predict properties of molecules with message passing graph networks.", True),
    SelectorPair(Q1, "Playing Atari with deep reinforcement learning",
                 "An agent learns to play Atari games from pixels.", False),
    SelectorPair(Q2, "Playing Atari with deep reinforcement learning",
                 "An agent learns to play Atari games from pixels.", True),
    SelectorPair(Q2, "Molecular property prediction with graph neural networks",
                 "We predict properties of molecules with message passing graph networks.", False),
    SelectorPair(Q2, "Bread baking at home", "Sourdough starters and oven temperatures.", False),
]
LABELS = np.array([p.label for p in PAIRS])


def test_bm25_scores_rank_the_matching_paper_first_and_zero_without_shared_words():
    s = bm25_scores(PAIRS)
    assert s[0] > s[1] and s[2] > s[3] and s[4] == 0.0
    # IDF over the eval set's 3 distinct papers: the same paper scores the same for the same query
    assert bm25_scores(PAIRS[:2])[0] > 0
    assert list(min_max(np.array([2.0, 4.0, 3.0]))) == [0.0, 1.0, 0.5]
    assert list(min_max(np.array([1.0, 1.0]))) == [0.5, 0.5]


def test_cosine_scores_with_minilm(papers_embedder):
    s = cosine_scores(PAIRS, papers_embedder)
    assert s[0] > s[1] and s[2] > s[3] and s[2] > s[4]
    assert np.all(np.abs(s) <= 1 + 1e-6)
    with pytest.raises(ValueError, match="unknown Selector baselines"):
        baseline_scores(PAIRS, ["tfidf"], lambda: papers_embedder)


def test_eval_selector_reports_the_baselines_beside_the_selector(tmp_path, tiny_model_dir, papers_embedder):
    from scholar_agents.eval.selector import selector

    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"query": p.query, "title": p.title, "abstract": p.abstract,
                                        "label": p.label}) + "\n" for p in PAIRS))
    res = selector(compose("eval_selector", [
        f"data.path={data}", f"paths.output_dir={tmp_path / 'out'}", f"llm.model={tiny_model_dir}",
        "llm.dtype=float32", "llm.max_model_len=1024", "name=tiny"]))
    b = res["baselines"]
    assert set(b) == {"minilm_cosine", "bm25"}
    assert b["minilm_cosine"]["auc"] == 1.0 and b["bm25"]["auc"] == 1.0  # constructed to be easy
    assert b["bm25"]["best_f1"] == 1.0 and 0.0 <= b["bm25"]["best_f1_threshold"] <= 1.0  # min-max scale
    # F1 at 0.5 of the scaled BM25 score: both relevant pairs are the set's top scores -> scaled >= 0.5
    assert b["bm25"]["tp"] == 2
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Zero-shot baselines (same pairs)" in report
    assert "| Selector: tiny |" in report and "zero-shot: BM25" in report and "zero-shot: cosine(" in report
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["baselines"]["bm25"]["auc"] == 1.0
    row = json.loads((tmp_path / "out" / "scores.jsonl").read_text().splitlines()[4])
    assert row["baseline_bm25"] == 0.0 and "baseline_minilm_cosine" in row
    off = selector(compose("eval_selector", [
        f"data.path={data}", f"paths.output_dir={tmp_path / 'out2'}", f"llm.model={tiny_model_dir}",
        "llm.dtype=float32", "llm.max_model_len=1024", "baselines=[]"]))
    assert off["baselines"] == {} and "Zero-shot" not in (tmp_path / "out2" / "report.md").read_text()
