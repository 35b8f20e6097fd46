"""Related-work passages from unarXive full text (``paper_id, metadata, body_text, bib_entries, ref_entries``).

In-text citations are ``{{cite:<bib id>}}`` spans; a bib entry carries linked arXiv ids (``ids.arxiv_id``,
``contained_arXiv_ids``) and the raw reference string (arXiv ids written in it, a guessable title).
Subsections belong to a related-work section through their section number (``2.1`` under ``2``).
"""

from __future__ import annotations

import email.utils
import re
from typing import Any

from scholar_agents.data_gen.bibliography import arxiv_id_in_text
from scholar_agents.data_gen.passages import (
    Cite,
    CitedPassage,
    CitedWork,
    Paragraph,
    RelatedWorkSection,
    build_passages,
)
from scholar_agents.papers.loaders import date_from_arxiv_id, strip_version
from scholar_agents.papers.titles import parse_cited_title

_SPAN = re.compile(r"\{\{(cite|formula|figure|table|ref):([^}]*)\}\}")


def unarxive_date(record: dict[str, Any]) -> str:
    """First-version date (the paper's publication on arXiv), else ``update_date``, else from the id."""
    meta = record.get("metadata") or {}
    versions = meta.get("versions") or []
    if versions and versions[0].get("created"):
        try:
            return email.utils.parsedate_to_datetime(versions[0]["created"]).date().isoformat()
        except (TypeError, ValueError):
            pass
    if meta.get("update_date"):
        return str(meta["update_date"])[:10]
    return date_from_arxiv_id(str(record.get("paper_id", "")))


def _work(key: str, entry: dict[str, Any] | None) -> CitedWork:
    if not entry:
        return CitedWork(key=key)
    raw = entry.get("bib_entry_raw") or ""
    ids = entry.get("ids") or {}
    arxiv = (ids.get("arxiv_id") or "").strip() or None
    if not arxiv:
        for c in entry.get("contained_arXiv_ids") or []:
            if c.get("id"):
                arxiv = str(c["id"]).strip()
                break
    if not arxiv:
        arxiv = arxiv_id_in_text(raw)
    return CitedWork(key=key, arxiv_id=strip_version(arxiv) if arxiv else None, title=parse_cited_title(raw) or None,
                     raw=raw)


def _paragraph(text: str, ref_entries: dict[str, Any]) -> Paragraph:
    out: Paragraph = []
    pos = 0
    for m in _SPAN.finditer(text):
        out.append(text[pos : m.start()])
        kind, ref = m.group(1), m.group(2)
        if kind == "cite":
            out.append(Cite(ref))
        elif kind == "formula":
            latex = (ref_entries.get(ref) or {}).get("latex") or ""
            out.append(f"${latex}$" if 0 < len(latex) <= 40 else "[formula]")
        else:
            out.append(f"[{kind}]")
        pos = m.end()
    out.append(text[pos:])
    return out


def related_work_sections(record: dict[str, Any], headings: re.Pattern) -> list[RelatedWorkSection]:
    """Paragraphs of every related-work section (with its numbered subsections), in document order."""
    sections: list[RelatedWorkSection] = []
    current: RelatedWorkSection | None = None
    prefix: str | None = None
    last_name = ""
    refs = record.get("ref_entries") or {}
    for par in record.get("body_text") or []:
        name = par.get("section") or ""
        num = str(par.get("sec_number") or "")
        inside = current is not None and (
            (prefix and (num == prefix or num.startswith(prefix + "."))) or (not prefix and name == current.heading)
        )
        if not inside:
            current, prefix = None, None
            if headings.search(name):
                current = RelatedWorkSection(heading=name)
                prefix = num or None
                sections.append(current)
        if current is None or par.get("content_type", "paragraph") not in ("paragraph", "list"):
            continue
        text = par.get("text") or ""
        if name != current.heading and name != last_name:
            text = f"{name}. {text}"  # a subsection's heading stays visible to the model
        last_name = name
        current.paragraphs.append(_paragraph(text, refs))
    return sections


def passages_from_unarxive(
    record: dict[str, Any], *, headings: re.Pattern, max_chars: int, min_citations: int = 1
) -> list[CitedPassage]:
    pid = str(record.get("paper_id") or "")
    if not pid:
        raise ValueError("unarXive record without paper_id")
    bib = record.get("bib_entries") or {}
    sections = related_work_sections(record, headings)
    keys = {seg.key for s in sections for p in s.paragraphs for seg in p if isinstance(seg, Cite)}
    works = {k: _work(k, bib.get(k)) for k in keys}
    title = " ".join(str((record.get("metadata") or {}).get("title") or "").split())
    return build_passages(sections, works, source_id=pid, source_title=title, source_date=unarxive_date(record),
                          source_format="unarxive", max_chars=max_chars, min_citations=min_citations)
