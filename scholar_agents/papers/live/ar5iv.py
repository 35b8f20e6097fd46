"""Sections and the papers each cites, from the HTML that LaTeXML makes of an arXiv paper (ar5iv, and arXiv's own
HTML for papers since December 2023): what PaSa's [Expand] reads (§4.1: "the papers cited in that section").

LaTeXML marks a top-level section ``<section class="ltx_section">`` with ``<h2 class="ltx_title ...">`` (its
number in ``<span class="ltx_tag">``), a citation ``<cite class="ltx_cite">`` with links ``href="#bib.bibN"``,
and the bibliography ``<li class="ltx_bibitem" id="bib.bibN">`` with its ``\\newblock`` parts as
``<span class="ltx_bibblock">`` (authors, then title, then venue for the usual BibTeX styles). A cited entry
keeps its arXiv id when the entry names one; otherwise its title is matched against the store by the caller.
Parsed with BeautifulSoup (html.parser: tolerant of broken markup, no compiled parser needed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scholar_agents.papers.live.http import INSTALL_HINT
from scholar_agents.papers.loaders import strip_version
from scholar_agents.validation import UsageError

_ARXIV = re.compile(r"(?:arXiv[:\s]*|arxiv\.org/(?:abs|pdf)/)(\d{4}\.\d{4,5}(?:v\d+)?|[a-z\-]+(?:\.[A-Z]{2})?/\d{7})",
                    re.IGNORECASE)


@dataclass
class CitedEntry:
    key: str  # the bibitem's id (bib.bib12)
    title: str
    arxiv_id: str | None


@dataclass
class HtmlPaper:
    title: str
    abstract: str
    sections: list[tuple[str, list[CitedEntry]]]  # (heading, cited entries in order of first citation)


def _soup(html: str | bytes):
    try:
        from bs4 import BeautifulSoup
    except ImportError as e:
        raise UsageError(INSTALL_HINT) from e
    return BeautifulSoup(html, "html.parser")


def _text(el) -> str:
    return " ".join(el.get_text(" ").split()) if el is not None else ""


def _entry_title(item) -> str:
    blocks = [_text(b) for b in item.find_all("span", class_="ltx_bibblock")]
    if len(blocks) >= 2:  # authors \newblock title \newblock venue
        return blocks[1].rstrip(" .,")
    text = blocks[0] if blocks else _text(item)
    parts = [p.strip() for p in re.split(r"\.\s+", text) if len(p.split()) >= 3]
    # one block: "A. Author and B. Author. The title. Venue, 2020." -> the part after the authors
    return (parts[1] if len(parts) > 1 else parts[0] if parts else "").rstrip(" .,")


def _bibliography(soup) -> dict[str, CitedEntry]:
    out = {}
    for item in soup.find_all("li", class_="ltx_bibitem"):
        key = item.get("id")
        if not key:
            continue
        for tag in item.find_all(class_="ltx_tag"):
            tag.decompose()  # "[12]"
        hrefs = " ".join(a.get("href", "") for a in item.find_all("a"))
        m = _ARXIV.search(hrefs) or _ARXIV.search(_text(item))
        out[key] = CitedEntry(key, _entry_title(item), strip_version(m.group(1)) if m else None)
    return out


def parse_html(html: str | bytes) -> HtmlPaper:
    """The paper's title, abstract and top-level sections with their cited entries. Raises ValueError when the
    page has no LaTeXML document (an error page, a redirect to the abstract page)."""
    soup = _soup(html)
    if soup.find(class_="ltx_document") is None and soup.find("section", class_="ltx_section") is None:
        raise ValueError("no LaTeXML document in the page")
    bib = _bibliography(soup)
    sections = []
    for sec in soup.find_all("section", class_=["ltx_section", "ltx_appendix"]):
        if sec.find_parent("section", class_=["ltx_section", "ltx_appendix"]) is not None:
            continue  # a nested section's citations count for its top-level section
        head = sec.find(re.compile(r"^h[1-6]$"), class_="ltx_title")
        if head is None:
            continue
        for tag in head.find_all(class_="ltx_tag"):
            tag.decompose()
        cited: list[CitedEntry] = []
        for cite in sec.find_all("cite"):
            for a in cite.find_all("a", href=True):
                key = a["href"].split("#")[-1]
                if key in bib and bib[key] not in cited:
                    cited.append(bib[key])
        sections.append((_text(head), cited))
    title = soup.find(class_="ltx_title_document")
    abstract = soup.find(class_="ltx_abstract")
    if abstract is not None:
        for h in abstract.find_all(class_="ltx_title"):
            h.decompose()
    return HtmlPaper(_text(title), _text(abstract), sections)
