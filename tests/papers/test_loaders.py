"""Corpus loaders on the bundled real sample, PaSa's paper-database format, and malformed input."""

import gzip
import json
import logging
import zipfile

import pytest

from scholar_agents.hydra_app import PACKAGE_DIR
from scholar_agents.papers.loaders import (
    date_from_arxiv_id,
    load_arxiv_jsonl,
    load_gold_stubs,
    load_pasa_db,
    load_research_town,
    load_unarxive,
)
from scholar_agents.papers.paper import Reference
from scholar_agents.papers.store import PaperStore
from tests.fixtures.papers import write_pasa_db

SAMPLE = PACKAGE_DIR / "assets" / "sample"


def test_arxiv_jsonl_sample_and_kaggle_format(tmp_path):
    papers = list(load_arxiv_jsonl(SAMPLE / "papers.jsonl.gz"))
    assert len(papers) == len({p.paper_id for p in papers}) > 1000
    p = papers[0]
    assert p.title and p.abstract and p.authors and p.categories and p.date and p.source == "arxiv"
    assert all(len(p.date) >= 4 for p in papers)
    # the same loader reads Kaggle's arxiv-metadata-oai-snapshot records (as in unarXive's metadata)
    kaggle = {"id": "2212.11867", "authors": "Marcus Michelen, Xuan-Truong Vu", "categories": "math.PR math.CA",
              "title": "Zeros of a growing number of derivatives of random polynomials with\n  independent roots",
              "abstract": "  Let $X_1,X_2,\\ldots$ be independent\nrandom variables.",
              "versions": [{"version": "v1", "created": "Thu, 22 Dec 2022 17:01:56 GMT"}]}
    f = tmp_path / "kaggle.jsonl"
    f.write_text(json.dumps(kaggle) + "\n\n")
    (k,) = load_arxiv_jsonl(f)
    assert k.paper_id == "2212.11867" and k.date == "2022-12-22"
    assert k.title == "Zeros of a growing number of derivatives of random polynomials with independent roots"
    assert k.authors == ["Marcus Michelen", "Xuan-Truong Vu"] and k.categories == ["math.PR", "math.CA"]


def test_malformed_lines_name_file_and_line_or_are_counted(tmp_path, caplog):
    good = gzip.open(SAMPLE / "papers.jsonl.gz", "rt").readline()
    f = tmp_path / "bad.jsonl"
    f.write_text(good + '{"arxiv_id": "2401.00001", "title": "trunc\n' + json.dumps({"arxiv_id": "x"}) + "\n" + good)
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: invalid JSON"):
        list(load_arxiv_jsonl(f))
    with caplog.at_level(logging.WARNING):
        papers = list(load_arxiv_jsonl(f, skip_bad=True))
    assert len(papers) == 2
    assert "skipped 2 malformed records" in caplog.text and "bad.jsonl:3" in caplog.text
    with pytest.raises(FileNotFoundError, match="does not exist"):
        list(load_arxiv_jsonl(tmp_path / "missing.jsonl.gz"))


def test_gold_stubs_take_the_arxiv_month():
    gold = {p.paper_id: p for p in load_gold_stubs(SAMPLE / "autoscholarquery_dev_gold_papers.jsonl")}
    assert len(gold) > 100 and all(p.source == "gold" and p.title for p in gold.values())
    assert any(p.abstract for p in gold.values()) and any(not p.abstract for p in gold.values())
    assert all(p.date == date_from_arxiv_id(pid) for pid, p in gold.items() if date_from_arxiv_id(pid))
    assert date_from_arxiv_id("2212.11867v2") == "2022-12" and date_from_arxiv_id("cs/0112017") == "2001-12"
    assert date_from_arxiv_id("rt:abc") == ""


def test_unarxive_sections_and_citations_resolved_to_arxiv_ids():
    papers = {p.paper_id: p for p in load_unarxive(SAMPLE / "unarxive_sample.jsonl.gz")}
    qpk = papers["2212.11826"]  # The Quantum Path Kernel
    assert qpk.title.startswith("The Quantum Path Kernel") and qpk.date == "2022-12-22"
    assert qpk.outline[:3] == ["1 Introduction", "1.1 Contributions", "1.2 Related works"]
    related = qpk.sections[2].references
    # the bibliography links "Neural tangent kernel: ..." to arXiv 1806.07572; unlinked entries keep their title
    assert related[0] == Reference(paper_id="1806.07572",
                                   title="Neural tangent kernel: Convergence and generalization in neural networks")
    assert any(r.paper_id is None and r.title for r in related)
    assert len({r.paper_id or r.title for r in related}) == len(related)  # deduplicated within a section
    euclid = papers["2212.11803"]
    intro = euclid.sections[0]
    assert intro.heading == "1 Introduction"
    assert [r.paper_id for r in intro.references[:2]] == ["2101.09336", "1710.09282"]


def test_research_town_author_year_citations_become_ordered_references():
    papers = {p.paper_id: p for p in load_research_town(SAMPLE / "research_town_papers.json")}
    inf = papers["2402.13718"]
    assert inf.date == "2024-02-21" and inf.title.startswith("$\\infty$Bench")
    related = next(s for s in inf.sections if s.heading == "2 Related Work").references
    titles = [r.title for r in related]
    # "(Beltagy et al., 2020)" in the text -> the bibliography entry, whose venue line carries arXiv:2004.05150
    longformer = next(r for r in related if r.title == "Longformer: The long-document transformer")
    assert longformer.paper_id == "2004.05150"
    # order of first mention: positional encodings (Sun et al. 2022; Press et al. 2021) come before Longformer
    assert titles.index("A length-extrapolatable transformer") < titles.index("Longformer: The long-document transformer")




def test_pasa_paper_database_format_and_title_resolution(tmp_path):
    db = write_pasa_db(tmp_path)
    papers = {p.paper_id: p for p in load_pasa_db(db)}
    assert set(papers) == {"2302.07241", "2210.05663", "2211.15654", "2103.00020"}
    cf = papers["2302.07241"]
    assert cf.date == "2023-02" and cf.source == "pasa_db"
    assert cf.outline == ["Related Work Vision-language models for 3D", "Conclusion"]
    assert all(r.paper_id is None for r in cf.sections[0].references)
    assert papers["2103.00020"].abstract == "" and papers["2103.00020"].sections == []  # title-only stub
    assert "2103.00020" not in {p.paper_id for p in load_pasa_db(db, stubs_for_missing=False)}
    # the parent folder and an explicit file list work too
    assert len(list(load_pasa_db(tmp_path))) == 4
    assert len(list(load_pasa_db([db / "id2paper.json", db / "cs_paper_2nd.zip"]))) == 4
    # cited titles become ids once every paper is in the store
    with PaperStore(tmp_path / "s.sqlite") as store:
        store.add(papers.values())
        store.resolve_references()
        refs = store.get("2302.07241").sections[0].references
        assert [r.paper_id for r in refs] == ["2210.05663", "2211.15654", "2103.00020"]
        assert refs[0].title == "Clip-fields: Weakly supervised semantic fields for robotic memory"


def test_pasa_paper_database_errors_name_the_member(tmp_path):
    db = tmp_path / "paper_database"
    db.mkdir()
    (db / "id2paper.json").write_text(json.dumps({"2302.07241": "ConceptFusion: Open-set Multimodal 3D Mapping"}))
    with zipfile.ZipFile(db / "cs_paper_2nd.zip", "w") as z:
        z.writestr("conceptfusionopensetmultimodaldmapping", json.dumps({"title": "x", "sections": ["not", "a map"]}))
    with pytest.raises(ValueError, match=r"cs_paper_2nd\.zip!conceptfusionopensetmultimodaldmapping.*heading"):
        list(load_pasa_db(db))
    assert list(load_pasa_db(db, skip_bad=True)) == []
    with pytest.raises(ValueError, match="no id2paper.json"):
        list(load_pasa_db(db / "cs_paper_2nd.zip"))
