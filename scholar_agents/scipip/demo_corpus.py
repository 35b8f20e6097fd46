"""A small real literature for SciPIP demos: papers whose references carry abstracts, so that co-citation
counts exist inside the database (the arXiv metadata corpus has no references).

research-town's interdisciplinary bench lists, for each of 20 papers, the titles and abstracts of the papers
it cites (~640 citations, ~580 distinct papers). Each citing paper becomes a Paper with one "References"
section; each cited paper becomes a Paper with its abstract, identified by a stable title key
(``rtb:<sha1 of the normalised title>``) since the file gives no arXiv ids. A few corpus papers (arXiv
metadata) can be added next to them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

from scholar_agents.papers.loaders import load_arxiv_jsonl
from scholar_agents.papers.paper import Paper, Reference, Section
from scholar_agents.papers.store import PaperStore
from scholar_agents.papers.titles import normalize_title


def cited_paper_id(title: str) -> str:
    return "rtb:" + hashlib.sha1(normalize_title(title).encode("utf-8")).hexdigest()[:16]


def load_cited_abstracts_bench(path: str | Path, max_cited: int | None = None) -> Iterator[Paper]:
    """Papers of ``research_town_interdisciplinary_bench.json`` ({title: {arxiv_id, abstract, year,
    references: [{title, abstract}]}}): the citing papers, then their cited papers (at most ``max_cited``,
    most-cited first so that co-citations survive the cut)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{path} does not exist") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from e
    records = list(data.values()) if isinstance(data, dict) else list(data)
    cited: dict[str, Paper] = {}
    cite_count: dict[str, int] = {}
    citing: list[Paper] = []
    for i, d in enumerate(records):
        if not isinstance(d, dict) or not d.get("paper_title"):
            raise ValueError(f"{path}: record {i} has no paper_title")
        refs = []
        for r in d.get("references") or []:
            if not isinstance(r, dict) or not r.get("title"):
                continue
            cid = cited_paper_id(r["title"])
            refs.append(Reference(paper_id=cid, title=r["title"]))
            cite_count[cid] = cite_count.get(cid, 0) + 1
            if cid not in cited and r.get("abstract"):
                cited[cid] = Paper(paper_id=cid, title=r["title"].strip(), abstract=r["abstract"].strip(), source="research_town_bench")
        year = d.get("year")
        citing.append(
            Paper(
                paper_id=str(d.get("arxiv_id") or cited_paper_id(d["paper_title"])),
                title=d["paper_title"].strip(),
                abstract=(d.get("abstract") or "").strip(),
                date=str(year) if year else "",
                authors=list(d.get("authors") or []),
                sections=[Section("References", refs)],
                source="research_town_bench",
            )
        )
    yield from citing
    ranked = sorted(cited, key=lambda c: (-cite_count[c], c))
    for cid in ranked[:max_cited] if max_cited is not None else ranked:
        yield cited[cid]


def build_demo_store(out: str | Path, bench_json: str | Path, corpus_jsonl: str | Path | None = None,
                     max_cited: int | None = None, n_corpus: int = 0, corpus_category: str = "cs.CL") -> dict:
    """A paper store for SciPIP demos: the bench's citing and cited papers, then the first ``n_corpus`` corpus
    papers of ``corpus_category`` (arXiv metadata JSONL). Returns the store's stats."""
    with PaperStore(out) as store:
        store.add(load_cited_abstracts_bench(bench_json, max_cited=max_cited))
        if corpus_jsonl and n_corpus:
            picked = (p for p in load_arxiv_jsonl(corpus_jsonl, skip_bad=True) if corpus_category in p.categories and p.abstract)
            store.add(islice(picked, n_corpus))
        return store.stats()


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="build a small paper store for SciPIP demos")
    ap.add_argument("--out", required=True)
    ap.add_argument("--bench-json", required=True, help="research_town_interdisciplinary_bench.json")
    ap.add_argument("--corpus", default=None, help="arXiv metadata JSONL(.gz)")
    ap.add_argument("--max-cited", type=int, default=None)
    ap.add_argument("--n-corpus", type=int, default=0)
    ap.add_argument("--category", default="cs.CL")
    a = ap.parse_args()
    print(json.dumps(build_demo_store(a.out, a.bench_json, a.corpus, a.max_cited, a.n_corpus, a.category)))
