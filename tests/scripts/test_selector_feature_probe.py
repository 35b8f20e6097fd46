"""scripts/selector_feature_probe.py: recipes fitted on training queries only, every held-out row against its bar,
the request forms as tables of their own (its lexical features are the lexical Selector's, tested in
tests/pasa/selectors/test_provenance.py). Real MiniLM, tiny pairs."""

import json

import pytest

from tests.fixtures.script_loader import load_script

TOPICS = ["protein folding", "graph coloring", "speech recognition", "image segmentation", "machine translation",
          "robot grasping", "code generation", "weather forecasting", "music transcription", "drug discovery"]
RARE = ["zorblax", "quintessa", "morvane", "trellick", "vandrix", "oplumen", "skerrit", "halvorn", "brisquet",
        "numvelt"]


@pytest.fixture(scope="module")
def probe():
    return load_script("selector_feature_probe")


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
