"""The lexical Selector and the provenance Selector: features computed as BM25 computes them, a learning
test with a known answer (gold papers share the query's rare term, negatives only its topic: what a dense miner
returns), routing by the retriever that found each paper, one threshold on one scale, "why?" that agrees with the
list, and the crawl's provenance reaching the Selector. Real MiniLM from its wheel; nothing downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import bm25s
import numpy as np
import pytest

from scholar_agents.eval.metrics import roc_auc
from scholar_agents.hydra_app import compose
from scholar_agents.papers.paper import Paper
from scholar_agents.pasa.actions import EXPAND, SEARCH
from scholar_agents.pasa.agent import queue_provenance
from scholar_agents.pasa.crawl_env import SEED_SESSION
from scholar_agents.pasa.selectors.embedding import EmbeddingSelector, save_adapter
from scholar_agents.pasa.selectors.factory import build_selector, describe_selector, needs_llm
from scholar_agents.pasa.selectors.lexical import FEATURES, LexicalSelector, TermStats, pair_features, tokens
from scholar_agents.pasa.selectors.llm import SelectorPair
from scholar_agents.pasa.selectors.provenance import ProvenanceSelector
from scholar_agents.pasa.trajectory import ActionRecord, QueryTrajectory, QueueEntry, SessionRecord
from scholar_agents.train.selector.lexical import LexicalSelectorTrainConfig, train_lexical_selector

TOPICS = ["protein folding", "graph coloring", "speech recognition", "image segmentation", "machine translation",
          "robot grasping", "code generation", "weather forecasting", "music transcription", "drug discovery",
          "query expansion", "style transfer"]
RARE = ["zorblax", "quintessa", "morvane", "trellick", "vandrix", "oplumen", "skerrit", "halvorn", "brisquet",
        "numvelt", "ferrowick", "glendari"]


def rare_term_pairs(idx, found_by: str = "") -> list[SelectorPair]:
    """Each query names a rare method on a topic: its gold papers name the method, its negatives only the topic."""
    pairs = []
    for i in idx:
        topic, rare = TOPICS[i], RARE[i]
        q = f"Which papers apply {rare} to {topic}?"
        for j in range(2):
            pairs.append(SelectorPair(query=q, title=f"{rare.capitalize()} for {topic}, part {j + 1}",
                                      abstract=f"We introduce {rare}, a method for {topic}. Experiments show {rare} "
                                               "helps.", label=True, qid=f"q{i}", paper_id=f"p{i}{j}",
                                      found_by=found_by))
            pairs.append(SelectorPair(query=q, title=f"A survey of {topic} methods, volume {j + 1}",
                                      abstract=f"We review recent work on {topic} and compare baselines for {topic}.",
                                      label=False, qid=f"q{i}", paper_id=f"n{i}{j}", found_by=found_by))
    return pairs


@pytest.fixture(scope="module")
def embedder():
    from scholar_agents.llm.embedder import build_embedder

    return build_embedder()


@pytest.fixture(scope="module")
def lexical_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("lexical")
    train_lexical_selector(rare_term_pairs(range(8)), out, LexicalSelectorTrainConfig(dev_fraction=0.25))
    return out


def test_features_follow_bm25s_tokens_and_idf():
    stop = frozenset(bm25s.stopwords.STOPWORDS_EN)
    stats = TermStats.of_texts(["zorblax for protein folding", "graph coloring", "protein structure",
                                "graph coloring"], stop)  # a repeated text counts once
    assert stats.n == 3
    assert tokens("The Zorblax of a graph", stop) == ["zorblax", "graph"]  # lower case, stop words out
    assert stats.idf("zorblax") > stats.idf("protein") > 0  # rarer term, larger IDF
    assert stats.idf("neverseen") > stats.idf("zorblax")  # unseen = the rarest there is
    q = tokens("zorblax protein folding", stop)
    assert stats.bm25(q, tokens("graph coloring", stop)) == 0.0
    assert stats.cover(q, tokens("zorblax for protein folding", stop)) == pytest.approx(1.0)
    f = pair_features("zorblax protein folding", "Zorblax", "Zorblax for protein folding", stats)
    assert len(f) == len(FEATURES)
    assert f[FEATURES.index("bigrams")] == 2  # bigrams after stop words go: "zorblax [for] protein" counts
    assert f[FEATURES.index("idf_cover_title")] == pytest.approx(stats.idf("zorblax") / sum(stats.idf(w) for w in q))
    assert f[FEATURES.index("rarest_hit")] == pytest.approx(stats.idf("zorblax"))


def test_lexical_selector_learns_the_rare_term_on_queries_never_fitted(lexical_dir):
    sel = LexicalSelector.load(lexical_dir)
    meta = json.loads((lexical_dir / "selector_meta.json").read_text())
    assert sel.threshold == pytest.approx(meta["threshold"]) and meta["dev"]["auc"] == pytest.approx(1.0)
    assert set(meta["train"]["qids"]) == {f"q{i}" for i in range(8)}
    assert meta["weights"]["rarest_hit"] > 0  # the known answer: sharing the rare term is the evidence
    test = rare_term_pairs(range(8, 12))  # topics and rare terms never seen: the IDF of an unseen term is the max
    y = np.array([p.label for p in test])
    s = sel.score(test)
    assert roc_auc(y, s) == pytest.approx(1.0)
    np.testing.assert_array_equal(sel.decide(test), s >= sel.threshold)
    np.testing.assert_allclose(LexicalSelector.load(lexical_dir).score(test[::-1]), s[::-1])  # reload, memo order
    (j,) = sel.judge([test[0]])
    assert j.decision and j.text.startswith("True")
    assert f'"{RARE[8]}" (IDF' in j.rationale.split("rarest first:")[1].split(",")[0]  # the rare term leads


def test_lexical_training_errors_are_clear(tmp_path):
    with pytest.raises(ValueError, match="both labels"):
        train_lexical_selector([SelectorPair(query="q", title="t", label=True, qid=f"{i}") for i in range(10)],
                               tmp_path / "m", LexicalSelectorTrainConfig())
    with pytest.raises(FileNotFoundError, match="train selector_lexical"):
        LexicalSelector.load(tmp_path / "missing")


def test_provenance_routes_dense_hits_to_the_lexical_head_on_one_scale(lexical_dir, embedder):
    default = EmbeddingSelector(embedder, a=6.0, b=-3.0, threshold=0.4, max_abstract_chars=600)
    lexical = LexicalSelector.load(lexical_dir, max_abstract_chars=600)
    sel = ProvenanceSelector(default, lexical, ["dense"])
    assert sel.threshold == pytest.approx(0.4)
    dense, other = rare_term_pairs(range(8, 12), "dense"), rare_term_pairs(range(8, 12), "bm25")
    mixed = [p for pair in zip(dense, other) for p in pair]
    s = sel.score(mixed)
    np.testing.assert_allclose(s[1::2], default.score(other))  # not a dense hit: the embedding Selector, as is
    lex = lexical.score(dense)
    assert np.all(np.diff(s[0::2][np.argsort(lex)]) >= -1e-12)  # the lexical head's ranking, kept
    # every decision of the lexical head at ITS fitted threshold is the same decision at the common one
    np.testing.assert_array_equal(s[0::2] >= sel.threshold, lex >= lexical.threshold)
    np.testing.assert_array_equal(sel.decide(mixed), s >= 0.4)
    papers = [Paper(paper_id=p.paper_id, title=p.title, abstract=p.abstract) for p in dense[:4]]
    by_route = sel.accept_many([(dense[0].query, papers, "dense"), (dense[0].query, papers)])
    assert by_route[0] == [bool(x) for x in lex[:4] >= lexical.threshold]
    assert by_route[1] == [bool(x) for x in default.score(other[:4]) >= 0.4]
    judged = sel.judge(mixed[:2])
    for j, p, score in zip(judged, mixed[:2], s[:2]):
        assert j.score == pytest.approx(score) and j.decision == bool(score >= sel.threshold)
        assert j.text.startswith("True" if j.decision else "False")
    assert "Found by dense, so judged by the lexical Selector" in judged[0].rationale
    assert "Found by bm25, so judged by the embedding Selector" in judged[1].rationale
    assert ProvenanceSelector(default, lexical, ["dense"], threshold=0.7).threshold == pytest.approx(0.7)


def test_config_switch_builds_without_llm_and_describes_both_routes(tmp_path, lexical_dir, embedder):
    save_adapter(tmp_path / "m", np.eye(embedder.dim, dtype=np.float32), 3.0, -1.0, {"threshold": 0.42})
    over = ["selector=provenance", f"selector.model={tmp_path / 'm'}", f"selector.lexical_model={lexical_dir}"]
    cfg = compose("eval_selector", ["data.path=x.jsonl", *over])
    assert not needs_llm(cfg.selector) and list(cfg.selector.lexical_for) == ["dense"]
    sel = build_selector(cfg.selector, llm_factory=lambda: pytest.fail("the provenance Selector builds no LLM"))
    assert isinstance(sel, ProvenanceSelector) and sel.threshold == pytest.approx(0.42)
    assert set(sel.meta["train"]["qids"]) == {f"q{i}" for i in range(8)}  # eval selector leaves these out
    line = describe_selector(cfg.selector)
    assert line.startswith("provenance Selector: papers found by dense search judged by the lexical Selector")
    assert "every other paper by the embedding Selector" in line
    compose("train_selector_lexical", ["train.train_file=x.jsonl"])
    bundled = compose("pasa_search", ["selector=provenance"]).selector
    assert isinstance(build_selector(bundled), ProvenanceSelector)  # the package's own heads load


def test_eval_selector_routes_a_set_by_data_found_by(tmp_path, lexical_dir, embedder):
    from scholar_agents.eval.selector import selector as eval_selector

    save_adapter(tmp_path / "m", np.eye(embedder.dim, dtype=np.float32), 3.0, -1.0, {"threshold": 0.42})
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps({"qid": p.qid, "query": p.query, "title": p.title, "abstract": p.abstract,
                                        "label": p.label}) + "\n" for p in rare_term_pairs(range(8, 12))))
    common = ["selector=provenance", f"selector.model={tmp_path / 'm'}", f"selector.lexical_model={lexical_dir}",
              f"data.path={path}", "baselines=[bm25]"]
    dense = eval_selector(compose("eval_selector", [*common, "data.found_by=dense",
                                                    f"paths.output_dir={tmp_path / 'dense'}"]))
    unknown = eval_selector(compose("eval_selector", [*common, f"paths.output_dir={tmp_path / 'unknown'}"]))
    assert dense["metrics"]["auc"] == pytest.approx(1.0)  # the lexical head: the known answer
    scores = {k: [json.loads(x)["score"] for x in (Path(r["output_dir"]) / "scores.jsonl").read_text().splitlines()]
              for k, r in (("dense", dense), ("unknown", unknown))}
    lexical = ProvenanceSelector.from_config(compose("eval_selector", [*common]).selector).lexical
    heads = {"dense": lexical, "unknown": EmbeddingSelector.load(tmp_path / "m", embedder=embedder)}
    for k, head in heads.items():  # each set judged by its route's head: the same ranking
        np.testing.assert_array_equal(np.argsort(scores[k], kind="stable"),
                                      np.argsort(head.score(rare_term_pairs(range(8, 12))), kind="stable"))
    assert dense["meta"]["found_by"] == "dense"
    assert "every paper as found by dense" in (Path(dense["output_dir"]) / "report.md").read_text()


def test_queue_provenance_names_the_action_that_first_added_each_paper():
    def session(sid, kinds):
        return SessionRecord(session_id=sid, qid="q", user_query="u", before=None, start_state="S_q", paper_id=None,
                             depth=0, parent_session_id=None, parent_action_index=None, prompt=[],
                             prompt_token_ids=[], response_text="", response_token_ids=[], response_logprobs=None,
                             finish_reason="stop", actions=[ActionRecord(k, "arg", 0, 1) for k in kinds])

    t0 = QueryTrajectory(qid="q", user_query="u", before=None, run=0)
    t0.sessions = [session("s0", [SEARCH, SEARCH]), session("s1", [EXPAND])]
    t0.queue = [QueueEntry("seed1", 1, SEED_SESSION, 0), QueueEntry("a", 1, "s0", 0), QueueEntry("b", 1, "s0", 1),
                QueueEntry("c", 2, "s1", 0)]
    t1 = QueryTrajectory(qid="q", user_query="u", before=None, run=1)
    t1.sessions = [session("s9", [EXPAND, SEARCH])]
    t1.queue = [QueueEntry("c", 1, "s9", 1), QueueEntry("d", 2, "s9", 0)]  # c: run 0 found it first
    assert queue_provenance([t0, t1], "dense") == {"seed1": "seed", "a": "dense", "b": "dense", "c": "expand",
                                                    "d": "expand"}
