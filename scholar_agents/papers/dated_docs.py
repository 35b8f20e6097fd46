"""The documents a search index covers, in date order, so that "published before D" is an index prefix.

Every local backend numbers its documents 0..N-1 in this order; the before-date filter then costs one binary
search and restricts scoring to ``[0, cutoff)`` (FAISS ``IDSelectorRange``, a slice of the BM25 score vector),
which is exact and as fast as an unfiltered search.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Sequence

from scholar_agents.papers.paper import Paper
from scholar_agents.runtime.progress import progress_bar

_COMPACT = re.compile(r"^(\d{4})(\d{2})(\d{2})$")
_ISO = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")


def normalize_date(date: str | int | None) -> str | None:
    """``"20230228"`` (PaSa's ``published_time``) / ``"2023-02-28"`` / ``"2023-02"`` / ``2023`` -> ISO string."""
    if date is None or date == "":
        return None
    s = str(date).strip()
    m = _COMPACT.match(s)
    if m:
        s = f"{m.group(1)}-{m.group(2)}-{m.group(3)}"
    if not _ISO.match(s):
        raise ValueError(f"before-date must be YYYY-MM-DD, YYYYMMDD, YYYY-MM or YYYY, got {date!r}")
    return s


def date_key(date: str) -> str:
    """A comparable full date: a partial date means its first day ("2016" -> "2016-01-01", "2025-06" ->
    "2025-06-01"), so "before 2025-06-01" excludes a June-2025 paper and "before 2025-06-30" (PaSa's month-end
    query dates) includes it. "" stays "" (undated)."""
    if len(date) == 4:
        return date + "-01-01"
    if len(date) == 7:
        return date + "-01"
    return date


def doc_text(paper: Paper, fields: Sequence[str]) -> str:
    """The indexed text of a paper: the named fields joined (title and abstract by default)."""
    parts = []
    for f in fields:
        if f == "title":
            parts.append(paper.title)
        elif f == "abstract":
            parts.append(paper.abstract)
        elif f == "authors":
            parts.append(", ".join(paper.authors))
        elif f == "categories":
            parts.append(" ".join(paper.categories))
        elif f == "outline":
            parts.append("; ".join(paper.outline))
        else:
            raise ValueError(f"unknown text field {f!r}; use title, abstract, authors, categories or outline")
    return ". ".join(p for p in parts if p)


@dataclass
class DatedDocs:
    """Paper ids and dates in index order. ``keep_undated``: papers without a date pass every date filter
    (placed first) — else they are placed last and only returned by unfiltered searches."""

    ids: list[str]
    dates: list[str]  # as stored; sorted by their date_key
    keep_undated: bool = True
    fingerprint: str = ""
    covers_before: str | None = None  # set on a date-bounded prefix (see ``prefix_before``): the only dates it serves

    def __post_init__(self) -> None:
        self._keys = [date_key(d) for d in self.dates]
        self._n_dated_end = len(self.dates)
        if not self.keep_undated:
            self._n_dated_end = sum(1 for d in self.dates if d)

    def __len__(self) -> int:
        return len(self.ids)

    def cutoff(self, before: str | None) -> int:
        """How many leading documents were published strictly before ``before`` (all of them for None)."""
        b = normalize_date(before)
        if self.covers_before is not None and (b is None or date_key(b) > date_key(self.covers_before)):
            raise ValueError(f"this index holds only the papers published before {self.covers_before} "
                             f"(search.dense_before), so it cannot serve a search before {b or 'any date'}: "
                             "raise search.dense_before or set it to null")
        if b is None:
            return len(self.ids)
        return bisect.bisect_left(self._keys, date_key(b), 0, self._n_dated_end)

    def prefix_before(self, before: str) -> "DatedDocs":
        """The documents published before ``before`` (with the undated ones when ``keep_undated``): an index prefix,
        so an index over it answers every search dated on or before ``before`` exactly as the full index would."""
        b = normalize_date(before)
        n = self.cutoff(b)
        h = hashlib.sha256(f"{self.fingerprint}\x1f{b}".encode()).hexdigest()[:20]
        return DatedDocs(self.ids[:n], self.dates[:n], self.keep_undated, h, covers_before=b)

    @classmethod
    def from_papers(cls, papers: Sequence[Paper], fields: Sequence[str], keep_undated: bool = True,
                    progress: bool = False) -> tuple["DatedDocs", list[str]]:
        """Sort ``papers`` by (date, id) and return the order plus the texts to index, with a fingerprint of
        exactly what gets indexed (ids, dates, texts, fields, undated policy): any change means rebuild."""
        rows = []
        for p in progress_bar(papers, desc="collect documents", disable=not progress):
            rows.append((p.date or "", p.paper_id, doc_text(p, fields)))
        if keep_undated:
            rows.sort(key=lambda r: (date_key(r[0]), r[1]))
        else:
            rows.sort(key=lambda r: (r[0] == "", date_key(r[0]), r[1]))
        h = hashlib.sha256(json.dumps([list(fields), keep_undated]).encode())
        for date, pid, text in rows:
            h.update(f"{pid}\x1f{date}\x1f{text}\x1e".encode())
        docs = cls([r[1] for r in rows], [r[0] for r in rows], keep_undated, h.hexdigest()[:20])
        return docs, [r[2] for r in rows]
