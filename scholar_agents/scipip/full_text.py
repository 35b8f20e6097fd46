"""The introduction and method sections SciPIP's database prompts read (§3.1, Eq. 1: τ1 takes title, abstract and
introduction T_n; τ3 takes the method section T_m).

The paper store keeps each paper's section headings and references, not their text; the text stays in the
full-text corpus files the store was built from (unarXive, research-town; the store records them in its
``sources`` metadata). :class:`FullText` reads the sections of the papers being summarised from those files
(``papers.loaders.load_section_texts``) and picks the two sections by heading:

- introduction: the first section whose heading says "introduction";
- method: the first section whose heading names a method ("method", "approach", "framework", "model", ...),
  else the first section after the introduction that is not related work, background, experiments, results,
  conclusions or an appendix (papers title their method after the method: "2 LC-Boost").

Where a paper has no full text or no such section, the abstract stands in (the only choice when a corpus has
no full text, e.g. arXiv metadata or PaSa's paper database); ``sources`` counts which was used.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path

from scholar_agents.papers.loaders import load_section_texts
from scholar_agents.papers.store import PaperStore

log = logging.getLogger(__name__)

FULL_TEXT_FORMATS = ("unarxive", "research_town")
SECTION_INPUTS = ("fulltext", "abstract")

_INTRODUCTION = re.compile(r"\bintroduction\b", re.IGNORECASE)
_METHOD = re.compile(r"\b(methods?|methodology|approach(es)?|proposed|framework|model|algorithms?|architecture)\b",
                     re.IGNORECASE)
_NOT_METHOD = re.compile(
    r"\b(introduction|related|background|preliminar\w*|motivation|experiment\w*|evaluation|results?|conclusions?|"
    r"discussion|limitations?|appendix|acknowledg\w*|references|reviewer|ethics|dataset)\b", re.IGNORECASE)


def pick_introduction(sections: list[tuple[str, str]]) -> str:
    return next((text for heading, text in sections if text and _INTRODUCTION.search(heading)), "")


_NUMBER = re.compile(r"^(\d+)(?:\.\d+)+\s")  # "2.3 ..." -> "2": a subsection of section 2


def pick_method(sections: list[tuple[str, str]]) -> str:
    # Subsections of excluded sections stay excluded ("2.3 ... model dynamics" under "2 Background").
    excluded = {h.split()[0] for h, _ in sections if h.split() and _NOT_METHOD.search(h)}
    for heading, text in sections:
        parent = _NUMBER.match(heading)
        if parent and parent.group(1) in excluded:
            continue
        if text and _METHOD.search(heading) and not _NOT_METHOD.search(heading):
            return text
    after_intro = False
    for heading, text in sections:
        if _INTRODUCTION.search(heading):
            after_intro = True
        elif after_intro and text and not _NOT_METHOD.search(heading):
            return text
    return ""


def store_full_text_sources(store: PaperStore) -> list[tuple[str, str]]:
    """``(format, path)`` of the full-text files the store was built from (``papers.corpus`` records them)."""
    raw = store.get_meta("sources")
    if not raw:
        return []
    out = []
    for sig in json.loads(raw):
        if sig and sig.get("format") in FULL_TEXT_FORMATS and Path(sig.get("path", "")).exists():
            out.append((sig["format"], sig["path"]))
    return out


class FullText:
    """Introduction and method texts of a set of papers, read once from the full-text files."""

    def __init__(self, sections: dict[str, list[tuple[str, str]]]):
        self.sections = sections

    @classmethod
    def read(cls, sources: Iterable[tuple[str, str]], paper_ids: Iterable[str]) -> "FullText":
        wanted = set(paper_ids)
        found: dict[str, list[tuple[str, str]]] = {}
        for fmt, path in sources:
            for pid, secs in load_section_texts(fmt, path, paper_ids=wanted):
                if any(text for _, text in secs):
                    found.setdefault(pid, secs)  # the first source with text wins, as in the store
        log.info("full text: %d of %d papers have section text", len(found), len(wanted))
        return cls(found)

    def introduction(self, paper_id: str) -> str:
        return pick_introduction(self.sections.get(paper_id, []))

    def method(self, paper_id: str) -> str:
        return pick_method(self.sections.get(paper_id, []))
