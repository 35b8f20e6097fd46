"""Related-work passages with numbered citations, from every input format; bibliography helpers; answers."""

import json
from collections import Counter

import pytest

from scholar_agents.data_gen.answers import NO_ANSWER, NO_CITATION, NO_QUESTION, NOT_AN_OBJECT, UNKNOWN_ID, read_items
from scholar_agents.data_gen.bibliography import arxiv_id_in_text, load_bib_mapping, parse_bibtex
from scholar_agents.data_gen.latex_passages import LatexSource, passages_from_latex
from scholar_agents.data_gen.passages import (
    Cite,
    CitedWork,
    RelatedWorkSection,
    build_passages,
    passages_from_paper,
    published_time,
    related_work_matcher,
)
from scholar_agents.data_gen.research_town_passages import (
    cite_paragraph,
    iter_research_town,
    passages_from_research_town,
)
from scholar_agents.data_gen.unarxive_passages import passages_from_unarxive, unarxive_date
from scholar_agents.papers.paper import Paper, Reference, Section
from scholar_agents.validation import read_jsonl
from tests.paths import REPO

SAMPLE = REPO / "scholar_agents" / "assets" / "sample"
H = related_work_matcher()


def _unarxive_record():
    """The shape of a real unarXive record (2212.11803, trimmed): a numbered related-work section with a
    subsection, cite spans, a formula span, bib entries linked by ids / contained ids / text."""
    return {
        "paper_id": "2212.11803",
        "metadata": {"title": "Adder  networks",
                     "versions": [{"version": "v1", "created": "Thu, 22 Dec 2022 05:01:02 GMT"}]},
        "body_text": [
            {"section": "Introduction", "sec_number": "1", "content_type": "paragraph", "text": "Intro {{cite:a}}."},
            {"section": "Context and related work", "sec_number": "2", "content_type": "paragraph",
             "text": "Pruning {{cite:a}} and quantization {{cite:b}}, {{cite:c}} cost {{formula:f1}} accuracy."},
            {"section": "Distillation", "sec_number": "2.1", "content_type": "paragraph",
             "text": "Knowledge distillation {{cite:d}} transfers {{cite:a}}."},
            {"section": "Method", "sec_number": "3", "content_type": "paragraph", "text": "We {{cite:b}}."},
        ],
        "bib_entries": {
            "a": {"bib_entry_raw": "Frankle, J., Carbin, M.: The lottery ticket hypothesis: Finding sparse, trainable "
                                  "neural networks. arXiv preprint arXiv:1803.03635 (2018)",
                  "contained_arXiv_ids": [], "ids": {"arxiv_id": ""}},
            "b": {"bib_entry_raw": "Jacob, B., et al.: Quantization and training of neural networks. CVPR (2018)",
                  "contained_arXiv_ids": [{"id": "1712.05877v1"}], "ids": {}},
            "c": {"bib_entry_raw": "Some Author. A book about numbers. Publisher, 1999.",
                  "contained_arXiv_ids": [], "ids": {"arxiv_id": "2001.00001"}},
            "d": {"bib_entry_raw": "G. Hinton, O. Vinyals, and J. Dean. Distilling the knowledge in a neural "
                                  "network. NeurIPS Workshop, 2015.", "contained_arXiv_ids": [], "ids": {}},
        },
        "ref_entries": {"f1": {"latex": "x^2", "type": "formula"}},
    }


def test_unarxive_passage_numbers_citations_and_keeps_subsections():
    (p,) = passages_from_unarxive(_unarxive_record(), headings=H, max_chars=5000)
    assert p.source_id == "2212.11803" and p.source_date == "2022-12-22" and p.source_format == "unarxive"
    assert p.heading == "Context and related work"
    assert "Pruning \\cite{1} and quantization \\cite{2}, \\cite{3} cost $x^2$ accuracy." in p.text
    assert "Distillation. Knowledge distillation \\cite{4} transfers \\cite{1}." in p.text
    assert "We " not in p.text and "Intro" not in p.text  # other sections are not related work
    assert [c.arxiv_id for c in p.citations] == ["1803.03635", "1712.05877", "2001.00001", None]
    assert p.citations[0].title == "The lottery ticket hypothesis: Finding sparse, trainable neural networks"
    assert p.citations[3].title == "Distilling the knowledge in a neural network"


def test_long_sections_split_at_paragraphs_with_fresh_numbering():
    works = {k: CitedWork(key=k, title=f"T{k}") for k in "abc"}
    sec = RelatedWorkSection("Related Work", [["x" * 50, Cite("a"), Cite("b")], ["y" * 50, Cite("c"), Cite("a")]])
    ps = build_passages([sec], works, source_id="s", source_title="S", source_date="2023-01-01",
                        source_format="latex", max_chars=80)
    assert len(ps) == 2
    assert ps[1].text.endswith("\\cite{1}\\cite{2}") and [c.key for c in ps[1].citations] == ["c", "a"]
    assert [p.passage_id for p in ps] == ["s#0", "s#1"]
    assert build_passages([sec], works, source_id="s", source_title="S", source_date="", source_format="latex",
                          max_chars=80, min_citations=3) == []


def test_research_town_author_year_citations():
    index = {"Dao et al.": {"2022": "Dao et al. (2022)"}, "Dao": {"2023": "Dao (2023)"},
             "01.AI": {"2023a": "01.AI (2023a)", "2023b": "01.AI (2023b)"},
             "Xiao et al.": {"2024a": "Xiao et al. (2024a)", "2024b": "Xiao et al. (2024b)"},
             "Su et al.": {"2023": "Su et al. (2023)"}}
    par = cite_paragraph("IO (Dao et al., 2022; Dao, 2023), Yi (01.AI, 2023a, b), (Xiao et\xa0al., 2024b; a) "
                         "and rotary encodings Su et al. (2023).", index)
    cites = [s.key for s in par if isinstance(s, Cite)]
    assert cites == ["Dao et al. (2022)", "Dao (2023)", "01.AI (2023a)", "01.AI (2023b)", "Xiao et al. (2024b)",
                     "Xiao et al. (2024a)", "Su et al. (2023)"]
    text = "".join(s if isinstance(s, str) else "@" for s in par)
    assert text == "IO (@; @), Yi (@, @), (@, @) and rotary encodings @."


def test_research_town_sample_file():
    path = SAMPLE / "research_town_papers.json"
    recs = list(iter_research_town(path))
    assert len({r["url"] for r in recs}) == len(recs)  # duplicates (same paper under two keys) are dropped
    passages = [p for r in recs for p in passages_from_research_town(r, headings=H, max_chars=3000)]
    assert passages, "the bundled research-town papers have Related Work sections"
    for p in passages:
        assert p.source_format == "research_town" and len(p.source_date) == 10
        n = len(p.citations)
        assert all(f"\\cite{{{i}}}" in p.text for i in range(1, n + 1))
        assert f"\\cite{{{n + 1}}}" not in p.text
    assert sum(1 for p in passages for c in p.citations if c.arxiv_id) > 0
    assert sum(1 for p in passages for c in p.citations if c.title) > 0.9 * sum(len(p.citations) for p in passages)


def test_unarxive_sample_file():
    recs = read_jsonl(SAMPLE / "unarxive_sample.jsonl.gz")
    assert all(unarxive_date(r) for r in recs)
    passages = [p for r in recs for p in passages_from_unarxive(r, headings=H, max_chars=3000)]
    assert passages and all(p.citations for p in passages)


def test_pasa_db_paper_becomes_a_list_passage():
    paper = Paper("2301.00001", "A paper", sections=[
        Section("1 Introduction", [Reference(title="Intro ref")]),
        Section("2 Related Work", [Reference(paper_id="1706.03762", title="Attention is all you need"),
                                   Reference(title="BERT: Pre-training of deep bidirectional transformers")]),
    ])
    (p,) = passages_from_paper(paper, headings=H, max_chars=5000)
    assert p.source_date == "2023-01" and p.heading == "2 Related Work"
    assert p.text == ("Attention is all you need \\cite{1}.\nBERT: Pre-training of deep bidirectional transformers "
                      "\\cite{2}.")
    assert p.citations[0].arxiv_id == "1706.03762" and p.citations[1].arxiv_id is None


def test_latex_with_bibtex_and_json_mapping(tmp_path):
    tex = tmp_path / "paper.tex"
    tex.write_text(r"""\documentclass{article}
\begin{document}
\section{Introduction} We build on \cite{vaswani}.
\section{Related Work}\label{sec:rw}
% a comment with \cite{ghost}
Transformers~\citep[see][p.~3]{vaswani, devlin} changed NLP.
\subsection{Retrieval} Dense retrieval \citet{karpukhin} and \cite{missing}.
\section{Method} Nothing cited here \cite{devlin}.
\bibliography{refs}
\end{document}""")
    bib = tmp_path / "refs.bib"
    bib.write_text("""@inproceedings{vaswani, title={Attention Is {All} You Need}, eprint={1706.03762},
  archivePrefix={arXiv}}
@article{devlin, title = "{BERT}: Pre-training of Deep Bidirectional Transformers",
  journal={arXiv preprint arXiv:1810.04805}}
@misc{karpukhin, title={Dense Passage Retrieval for Open-Domain Question Answering}, year=2020}
""")
    (p,) = passages_from_latex(LatexSource(str(tex), str(bib), "2101.00001", "Ours"), headings=H, max_chars=5000)
    assert p.heading == "Related Work" and p.source_date == "2021-01"
    assert "ghost" not in p.text and "Nothing cited" not in p.text
    assert "Transformers \\cite{1}, \\cite{2} changed NLP." in p.text
    assert "Retrieval." in p.text and "Dense retrieval \\cite{3} and \\cite{4}." in p.text
    assert [(c.key, c.arxiv_id) for c in p.citations] == [("vaswani", "1706.03762"), ("devlin", "1810.04805"),
                                                         ("karpukhin", None), ("missing", None)]
    assert p.citations[0].title == "Attention Is All You Need" and p.citations[3].title is None
    mapping = tmp_path / "refs.json"
    mapping.write_text(json.dumps({"vaswani": "Attention Is All You Need",
                                   "devlin": {"title": "BERT", "arxiv_id": "1810.04805"}}))
    plain = tmp_path / "rw.txt"
    plain.write_text("Attention \\cite{vaswani} and BERT \\cite{devlin}.")
    (q,) = passages_from_latex(LatexSource(str(plain), str(mapping), "x", date="2020-05-01"), headings=H, max_chars=500)
    assert q.text == "Attention \\cite{1} and BERT \\cite{2}." and q.citations[1].arxiv_id == "1810.04805"


def test_bibliography_errors_name_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.bib"
    bad.write_text("@article{ok, title={Fine}}\n\n@article{broken, title={Unclosed\n")
    with pytest.raises(ValueError, match=r"bad\.bib:3"):
        parse_bibtex(bad.read_text(), str(bad))
    with pytest.raises(FileNotFoundError):
        load_bib_mapping(tmp_path / "nope.bib")
    j = tmp_path / "m.json"
    j.write_text("[1, 2]")
    with pytest.raises(ValueError, match="JSON object"):
        load_bib_mapping(j)


@pytest.mark.parametrize("text, aid", [
    ("arXiv preprint arXiv:1702.07983v2, 2017", "1702.07983"), ("CoRR, abs/2005.14165.", "2005.14165"),
    ("https://arxiv.org/abs/2107.03374", "2107.03374"), ("doi: 10.48550/arXiv.2301.00001", "2301.00001"),
    ("Phys. Rev. D 12, 2005.", None), ("arXiv:hep-th/9901001", "hep-th/9901001")])
def test_arxiv_id_in_text(text, aid):
    assert arxiv_id_in_text(text) == aid


def test_published_time():
    assert published_time("2023-02-14") == "20230214"
    assert published_time("2023-02") == "20230228" and published_time("2024-02") == "20240229"
    assert published_time("2019") == "20191231"
    with pytest.raises(ValueError):
        published_time("")


def test_read_items_accepts_every_answer_shape_and_counts_the_rest():
    titles = ["Attention is all you need", "BERT: pre-training of deep bidirectional transformers", None]
    items = [
        {"question": "Q1?", "answer": ["\\cite{1}", "\\cite{2}"]},
        {"Question": "Q2?", "Answers": "\\cite{1, 3}"},
        {"query": "Q3?", "answer": [2, "[3]"]},
        {"question": "Q4?", "answer": ["BERT: Pre-training of Deep Bidirectional Transformers"]},
        {"question": "Q5?", "answer": [{"id": 1, "title": "x"}]},
        {"question": "Q6?", "answer": ["\\cite{9}"]},
        {"question": "Q7?", "answer": "some paper nobody cited"},
        {"question": "", "answer": [1]},
        {"question": "Q9?"},
        "not an object",
    ]
    failures = Counter()
    qs = read_items(items, titles, failures)
    assert [(q.question, q.cite_ids) for q in qs] == [("Q1?", [1, 2]), ("Q2?", [1, 3]), ("Q3?", [2, 3]),
                                                       ("Q4?", [2]), ("Q5?", [1])]
    assert qs[3].via_title == [2]
    assert failures == Counter({UNKNOWN_ID: 1, NO_CITATION: 2, NO_QUESTION: 1, NO_ANSWER: 1, NOT_AN_OBJECT: 1})


def test_split_by_source_paper_is_seeded_and_complete():
    from scholar_agents.data_gen.autoscholarquery.assembly import SplitConfig, split_sources

    ids = [f"s{i}" for i in range(20)]
    a = split_sources(ids, SplitConfig(), seed=0)
    assert a == split_sources(list(reversed(ids)), SplitConfig(), seed=0)  # input order does not matter
    assert a != split_sources(ids, SplitConfig(), seed=1)
    assert Counter(a.values()) == Counter({"train": 16, "dev": 2, "test": 2})
    few = split_sources(["a", "b", "c"], SplitConfig(), seed=0)
    assert sorted(few.values()) == ["dev", "test", "train"]  # every split gets a source when there are 3
    assert set(split_sources(ids, SplitConfig(train=0.0, dev=0.5, test=0.5), 0).values()) == {"dev", "test"}
    with pytest.raises(ValueError, match="sum to 1"):
        split_sources(ids, SplitConfig(train=0.5, dev=0.1, test=0.1), 0)


def test_pasa_db_input_resolution_by_title_and_assembly(tmp_path):
    """PaSa's paper-database format end to end without an LLM: passages from `load_pasa_db`, a hand-written
    teacher answer, titles resolved through the store (the format has no ids in its sections)."""
    from scholar_agents.data_gen.autoscholarquery.assembly import assemble
    from scholar_agents.data_gen.autoscholarquery.generation import _passage_record
    from scholar_agents.data_gen.autoscholarquery.inputs import collect_passages
    from scholar_agents.data_gen.citation_resolution import CitationResolver, ResolutionConfig
    from scholar_agents.hydra_app import compose
    from scholar_agents.papers.loaders import load_pasa_db
    from scholar_agents.papers.store import PaperStore
    from tests.fixtures.papers import write_pasa_db

    db = write_pasa_db(tmp_path)
    cfg = compose("data_gen_autoscholarquery", [f"data_gen.inputs.pasa_db=[{db}]", "data_gen.inputs.unarxive=[]",
                                                 "data_gen.inputs.research_town=[]", "data_gen.min_citations=1"])
    passages, sources = collect_passages(cfg.data_gen)
    assert sources == Counter({"pasa_db_papers": 3})
    by_id = {p.source_id: p for p in passages}
    assert set(by_id) == {"2302.07241", "2211.15654"}  # the third paper has no related-work section
    p = by_id["2302.07241"]
    assert p.text.splitlines()[0] == "Clip-fields: Weakly supervised semantic fields for robotic memory \\cite{1}."
    rec = _passage_record(p)
    rec["questions"] = [{"question": "Which works build open-vocabulary 3D scene representations?",
                         "cite_ids": [1, 2]},
                        {"question": "Which paper learns visual models from natural language supervision?",
                         "cite_ids": [3]}]
    with PaperStore(tmp_path / "s.sqlite") as store:
        store.add(load_pasa_db(db))
        resolver = CitationResolver(store, ResolutionConfig())
        splits, stats = assemble([rec], resolver, cfg.data_gen, seed=0)
    rows = [r for rs in splits.values() for r in rs]
    assert [r["answer_arxiv_id"] for r in rows] == [["2210.05663", "2211.15654"], ["2103.00020"]]
    assert rows[0]["answer"][0] == "CLIP-Fields: Weakly Supervised Semantic Fields for Robotic Memory"  # stored title
    assert rows[0]["source_meta"]["published_time"] == "20230228"
    assert stats["resolution_of_answer_citations"]["by_method"]["title_exact"] == 3
    assert stats["answers_per_query"] == {"mean": 1.5, "p50": 1.5, "p90": 1.9}


def test_answer_title_of_an_unstored_bibliography_id(tmp_path):
    """An arXiv id from the bibliography resolves without the store; its answer title is the entry's title, or the
    id when the raw entry has none (physics style: the parser's best guess is a journal abbreviation)."""
    from scholar_agents.data_gen.citation_resolution import CitationResolver, ResolutionConfig, looks_like_title
    from scholar_agents.data_gen.passages import CitedWork
    from scholar_agents.papers.store import PaperStore

    no_titles = ("Phys", "Rev", "Page D", "A 53, no.40, 404002 (2020) [arXiv:2004.01718]", "")
    assert not any(looks_like_title(t) for t in no_titles)
    assert all(looks_like_title(t) for t in ("GPT-4 Technical Report", "A length-extrapolatable transformer"))
    with PaperStore(tmp_path / "s.sqlite") as store:
        resolver = CitationResolver(store, ResolutionConfig())
        phys = resolver.resolve(CitedWork(key="b1", arxiv_id="2004.01718", title="Phys"))
        ml = resolver.resolve(CitedWork(key="b2", arxiv_id="2212.10554", title="A length-extrapolatable transformer"))
        closed = CitationResolver(store, ResolutionConfig(require_in_store=True)).resolve(
            CitedWork(key="b1", arxiv_id="2004.01718", title="Phys"))
    assert (phys.arxiv_id, phys.title, phys.method) == ("2004.01718", "arXiv:2004.01718", "bib_id_not_in_store")
    assert (ml.title, ml.method) == ("A length-extrapolatable transformer", "bib_id_not_in_store")
    assert (closed.arxiv_id, closed.method) == (None, "unresolved")
