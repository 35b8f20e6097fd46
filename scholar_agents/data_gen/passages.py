"""Related-work passages with numbered citation markers: what the AutoScholarQuery prompt (PaSa Table 16) reads.

Every input format (unarXive full text, research-town papers, LaTeX with a bibliography, PaSa's paper database)
is turned into the same :class:`CitedPassage`: the passage text with ``\\cite{n}`` markers and the list of cited
works, ``citations[n - 1]`` being the work behind marker ``n``. Numbering restarts in every passage so that the
ids a model has to echo stay small, and the answer ids map back to the source's own bibliography entries.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Union

from scholar_agents.papers.loaders import date_from_arxiv_id
from scholar_agents.papers.paper import Paper

# Headings treated as "Related Work" (PaSa §3.1 uses the Related Work section; background / prior-work sections
# are the same kind of text under another name — ours, configurable in data_gen.related_work_headings).
DEFAULT_RELATED_WORK_HEADINGS = (
    r"related\s+works?",
    r"prior\s+works?",
    r"previous\s+works?",
    r"literature\s+(review|survey)",
    r"related\s+literature",
    r"background",
)

CITE_MARKER = "\\cite{{{n}}}"


@dataclass
class CitedWork:
    """One bibliography entry of the source paper as the source describes it."""

    key: str  # the source's own key: unarXive bib id, BibTeX key, author-year label, cited title
    arxiv_id: str | None = None  # from the bibliography itself (ids, links, "arXiv:2301.00001" in the text)
    title: str | None = None
    raw: str = ""


@dataclass
class CitedPassage:
    source_id: str  # the source paper's id (arXiv id where known)
    source_title: str
    source_date: str  # ISO date of the source paper: the query date (PaSa §3.1)
    heading: str
    text: str  # with \cite{n} markers, n = 1..len(citations)
    citations: list[CitedWork]
    source_format: str  # unarxive | research_town | latex | pasa_db
    index: int = 0  # passage number within the source paper

    @property
    def passage_id(self) -> str:
        return f"{self.source_id}#{self.index}"

    def section_text(self) -> str:
        """The ``{section}`` slot of Table 16."""
        return f"{self.heading}\n{self.text}" if self.heading else self.text


@dataclass(frozen=True)
class Cite:
    """A citation inside a paragraph, by the source's key (rendered as ``\\cite{n}`` per passage)."""

    key: str


Segment = Union[str, Cite]
Paragraph = list[Segment]


@dataclass
class RelatedWorkSection:
    """A source paper's related-work text before numbering: paragraphs of text and citations by key."""

    heading: str
    paragraphs: list[Paragraph] = field(default_factory=list)


def related_work_matcher(patterns: Sequence[str] = DEFAULT_RELATED_WORK_HEADINGS) -> re.Pattern:
    if not patterns:
        raise ValueError("related_work_headings is empty: no section would ever be used")
    return re.compile(r"\b(" + "|".join(f"(?:{p})" for p in patterns) + r")\b", re.IGNORECASE)


def paragraph_chars(par: Paragraph) -> int:
    # A marker costs about as much as "\cite{12}".
    return sum(len(s) if isinstance(s, str) else 9 for s in par)


def build_passages(
    sections: Iterable[RelatedWorkSection],
    works: dict[str, CitedWork],
    *,
    source_id: str,
    source_title: str,
    source_date: str,
    source_format: str,
    max_chars: int,
    min_citations: int = 1,
) -> list[CitedPassage]:
    """Number the citations of each passage; split a long section at paragraph boundaries into passages of at
    most ``max_chars`` (a single longer paragraph becomes a passage of its own, cut at ``max_chars``)."""
    passages: list[CitedPassage] = []
    for section in sections:
        chunk: list[Paragraph] = []
        size = 0
        chunks: list[list[Paragraph]] = []
        for par in section.paragraphs:
            n = paragraph_chars(par)
            if chunk and size + n > max_chars:
                chunks.append(chunk)
                chunk, size = [], 0
            chunk.append(par)
            size += n
        if chunk:
            chunks.append(chunk)
        for pars in chunks:
            passage = _number(pars, works, max_chars)
            if passage is None:
                continue
            text, cited = passage
            if len(cited) < min_citations:
                continue
            passages.append(
                CitedPassage(
                    source_id=source_id,
                    source_title=source_title,
                    source_date=source_date,
                    heading=section.heading,
                    text=text,
                    citations=cited,
                    source_format=source_format,
                    index=len(passages),
                )
            )
    return passages


def _number(pars: list[Paragraph], works: dict[str, CitedWork], max_chars: int):
    numbers: dict[str, int] = {}
    cited: list[CitedWork] = []
    out_pars: list[str] = []
    used = 0
    for par in pars:
        parts: list[str] = []
        for seg in par:
            if used >= max_chars:
                break
            if isinstance(seg, Cite):
                if seg.key not in numbers:
                    numbers[seg.key] = len(cited) + 1
                    cited.append(works.get(seg.key) or CitedWork(key=seg.key))
                piece = CITE_MARKER.format(n=numbers[seg.key])
            else:
                piece = seg[: max(0, max_chars - used)]
            parts.append(piece)
            used += len(piece)
        text = re.sub(r"[ \t]+", " ", "".join(parts)).strip()
        if text:
            out_pars.append(text)
    if not out_pars:
        return None
    return "\n\n".join(out_pars), cited


# ---- dates ----

def published_time(date: str) -> str:
    """PaSa's ``source_meta.published_time`` (``YYYYMMDD``) from an ISO date. A month-only date gets the month's
    last day (the convention of the released dev split), a year-only date the 31st of December."""
    m = re.fullmatch(r"(\d{4})(?:-(\d{2}))?(?:-(\d{2}))?", date or "")
    if not m:
        raise ValueError(f"not an ISO date: {date!r}")
    y = int(m.group(1))
    mo = int(m.group(2) or 12)
    d = int(m.group(3) or calendar.monthrange(y, mo)[1])
    return f"{y:04d}{mo:02d}{d:02d}"


# ---- PaSa paper-database format (sections list cited titles, no prose) ----


def passages_from_paper(
    paper: Paper,
    *,
    headings: re.Pattern,
    max_chars: int,
    min_citations: int = 1,
    source_format: str = "pasa_db",
) -> list[CitedPassage]:
    """Passages from a :class:`Paper` whose sections carry references but no text (PaSa's paper database,
    ``{title, abstract, sections: {heading: [cited titles]}}``). The passage lists the cited works of each
    related-work section one per line with its marker: the prompt then asks for questions whose answers are
    those works, which is all the database can support (a deviation from prose passages, forced by the format)."""
    works: dict[str, CitedWork] = {}
    sections: list[RelatedWorkSection] = []
    for sec in paper.sections:
        if not headings.search(sec.heading or ""):
            continue
        pars: list[Paragraph] = []
        for ref in sec.references:
            key = ref.paper_id or ref.title or ""
            if key not in works:
                works[key] = CitedWork(key=key, arxiv_id=ref.paper_id if looks_like_arxiv_id(ref.paper_id) else None,
                                       title=ref.title, raw=ref.title or "")
            label = ref.title or ref.paper_id
            pars.append([f"{label} ", Cite(key), "."])
        if pars:
            # One "paragraph" per reference line, joined as a list inside the passage.
            sections.append(RelatedWorkSection(sec.heading, [_join_lines(pars)]))
    date = paper.date or date_from_arxiv_id(paper.paper_id)
    return build_passages(sections, works, source_id=paper.paper_id, source_title=paper.title, source_date=date,
                          source_format=source_format, max_chars=max_chars, min_citations=min_citations)


def _join_lines(pars: list[Paragraph]) -> Paragraph:
    out: Paragraph = []
    for i, p in enumerate(pars):
        if i:
            out.append("\n")
        out.extend(p)
    return out


_ARXIV_ID = re.compile(r"^(\d{4}\.\d{4,5}|[a-z\-]+(\.[A-Z]{2})?/\d{7})$")


def looks_like_arxiv_id(s: str | None) -> bool:
    return bool(s and _ARXIV_ID.match(s))
