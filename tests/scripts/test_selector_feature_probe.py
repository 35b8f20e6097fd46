"""scripts/selector_feature_probe.py: lexical features computed as BM25 computes them, recipes fitted on training
queries only, every held-out row against its bar, the request forms as tables of their own. Real MiniLM, tiny pairs."""

import importlib.util
import json

import bm25s
import pytest

from tests.paths import REPO

SCRIPT = REPO / "scripts" / "selector_feature_probe.py"
TOPICS = ["protein folding", "graph coloring", "speech recognition", "image segmentation", "machine translation",
          "robot grasping", "code generation", "weather forecasting", "music transcription", "drug discovery"]
RARE = ["zorblax", "quintessa", "morvane", "trellick", "vandrix", "oplumen", "skerrit", "halvorn", "brisquet",
        "numvelt"]


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("selector_feature_probe", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pairs(idx):
    """Each query names a rare method on a topic: its gold papers name the method, its negatives only the topic
    (what a dense miner returns: the same subject, not the paper asked for)."""
    rows = []
    for i in idx:
        topic, rare = TOPICS[i], RARE[i]
        q = f"Which papers apply {rare} to {topic}?"
        for j in range(2):
            rows.append({"qid": f"q{i}", "paper_id": f"p{i}{j}", "query": q, "label": True, "source": "gold",
                         "title": f"{rare.capitalize()} for {topic}, part {j + 1}",
                         "abstract": f"We introduce {rare}, a method for {topic}. Experiments show {rare} helps."})
            rows.append({"qid": f"q{i}", "paper_id": f"n{i}{j}", "query": q, "label": False, "source": "search_before",
                         "title": f"A survey of {topic} methods, volume {j + 1}",
                         "abstract": f"We review recent work on {topic} and compare baselines for {topic}."})
    return rows


def _write(out, miner, split, rows):
    d = out / f"pairs_{miner}"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"pairs_{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_lexical_features_follow_bm25s_tokens_and_idf(probe):
    stop = frozenset(bm25s.stopwords.STOPWORDS_EN)
    docs = [probe.tokens(t, stop) for t in ("zorblax for protein folding", "graph coloring", "protein structure")]
    stats = probe.TermStats(docs)
    assert probe.tokens("The Zorblax of a graph", stop) == ["zorblax", "graph"]  # lower case, stop words out
    assert stats.idf("zorblax") > stats.idf("protein") > 0  # rarer term, larger IDF
    q = probe.tokens("zorblax protein folding", stop)
    assert stats.bm25(q, probe.tokens("graph coloring", stop)) == 0.0
    assert stats.cover(q, docs[0]) == pytest.approx(1.0)
    f = probe.lexical_features("zorblax protein folding", "Zorblax", "Zorblax for protein folding", stats, stop)
    assert len(f) == len(probe.LEXICAL) + len(probe.LENGTH)
    assert f[probe.LEXICAL.index("bigrams")] == 2  # bigrams after stop words go: "zorblax [for] protein" counts
    assert f[probe.LEXICAL.index("idf_cover_title")] == pytest.approx(stats.idf("zorblax") / sum(
        stats.idf(w) for w in q))


def test_probe_fits_on_training_queries_and_reports_each_bar(probe, tmp_path):
    for miner in ("bm25", "dense"):
        _write(tmp_path, miner, "train", _pairs(range(6)))
        _write(tmp_path, miner, "test", _pairs(range(6, 10)))
    result = probe.main([str(tmp_path), "--miners", "bm25", "dense", "--samples", "50", "--forms", "imperative"])
    assert result["phrasings"] == ["original", "imperative"]
    assert result["bars"]["original"]["dense"]["scorer"] == "bm25_eval"
    assert result["bars"]["original"]["bm25"]["scorer"] == "cosine"
    lexical = next(r for r in result["recipes"] if r["name"] == "lexical")
    assert lexical["fitted_on"] == ["dense"]
    # the gold papers share the query's rare term, the negatives do not: a lexical model fitted on OTHER queries
    # must rank every held-out gold paper first, in both phrasings
    assert lexical["auc"]["original"]["dense"] == pytest.approx(1.0)
    assert lexical["auc"]["imperative"]["dense"] == pytest.approx(1.0)
    assert set(lexical["weights"]) == set(probe.LEXICAL)
    assert result["single"]["original"]["rarest_hit"]["dense"] == pytest.approx(1.0)
    text = (tmp_path / "feature_probe.md").read_text()
    assert "## original phrasing" in text and "## imperative phrasing" in text
    assert "dense-mined: BM25" in text and json.loads((tmp_path / "feature_probe.json").read_text())["recipes"]


def test_augmented_fit_writes_its_own_report(probe, tmp_path):
    for miner in ("bm25", "dense"):
        _write(tmp_path, miner, "train", _pairs(range(6)))
        _write(tmp_path, miner, "test", _pairs(range(6, 10)))
    result = probe.main([str(tmp_path), "--miners", "bm25", "dense", "--samples", "0",
                         "--augment-forms", "show_me"])
    assert result["augment_forms"] == ["show_me"] and result["phrasings"] == ["original"]
    assert (tmp_path / "feature_probe_augmented.md").is_file() and not (tmp_path / "feature_probe.md").exists()
    lexical = next(r for r in result["recipes"] if r["name"] == "lexical")
    assert lexical["auc"]["original"]["dense"] == pytest.approx(1.0)
