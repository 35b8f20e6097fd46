"""Selector evaluation pieces that need no model: metrics on hand-computed cases, answer parsing, the loaders."""

import json
import math

import numpy as np
import pytest

from scholar_agents.eval.metrics import binary_metrics, reliability_curve, roc_auc
from scholar_agents.eval.selector import evaluate_scores, load_labelled_pairs
from scholar_agents.pasa.prompts import selector_messages
from scholar_agents.pasa.selectors.llm import parse_judgement, truncate_abstract
from tests.paths import TEST_ASSETS

ASSETS = TEST_ASSETS


def test_binary_metrics_hand_case():
    labels = [1, 1, 1, 0, 0, 0, 0, 1]
    preds = [1, 1, 0, 1, 0, 0, 0, 0]
    m = binary_metrics(np.array(labels, bool), np.array(preds, bool))
    assert (m.tp, m.fp, m.fn, m.tn) == (2, 1, 2, 3)
    assert m.precision == pytest.approx(2 / 3)
    assert m.recall == pytest.approx(2 / 4)
    assert m.f1 == pytest.approx(2 * (2 / 3) * 0.5 / (2 / 3 + 0.5))
    assert m.accuracy == pytest.approx(5 / 8)
    empty = binary_metrics(np.array([True, False]), np.array([False, False]))
    assert (empty.precision, empty.recall, empty.f1) == (0.0, 0.0, 0.0)


def test_roc_auc_counts_ties_as_half():
    # positives 0.9, 0.5 ; negatives 0.5, 0.1 -> pairs: (0.9>0.5) 1, (0.9>0.1) 1, (0.5=0.5) 0.5, (0.5>0.1) 1 -> 3.5/4
    assert roc_auc([1, 1, 0, 0], [0.9, 0.5, 0.5, 0.1]) == pytest.approx(0.875)
    assert roc_auc([1, 0], [0.2, 0.8]) == 0.0
    assert math.isnan(roc_auc([1, 1], [0.2, 0.8]))


def test_reliability_curve_bins_and_ece():
    scores = np.array([0.05, 0.15, 0.95, 0.85, 1.0])
    labels = np.array([0, 1, 1, 1, 0], bool)
    c = reliability_curve(labels, scores, n_bins=2)
    assert c.counts == [2, 3]  # [0, .5) and [.5, 1]
    assert c.mean_score[0] == pytest.approx(0.1) and c.frac_positive[0] == pytest.approx(0.5)
    assert c.mean_score[1] == pytest.approx(0.9333333) and c.frac_positive[1] == pytest.approx(2 / 3)
    assert c.ece == pytest.approx(2 / 5 * 0.4 + 3 / 5 * (0.9333333 - 2 / 3))
    with pytest.raises(ValueError, match="probabilities"):
        reliability_curve(labels, scores + 1)


def test_evaluate_scores_threshold_and_best_f1():
    labels = np.array([1, 1, 0, 0], bool)
    m = evaluate_scores(labels, np.array([0.9, 0.4, 0.3, 0.1]), threshold=0.5, n_bins=5)
    assert (m["tp"], m["fn"], m["fp"]) == (1, 1, 0)
    assert m["auc"] == 1.0
    assert m["best_f1"] == 1.0 and m["best_f1_threshold"] == pytest.approx(0.4)
    assert m["always_true_f1"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("text,decision,rationale", [
    ("True\nReason: it studies exactly that.", True, "it studies exactly that."),
    ("Decision: False. Reason: off topic", False, "off topic"),
    ("false", False, ""),
    ("**True** because it matches", True, "because it matches"),
    ("I think so", None, "I think so"),
    ("Truest", None, "Truest"),
])
def test_parse_judgement(text, decision, rationale):
    j = parse_judgement(text)
    assert j.decision is decision
    assert j.rationale == rationale


def test_truncate_abstract_cuts_at_word_boundary():
    text = "alpha beta gamma delta"
    assert truncate_abstract(text, None) == text
    assert truncate_abstract(text, 100) == text
    assert truncate_abstract(text, 13) == "alpha beta"
    assert truncate_abstract(text, 16) == "alpha beta gamma"  # the cut falls exactly on a word boundary
    assert truncate_abstract("  spaced\n out  ", None) == "spaced out"


def test_load_pasa_released_selector_test_format():
    # PaSa's released sft_selector/test.jsonl (App. C: 200 human-annotated pairs) is chat messages
    pairs = load_labelled_pairs(ASSETS / "pasa_sft_selector_test_sample.jsonl", fmt="messages")
    assert [p.label for p in pairs] == [True, False, True, False]
    assert pairs[0].query.startswith("Could you list the works exploit knowledge")
    assert pairs[0].title.startswith("CLIP-Fields")
    assert pairs[1].abstract and pairs[0].query == pairs[1].query


def test_load_labelled_pairs_formats_and_errors(tmp_path):
    f = tmp_path / "pairs.jsonl"
    rows = [{"question": "q1", "title": "t1", "abstract": "a1", "label": 1},
            {"query": "q2", "title": "t2", "label": "False"}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    pairs = load_labelled_pairs(f)
    assert [(p.query, p.label) for p in pairs] == [("q1", True), ("q2", False)]
    assert pairs[1].abstract == ""
    m = tmp_path / "messages.jsonl"
    m.write_text(json.dumps({"messages": selector_messages("q3", "t3", "a3")
                             + [{"role": "assistant", "content": "False\nReason: no"}]}) + "\n")
    assert [(p.query, p.title, p.abstract, p.label) for p in load_labelled_pairs(m)] == [("q3", "t3", "a3", False)]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"query": "q", "title": "t", "label": "maybe"}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: label"):
        load_labelled_pairs(bad)
    bad.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                            {"role": "assistant", "content": "True"}]}) + "\n")
    with pytest.raises(ValueError, match=r"bad.jsonl:1: .*Table 15"):
        load_labelled_pairs(bad)
    with pytest.raises(ValueError, match="format"):
        load_labelled_pairs(f, fmt="csv")
