"""The Markdown of an ``eval pasa`` report: the tables and ``report.md``.

:func:`markdown_table` is the main table (PaSa Table 2's columns, each mean with its interval);
:func:`comparisons_table`, :func:`crawler_pairs_table` and :func:`phrasing_table` render what
``eval/pasa/stats.py`` computed; :func:`write_report` writes ``report.md`` and :func:`phrasing_report` rebuilds the
per-form tables from finished runs' ``summary.json`` (for ``scripts/crawler_phrasings.sh`` and the demo report).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from scholar_agents.eval.bootstrap import BootstrapConfig
from scholar_agents.eval.pasa.metrics import METRIC_COLUMNS
from scholar_agents.eval.pasa.rows import PHRASING_SEP, phrasing_of


def _fmt(v: Optional[float], digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _fmt_ci(s: dict, m: str) -> str:
    """``0.542 (0.41–0.66)``: the mean and its bootstrap interval, when there is one."""
    ci = s.get(f"{m}_ci")
    if s.get(m) is None or not ci:
        return _fmt(s.get(m))
    return f"{s[m]:.3f} ({ci[0]:.2f}–{ci[1]:.2f})"


def crawler_pairs_table(pairs: Sequence[dict], labels: dict[str, str]) -> str:
    if not pairs:
        return ""
    lines = ["| Row | minus row | Queries | Crawler recall: row vs minus row, difference (interval) |",
             "|---|---|---:|---|"]
    for c in pairs:
        lines.append(f"| {labels.get(c['row'], c['row'])} | {labels.get(c['minus'], c['minus'])} | {c['queries']} | "
                     f"{_fmt_diff(c['crawler_recall'])} |")
    return "\n".join(lines) + "\n"


def _fmt_diff(d: Optional[dict]) -> str:
    if not d:
        return "-"
    ci = d.get("ci")
    rng = f" ({ci[0]:+.3f} to {ci[1]:+.3f})" if ci else ""
    return f"{d['mean_a']:.3f} vs {d['mean_b']:.3f}: **{d['diff']:+.3f}**{rng}, {d['verdict']}"


def ranking_table(pairs: Sequence[dict], labels: dict[str, str]) -> str:
    if not pairs:
        return ""
    lines = ["| Agent row | Final list ordered by | Queries | recall@10: this order vs crawl order | "
             "nDCG@10: this order vs crawl order |", "|---|---|---:|---|---|"]
    for c in pairs:
        lines.append(f"| {labels.get(c['row'], c['row'])} | {c['ranking']} | {c['queries']} | "
                     f"{_fmt_diff(c['recall_at_10'])} | {_fmt_diff(c['ndcg_at_10'])} |")
    return "\n".join(lines) + "\n"


def comparisons_table(comps: Sequence[dict], labels: dict[str, str]) -> str:
    if not comps:
        return ""
    k = comps[0]["k"]
    lines = [f"| Crawler row | Search row | Queries | Actions (mean / max) | Queue (mean) | Crawler recall vs search "
             f"recall@{k} | Agent recall@{k} vs search recall@{k} | **Equal budget**: crawler recall vs search "
             f"recall at the same queue size |", "|---|---|---:|---:|---:|---|---|---|"]
    for c in comps:
        capped = f" ({c['budget_capped_queries']} queries capped)" if c["budget_capped_queries"] else ""
        lines.append(f"| {labels.get(c['crawler'], c['crawler'])} | {labels.get(c['search'], c['search'])} | "
                     f"{c['queries']} | {c['actions_mean']:.1f} / {c['max_actions']} | {c['queue_mean']:.1f} | "
                     f"{_fmt_diff(c['crawler_recall_vs_recall_at_k'])} | "
                     f"{_fmt_diff(c.get('recall_at_k_vs_recall_at_k'))} | {_fmt_diff(c['equal_budget'])}{capped} |")
    return "\n".join(lines) + "\n"


def phrasing_table(summary: dict[str, dict], comps: Sequence[dict], labels: dict[str, str]) -> str:
    """Phrasing robustness (does the agent find the gold papers when the question is asked another way?): per
    request form, each crawling row beside the search-only row on the same rewritten queries (paired as in
    :func:`comparisons`). Empty unless rows ran in more than one phrasing."""
    if len({phrasing_of(n) for n in summary}) < 2 or not comps:
        return ""
    k = comps[0]["k"]
    lines = [f"| Form | Crawler row | Valid search | Fallback (queries) | Actions/query | Crawler recall | "
             f"Recall@{k} | Search row | Search recall@{k} | Crawler recall − search recall@{k} | Equal budget |",
             "|---|---|---:|---:|---:|---:|---:|---|---:|---|---|"]
    for c in sorted(comps, key=lambda c: (c["setting"], c["search"], c["crawler"].split(PHRASING_SEP)[0],
                                         c["phrasing"] != "original", c["phrasing"])):
        a, s = summary[c["crawler"]], summary[c["search"]]
        fb = a.get("fallback_queries")
        lines.append(
            f"| {c['phrasing']} | {labels.get(c['crawler'], c['crawler'])} | {_fmt(a.get('valid_search'), 3)} | "
            f"{'off' if fb is None and a.get('valid_search') is not None else _fmt(fb, 0)} | "
            f"{_fmt(a.get('actions'), 2)} | {_fmt_ci(a, 'crawler_recall')} | {_fmt_ci(a, f'recall_at_{k}')} | "
            f"{labels.get(c['search'], c['search'])} | {_fmt_ci(s, f'recall_at_{k}')} | "
            f"{_fmt_diff(c['crawler_recall_vs_recall_at_k'])} | {_fmt_diff(c['equal_budget'])} |")
    return "\n".join(lines) + "\n"


def phrasing_report(run_dirs: Sequence[Path], preface: str = "") -> str:
    """The per-form tables (:func:`phrasing_table`) of finished ``eval pasa`` runs, one block per run dir (e.g. one per
    setting), each crawling row beside the search-only row of the run's own backend (the search the agent wraps):
    what ``scripts/crawler_phrasings.sh`` ships beside the adapter for its card and the demo report."""
    parts = [preface] if preface else []
    for d in run_dirs:
        path = Path(d) / "summary.json"
        if not path.is_file():
            continue
        s = json.loads(path.read_text())
        n = max((v.get("queries", 0) for v in s["summary"].values()), default=0)
        # against the search the agent wraps: the search-only row on the run's own backend (hybrid, bm25, ...)
        backend = str(s["meta"].get("search", "")).split(" ")[0]
        comps = [c for c in s["comparisons"] if c["search"].split(PHRASING_SEP)[0] == f"search_{backend}"] \
            or s["comparisons"]
        table = phrasing_table(s["summary"], comps, {name: name for name in s["summary"]})
        if table:
            parts += ["", f"**{Path(d).name}** ({s['meta'].get('search', '')}; {n} queries in the search rows):", "",
                      table]
    return "\n".join(parts).strip() + "\n"


def markdown_table(summary: dict[str, dict], labels: dict[str, str]) -> str:
    cols = ["Method", "Crawler Recall", "Precision", "Recall", "Recall@100", "Recall@50", "Recall@20",
            "Actions", "Wall s/query", "Queries"]
    # the searched-corpus size per query (mean / median), only when the rows carry it
    with_cands = any(s.get("candidates_searched_mean") is not None for s in summary.values())
    if with_cands:
        cols.insert(-1, "Candidates searched (mean / median)")
    # the Crawler's own valid first [Search] (rate) and the queries crawler.env.fallback_search searched
    with_fallback = any(s.get("valid_search") is not None for s in summary.values())
    if with_fallback:
        cols[-1:-1] = ["Valid search", "Fallback (queries, rate)"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join(["---"] + ["---:"] * (len(cols) - 1)) + "|"]
    for name, s in summary.items():
        cells = [labels.get(name, name)] + [_fmt_ci(s, m) for m in METRIC_COLUMNS]
        cells += [_fmt(s.get("actions"), 1), _fmt(s.get("wall_s"), 2)]
        if with_cands:
            mean, median = s.get("candidates_searched_mean"), s.get("candidates_searched_median")
            cells.append(f"{_fmt(mean, 1)} / {_fmt(median, 1)}")
        if with_fallback:
            fb, n = s.get("fallback_queries"), s.get("queries", 0)
            off = "off" if s.get("valid_search") is not None else "-"  # an agent row without the fallback
            cells += [_fmt(s.get("valid_search"), 3), off if fb is None else f"{fb} ({fb / max(n, 1):.0%})"]
        cells.append(str(s.get("queries", 0)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_report(out: Path, summary: dict[str, dict], labels: dict[str, str], meta: dict,
                 common: Optional[tuple[int, dict[str, dict]]] = None, comps: Sequence[dict] = (),
                 boot: BootstrapConfig = BootstrapConfig(), cpairs: Sequence[dict] = (),
                 rpairs: Sequence[dict] = (), rrpairs: Sequence[dict] = (), methods: Optional[dict] = None) -> str:
    level = f"{boot.level:.0%}"
    text = ["# PaSa evaluation", "",
            f"Mean over queries, with the {level} percentile-bootstrap interval of the mean in brackets "
            f"({boot.samples} resamples of the queries, seed {boot.seed})." if boot.samples else "", "",
            markdown_table(summary, labels)]
    if common is not None:
        n, common_summary = common
        text += [f"On the {n} queries every row ran:", "", markdown_table(common_summary, labels)]
    if comps:
        text += ["## Crawler vs search-only, paired on the same queries", "",
                 f"Difference of the means, with the {level} bootstrap interval of the paired difference; "
                 "*above* / *below* when the interval excludes 0. Equal budget = the search ranking cut, per query, "
                 "at the number of papers the crawler put in its queue.", "", comparisons_table(comps, labels)]
    phr = phrasing_table(summary, comps, labels)
    if phr:
        text += ["## Phrasing robustness: the queries rewritten into request forms", "",
                 "Each form asks the same queries (same gold papers, same dates) in a researcher's phrasing "
                 "(`data_gen/request_forms.py`). Valid search = the Crawler's first action is a [Search] with a "
                 "non-empty query (its own, before any fallback); search-only runs on the same rewritten queries.",
                 "", phr]
    if cpairs:
        text += ["## Crawler rows against each other, paired on the same queries", "",
                 crawler_pairs_table(cpairs, labels)]
    if rpairs:
        text += ["## Ranking the final list: the Selector's order and the fusion against the crawl's order", "",
                 "The same crawl and the same Selector scores, ordered three ways (`agent.ranking`: selector | crawl "
                 "| fusion, `pasa/ranking.py`); recall@10 and nDCG@10 of the top 10, paired over the row's queries. "
                 "The row's own order is in its recall@k columns above.", "", ranking_table(rpairs, labels)]
    if rrpairs:
        text += ["## The agent's ranked top 10 against the search it wraps and \"search, then Selector re-rank\"", "",
                 "The agent's list in its Selector's order (what `pasa search` and the page show first) against the "
                 "top 10 of each plain search of the user's words, and against that search re-ranked by the same "
                 "Selector (rows `method: search_rerank`; `budget_of: <agent row>` searches as many papers as that "
                 "row's crawl held, query by query). Difference of the means (agent minus the other list) with the "
                 f"{level} bootstrap interval of the paired difference.", "", rerank_table(rrpairs, labels)]
    kinds = set((methods or {}).values())
    if "gold_blind_oracle" in kinds or "verified_teacher" in kinds:
        text += ["## Ceilings", "",
                 "- **Verified teacher** (hindsight): chooses among searches that include phrases of the gold "
                 "papers' titles. No policy that cannot read the gold can reach it; it bounds imitation of its data, "
                 "not what a Crawler can learn.",
                 "- **Gold-blind oracle** (reachable): greedy choice against the gold, but only among searches a "
                 "policy could write from what it sees — the request's own candidates (topic, request, key "
                 "phrases), then the related searches of the papers those found (`eval/pasa/oracle.py`), at the "
                 "row's number of searches. Its gap over search-only is the headroom of choosing what to follow.",
                 ""]
    text += ["## Setting", ""]
    for k, v in meta.items():
        text.append(f"- **{k}**: {v if not isinstance(v, (dict, list)) else json.dumps(v)}")
    errs = {n: s["grammar_errors"] for n, s in summary.items() if s.get("grammar_errors")}
    if errs:
        text += ["", "## Crawler grammar errors (counted, never raised)", ""]
        text += [f"- {labels.get(n, n)}: {json.dumps(e)}" for n, e in errs.items()]
    text += ["", "Metrics: mean over queries. Crawler recall = gold papers in the paper queue; precision/recall = "
             "papers the Selector accepts; recall@k = top-k of the search ranking or of the queue ranked by "
             "P(\"True\") (PaSa §5.2). \"-\" = not applicable to the method (as in PaSa Table 2).", ""]
    md = "\n".join(text)
    (out / "report.md").write_text(md)
    return md


def rerank_table(rrpairs: Sequence[dict], labels: dict[str, str]) -> str:
    lines = ["| Agent row | minus: the search it wraps (its top 10) or search + Selector re-rank | Queries | agent papers "
             "| re-ranked papers | recall@10 | nDCG@10 |", "|---|---|---:|---:|---:|---|---|"]
    for p in rrpairs:
        rerank = p.get("rerank_papers_mean")
        lines.append(f"| {labels.get(p['row'], p['row'])} | {labels.get(p['minus'], p['minus'])} | {p['queries']} | "
                     f"{p['queue_mean']:.1f} | {'-' if rerank is None else f'{rerank:.1f}'} | "
                     f"{_fmt_diff(p['recall_at_10'])} | {_fmt_diff(p['ndcg_at_10'])} |")
    return "\n".join(lines) + "\n"
