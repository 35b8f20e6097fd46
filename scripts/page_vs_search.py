"""Is the `pasa serve` page's top 10 at least as good as plain search? Judged blind, on a few researcher requests.

    python scripts/page_vs_search.py run --out outputs/page_vs_search [hydra overrides of pasa_serve ...]
    python scripts/page_vs_search.py score --key outputs/page_vs_search/key.json \
        --judgments tests/assets/page_requests_judged.json --out outputs/page_vs_search

`run` composes the page's own config (pasa_serve.yaml: the same agent as `pasa search`; the settings that change a
result list are compared with pasa_search.yaml and every difference is printed and recorded: the page's settings are
the ones run), asks the page's SearchService for each request (the list the page shows, in its order), and searches
the same store with BM25 and hybrid (`scholar papers search` search=bm25 / search=hybrid). It writes

- pool.json: per request, the union of the three top 10s, shuffled with --seed, each paper only paper_id, title
  and abstract: what a judge reads, with nothing that tells which system found a paper or where it ranked;
- key.json: the three ranked top 10s per request, the page's Selector scores and marks, and the setting.

It prints only counts, so whoever judges can run it without seeing a ranked list. `score` reads key.json and a
judgments file (per request: paper_id -> true/false, or {"relevant": bool, "reason": str}) and prints relevant@10 per
system per request, their means, and the page minus each search (per request, summed and mean); it writes
result.json and result.md. A paper of a top 10 without a judgment, or a judgment of a paper in no top 10, is refused:
the judgments were made on another pool.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

K = 10
SYSTEMS = ("page", "bm25", "hybrid")
SEARCHES = ("bm25", "hybrid")
REQUESTS = [
    ("r1", "I'm looking for work on speculative decoding to speed up LLM inference"),
    ("r2", "Which papers evaluate hallucination in large vision-language models?"),
    ("r3", "Give me papers on diffusion models for video generation"),
    ("r4", "We are building a retrieval-augmented generation system over long documents. What methods exist to "
           "compress or select the retrieved context before it is passed to the language model?"),
]
# the keys of the composed configs whose values change a result list: the page's must equal `pasa search`'s for the
# page to be "the same agent"; the named ones are the ones a serve preset has overridden in the past
RESULT_KEYS = ("crawler.env.search_user_query", "crawler.env.fallback_search", "crawler.env.search_k",
               "crawler.env.user_query_k", "crawler.env.dense_search_k", "agent.ranking")
RESULT_GROUPS = ("crawler", "agent", "selector", "search", "expand", "llm", "selector_llm", "embedder", "papers")


# ---- settings ----

def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, Mapping):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: d}


def setting_differences(page: Mapping, search: Mapping) -> dict[str, list]:
    """``{key: [page's value, pasa search's value]}`` for every key of RESULT_GROUPS that differs (plain dicts)."""
    a = _flat({g: page.get(g) for g in RESULT_GROUPS})
    b = _flat({g: search.get(g) for g in RESULT_GROUPS})
    return {k: [a.get(k), b.get(k)] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}


# ---- the blind pool ----

def blind_pool(ranked: Mapping[str, Mapping], papers: Mapping[str, Mapping], seed: int, k: int = K) -> dict:
    """The judge's file: per request (``ranked[rid] = {"request": str, "systems": {name: [paper ids, best first]}}``)
    the union of every system's top k, shuffled with ``seed``, each paper only paper_id, title and abstract.
    The union is sorted before it is shuffled, so the order says nothing about which system listed a paper first."""
    out = []
    for rid, r in ranked.items():
        union = sorted({pid for ids in r["systems"].values() for pid in list(ids)[:k]})
        random.Random(f"{seed}:{rid}").shuffle(union)
        missing = [pid for pid in union if pid not in papers]
        if missing:
            raise ValueError(f"{rid}: no title and abstract for {missing}")
        out.append({"request_id": rid, "request": r["request"],
                    "papers": [{"paper_id": pid, "title": papers[pid]["title"],
                                "abstract": papers[pid].get("abstract") or ""} for pid in union]})
    return {"instructions": "judge each paper by its title and abstract: relevant if it is about what the request "
                            "asks (a survey of it counts), not if it only mentions it",
            "requests": out}


# ---- scoring ----

def read_judgments(data: Mapping) -> dict[str, dict[str, bool]]:
    """``{rid: {paper_id: bool}}`` from a judgments file: ``{"requests": {rid: {"judgments": {pid: J}}}}`` or
    ``{rid: {pid: J}}``, J = a bool or ``{"relevant": bool, ...}``."""
    reqs = data.get("requests", data)
    out: dict[str, dict[str, bool]] = {}
    for rid, r in reqs.items():
        js = r.get("judgments", r) if isinstance(r, Mapping) else r
        got = {}
        for pid, j in js.items():
            v = j.get("relevant") if isinstance(j, Mapping) else j
            if not isinstance(v, bool):
                raise ValueError(f"{rid} / {pid}: a judgment is true or false, got {v!r}")
            got[pid] = v
        out[rid] = got
    return out


def score(key: Mapping, judged: Mapping[str, Mapping[str, bool]], k: int = K) -> dict:
    """relevant@k (relevant papers among a system's first k; a shorter list counts what it has) per system per
    request, means over requests, and the page minus each search per request, summed and mean."""
    rows = []
    for r in key["requests"]:
        rid = r["request_id"]
        if rid not in judged:
            raise ValueError(f"{rid}: no judgments for this request")
        j = judged[rid]
        tops = {s: list(r["systems"][s])[:k] for s in SYSTEMS}
        shown = {pid for ids in tops.values() for pid in ids}
        missing = sorted(shown - set(j))
        extra = sorted(set(j) - shown)
        if missing or extra:
            raise ValueError(f"{rid}: the judgments are not of this pool: "
                             f"{len(missing)} listed papers unjudged {missing[:5]}, "
                             f"{len(extra)} judged papers in no top {k} {extra[:5]}")
        rel = {s: sum(j[pid] for pid in tops[s]) for s in SYSTEMS}
        rows.append({"request_id": rid, "request": r["request"], "listed": {s: len(tops[s]) for s in SYSTEMS},
                     "relevant_at_k": rel, "pool": len(shown), "pool_relevant": sum(j[p] for p in shown),
                     "page_minus": {s: rel["page"] - rel[s] for s in SEARCHES}})
    n = len(rows)
    total = {s: sum(r["relevant_at_k"][s] for r in rows) for s in SYSTEMS}
    minus = {s: sum(r["page_minus"][s] for r in rows) for s in SEARCHES}
    return {"k": k, "requests": rows, "total": total, "mean": {s: total[s] / n for s in SYSTEMS},
            "page_minus_total": minus, "page_minus_mean": {s: minus[s] / n for s in SEARCHES},
            "page_lost_to": {s: [r["request_id"] for r in rows if r["page_minus"][s] < 0] for s in SEARCHES}}


def markdown(result: Mapping, how_judged: str = "") -> str:
    k = result["k"]
    out = [f"relevant@{k}: relevant papers (judged blind) among each system's first {k}", ""]
    if how_judged:
        out += [f"judged: {how_judged}", ""]
    out += ["| request | page | BM25 | hybrid | page − BM25 | page − hybrid | relevant in pool |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for r in result["requests"]:
        rel, m = r["relevant_at_k"], r["page_minus"]
        short = r["request"] if len(r["request"]) <= 60 else r["request"][:57] + "..."
        out.append(f"| {r['request_id']}: {short} | {rel['page']} | {rel['bm25']} | {rel['hybrid']} | "
                   f"{m['bm25']:+d} | {m['hybrid']:+d} | {r['pool_relevant']} of {r['pool']} |")
    t, mt = result["total"], result["page_minus_total"]
    out.append(f"| **total** | {t['page']} | {t['bm25']} | {t['hybrid']} | {mt['bm25']:+d} | {mt['hybrid']:+d} | |")
    m, mm = result["mean"], result["page_minus_mean"]
    out.append(f"| **mean** | {m['page']:.2f} | {m['bm25']:.2f} | {m['hybrid']:.2f} | {mm['bm25']:+.2f} | "
               f"{mm['hybrid']:+.2f} | |")
    short_lists = [f"{r['request_id']} {s}: {r['listed'][s]}" for r in result["requests"] for s in SYSTEMS
                   if r["listed"][s] < k]
    if short_lists:
        out += ["", f"lists shorter than {k} (counted as they are): " + "; ".join(short_lists)]
    lost = [f"{s}: {', '.join(ids)}" for s, ids in result["page_lost_to"].items() if ids]
    out += ["", "the page lost to " + "; ".join(lost) if lost else "the page lost to neither search on any request"]
    return "\n".join(out) + "\n"


# ---- running the systems ----

def _search_top(kind: str, overrides: list[str], queries: list[str], store_path: str, k: int) -> list[list[str]]:
    """`scholar papers search search=<kind>`'s top k per query (no date filter) on the page's store."""
    from scholar_agents.hydra_app import compose
    from scholar_agents.papers.commands import _embedder_for
    from scholar_agents.papers.index import load_or_build_search, to_search_config
    from scholar_agents.papers.store import PaperStore

    keep = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in ("papers", "embedder") or
            o.startswith(("papers.", "embedder."))]
    cfg = compose("papers_search", [*keep, f"search={kind}"])
    if str(cfg.papers.store) != store_path:
        raise ValueError(f"search={kind} would read {cfg.papers.store}, the page reads {store_path}")
    scfg = to_search_config(cfg.search)
    with PaperStore(str(cfg.papers.store), readonly=True) as store:
        backend = load_or_build_search(scfg, store, _embedder_for(cfg, scfg.kind, scfg.hybrid_components),
                                       cfg.papers.index_dir, progress=False)
        hits = backend.search_batch(queries, k=k, before=[None] * len(queries))
    return [[h.paper_id for h in hs] for hs in hits]


def _page_lists(cfg, requests: list[tuple[str, str]]) -> tuple[dict[str, list[dict]], dict, dict[str, float]]:
    """What the page shows for each request: SearchService.run's result papers, in their order."""
    from scholar_agents.pasa.serve.jobs import Job
    from scholar_agents.pasa.serve.service import SearchService

    service = SearchService(cfg)
    lists, seconds = {}, {}
    for rid, text in requests:
        t0 = time.perf_counter()
        res = service.run(Job(f"page_vs_search_{rid}", text, None), lambda kind, data: None)
        seconds[rid] = round(time.perf_counter() - t0, 1)
        lists[rid] = [{"paper_id": p["paper_id"], "score": p.get("score"), "selected": p.get("selected"),
                       "found_by": p.get("found_by")} for p in res["papers"]]
        print(f"{rid}: the page listed {len(res['papers'])} papers in {seconds[rid]} s", flush=True)
    return lists, service._res.describe(), seconds


def cmd_run(a) -> int:
    from omegaconf import OmegaConf

    from scholar_agents.hydra_app import compose, setup_environment, task_environment
    from scholar_agents.papers.store import PaperStore

    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    page_cfg = compose("pasa_serve", [f"serve.runs_root={out}", *a.overrides])
    plain = compose("pasa_search", [o for o in a.overrides if not o.startswith("serve.")])
    diffs = setting_differences(OmegaConf.to_container(page_cfg, resolve=True),
                                OmegaConf.to_container(plain, resolve=True))
    named = {k: OmegaConf.select(page_cfg, k) for k in RESULT_KEYS}
    print("page settings: " + ", ".join(f"{k}={v}" for k, v in named.items()) +
          f", selector={page_cfg.selector.get('kind')}")
    print("page vs pasa search: " + ("the same settings" if not diffs else
                                     f"{len(diffs)} differences (the page's are run): " + json.dumps(diffs)))
    requests = REQUESTS
    setup_environment(page_cfg)
    texts = [t for _, t in requests]
    store_path = str(page_cfg.papers.store)
    with task_environment(page_cfg):
        searched = {kind: _search_top(kind, a.overrides, texts, store_path, K) for kind in SEARCHES}
        page, setting, seconds = _page_lists(page_cfg, requests)
    ranked = {rid: {"request": text, "systems": {"page": [p["paper_id"] for p in page[rid]][:K],
                                                 **{s: searched[s][i] for s in SEARCHES}}}
              for i, (rid, text) in enumerate(requests)}
    ids = sorted({pid for r in ranked.values() for ids in r["systems"].values() for pid in ids})
    with PaperStore(store_path, readonly=True) as store:
        got = store.get_many(ids, with_sections=False)
    papers = {pid: {"title": p.title, "abstract": p.abstract} for pid, p in got.items()}
    pool = blind_pool(ranked, papers, a.seed)
    key = {"k": K, "seed": a.seed, "setting": {**setting, "page config": "pasa_serve", "overrides": a.overrides,
                                                "named": named, "differences from pasa search": diffs},
           "requests": [{"request_id": rid, "request": r["request"], "systems": r["systems"],
                         "page_full": page[rid], "page_seconds": seconds[rid]} for rid, r in ranked.items()]}
    (out / "pool.json").write_text(json.dumps(pool, indent=1, ensure_ascii=False))
    (out / "key.json").write_text(json.dumps(key, indent=1, ensure_ascii=False))
    for r in pool["requests"]:
        print(f"{r['request_id']}: pool of {len(r['papers'])} papers")
    print(f"pool (to judge): {out / 'pool.json'}\nkey (not before judging): {out / 'key.json'}")
    return 0


def cmd_score(a) -> int:
    key = json.loads(a.key.read_text())
    data = json.loads(a.judgments.read_text())
    result = score(key, read_judgments(data), int(key.get("k", K)))
    result["how_judged"] = data.get("how_judged", "")
    md = markdown(result, result["how_judged"])
    print(md, end="")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "result.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    (a.out / "result.md").write_text(md)
    print(f"\nwritten: {a.out / 'result.md'}, {a.out / 'result.json'}")
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="the three top 10s -> pool.json (blind) + key.json")
    r.add_argument("--out", type=Path, default=Path("outputs/page_vs_search"))
    r.add_argument("--seed", type=int, default=0, help="the pool's shuffle")
    r.add_argument("overrides", nargs="*", help="hydra overrides of pasa_serve (e.g. papers=...)")
    s = sub.add_parser("score", help="key.json + judgments -> relevant@10 table")
    s.add_argument("--key", type=Path, required=True)
    s.add_argument("--judgments", type=Path, required=True)
    s.add_argument("--out", type=Path, default=Path("outputs/page_vs_search"))
    a = ap.parse_args(None if argv is None else list(argv))
    if a.cmd == "run":
        return cmd_run(a)
    try:
        return cmd_score(a)
    except (ValueError, FileNotFoundError) as e:  # judgments of another pool, a missing file: one line
        print(f"page_vs_search: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
