"""Corpus loaders: each reads one public format and yields :class:`Paper` records for the store.

- ``load_arxiv_jsonl``: arXiv metadata JSONL (the shared corpus; also Kaggle's arxiv-metadata-oai-snapshot).
- ``load_pasa_db``: PaSa's released paper database: ``id2paper.json`` (arXiv id -> title) plus one JSON per paper
  ``{title, abstract, sections: {heading: [cited titles]}}``, stored in ``cs_paper_2nd.zip`` (or a folder) under
  the title's lower-cased letters (the key the official code uses to look papers up).
- ``load_unarxive``: unarXive full text (sections, in-text citations, bibliography linked to arXiv ids).
- ``load_research_town``: research-town paper dumps (section texts + author-year bibliographies).
- ``load_gold_stubs``: AutoScholarQuery gold papers (id, title, year, abstract where known).

Malformed records raise ``ValueError("<file>:<line>: ...")``; with ``skip_bad=True`` they are counted and logged.

One file (~500 lines) on purpose: each loader is a few dozen lines over the same cleaning and bad-record helpers; a file
per format would repeat them.
"""

from __future__ import annotations

import json
import logging
import re
import zipfile
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Callable, Container, Iterator, Sequence

from scholar_agents.papers.ids import norm_id
from scholar_agents.papers.paper import Paper, Reference, Section
from scholar_agents.papers.titles import clean_cited_title, parse_cited_title
from scholar_agents.validation import jsonl_records

log = logging.getLogger(__name__)

PathLike = str | Path

_NEW_ID = re.compile(r"^(\d{2})(\d{2})\.\d{4,5}(?:v\d+)?$")
_OLD_ID = re.compile(r"^[a-z\-]+(?:\.[A-Z]{2})?/(\d{2})(\d{2})\d{3}(?:v\d+)?$")
_ARXIV_IN_TEXT = re.compile(r"(?:arXiv:\s*|arxiv\.org/(?:abs|pdf)/|abs/)(\d{4}\.\d{4,5}|[a-z\-]+(?:\.[A-Z]{2})?/\d{7})",
                            re.IGNORECASE)


def strip_version(arxiv_id: str) -> str:
    """The loaders' name for :func:`scholar_agents.papers.ids.norm_id` (ids read from files)."""
    return norm_id(arxiv_id)


def date_from_arxiv_id(arxiv_id: str) -> str:
    """``2212.11867`` -> ``2022-12``; ``cs/0112017`` -> ``2001-12``; "" when the id is not an arXiv id."""
    m = _NEW_ID.match(arxiv_id) or _OLD_ID.match(arxiv_id)
    if not m:
        return ""
    yy, mm = int(m.group(1)), m.group(2)
    year = 1900 + yy if yy >= 91 else 2000 + yy
    return f"{year}-{mm}"


def _clean(text: Any) -> str:
    return " ".join(str(text or "").split())  # ~10x faster than a regex on 97k abstracts


class _BadRecords:
    """Counts malformed records; raises on the first one unless ``skip``."""

    def __init__(self, path: Path, skip: bool):
        self.path, self.skip, self.count = path, skip, 0

    def __call__(self, where: str, reason: str) -> None:
        msg = f"{self.path}:{where}: {reason}"
        if not self.skip:
            raise ValueError(msg)
        self.count += 1
        if self.count <= 10:
            log.warning("skipping malformed record %s", msg)

    def report(self, n_ok: int) -> None:
        if self.count:
            log.warning("%s: loaded %d papers, skipped %d malformed records", self.path, n_ok, self.count)
        else:
            log.info("%s: loaded %d papers", self.path, n_ok)


def _iter_jsonl(path: Path, bad: _BadRecords) -> Iterator[tuple[int, dict]]:
    """``(line, record)`` of a JSONL(.gz) corpus file; a malformed line goes to ``bad`` (raised, or counted)."""
    if not path.exists():
        raise FileNotFoundError(f"corpus file {path} does not exist")
    yield from jsonl_records(path, on_bad=lambda line_no, reason: bad(str(line_no), reason))


# --- arXiv metadata ---------------------------------------------------------------------------------------------

def _authors(value: Any) -> list[str]:
    if isinstance(value, list):
        return [_clean(a if isinstance(a, str) else " ".join(x for x in a if x)) for a in value]
    if isinstance(value, str) and value.strip():
        return [_clean(a) for a in re.split(r",\s*|\s+and\s+", value) if a.strip()]
    return []


def _categories(value: Any) -> list[str]:
    if isinstance(value, list):
        return [str(c) for c in value]
    if isinstance(value, str):
        return value.split()
    return []


def _created_date(versions: Any) -> str:
    """First version's creation date of a Kaggle/unarXive metadata record ("Thu, 22 Dec 2022 17:01:56 GMT")."""
    try:
        return parsedate_to_datetime(versions[0]["created"]).date().isoformat()
    except (TypeError, KeyError, IndexError, ValueError):
        return ""


def load_arxiv_jsonl(path: PathLike, skip_bad: bool = False, source: str = "arxiv") -> Iterator[Paper]:
    """Records ``{arxiv_id, title, abstract, authors, categories, date}`` (the shared corpus) or Kaggle's
    ``{id, title, abstract, authors: "A, B and C", categories: "cs.CL cs.LG", versions: [...]}``."""
    path = Path(path)
    bad = _BadRecords(path, skip_bad)
    n = 0
    for lineno, d in _iter_jsonl(path, bad):
        pid = d.get("arxiv_id") or d.get("id") or d.get("paper_id")
        title = _clean(d.get("title"))
        if not pid or not title:
            bad(str(lineno), "record needs an arxiv_id (or id) and a title")
            continue
        pid = strip_version(str(pid))
        date = str(d.get("date") or "") or _created_date(d.get("versions")) or date_from_arxiv_id(pid)
        n += 1
        yield Paper(paper_id=pid, title=title, abstract=_clean(d.get("abstract")), date=date,
                    authors=_authors(d.get("authors")), categories=_categories(d.get("categories")), source=source)
    bad.report(n)


def load_gold_stubs(path: PathLike, skip_bad: bool = False, source: str = "gold") -> Iterator[Paper]:
    """AutoScholarQuery gold papers ``{arxiv_id, title, year, abstract?}``. The date is the arXiv id's month
    (what arXiv metadata uses) where the id is an arXiv id, else the year."""
    path = Path(path)
    bad = _BadRecords(path, skip_bad)
    n = 0
    for lineno, d in _iter_jsonl(path, bad):
        pid, title = d.get("arxiv_id") or d.get("paper_id"), _clean(d.get("title"))
        if not pid or not title:
            bad(str(lineno), "gold record needs arxiv_id and title")
            continue
        pid = strip_version(str(pid))
        year = str(d.get("year") or "")
        n += 1
        yield Paper(paper_id=pid, title=title, abstract=_clean(d.get("abstract")),
                    date=date_from_arxiv_id(pid) or year, authors=_authors(d.get("authors")), source=source)
    bad.report(n)


# --- PaSa paper database ----------------------------------------------------------------------------------------

def pasa_title_key(title: str) -> str:
    """The official code's file name for a paper: the lower-cased letters of its title (``keep_letters``)."""
    return "".join(c for c in title if c.isalpha()).lower()


class _PaperFiles:
    """Per-paper JSON documents in a zip archive or a folder, looked up by :func:`pasa_title_key`."""

    def __init__(self, paths: Sequence[Path]):
        self._zips: list[tuple[zipfile.ZipFile, dict[str, str]]] = []
        self._dirs: list[Path] = []
        for p in paths:
            if p.is_dir():
                self._dirs.append(p)
            elif zipfile.is_zipfile(p):
                z = zipfile.ZipFile(p)
                names = {Path(n).name.removesuffix(".json"): n for n in z.namelist() if not n.endswith("/")}
                self._zips.append((z, names))
            else:
                raise ValueError(f"{p}: expected a zip archive or a folder of per-paper JSON files")

    def get(self, key: str) -> tuple[str, bytes] | None:
        for z, names in self._zips:
            name = names.get(key)
            if name is not None:
                return f"{z.filename}!{name}", z.read(name)
        for d in self._dirs:
            for cand in (d / key, d / f"{key}.json"):
                if cand.is_file():
                    return str(cand), cand.read_bytes()
        return None

    def close(self) -> None:
        for z, _ in self._zips:
            z.close()


def _pasa_sections(value: Any, where: str) -> list[Section]:
    if value in (None, "", [], {}):
        return []
    if not isinstance(value, dict):
        raise ValueError(f"{where}: 'sections' must map a heading to a list of cited titles, "
                         f"got {type(value).__name__}")
    sections = []
    for heading, cited in value.items():
        if isinstance(cited, str):
            cited = [cited]
        if not isinstance(cited, list):
            raise ValueError(f"{where}: section {heading!r} must list cited titles, got {type(cited).__name__}")
        refs = [Reference(title=_clean(t)) for t in dict.fromkeys(cited) if isinstance(t, str) and _clean(t)]
        sections.append(Section(_clean(heading), refs))
    return sections


def load_pasa_db(source: PathLike | Sequence[PathLike], stubs_for_missing: bool = True,
                 skip_bad: bool = False) -> Iterator[Paper]:
    """PaSa's paper database. ``source`` is its ``paper_database/`` folder (holding ``id2paper.json`` and
    ``cs_paper_2nd.zip`` or a folder of per-paper JSON files) or an explicit list of those files.

    Cited titles stay unresolved here; ``PaperStore.resolve_references()`` maps them to ids once every corpus is
    loaded (the official code instead searched arXiv by exact title at crawl time, which broke expansion).
    ``stubs_for_missing``: papers listed in ``id2paper.json`` without a document become title-only records.
    """
    paths = [Path(source)] if isinstance(source, (str, Path)) else [Path(p) for p in source]
    id_maps: list[Path] = []
    doc_paths: list[Path] = []
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"PaSa paper database path {p} does not exist")
        if p.is_dir() and (p / "id2paper.json").exists():
            id_maps.append(p / "id2paper.json")
            doc_paths += sorted(p.glob("*.zip"))
            doc_paths += [d for d in sorted(p.iterdir()) if d.is_dir()]
        elif p.is_dir() and (p / "paper_database").is_dir():
            paths.append(p / "paper_database")
        elif p.name.endswith(".json") and p.is_file():
            id_maps.append(p)
        else:
            doc_paths.append(p)
    if not id_maps:
        raise ValueError(f"no id2paper.json found in {[str(p) for p in paths]}")
    files = _PaperFiles(doc_paths)
    n = n_docs = 0
    try:
        for id_map in id_maps:
            bad = _BadRecords(id_map, skip_bad)
            try:
                id2paper = json.loads(id_map.read_text(encoding="utf-8"))
            except json.JSONDecodeError as e:
                raise ValueError(f"{id_map}:{e.lineno}: invalid JSON ({e.msg})") from e
            if not isinstance(id2paper, dict):
                raise ValueError(f"{id_map}: expected an object mapping arXiv id -> title")
            for aid, title in id2paper.items():
                if not isinstance(title, str) or not title.strip():
                    bad(aid, "title must be a non-empty string")
                    continue
                pid = strip_version(aid)
                found = files.get(pasa_title_key(title))
                paper = Paper(paper_id=pid, title=_clean(title), date=date_from_arxiv_id(pid), source="pasa_db")
                if found is not None:
                    where, raw = found
                    try:
                        doc = json.loads(raw)
                        if not isinstance(doc, dict):
                            raise ValueError(f"{where}: expected a JSON object")
                        paper.title = _clean(doc.get("title")) or paper.title
                        paper.abstract = _clean(doc.get("abstract"))
                        paper.sections = _pasa_sections(doc.get("sections"), where)
                    except (json.JSONDecodeError, ValueError) as e:
                        bad(aid, f"bad paper document {where}: {e}")
                        continue
                    n_docs += 1
                elif not stubs_for_missing:
                    continue
                n += 1
                yield paper
            bad.report(n)
    finally:
        files.close()
    log.info("PaSa paper database: %d papers, %d with a document", n, n_docs)


# --- unarXive ---------------------------------------------------------------------------------------------------

def _bib_reference(entry: dict) -> Reference | None:
    ids = entry.get("ids") or {}
    aid = ids.get("arxiv_id") if isinstance(ids, dict) else None
    if not aid:
        contained = entry.get("contained_arXiv_ids") or []
        if contained and isinstance(contained[0], dict):
            aid = contained[0].get("id")
    raw = entry.get("bib_entry_raw") or ""
    title = parse_cited_title(raw) or None
    if not aid:
        m = _ARXIV_IN_TEXT.search(raw)
        aid = m.group(1) if m else None
    if not aid and not title:
        return None
    return Reference(paper_id=strip_version(aid) if aid else None, title=title)


def load_unarxive(path: PathLike, skip_bad: bool = False, source: str = "unarxive") -> Iterator[Paper]:
    """unarXive JSONL (format: unarXive's data_format.md). Sections in reading order; a section's references are
    its paragraphs' citation spans in order (deduplicated), resolved to arXiv ids where the bibliography entry is
    linked (``ids.arxiv_id`` / ``contained_arXiv_ids``), else the title parsed from the raw entry."""
    path = Path(path)
    bad = _BadRecords(path, skip_bad)
    n = 0
    for lineno, d in _iter_jsonl(path, bad):
        meta = d.get("metadata") or {}
        pid = d.get("paper_id") or meta.get("id")
        title = _clean(meta.get("title"))
        body = d.get("body_text")
        if not pid or not title or not isinstance(body, list):
            bad(str(lineno), "unarXive record needs paper_id, metadata.title and body_text")
            continue
        pid = strip_version(str(pid))
        bib = d.get("bib_entries") or {}
        abstract = meta.get("abstract") or (d.get("abstract") or {}).get("text", "")
        sections: list[Section] = []
        seen: list[set] = []
        for para in body:
            if not isinstance(para, dict):
                continue
            name = _clean(para.get("section")) or "(untitled)"
            num = _clean(para.get("sec_number"))
            heading = f"{num} {name}" if num and not name.startswith(num) else name
            if not sections or sections[-1].heading != heading:
                sections.append(Section(heading, []))
                seen.append(set())
            for span in para.get("cite_spans") or []:
                entry = bib.get(span.get("ref_id")) if isinstance(span, dict) else None
                if not isinstance(entry, dict):
                    continue
                ref = _bib_reference(entry)
                if ref is None:
                    continue
                key = ref.paper_id or ref.title
                if key not in seen[-1]:
                    seen[-1].add(key)
                    sections[-1].references.append(ref)
        sections = _merge_repeated_headings(sections)
        n += 1
        yield Paper(paper_id=pid, title=title, abstract=_clean(abstract),
                    date=_created_date(meta.get("versions")) or str(meta.get("update_date") or "")
                    or date_from_arxiv_id(pid),
                    authors=[_clean(" ".join([a[1], a[0]])) for a in meta.get("authors_parsed") or [] if len(a) >= 2]
                    or _authors(meta.get("authors")),
                    categories=_categories(meta.get("categories")), sections=sections, source=source)
    bad.report(n)


def _merge_repeated_headings(sections: list[Section]) -> list[Section]:
    """A heading interrupted by a figure/listing paragraph of another section appears twice: merge, keep order."""
    out: dict[str, Section] = {}
    for s in sections:
        if s.heading in out:
            have = {r.paper_id or r.title for r in out[s.heading].references}
            out[s.heading].references += [r for r in s.references if (r.paper_id or r.title) not in have]
        else:
            out[s.heading] = s
    return list(out.values())


# --- research-town ----------------------------------------------------------------------------------------------

def _rt_bib_entry(key: str, text: str) -> tuple[Reference | None, str]:
    """research-town bibliography value: "Key\\n\\nAuthors. Year.\\n\\n\\nTitle.\\n\\n\\nVenue." -> reference."""
    blocks = [b.strip() for b in text.replace("\u00a0", " ").strip().split("\n\n\n") if b.strip()]
    title = clean_cited_title(_clean(blocks[1])) if len(blocks) >= 2 else parse_cited_title(_clean(text))
    m = _ARXIV_IN_TEXT.search(text)
    aid = strip_version(m.group(1)) if m else None
    if not title and not aid:
        return None, key
    return Reference(paper_id=aid, title=title or None), key


def _citation_pattern(key: str) -> re.Pattern | None:
    """"Ainslie et al. (2023)" -> matches "Ainslie et al. (2023)" and "(Ainslie et al., 2023; ...)"."""
    m = re.match(r"^(.*\S)\s*\((\d{4}[a-z]?)\)$", key.replace("\u00a0", " ").strip())
    if not m:
        return None
    name, year = re.escape(m.group(1)).replace(r"\ ", r"\s+"), re.escape(m.group(2))
    return re.compile(rf"{name},?\s*\(?{year}(?![a-z0-9])")


def load_research_town(path: PathLike, skip_bad: bool = False, source: str = "research_town") -> Iterator[Paper]:
    """research-town paper dumps ``{pk: {title, abstract, authors, url, timestamp, sections: {heading: text},
    bibliography: {"Name et al. (Year)": entry}}}``. A section's references are the bibliography entries its text
    cites (author-year citations), in order of first mention. Records are deduplicated by arXiv id."""
    path = Path(path)
    bad = _BadRecords(path, skip_bad)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"corpus file {path} does not exist") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from e
    records = data.values() if isinstance(data, dict) else data
    seen: set[str] = set()
    n = 0
    for i, d in enumerate(records):
        where = str(d.get("pk", i)) if isinstance(d, dict) else str(i)
        if not isinstance(d, dict) or not d.get("title") or not isinstance(d.get("sections"), dict):
            bad(where, "record needs a title and a sections object")
            continue
        m = _ARXIV_IN_TEXT.search(d.get("url") or "")
        pid = strip_version(m.group(1)) if m else f"rt:{d.get('pk', i)}"
        if pid in seen:
            continue
        seen.add(pid)
        bib = [(_rt_bib_entry(k, v), _citation_pattern(k)) for k, v in (d.get("bibliography") or {}).items()
               if isinstance(v, str)]
        sections = []
        for heading, text in d["sections"].items():
            text = str(text or "").replace("\u00a0", " ")
            found = []
            for (ref, _), pat in bib:
                if ref is None or pat is None:
                    continue
                hit = pat.search(text)
                if hit:
                    found.append((hit.start(), ref))
            found.sort(key=lambda x: x[0])
            sections.append(Section(_clean(heading), [r for _, r in found]))
        ts = d.get("timestamp")
        date = (datetime.fromtimestamp(int(ts), tz=timezone.utc).date().isoformat() if ts
                else date_from_arxiv_id(pid))
        n += 1
        yield Paper(paper_id=pid, title=_clean(d["title"]), abstract=_clean(d.get("abstract")), date=date,
                    authors=_authors(d.get("authors")), categories=_categories(d.get("domain")),
                    sections=sections, source=source)
    bad.report(n)


# --- section text -----------------------------------------------------------------------------------------------

def load_section_texts(fmt: str, path: PathLike, paper_ids: Container[str] | None = None,
                       skip_bad: bool = True) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """``(paper_id, [(heading, text), ...])`` from a full-text corpus file (``unarxive``, ``research_town``): the
    section TEXT, which the paper store does not keep (it keeps headings and references). Ids and headings are
    the ones :func:`load_unarxive` / :func:`load_research_town` give the same records; only ``paper_ids`` (when
    given) are kept, so a consumer holds the texts it needs, not the corpus."""
    path = Path(path)
    if fmt == "unarxive":
        bad = _BadRecords(path, skip_bad)
        for _, d in _iter_jsonl(path, bad):
            meta = d.get("metadata") or {}
            pid, body = d.get("paper_id") or meta.get("id"), d.get("body_text")
            if not pid or not isinstance(body, list):
                continue
            pid = strip_version(str(pid))
            if paper_ids is not None and pid not in paper_ids:
                continue
            texts: dict[str, list[str]] = {}
            for para in body:
                if isinstance(para, dict) and para.get("text"):
                    name = _clean(para.get("section")) or "(untitled)"
                    num = _clean(para.get("sec_number"))
                    heading = f"{num} {name}" if num and not name.startswith(num) else name
                    texts.setdefault(heading, []).append(_clean(para["text"]))
            yield pid, [(h, " ".join(parts)) for h, parts in texts.items()]
    elif fmt == "research_town":
        data = json.loads(path.read_text(encoding="utf-8"))
        seen: set[str] = set()
        for i, d in enumerate(data.values() if isinstance(data, dict) else data):
            if not isinstance(d, dict) or not isinstance(d.get("sections"), dict):
                continue
            m = _ARXIV_IN_TEXT.search(d.get("url") or "")
            pid = strip_version(m.group(1)) if m else f"rt:{d.get('pk', i)}"
            if pid in seen or (paper_ids is not None and pid not in paper_ids):
                continue
            seen.add(pid)
            yield pid, [(_clean(h), _clean(t)) for h, t in d["sections"].items()]
    else:
        raise ValueError(f"{fmt!r} keeps no section text; full-text formats: unarxive, research_town")


def load_paper_jsonl(path: PathLike, skip_bad: bool = False, source: str = "") -> Iterator[Paper]:
    """Our own record, one ``Paper.to_dict()`` per line (sections with their references): what generated corpora
    (``scholar data_gen crawl_tasks``) write. ``source`` overrides the records' own when given."""
    path = Path(path)
    bad = _BadRecords(path, skip_bad)
    n = 0
    for lineno, d in _iter_jsonl(path, bad):
        try:
            paper = Paper.from_dict(d)
        except (KeyError, TypeError, ValueError) as e:
            bad(str(lineno), f"not a Paper record ({e})")
            continue
        if source:
            paper.source = source
        n += 1
        yield paper
    bad.report(n)


# --- dispatch ---------------------------------------------------------------------------------------------------

LOADERS: dict[str, Callable[..., Iterator[Paper]]] = {
    "arxiv_jsonl": load_arxiv_jsonl,
    "gold_stubs": load_gold_stubs,
    "pasa_db": load_pasa_db,
    "unarxive": load_unarxive,
    "research_town": load_research_town,
    "paper_jsonl": load_paper_jsonl,
}


def load_source(fmt: str, path: PathLike | Sequence[PathLike], **kwargs: Any) -> Iterator[Paper]:
    """``load_source("arxiv_jsonl", path)``: the loader for a corpus format named in a ``papers`` config."""
    if fmt not in LOADERS:
        raise ValueError(f"unknown corpus format {fmt!r}; known: {sorted(LOADERS)}")
    return LOADERS[fmt](path, **kwargs)
