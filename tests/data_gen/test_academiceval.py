"""AcademicEval builders on the bundled sample and the loaders of the official formats."""

from __future__ import annotations

import json
import random

import pytest

from scholar_agents.data_gen.academiceval import (
    CITED,
    CONCLUSION_HEADING,
    RANDOM,
    abstract_multi_groups,
    abstract_multi_records,
    abstract_single_records,
    iter_fulltext,
    iter_related_sources,
    load_cases,
    main_content,
    related_multi_records,
)
from tests.paths import REPO

SAMPLE = REPO / "scholar_agents" / "assets" / "sample"
FULLTEXT = [SAMPLE / "unarxive_sample.jsonl.gz", SAMPLE / "research_town_papers.json"]
RELATED = [SAMPLE / "related" / "citebench_dev.json", SAMPLE / "related" / "research_town_interdisciplinary_bench.json"]


@pytest.fixture(scope="module")
def papers():
    return [p for f in FULLTEXT for p in iter_fulltext(f)]


def test_abstract_single_from_the_sample_full_texts(papers):
    recs, skipped = abstract_single_records(papers, min_main_words=1000, fields=["cs"])
    assert len(recs) >= 5 and len({r["id"] for r in recs}) == len(recs)
    for r in recs:
        assert {"title", "abstract", "main_content"} <= set(r)  # Table 4's names
        assert len(r["main_content"].split()) >= 1000
        assert r["abstract"] not in r["main_content"]
        assert "{{cite:" not in r["main_content"] and "{{formula:" not in r["main_content"]
        paper = next(p for p in papers if p.paper_id == r["id"])
        dropped = [h for h, _ in paper.sections if CONCLUSION_HEADING.search(h)]
        assert not any(line in dropped for line in r["main_content"].splitlines())
    # the research-town dump repeats its papers: each is used once; a reviewers' reply has no paper structure
    assert sum(skipped.values()) >= 1
    ids = {r["id"] for r in recs}
    assert "2402.13718" in ids and "2212.11791" not in ids
    short, why = abstract_single_records(papers, min_main_words=10**6)
    assert short == [] and why["too_short"] > 0


def test_main_content_drops_only_the_conclusion(papers):
    p = next(p for p in papers if p.paper_id == "2402.13718")
    body = main_content(p)
    headings = [h for h, _ in p.sections]
    assert "2 Related Work" in body and "6 Conclusions" in headings and "6 Conclusions" not in body


def test_abstract_multi_groups_and_label_layout(tiny_llm):
    singles = [{"id": f"p{i}", "title": f"Paper {i}", "abstract": f"Abstract {i} about retrieval.",
                "main_content": f"Body {i}", "categories": ["cs.CL" if i < 6 else "math.PR"]} for i in range(11)]
    groups = abstract_multi_groups(singles, random.Random(0))
    assert len(groups) == 2 and all(len(g) == 5 for g in groups)
    assert len({s["id"] for g in groups for s in g}) == 10  # no paper twice
    assert all(len({s["categories"][0].split(".")[0] for s in g}) == 1 for g in groups)  # one broad field each
    recs, skipped = abstract_multi_records(groups, tiny_llm, max_new_tokens=48)
    assert len(recs) + sum(skipped.values()) == len(groups)
    for r in recs:
        assert all(f"{k} {i}" in r for k in ("title", "abstract", "main_content") for i in range(1, 6))
        assert r["label"] and r["id"] == "+".join(s["id"] for s in groups[recs.index(r)])
    # five long abstracts do not fit the tiny model's 512-token window: skipped and counted, not crashed
    long_group = [[{**s, "abstract": "retrieval " * 200} for s in groups[0]]]
    recs, skipped = abstract_multi_records(long_group, tiny_llm, max_new_tokens=48)
    assert recs == [] and skipped["prompt_too_long"] == 1


def test_related_multi_from_citebench_and_research_town():
    sources = [s for f in RELATED for s in iter_related_sources(f)]
    recs, skipped = related_multi_records(sources, n_random=10, rng=random.Random(0), min_citations=2)
    again, _ = related_multi_records(sources, n_random=10, rng=random.Random(0), min_citations=2)
    assert recs == again  # seeded
    assert len(recs) > 10 and skipped["too_few_citations"] > 0
    by_id = {s.case_id: s for s in sources}
    for r in recs:
        src = by_id[r["id"]]
        cited = [p for p in r["papers"] if p["label"] == CITED]
        randoms = [p for p in r["papers"] if p["label"] == RANDOM]
        assert len(cited) == len(src.cited) and len(randoms) == 10
        own = {p["abstract"] for s in sources if s.paper_key == src.paper_key for p in s.cited}
        assert not any(p["abstract"] in own for p in randoms)  # a distractor is never one of the paper's citations
        assert r["abstract"] and set(r) >= {"title", "abstract", "gt", "papers"}
    labelled = [r for r in recs if r["gt"]]
    # the research-town bench has no related-work text
    assert labelled and all(r["id"].startswith("citebench") for r in labelled)
    strict, why = related_multi_records(sources, 10, random.Random(0), require_label=True)
    assert len(strict) == len(labelled) and why["no_label"] > 0


def test_load_cases_reads_ours_and_the_official_formats(tmp_path):
    ours = tmp_path / "related_multi.jsonl"
    ours.write_text(json.dumps({"id": "c1", "title": "T", "abstract": "A.", "gt": "RW.", "papers": [
        {"title": "X", "abstract": "x", "label": CITED}, {"title": "", "abstract": "y", "label": RANDOM}]}) + "\n")
    (case,) = load_cases(ours)
    assert case.task == "related_multi" and case.references == ["RW."] and case.whole_documents
    assert [d.text for d in case.documents] == ["X\nx", "y"] and case.cited_doc_ids == [case.documents[0].doc_id]

    # Thought-Retriever's official per-case file: [target, *papers with labels]
    official = tmp_path / "tr_official"
    official.mkdir()
    (official / "paper1.json").write_text(json.dumps([
        {"title": "T", "abstract": "A.", "gt": "RW.", "pre_questions": ["q?"]},
        {"title": "C", "abstract": "c", "label": "related work"},
        {"title": "R", "abstract": "r", "label": "random paper"}]))
    (case,) = load_cases(official)
    assert case.task == "related_multi" and len(case.documents) == 2 and len(case.cited_doc_ids) == 1

    # the AcademicEval release: *test*.json samples with title / abstract / main_content / gt
    release = tmp_path / "abs_9K"
    release.mkdir()
    (release / "abs_test_0.json").write_text(json.dumps({"title": "T", "abstract": "A", "main_content": "M",
                                                          "gt": "A"}))
    (release / "abs_train_0.json").write_text(json.dumps({"title": "U", "abstract": "B", "main_content": "N",
                                                           "gt": "B"}))
    (case,) = load_cases(release)
    assert case.task == "abstract_single" and case.references == ["A"] and case.documents[0].text == "M"
    related = tmp_path / "related_34K"
    related.mkdir()
    (related / "rel_test_0.json").write_text(json.dumps([
        {"title": "T", "abstract": "A", "main_content": "M", "gt": "RW", "additional_info": []},
        {"title": "C1", "abstract": "c1"}, {"title": "C2", "abstract": "c2"}]))
    (case,) = load_cases(related)
    assert len(case.cited_doc_ids) == 2  # the release lists citations only

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"title": "no body"}) + "\n")
    with pytest.raises(ValueError, match="cannot tell the AcademicEval task"):
        load_cases(bad)
