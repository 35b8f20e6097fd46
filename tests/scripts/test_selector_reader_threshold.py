"""scripts/selector_reader_threshold.py: the "selected" mark fitted for a stated precision on the papers real crawls
queued (gold-labelled), reported on held-out crawls in both settings, and written into the Selector's card, which
`pasa search` / `pasa serve` (selector.mark=card) then mark with. Hand-computed thresholds; a real SQLite store,
trajectories written by the crawl's own writer, the real MiniLM and the bundled Selector."""

import json
import shutil

import numpy as np
import pytest

from scholar_agents.papers.paper import Paper
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.trajectory import QueryTrajectory, QueueEntry, write_trajectories
from tests.fixtures.script_loader import load_script

TOPICS = ["protein folding", "speech recognition", "image segmentation", "machine translation", "object detection",
          "recommender systems"]


@pytest.fixture(scope="module")
def script():
    return load_script("selector_reader_threshold")


def test_the_lowest_threshold_that_reaches_the_target_with_enough_papers_marked(script):
    # scores best first: T T F T F F F F (precision 1, 1, .67, .75, .6, .5, .43, .38 at each cut)
    s = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2])
    y = np.array([1, 1, 0, 1, 0, 0, 0, 0], dtype=bool)
    raw = dict(confidence=0)  # the precision itself
    assert script.pick_threshold(y, s, 0.6, 1, **raw) == (0.5, 1.0, 1)  # the lowest cut with precision >= 0.6
    assert script.pick_threshold(y, s, 0.7, 1, **raw)[0] == 0.6  # 0.75 at the 4th; the 3rd (0.67) is below
    assert script.pick_threshold(y, s, 0.7, 5, **raw)[:1] == (None,)  # no cut of >= 5 papers reaches 0.7 ...
    assert script.pick_threshold(y, s, 0.7, 5, **raw)[1:] == (pytest.approx(0.6), 5)  # ... the best: 3 of 5
    tied = np.array([0.9, 0.5, 0.5, 0.1])  # a threshold marks every paper tied at it: {0.9} or {0.9, 0.5, 0.5}
    assert script.pick_threshold(np.array([1, 1, 0, 0], dtype=bool), tied, 0.7, 1, **raw)[0] == 0.9
    # with 95 % confidence 2 gold of 2 marked is not precision 0.6 (Wilson lower bound 0.34)
    assert script.wilson_lower(np.array([2.0]), np.array([2.0]), 0.95)[0] == pytest.approx(0.3424, abs=1e-4)
    assert script.pick_threshold(y, s, 0.6, 1)[0] is None
    many = np.r_[np.ones(40, bool), np.zeros(40, bool)]
    # 40 gold first, then 40 not: 40 of 54 marked has the lower bound 0.611, 40 of 55 0.598 (by hand)
    assert script.pick_threshold(many, np.linspace(1, 0, 80), 0.6, 10)[0] == pytest.approx(np.linspace(1, 0, 80)[53])


def test_figures_count_precision_recall_and_marked_per_query(script):
    y = np.array([1, 0, 0, 1, 1, 0], dtype=bool)
    s = np.array([0.9, 0.8, 0.1, 0.2, 0.7, 0.6])
    f = script.figures(y, s, ["a", "a", "a", "b", "b", "b"], 0.5, samples=20)
    assert (f["marked"], f["gold"], f["queries"]) == (4, 3, 2)
    assert f["precision"] == pytest.approx(0.5) and f["recall"] == pytest.approx(2 / 3)
    assert f["marked_per_query"] == pytest.approx(2.0) and len(f["precision_ci"]) == 2
    none = script.figures(y, s, ["a"] * 6, None, samples=0)
    assert none["marked"] == 0 and none["precision"] is None and none["recall"] == 0.0


def _world(tmp_path, n_queries, tag, settings=("", "@whole_corpus")):
    """Per query: 2 papers on its topic (gold), 4 on cooking (not), queued in both settings."""
    papers, trajs, gold = [], [], []
    for i, topic in enumerate(TOPICS[:n_queries]):
        g = [Paper(paper_id=f"24{tag}{i}.0000{j}", title=f"Deep learning for {topic}, part {j}",
                   abstract=f"We study {topic} with neural networks.") for j in range(2)]
        n = [Paper(paper_id=f"24{tag}{i}.0010{j}", title=f"A history of cooking, volume {j}",
                   abstract="An essay on bread.") for j in range(4)]
        papers += g + n
        t = QueryTrajectory(qid=f"{tag}{i}", user_query=f"Which papers study {topic}?", before=None, run=0,
                            queue=[QueueEntry(p.paper_id, 1, "s0", 0) for p in n[:2] + g + n[2:]])
        trajs.append(t)
        gold.append({"qid": t.qid, "question": t.user_query, "answer_arxiv_id": [p.paper_id for p in g]})
    for suffix in settings:
        write_trajectories(tmp_path / tag / "trajectories" / f"agent{suffix}.jsonl", trajs)
    return papers, gold


def test_the_mark_is_fitted_reported_per_setting_and_read_back_from_the_card(script, tmp_path):
    from scholar_agents.hydra_app import compose
    from scholar_agents.pasa.selectors.embedding import BUNDLED_DIR
    from scholar_agents.pasa.selectors.factory import build_selector, describe_selector

    fit_papers, fit_gold = _world(tmp_path, 4, "f")
    held_papers, held_gold = _world(tmp_path, 2, "h")
    with PaperStore(tmp_path / "store.sqlite") as store:
        store.add(fit_papers + held_papers)
    (tmp_path / "gold.jsonl").write_text("".join(json.dumps(g) + "\n" for g in fit_gold + held_gold))
    card = tmp_path / "card"
    shutil.copytree(BUNDLED_DIR, card)
    args = ["--fit", str(tmp_path / "f"), "--heldout", str(tmp_path / "h"), "--store", str(tmp_path / "store.sqlite"),
            "--queries", str(tmp_path / "gold.jsonl"), "--selector", f"model={card}", "--samples", "20",
            "--min-marked", "4", "--confidence", "0"]
    loose = script.main([*args, "--out", str(tmp_path / "out0")])["mark"]
    # the LOWEST threshold whose precision reaches 0.6: it keeps marking cooking papers while precision stays >= 0.6
    assert loose["target_precision"] == 0.6 and 0.6 <= loose["fit"]["all"]["precision"] < 1.0
    assert loose["fit"]["all"]["recall"] == 1.0
    out = script.main([*args, "--out", str(tmp_path / "out"), "--target", "0.99", "--write-card", str(card)])
    m = out["mark"]
    # the topic papers score far above the cooking ones: at 0.99 the mark is exactly the gold papers
    assert m["target_precision"] == 0.99 and loose["threshold"] < m["threshold"]
    fit = out["fit"]["all"]["mark"]
    assert (fit["papers"], fit["gold"], fit["queries"], fit["marked"]) == (48, 16, 8, 16)  # 4 queries x 6, twice
    held = out["heldout"]
    assert set(held) == {"date_filtered", "whole_corpus", "all"}
    d = held["date_filtered"]["mark"]
    assert (d["queries"], d["precision"], d["recall"], d["marked_per_query"]) == (2, 1.0, 1.0, 2.0)
    assert "F1 threshold" in held["all"]
    meta = json.loads((card / "selector_meta.json").read_text())
    assert meta["mark"]["threshold"] == m["threshold"] and meta["threshold"] == pytest.approx(0.2660445894303386)
    assert "## The reader's mark" in (card / "README.md").read_text()
    serve = compose("pasa_serve", [f"selector.model={card}"]).selector
    sel = build_selector(serve)
    assert sel.mark.threshold == pytest.approx(m["threshold"])
    assert sel.mark.note == ("mark fitted for precision 0.99 on real crawls' hits; held-out crawls: precision 1.00, "
                             "recall 1.00")
    assert f"selected = P(relevant) >= {m['threshold']:.3f}, mark fitted for precision 0.99" in describe_selector(serve)
    assert sel.threshold == pytest.approx(0.2660445894303386)  # eval selector's F1 and PPO's reward decide here

    # a target no threshold reaches: no mark, and the card says why
    none = script.main([*args, "--out", str(tmp_path / "out2"), "--target", "1.01", "--write-card", str(card)])
    assert none["mark"]["threshold"] is None
    assert none["mark"]["why_none"].startswith("no threshold reached precision 1.01 on the 48 papers real crawls of 4 "
                                               "queries found (the closest: ")
    sel = build_selector(compose("pasa_serve", [f"selector.model={card}"]).selector)
    assert sel.mark.threshold is None and sel.mark.note.startswith("nothing marked: no threshold reached precision 1.01")
    assert "nothing marked" in describe_selector(compose("pasa_serve", [f"selector.model={card}"]).selector)
