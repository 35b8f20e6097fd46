"""scripts/build_selector_eval_pairs.py on the bundled sample: gold positives, search-mined negatives, a split by
query, and SFT chats whose answer is the decision token."""

import json

import pytest

from scholar_agents.eval.selector import load_labelled_pairs
from tests.fixtures.script_loader import load_script
from tests.paths import REPO


def _load_script():
    return load_script("build_selector_eval_pairs")


def test_pairs_from_the_sample_split_by_query(tmp_path, monkeypatch):
    monkeypatch.setenv("SCHOLAR_CACHE", str(tmp_path / "cache"))  # a private store + index
    out = tmp_path / "pairs"
    summary = _load_script().main(["--papers", "sample", "--search", "bm25", "--out-dir", str(out),
                                   "--queries", str(REPO / "scholar_agents" / "assets"
                                                    / "sample" / "autoscholarquery_dev.jsonl"),
                                   "--max-queries", "20", "--neg-per-query", "2", "--test-fraction", "0.25"])
    train, test = load_labelled_pairs(out / "pairs_train.jsonl"), load_labelled_pairs(out / "pairs_test.jsonl")
    assert summary["usable_queries"] == 20 and summary["train_qids_overlap_test"] == 0
    assert not {p.qid for p in train} & {p.qid for p in test}
    assert len({p.qid for p in test}) == 5
    rows = [json.loads(line) for line in (out / "pairs_train.jsonl").open()]
    queries = json.loads((out / "stats.json").read_text())["queries_file"]
    gold = {json.loads(line)["qid"]: set(json.loads(line)["answer_arxiv_id"]) for line in open(queries)}
    for r in rows:  # positives are gold, negatives are retrieved non-gold papers with an abstract
        assert r["label"] == (r["paper_id"] in gold[r["qid"]])
        assert r["source"] == "gold" if r["label"] else r["source"] in ("search", "search_before")
        assert r["found_by"] == "bm25"  # the set's miner, on every row: what selector=provenance routes on
        assert r["abstract"] and len(r["abstract"]) <= 600
    assert sum(not r["label"] for r in rows) > 0
    sft = [json.loads(line) for line in (out / "sft_train.jsonl").open()]
    answers = [s["messages"][-1]["content"] for s in sft]
    assert set(answers) == {"True", "False"} and answers.count("True") == answers.count("False")  # balanced
    assert sft[0]["messages"][0]["content"].startswith("You are an elite researcher")


def test_teacher_filters_train_labels_only(tmp_path, monkeypatch):
    """--teacher minilm (PaSa App. B's label filter, offline teacher): train positives are gold the teacher accepts,
    train negatives non-gold it rejects; the held-out pairs are exactly those of the unfiltered build."""
    monkeypatch.setenv("SCHOLAR_CACHE", str(tmp_path / "cache"))
    script = _load_script()
    queries = str(REPO / "scholar_agents" / "assets" / "sample" /
                  "autoscholarquery_dev.jsonl")
    common = ["--papers", "sample", "--search", "bm25", "--queries", queries, "--max-queries", "20",
              "--neg-per-query", "2", "--test-fraction", "0.25"]
    plain = script.main(common + ["--out-dir", str(tmp_path / "plain")])
    threshold = 0.3
    taught = script.main(common + ["--out-dir", str(tmp_path / "taught"), "--teacher", "minilm",
                                   "--teacher-threshold", str(threshold)])
    assert (tmp_path / "plain" / "pairs_test.jsonl").read_text() == (tmp_path / "taught" / "pairs_test.jsonl").read_text()
    counts = taught["counts"]
    assert counts["train_teacher_rejected_gold"] + counts["train_teacher_accepted_non_gold"] > 0  # it did filter
    assert taught["train_positive"] == plain["train_positive"] - counts["train_teacher_rejected_gold"]

    from scholar_agents.llm.embedder import build_embedder

    rows = [json.loads(line) for line in (tmp_path / "taught" / "pairs_train.jsonl").open()]
    emb = build_embedder()
    q = emb.encode([r["query"] for r in rows], kind="query")
    d = emb.encode([f"{r['title']}. {r['abstract']}" for r in rows], kind="doc")
    cos = (q * d).sum(1)
    for r, c in zip(rows, cos):
        assert (c >= threshold - 1e-5) if r["label"] else (c < threshold + 1e-5), (r["label"], c)


def test_exclude_qids_keeps_another_sets_held_out_queries_out(tmp_path, monkeypatch):
    """--exclude-qids (a pairs file or a qid list) drops those queries before the split: a training set built with
    another set's pairs_test.jsonl never holds one of its held-out queries; --test-fraction 0 puts the rest in train."""
    monkeypatch.setenv("SCHOLAR_CACHE", str(tmp_path / "cache"))
    script = _load_script()
    queries = str(REPO / "scholar_agents" / "assets" / "sample" / "autoscholarquery_dev.jsonl")
    common = ["--papers", "sample", "--search", "bm25", "--queries", queries, "--max-queries", "20",
              "--neg-per-query", "2"]
    script.main(common + ["--out-dir", str(tmp_path / "heldout"), "--test-fraction", "0.25"])
    held = {p.qid for p in load_labelled_pairs(tmp_path / "heldout" / "pairs_test.jsonl")}
    assert len(held) == 5
    (tmp_path / "more.txt").write_text("\n" + "AutoScholarQuery_dev_not_a_qid\n")
    summary = script.main(common + ["--out-dir", str(tmp_path / "train"), "--test-fraction", "0", "--title-only",
                                    "--exclude-qids", str(tmp_path / "heldout" / "pairs_test.jsonl"),
                                    str(tmp_path / "more.txt")])
    train = load_labelled_pairs(tmp_path / "train" / "pairs_train.jsonl")
    assert summary["counts"]["excluded_queries"] == 5 and summary["test_pairs"] == 0
    assert train and not {p.qid for p in train} & held
    (tmp_path / "bad.jsonl").write_text('{"paper_id": "x"}\n')
    with pytest.raises(ValueError, match="bad.jsonl:1"):
        script.main(common + ["--out-dir", str(tmp_path / "bad"), "--exclude-qids", str(tmp_path / "bad.jsonl")])
