"""SciPIP's database prompts read the real introduction and method sections (Eq. 1's T_n, T_m) from the full-text
files a store was built from (the bundled unarXive and research-town samples), the abstract where there are none,
and the build counts which was used."""

from pathlib import Path

import pytest

from scholar_agents.hydra_app import PACKAGE_DIR
from scholar_agents.papers.corpus import CorpusSource, PapersConfig, build_store
from scholar_agents.papers.loaders import load_section_texts
from scholar_agents.papers.store import PaperStore
from scholar_agents.scipip.config import LiteratureDBConfig
from scholar_agents.scipip.db_build import NO_INTRODUCTION, LiteratureDBBuilder
from scholar_agents.scipip.full_text import pick_introduction, pick_method
from scholar_agents.scipip.literature_db import LiteratureDB

SAMPLE = PACKAGE_DIR / "assets" / "sample"
UNARXIVE = SAMPLE / "unarxive_sample.jsonl.gz"
RESEARCH_TOWN = SAMPLE / "research_town_papers.json"


def test_sections_are_picked_by_heading_from_both_full_text_formats():
    unarxive = dict(load_section_texts("unarxive", UNARXIVE))
    esg = unarxive["2212.11765"]  # "1 Introduction", ..., "4 Methodology", ...
    assert pick_introduction(esg) == dict(esg)["1 Introduction"] and len(pick_introduction(esg)) > 1000
    assert pick_method(esg) == dict(esg)["4 Methodology"]
    assert pick_introduction(unarxive["2212.11791"]) == "" and pick_method(unarxive["2212.11791"]) == ""  # reviews
    qpk = unarxive["2212.11826"]  # "2.3 Characterization of model dynamics ..." sits under "2 Background"
    assert pick_method(qpk) == dict(qpk)["3 The Quantum Path Kernel Framework"]
    rt = dict(load_section_texts("research_town", RESEARCH_TOWN, paper_ids={"2405.15318"}))
    assert list(rt) == ["2405.15318"]
    assert pick_method(rt["2405.15318"]) == dict(rt["2405.15318"])["2 LC-Boost"]  # the method is named after itself
    with pytest.raises(ValueError, match="keeps no section text"):
        next(load_section_texts("arxiv_jsonl", SAMPLE / "papers.jsonl.gz"))


@pytest.fixture(scope="module")
def full_text_store(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("scipip_fulltext")
    build_store(PapersConfig(name="fulltext", store=str(d / "store.sqlite"), resolve_references=False, sources=[
        CorpusSource(format="unarxive", path=str(UNARXIVE)),
        CorpusSource(format="research_town", path=str(RESEARCH_TOWN))]), progress=False)
    return d / "store.sqlite"


def test_build_reads_introduction_and_method_and_counts_them(full_text_store, tiny_model_dir, tmp_path):
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig
    from scholar_agents.llm.embedder import build_embedder

    cfg = LiteratureDBConfig(max_new_tokens_summary=4, max_new_tokens_details=4, max_new_tokens_keywords=4,
                             max_new_tokens_method=4, max_abstract_chars=150, max_section_chars=150)
    llm = build_llm(LLMConfig(backend="hf", model=str(tiny_model_dir), dtype="float32", device="cpu", batch_size=8,
                              max_model_len=1024))
    try:
        with PaperStore(full_text_store, readonly=True) as store, LiteratureDB(full_text_store) as db:
            ids = [p.paper_id for p in store.iter_papers() if p.abstract]
            builder = LiteratureDBBuilder(store, db, llm, build_embedder(None), cfg)
            stats = builder.run(ids)
            esg = store.get("2212.11765")
            reviews = store.get("2212.11791")
    finally:
        llm.close()
    inputs = stats["inputs"]
    n = stats["papers"]
    assert inputs["sections"] == "fulltext" and n == len(ids) >= 6
    # every sample paper has an introduction except the peer-review file; same for a method section
    assert inputs["introduction"] == {"fulltext": n - 1, "not_available": 1}
    assert inputs["method"] == {"fulltext": n - 1, "abstract": 1}
    intro = dict(dict(load_section_texts("unarxive", UNARXIVE))["2212.11765"])["1 Introduction"]
    assert intro[:150] in builder._summary_chat(esg)[1]["content"]
    assert NO_INTRODUCTION not in builder._summary_chat(esg)[1]["content"]
    assert "4 Methodology" not in builder._method_chat(esg)[1]["content"]  # the section's text, not its heading
    assert NO_INTRODUCTION in builder._summary_chat(reviews)[1]["content"]
    assert reviews.abstract[:100] in builder._method_chat(reviews)[1]["content"]

    # the named switch: abstract only (the earlier behaviour)
    with PaperStore(full_text_store, readonly=True) as store, LiteratureDB(full_text_store) as db:
        abstract_only = LiteratureDBBuilder(store, db, None, None, LiteratureDBConfig(sections="abstract"))
        assert NO_INTRODUCTION in abstract_only._summary_chat(esg)[1]["content"]
        assert abstract_only._count_inputs({esg.paper_id: esg})["method"] == {"fulltext": 0, "abstract": 1}
    with pytest.raises(ValueError, match="fulltext or abstract"):
        LiteratureDBConfig(sections="intro")
