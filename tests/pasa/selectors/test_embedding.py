"""The embedding Selector: the embedded MiniLM (from its wheel; nothing downloaded), a query adapter and a
calibration. The learning test is a task with a known answer where the zero-shot cosine is wrong by construction (the
partner task, tests/fixtures/partner_task.py)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from scholar_agents.eval.bootstrap import BootstrapConfig, auc_diff_by_query
from scholar_agents.eval.metrics import roc_auc
from scholar_agents.hydra_app import compose
from scholar_agents.papers.paper import Paper
from scholar_agents.pasa.selectors.embedding import ADAPTER_FILE, EmbeddingSelector, load_adapter, save_adapter
from scholar_agents.pasa.selectors.factory import build_selector, needs_llm
from scholar_agents.pasa.selectors.llm import SelectorPair
from scholar_agents.train.selector.embedding import EmbeddingSelectorTrainConfig, train_embedding_selector
from tests.fixtures.partner_task import PARTNERS, TEMPLATES, partner_pairs


@pytest.fixture(scope="module")
def embedder():
    from scholar_agents.llm.embedder import build_embedder

    return build_embedder()


def test_identity_adapter_is_the_calibrated_zero_shot_cosine(embedder):
    from scholar_agents.eval.selector_baselines import cosine_scores

    sel = EmbeddingSelector(embedder, a=4.0, b=-1.0, threshold=0.5)
    pairs = partner_pairs(TEMPLATES[:2], "x")
    s = sel.score(pairs)
    cos = cosine_scores(pairs, embedder)
    np.testing.assert_allclose(s, 1 / (1 + np.exp(-(4.0 * cos - 1.0))), atol=1e-5)
    np.testing.assert_allclose(sel.score(pairs[::-1]), s[::-1])  # memo: the same pair scores the same
    np.testing.assert_array_equal(sel.decide(pairs), s >= 0.5)
    probs = sel.probs(pairs)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    papers = [Paper(paper_id=f"p{i}", title=p.title, abstract=p.abstract) for i, p in enumerate(pairs[:4])]
    ranked = sel.rank(pairs[0].query, papers)
    assert [x for _, x in ranked] == sorted((x for _, x in ranked), reverse=True)
    out = sel.accept_many([(pairs[0].query, papers[:1]), ("q", []), (pairs[0].query, papers[1:])])
    assert [len(o) for o in out] == [1, 0, 3]
    # the known task's premise: the zero-shot cosine ranks the same-topic negatives first
    assert roc_auc(np.array([p.label for p in pairs]), s) < 0.3


def test_training_learns_the_partner_map_on_unseen_phrasings(tmp_path, embedder, torch_one_thread):
    train = partner_pairs(TEMPLATES[:4], "train")
    test = partner_pairs(TEMPLATES[4:], "test")  # phrasings never fitted on
    cfg = EmbeddingSelectorTrainConfig(l2_grid=[0.01, 0.001], steps=200, dev_fraction=0.25, seed=0)
    meta = train_embedding_selector(train, tmp_path / "m", cfg, embedder=embedder)
    assert meta["adapter"].startswith("query adapter")  # it beat W = I on dev, as it must here
    assert meta["dev"]["auc"] > meta["dev"]["zero_shot_auc"] + 0.3
    sel = EmbeddingSelector.load(tmp_path / "m", embedder=embedder)
    y = np.array([p.label for p in test])
    zero_shot = EmbeddingSelector(embedder).score(test)
    assert roc_auc(y, sel.score(test)) > 0.9 > 0.3 > roc_auc(y, zero_shot)
    assert sel.threshold == pytest.approx(meta["threshold"])
    W, _, _, _ = load_adapter(tmp_path / "m")
    assert W.shape == (embedder.dim, embedder.dim) and (tmp_path / "m" / ADAPTER_FILE).stat().st_size < 1_000_000


def test_identity_wins_on_dev_when_the_labels_are_noise(tmp_path, embedder, torch_one_thread):
    """Random labels: no adapter may beat W = I by more than chance on dev, and W = I is in the running."""
    rng = random.Random(0)
    pairs = [SelectorPair(query=p.query, title=p.title, abstract=p.abstract, label=rng.random() < 0.5, qid=p.qid)
             for p in partner_pairs(TEMPLATES, "n")]
    meta = train_embedding_selector(pairs, tmp_path / "m", EmbeddingSelectorTrainConfig(l2_grid=[1.0], steps=50),
                                    embedder=embedder)
    assert [g["l2"] for g in meta["grid"]] == [None, 1.0]
    assert meta["threshold"] == pytest.approx(meta["dev"]["threshold"])


def test_bad_models_get_clear_errors(tmp_path, embedder):
    with pytest.raises(FileNotFoundError, match="train selector_embedding"):
        EmbeddingSelector.load(tmp_path / "missing", embedder=embedder)
    save_adapter(tmp_path / "wrong", np.eye(8, dtype=np.float32), 1.0, 0.0, {"embedder": "other"})
    with pytest.raises(ValueError, match="8-d"):
        EmbeddingSelector.load(tmp_path / "wrong", embedder=embedder)
    with pytest.raises(ValueError, match="both labels"):
        train_embedding_selector([SelectorPair(query="q", title="t", label=True, qid=f"{i}") for i in range(10)],
                                 tmp_path / "m", EmbeddingSelectorTrainConfig(), embedder=embedder)


def test_config_switch_builds_without_llm_and_the_train_command_composes(tmp_path, embedder):
    save_adapter(tmp_path / "m", np.eye(embedder.dim, dtype=np.float32), 3.0, -1.0, {"threshold": 0.42})
    cfg = compose("eval_selector", ["data.path=x.jsonl", "selector=embedding", f"selector.model={tmp_path / 'm'}"])
    assert not needs_llm(cfg.selector)
    sel = build_selector(cfg.selector, llm_factory=lambda: pytest.fail("the embedding Selector builds no LLM"))
    assert isinstance(sel, EmbeddingSelector) and sel.threshold == pytest.approx(0.42)
    pasa = compose("pasa_search", ["selector=embedding", f"selector.model={tmp_path / 'm'}", "selector.threshold=0.7"])
    assert build_selector(pasa.selector).threshold == pytest.approx(0.7)
    train = compose("train_selector_embedding", ["train.train_file=x.jsonl"])
    assert list(train.train.l2_grid) == [1.0, 0.1, 0.01, 0.001] and train.train.include_identity


def test_judge_gives_the_decision_and_the_nearest_sentences(embedder):
    sel = EmbeddingSelector(embedder, a=10.0, b=-5.0, threshold=0.5)
    pair = SelectorPair(query="graph neural networks for molecules", title="Message passing",
                        abstract="We bake bread. Graph neural networks predict molecular properties. The end.")
    (j,) = sel.judge([pair])
    assert j.decision == bool(sel.score([pair])[0] >= 0.5)
    assert j.text.startswith("True" if j.decision else "False")
    first_quoted = j.rationale.split('"')[1]
    assert first_quoted == "Graph neural networks predict molecular properties."


def test_auc_difference_interval_resamples_whole_queries():
    rng = np.random.default_rng(0)
    groups = [f"q{i // 6}" for i in range(120)]
    y = np.array([i % 3 == 0 for i in range(120)])
    perfect = y + rng.normal(0, 0.1, 120)
    noise = rng.normal(0, 1, 120)
    d = auc_diff_by_query(y, perfect, noise, groups, BootstrapConfig(samples=300))
    assert d.n == 20 and d.verdict == "above" and d.diff > 0.3
    same = auc_diff_by_query(y, noise, noise, groups, BootstrapConfig(samples=50))
    assert same.diff == 0 and same.ci == (0.0, 0.0)
    with pytest.raises(ValueError, match="equal length"):
        auc_diff_by_query(y, noise, noise[:5], groups)


def test_eval_selector_asks_the_pairs_in_a_request_form(tmp_path, embedder):
    from scholar_agents.eval.selector import selector as eval_selector

    save_adapter(tmp_path / "m", np.eye(embedder.dim, dtype=np.float32), 3.0, -1.0, {"threshold": 0.5})
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"query": "Which works study protein folding?", "title": p.title,
                                        "abstract": p.abstract, "label": p.label, "qid": p.qid}) + "\n"
                            for p in partner_pairs(TEMPLATES[:3], "e")))
    cfg = compose("eval_selector", [f"data.path={data}", "selector=embedding", f"selector.model={tmp_path / 'm'}",
                                    "data.phrasing=looking_for", f"paths.output_dir={tmp_path / 'out'}"])
    out = eval_selector(cfg)
    assert out["meta"]["phrasing"] == "looking_for" and out["meta"]["backend"] == "embedding"
    first = json.loads((tmp_path / "out" / "scores.jsonl").read_text().splitlines()[0])
    assert first["query"].startswith("I am looking for papers")
    assert set(out["baselines"]) == {"minilm_cosine", "bm25"}
    assert out["baselines"]["minilm_cosine"]["auc_diff"]["diff"] == pytest.approx(0.0, abs=1e-9)  # W = I: same rank
    assert "Selector AUC − baseline AUC" in (tmp_path / "out" / "report.md").read_text()


def test_eval_selector_leaves_out_the_queries_the_selector_was_fitted_on(tmp_path, embedder):
    from scholar_agents.eval.selector import selector as eval_selector

    pairs = partner_pairs(TEMPLATES[:3], "f")
    fitted = sorted({p.qid for p in pairs})[:5]
    save_adapter(tmp_path / "m", np.eye(embedder.dim, dtype=np.float32), 3.0, -1.0,
                 {"threshold": 0.5, "train": {"qids": fitted}})
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"query": p.query, "title": p.title, "abstract": p.abstract, "label": p.label,
                                        "qid": p.qid}) + "\n" for p in pairs))
    base = ["selector=embedding", f"selector.model={tmp_path / 'm'}", "baselines=[]", f"data.path={data}"]
    out = eval_selector(compose("eval_selector", [*base, f"paths.output_dir={tmp_path / 'a'}"]))
    left_out = sum(p.qid in fitted for p in pairs)
    assert out["meta"]["excluded_fitted_pairs"] == left_out > 0
    assert out["metrics"]["n"] == len(pairs) - left_out
    assert f"{left_out} pairs of queries the Selector was fitted on left out" in (tmp_path / "a" / "report.md").read_text()
    every = eval_selector(compose("eval_selector", [*base, "data.exclude_fitted=false",
                                                    f"paths.output_dir={tmp_path / 'b'}"]))
    assert every["metrics"]["n"] == len(pairs)


def test_fusion_ceiling_script_finds_the_miners_score_weighted_against_relevance(tmp_path, embedder):
    """scripts/selector_fusion_ceiling.py (docs/results/selector_embedding.md, "Would a calibrated fusion with BM25 win there?") on a
    pair set whose negatives were chosen for their word overlap with the query, as BM25 mining does: BM25 alone ranks
    them first (AUC below 0.5), and the fusion fitted across query halves learns a NEGATIVE BM25 weight — the
    artifact the docs report — and beats BM25."""
    import subprocess
    import sys

    from tests.paths import REPO

    pairs = []
    for i, (a, b) in enumerate(PARTNERS):
        for j, tmpl in enumerate(TEMPLATES[:2]):
            query = tmpl.format(t=a)
            for k in range(2):
                pairs.append({"qid": f"q{i}-{j}", "query": query, "title": f"Advances in {b} ({k})",
                              "abstract": f"We study {b}.", "label": True})
                pairs.append({"qid": f"q{i}-{j}", "query": query, "title": f"{a} {a} ({k})",
                              "abstract": f"{query} {a}, {a} and {a}.", "label": False})
    (tmp_path / "pairs_bm25").mkdir()
    (tmp_path / "pairs_bm25" / "pairs_test.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    save_adapter(tmp_path / "model", np.eye(embedder.dim, dtype=np.float32), 1.0, 0.0,
                 {"kind": "embedding", "embedder": "embedded:minilm", "threshold": 0.5})
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "selector_fusion_ceiling.py"), str(tmp_path),
                          "--miners", "bm25", "--samples", "50"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    row = json.loads((tmp_path / "fusion_ceiling.json").read_text())["bm25"]
    assert row["pairs"] == len(pairs) and row["queries"] == 12 and row["single"]["bm25"] < 0.5
    fused = row["fusions"]["adapter + BM25"]
    assert all(w < 0 for w in fused["weights"]["bm25"]) and fused["vs_bm25"][0] > 0
    assert "| bm25-mined |" in (tmp_path / "fusion_ceiling.md").read_text()
