"""The source papers of ``data_gen autoscholarquery`` and their related-work passages: :class:`AutoScholarQueryInputs`
(``data_gen.inputs``: unarXive, research-town, LaTeX + bibliography, PaSa's paper database) and
:func:`collect_passages`, which reads every input in order through its format's extractor (``*_passages.py``) and
keeps each passage once (a paper present in two inputs yields its passages once).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from scholar_agents.data_gen.latex_passages import LatexSource, passages_from_latex
from scholar_agents.data_gen.passages import CitedPassage, passages_from_paper, related_work_matcher
from scholar_agents.data_gen.research_town_passages import iter_research_town, passages_from_research_town
from scholar_agents.data_gen.unarxive_passages import passages_from_unarxive
from scholar_agents.papers.loaders import load_pasa_db
from scholar_agents.validation import jsonl_records


@dataclass
class AutoScholarQueryInputs:
    """Source papers. Every list may be empty; at least one input is needed."""

    unarxive: list[str] = field(default_factory=list)  # unarXive JSONL(.gz) files
    research_town: list[str] = field(default_factory=list)  # research-town paper dumps (JSON)
    latex: list[LatexSource] = field(default_factory=list)  # {tex, bib (.bib or JSON), paper_id, title, date}
    pasa_db: list[str] = field(default_factory=list)  # PaSa paper_database/ folders (papers.loaders.load_pasa_db)


def collect_passages(dg) -> tuple[list[CitedPassage], Counter]:
    """Every input's related-work passages in input order, and counts of source papers by format. ``dg``: the
    ``data_gen`` config (:class:`~scholar_agents.data_gen.autoscholarquery.command.AutoScholarQueryConfig` or its
    node)."""
    headings = related_work_matcher(list(dg.related_work_headings))
    kw = dict(headings=headings, max_chars=int(dg.max_passage_chars), min_citations=int(dg.min_citations))
    passages: list[CitedPassage] = []
    sources: Counter = Counter()
    inputs = dg.inputs
    for path in inputs.unarxive:
        for _, rec in jsonl_records(path):
            sources["unarxive_papers"] += 1
            passages += passages_from_unarxive(rec, **kw)
    for path in inputs.research_town:
        for rec in iter_research_town(path):
            sources["research_town_papers"] += 1
            passages += passages_from_research_town(rec, **kw)
    for src in inputs.latex:
        sources["latex_papers"] += 1
        passages += passages_from_latex(LatexSource(**dict(src)), **kw)
    if inputs.pasa_db:
        for paper in load_pasa_db([str(p) for p in inputs.pasa_db], stubs_for_missing=False):
            sources["pasa_db_papers"] += 1
            passages += passages_from_paper(paper, **kw)
    if not sum(sources.values()):
        raise ValueError("data_gen.inputs names no input file (unarxive, research_town, latex, pasa_db)")
    seen: set[str] = set()
    unique = []
    for p in passages:  # a paper present in two inputs yields its passages once
        if p.passage_id not in seen:
            seen.add(p.passage_id)
            unique.append(p)
    return unique, sources
