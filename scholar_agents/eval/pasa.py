"""``scholar eval pasa``: PaSa's evaluation (§5.2, Tables 2, 3, 5) on any query file in PaSa's format.

Each *row* of the report is one method run through the same harness on the same queries, corpus and date filter:

- ``search``: the user query straight into our search (BM25, dense or hybrid) — Table 2's "Google" row;
- ``paraphrase``: the Table 13 LLM paraphrase, then search — "Google with GPT-4o";
- ``verified_teacher``: the ceiling of a Crawler imitating ``data_gen crawler_sessions teacher=verified`` — an
  ORACLE (it reads the gold papers): the teacher's kept searches (at most ``verified_max_queries`` of the
  ``data_gen`` defaults, ``crawler.env.search_k`` hits each), their hits as the queue (crawler recall) and ranking;
- ``agent``: the Crawler + Selector (``pasa.agent``): PaSa-7b with a trained crawler, the prompted agent
  ("PaSa-GPT-4o") with an untrained one; per-row switches give the Table 5 ablations (``expand: false`` = w/o
  [Expand]) and ``use_selector: false`` (every crawled paper returned).

Two settings (``setting``): ``date_filtered`` = PaSa §5.1, every search sees only the papers published before the
query date; ``whole_corpus`` = ours, the realistic one: search sees the whole corpus (a user searches today's
corpus) while the Crawler's expansion stays date-filtered (``crawler.env.date_filter_expand``), so no citation
leaks a later paper. ``both`` runs every row in each setting, side by side (``<row>@whole_corpus``). Each query's
row records ``candidates_searched``: the papers its searches ranked (store papers before its date, or all).

Outputs under the run directory: ``per_query/<row>.jsonl`` (one line per query; a re-run with
``resume_dir=<that run dir>`` skips what is done, and refuses a row whose settings changed: ``<row>.row.json``),
``trajectories/<row>.jsonl`` (agents), ``summary.json``, ``report.md`` (the table, plus the corpus, date filter
and citation source), ``metrics.png``, ``recall_vs_actions.png``.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from scholar_agents.eval.bootstrap import BootstrapConfig, mean_ci, paired_diff
from scholar_agents.eval.pasa_metrics import (
    METRIC_COLUMNS, QueryMetrics, agent_metrics, gold_count, gold_ranks, mean_metrics, ranking_metrics,
    recall, recall_at_depth,
)
from scholar_agents.papers.ids import norm_id
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.trajectory import write_trajectories
from scholar_agents.validation import jsonl_records

log = logging.getLogger(__name__)

METHODS = ("search", "paraphrase", "verified_teacher", "agent")
# PaSa §5.1 (search before the query date) | ours (search over the whole corpus, expansion still date-filtered)
SETTINGS = ("date_filtered", "whole_corpus")
WHOLE_CORPUS_SUFFIX = "@whole_corpus"
PHRASING_SEP = "~"  # <row>~<request form>[@whole_corpus]: the row on the queries rewritten into that form


@dataclass
class RowSpec:
    """One method of the report (``rows`` in ``conf/eval_pasa.yaml``)."""

    name: str
    method: str  # search | paraphrase | agent
    search: Optional[str] = None  # search kind for this row (bm25 | dense | hybrid); null = search.kind
    crawler_model: Optional[str] = None  # agent: the Crawler's model (null = llm.model)
    # agent: a LoRA adapter on the Crawler's model (a path; "none" = the base model); null = crawler.policy.adapter
    # when the row runs the preset's model, none when it names its own crawler_model
    adapter: Optional[str] = None
    constrained: Optional[bool] = None  # agent: override crawler.policy.constrained
    expand: Optional[bool] = None  # agent: override crawler.env.expand (Table 5 "w/o [Expand]")
    instructed_prompts: Optional[bool] = None  # agent: override crawler.env.instructed_prompts (untrained models)
    use_selector: Optional[bool] = None  # agent: override agent.use_selector
    ensemble: Optional[int] = None  # agent: override agent.ensemble
    label: Optional[str] = None  # shown in the table (default: name)
    limit: Optional[int] = None  # run this row on the first N queries only (slow agents next to cheap searches)
    # false = search the whole corpus (set by ``setting``, not by hand); null = crawler.env.search_date_filter
    search_date_filter: Optional[bool] = None
    # agent: override crawler.env.fallback_search (search the user's query when the Crawler writes no valid
    # [Search]); the default `agent` row sets true (the agent as `pasa search` runs it), rows that measure the
    # learned policy alone leave it null (= false in the presets)
    fallback_search: Optional[bool] = None
    # agent: override crawler.env.search_user_query (the user's query also searched as written, beside the
    # Crawler's searches: the agent never below the search it wraps at its k)
    search_user_query: Optional[bool] = None
    # the queries rewritten into this request form (data_gen/request_forms.py; set by ``phrasings``, not by hand)
    phrasing: Optional[str] = None

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"row {self.name!r}: method must be one of {METHODS}, got {self.method!r}")


def settings_of(setting: Optional[str], env_search_date_filter: bool = True) -> list[str]:
    """The settings a run reports: ``setting`` (date_filtered | whole_corpus | both) or, when null, the one
    ``crawler.env.search_date_filter`` names."""
    if setting is None:
        return ["date_filtered" if env_search_date_filter else "whole_corpus"]
    if setting == "both":
        return list(SETTINGS)
    if setting not in SETTINGS:
        from scholar_agents.validation import UsageError

        raise UsageError(f"setting must be date_filtered, whole_corpus, both or null, got {setting!r}")
    return [setting]


def row_specs(rows: Any, settings: Sequence[str] = ("date_filtered",),
              phrasings: Optional[Sequence[str]] = None) -> list[RowSpec]:
    """The rows, once per setting: a whole-corpus copy is named ``<row>@whole_corpus`` when both settings run
    (alone it keeps its name; the report states the setting). With ``phrasings`` (request forms), each row also
    runs once per form on the rewritten queries, named ``<row>~<form>`` (``original`` keeps the row's name)."""
    rows = OmegaConf.to_container(rows, resolve=True) if isinstance(rows, DictConfig) or hasattr(rows, "_content") \
        else rows
    base = [RowSpec(**r) for r in rows]
    if phrasings:
        from scholar_agents.data_gen.request_forms import FORMS, ORIGINAL

        unknown = [f for f in phrasings if f not in FORMS]
        if unknown or len(set(phrasings)) != len(phrasings):
            from scholar_agents.validation import UsageError

            raise UsageError(f"phrasings must be distinct request forms of {', '.join(FORMS)}; got {list(phrasings)}")
        base = [b if f == ORIGINAL else dataclasses.replace(b, name=f"{b.name}{PHRASING_SEP}{f}", phrasing=f,
                                                            label=f"{b.label or b.name} [{f}]")
                for f in phrasings for b in base]
    specs = []
    for setting in settings:
        for b in base:
            if setting == "date_filtered":
                specs.append(dataclasses.replace(b, search_date_filter=True))
            elif len(settings) == 1:
                specs.append(dataclasses.replace(b, search_date_filter=False))
            else:
                specs.append(dataclasses.replace(b, name=b.name + WHOLE_CORPUS_SUFFIX, search_date_filter=False,
                                                 label=(b.label or b.name) + " [whole corpus]"))
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"row names must be unique, got {names}")
    return specs


# --------------------------------------------------------------------------------------------------------------
# evaluating one row on a batch of queries


def gold_in_store(queries: Sequence[ScholarQuery], store) -> dict[str, int]:
    ids = {norm_id(g) for q in queries for g in q.gold_ids}
    present = set(store.get_many(list(ids), with_sections=False)) if ids else set()
    return {q.qid: sum(norm_id(g) in present for g in set(q.gold_ids)) for q in queries}


class CandidateCounter:
    """How many papers a search before a date ranks over: the store's papers dated strictly before it (a partial
    date counts as its first day, as the indexes do; undated papers pass when ``keep_undated``), or all of them."""

    def __init__(self, store, keep_undated: bool = True):
        from scholar_agents.papers.dated_docs import date_key

        dates = store.dates()
        self._keys = sorted(date_key(d) for d in dates if d)
        self._undated = len(dates) - len(self._keys) if keep_undated else 0
        self.total = len(dates)

    def __call__(self, before: Optional[str]) -> int:
        from scholar_agents.papers.dated_docs import date_key, normalize_date

        b = normalize_date(before)
        if b is None:
            return self.total
        return bisect.bisect_left(self._keys, date_key(b)) + self._undated


def search_rows(rankings: Sequence[Sequence[str]], queries: Sequence[ScholarQuery], in_store: dict[str, int],
                wall_s: float, candidates: Optional[Sequence[int]] = None) -> list[dict]:
    out = []
    for i, (q, ranking) in enumerate(zip(queries, rankings)):
        m = QueryMetrics(q.qid, len(set(q.gold_ids)), in_store[q.qid], n_returned=len(ranking),
                         wall_s=wall_s / max(len(queries), 1), **ranking_metrics(q.gold_ids, ranking))
        d = m.to_dict()
        # the gold papers' ranks (and the normalised gold count): recall at the agent's own budget, after the fact
        d["gold_ranks"] = gold_ranks(q.gold_ids, ranking)
        d["n_gold_ids"] = gold_count(q.gold_ids)
        if candidates is not None:
            d["candidates_searched"] = candidates[i]
        out.append(d)
    return out


def agent_rows(results, queries: Sequence[ScholarQuery], in_store: dict[str, int],
               candidates: Optional[Sequence[int]] = None, fallback_search: bool = False) -> list[dict]:
    """``fallback_search``: whether the row ran with crawler.env.fallback_search (else ``fallback`` is None)."""
    out = []
    for i, (q, r) in enumerate(zip(queries, results)):
        ranking = [p.paper_id for p in r.papers]
        selected = [p.paper_id for p in r.selected]
        trajs = r.trajectories
        m = QueryMetrics(
            q.qid, len(set(q.gold_ids)), in_store[q.qid], n_returned=len(selected), n_queue=len(ranking),
            actions=sum(t.n_moves for t in trajs), sessions=sum(len(t.sessions) for t in trajs),
            gen_tokens=sum(t.gen_tokens for t in trajs), wall_s=r.crawl_seconds + r.select_seconds,
            **agent_metrics(q.gold_ids, r.queue_ids, selected, ranking))
        d = m.to_dict()
        d["grammar_errors"] = r.to_dict()["grammar_errors"]
        d["action_statuses"] = r.to_dict()["action_statuses"]
        d["stopped_by"] = [t.stopped_by for t in trajs]
        # issue 29: did the Crawler's own first action search (share of ensemble runs), and how often did
        # crawler.env.fallback_search search the query for it (per run: 0 or 1)
        valid = [t.first_search_valid for t in trajs if t.first_search_valid is not None]
        d["valid_search"] = sum(valid) / len(valid) if valid else None
        d["fallback_searches"] = r.fallback_searches
        d["user_query_searches"] = r.user_query_searches
        d["fallback"] = r.fallback_searches > 0 if fallback_search else None
        if candidates is not None:
            d["candidates_searched"] = candidates[i]
        out.append(d)
    return out


def teacher_rows(search, queries: Sequence[ScholarQuery], befores: Sequence[Optional[str]], in_store: dict[str, int],
                 candidates: Sequence[int], search_k: int) -> list[dict]:
    """The verified teacher's searches as a row (an oracle: it reads the gold papers), with the data_gen defaults
    (``CrawlerSessionsConfig``) so that the row is the ceiling of the Crawler trained on that data."""
    from scholar_agents.data_gen.crawler_sessions import CrawlerSessionsConfig
    from scholar_agents.data_gen.verified_teacher import candidate_queries, verify_queries

    d = CrawlerSessionsConfig()
    t0 = time.perf_counter()
    cands = [candidate_queries(q.question, q.gold_titles, n_key_phrases=d.key_phrases, ngram=d.key_phrase_ngram,
                               hindsight=d.hindsight, min_support=d.hindsight_min_support,
                               per_title=d.hindsight_phrases_per_title) for q in queries]
    verified = verify_queries(search, queries, cands, befores, search_k, d.verified_max_queries,
                              d.verified_fallback_raw)
    wall = (time.perf_counter() - t0) / max(len(queries), 1)
    out = []
    for q, v, n_cand in zip(queries, verified, candidates):
        m = QueryMetrics(q.qid, len(set(q.gold_ids)), in_store[q.qid], crawler_recall=recall(q.gold_ids, v.found),
                         n_queue=len(v.found), actions=len(v.kept), wall_s=wall,
                         **ranking_metrics(q.gold_ids, v.found))
        out.append({**m.to_dict(), "candidates_searched": n_cand, "searched": v.queries,
                    "raw_query_recall_at_k": v.raw_recall_at_k})
    return out


# --------------------------------------------------------------------------------------------------------------
# the report


def summarize(rows_by_name: dict[str, list[dict]], boot: BootstrapConfig = BootstrapConfig()) -> dict[str, dict]:
    """Means over queries, each metric with its bootstrap interval (``<metric>_ci``)."""
    keys = (*METRIC_COLUMNS, "actions", "sessions", "gen_tokens", "wall_s", "n_queue", "n_returned", "valid_search")
    out = {}
    for name, rows in rows_by_name.items():
        s = mean_metrics(rows, keys)
        for m in (*METRIC_COLUMNS, "actions", "n_queue"):
            if s.get(m) is not None:
                ci = mean_ci([r.get(m) for r in rows], boot)
                s[f"{m}_ci"] = list(ci) if ci else None
        s["queries"] = len(rows)
        if any(r.get("fallback") is not None for r in rows):  # queries crawler.env.fallback_search searched
            s["fallback_queries"] = sum(bool(r.get("fallback")) for r in rows)
        errs: dict[str, int] = {}
        for r in rows:
            for k, v in (r.get("grammar_errors") or {}).items():
                errs[k] = errs.get(k, 0) + v
        if errs:
            s["grammar_errors"] = errs
        cands = [r["candidates_searched"] for r in rows if r.get("candidates_searched") is not None]
        if cands:
            s["candidates_searched_mean"] = sum(cands) / len(cands)
            s["candidates_searched_median"] = statistics.median(cands)
        out[name] = s
    return out


def _fmt(v: Optional[float], digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _fmt_ci(s: dict, m: str) -> str:
    """``0.542 (0.41–0.66)``: the mean and its bootstrap interval, when there is one."""
    ci = s.get(f"{m}_ci")
    if s.get(m) is None or not ci:
        return _fmt(s.get(m))
    return f"{s[m]:.3f} ({ci[0]:.2f}–{ci[1]:.2f})"


def setting_of(name: str) -> str:
    return "whole_corpus" if name.endswith(WHOLE_CORPUS_SUFFIX) else "date_filtered"


def phrasing_of(name: str) -> str:
    """The request form a row's queries were asked in (``original`` unless the name carries ``~<form>``)."""
    base = name.removesuffix(WHOLE_CORPUS_SUFFIX)
    return base.split(PHRASING_SEP, 1)[1] if PHRASING_SEP in base else "original"


def group_of(name: str) -> tuple[str, str]:
    """Rows are compared only within one setting and one phrasing (the same queries, searched the same way)."""
    return setting_of(name), phrasing_of(name)


def _crawling_rows(rows_by_name: dict[str, list[dict]]) -> list[str]:
    """Rows whose every query has a crawler recall (agents, the verified teacher)."""
    return [n for n, rs in rows_by_name.items() if rs and all(r.get("crawler_recall") is not None for r in rs)]


def _paired(a_rows: list[dict], b_rows: list[dict]) -> list[tuple[dict, dict]]:
    """(a, b) per query both rows ran, in a's order."""
    by_qid = {r["qid"]: r for r in b_rows}
    return [(a, by_qid[a["qid"]]) for a in a_rows if a["qid"] in by_qid]


def comparisons(rows_by_name: dict[str, list[dict]], boot: BootstrapConfig = BootstrapConfig(),
                k: int = 20) -> list[dict]:
    """Each crawling row (agent or verified teacher) against each search-only row of the same setting, paired over
    the queries both ran, with the bootstrap interval of the difference:

    - ``crawler_recall`` vs the search's recall@k (PaSa Table 2's comparison: the agent at <= max_actions);
    - the agent's recall@k (its queue ranked by the Selector) vs the search's recall@k;
    - **equal budget**: ``crawler_recall`` vs the search's recall at the agent's own queue size for that query
      (the search ranking is retrieved to max(ks); a deeper queue counts as ``capped``, the search side is then a
      lower bound).
    """
    searches = [n for n, rs in rows_by_name.items() if rs and all("gold_ranks" in r for r in rs)]
    out = []
    for a_name in _crawling_rows(rows_by_name):
        for s_name in searches:
            if group_of(a_name) != group_of(s_name):
                continue
            pairs = _paired(rows_by_name[a_name], rows_by_name[s_name])
            if not pairs:
                continue
            budget = [recall_at_depth(s["gold_ranks"], s["n_gold_ids"], int(a.get("n_queue") or 0))
                      for a, s in pairs]
            capped = sum(1 for a, s in pairs if (a.get("n_queue") or 0) > (s.get("n_returned") or 0))
            row = {
                "crawler": a_name, "search": s_name, "setting": setting_of(a_name), "queries": len(pairs),
                "actions_mean": sum(a.get("actions") or 0 for a, _ in pairs) / len(pairs),
                "max_actions": max(a.get("actions") or 0 for a, _ in pairs),
                "queue_mean": sum(a.get("n_queue") or 0 for a, _ in pairs) / len(pairs),
                "crawler_recall_vs_recall_at_k": paired_diff(
                    [a["crawler_recall"] for a, _ in pairs], [s[f"recall_at_{k}"] for _, s in pairs], boot).to_dict(),
                "equal_budget": paired_diff([a["crawler_recall"] for a, _ in pairs], budget, boot).to_dict(),
                "budget_capped_queries": capped, "k": k, "phrasing": phrasing_of(a_name),
            }
            if all(a.get(f"recall_at_{k}") is not None for a, _ in pairs):
                row["recall_at_k_vs_recall_at_k"] = paired_diff(
                    [a[f"recall_at_{k}"] for a, _ in pairs], [s[f"recall_at_{k}"] for _, s in pairs], boot).to_dict()
            out.append(row)
    return out


def crawler_pairs(rows_by_name: dict[str, list[dict]], boot: BootstrapConfig = BootstrapConfig()) -> list[dict]:
    """Crawling rows against each other in the same setting (a later row minus an earlier one, e.g. after PPO
    minus after SFT): the paired difference of crawler recall on the queries both ran."""
    crawling = _crawling_rows(rows_by_name)
    out = []
    for i, a_name in enumerate(crawling):
        for b_name in crawling[:i]:
            if group_of(a_name) != group_of(b_name):
                continue
            pairs = _paired(rows_by_name[a_name], rows_by_name[b_name])
            if pairs:
                out.append({"row": a_name, "minus": b_name, "setting": setting_of(a_name), "queries": len(pairs),
                            "crawler_recall": paired_diff([a["crawler_recall"] for a, _ in pairs],
                                                          [b["crawler_recall"] for _, b in pairs], boot).to_dict()})
    return out


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
    """Issue 29's phrasing robustness: per request form, each crawling row beside the search-only row on the same
    rewritten queries (paired as in :func:`comparisons`). Empty unless rows ran in more than one phrasing."""
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
    # issue 29: the Crawler's own valid first [Search] (rate) and the queries crawler.env.fallback_search searched
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
                 boot: BootstrapConfig = BootstrapConfig(), cpairs: Sequence[dict] = ()) -> str:
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


# --------------------------------------------------------------------------------------------------------------
# the harness (resumable, chunked)


def _read_done(path: Path) -> dict[str, dict]:
    """The per-query lines already written. A crash while appending can leave one cut-off last line: it is
    dropped from the file (its query runs again); a broken line anywhere else is an error naming it."""
    if not path.is_file():
        return {}
    bad: list[tuple[int, str]] = []  # malformed lines (not JSON, not an object, no qid), in file order
    followed = False  # a record came after a malformed line: that line was not a cut-off last one
    done = {}
    for line_no, d in jsonl_records(path, on_bad=lambda n, reason: bad.append((n, reason))):
        if bad:
            followed = True
            break
        if "qid" not in d:
            bad.append((line_no, "no 'qid'"))
            continue
        done[d["qid"]] = d
    if bad and (followed or len(bad) > 1):
        n, reason = bad[0]
        raise ValueError(f"{path}:{n}: not a per-query result line ({reason}); fix or delete that line and resume")
    if bad:
        line_no = bad[0][0]
        log.warning("%s:%d: dropping a cut-off last line (an interrupted run); that query runs again", path, line_no)
        with path.open(encoding="utf-8") as f:
            kept = [line for _, line in zip(range(line_no - 1), f)]
        path.write_text("".join(kept), encoding="utf-8")
    return done


def row_identity(spec: RowSpec, cfg: DictConfig, search_kind: Optional[str] = None) -> dict[str, Any]:
    """What a row's per-query results depend on besides the query (not its name, label or limit): a resumed run
    must match it, so a row that now searches another index or runs another policy is never mixed with the old
    lines. ``search_kind``: the row's search kind with ``auto`` resolved."""
    ident: dict[str, Any] = {f"row.{k}": v for k, v in dataclasses.asdict(spec).items()
                             if k not in ("name", "label", "limit") and v is not None}
    ident["search.kind"] = kind = search_kind or spec.search or cfg.search.kind
    if kind in ("dense", "hybrid"):  # the papers the dense index holds
        ident["search.dense_before"] = str(cfg.search.get("dense_before"))
    if spec.method in ("verified_teacher", "agent"):
        ident["crawler.env"] = OmegaConf.to_container(cfg.crawler.env, resolve=True)
    if spec.method == "agent":
        ident["crawler.policy"] = OmegaConf.to_container(cfg.crawler.policy, resolve=True)
        ident["agent"] = OmegaConf.to_container(cfg.agent, resolve=True) if cfg.get("agent") else None
        ident["selector"] = OmegaConf.to_container(cfg.selector, resolve=True) if cfg.get("selector") else None
    if spec.method in ("agent", "paraphrase"):
        ident["llm.model"] = spec.crawler_model or cfg.llm.get("model")
    if spec.method == "agent" and cfg.get("selector_llm"):
        ident["selector_llm.model"] = cfg.selector_llm.get("model")
    return json.loads(json.dumps(ident, default=str))


def _with_new_defaults(old: dict[str, Any], identity: dict[str, Any]) -> dict[str, Any]:
    """``old`` with the crawler switches added since it was recorded filled in, where the current value is the
    switch's default (the behaviour the old run had): a new field with its default does not block a resume."""
    from scholar_agents.pasa.crawl_env import CrawlConfig
    from scholar_agents.pasa.crawler import CrawlerConfig

    old = dict(old)
    for key, schema in (("crawler.env", CrawlConfig), ("crawler.policy", CrawlerConfig)):
        if not isinstance(old.get(key), dict) or not isinstance(identity.get(key), dict):
            continue
        defaults = {f.name: f.default for f in dataclasses.fields(schema)}
        section = dict(old[key])
        for name, value in identity[key].items():
            if name not in section and name in defaults and defaults[name] == value:
                section[name] = value
        old[key] = section
    return old


def _check_identity(path: Path, identity: dict[str, Any], has_results: bool) -> None:
    """Refuse to resume a row whose recorded identity differs (naming the keys); record it on first use."""
    if path.is_file():
        old = _with_new_defaults(json.loads(path.read_text(encoding="utf-8")), identity)
        diff = sorted(k for k in set(old) | set(identity) if old.get(k) != identity.get(k))
        if diff:
            row = path.name.removesuffix(".row.json")
            raise ValueError(
                f"resume_dir: row {row!r} was run with other settings ({', '.join(diff)} differ, see {path}); "
                "its results would be mixed with the new ones. Use a new run directory (or another row name)")
        return
    if has_results:
        log.info("%s: no recorded row settings (an older run); recording the current ones", path.parent)
    path.write_text(json.dumps(identity, indent=2, sort_keys=True), encoding="utf-8")


def _as_run(desc: dict[str, Any], settings: Sequence[str]) -> dict[str, Any]:
    """The resources' description as the rows ran it: the setting decides the search side, not the env's
    ``search_date_filter`` (expansion follows ``date_filter_expand`` either way). Returns a new dict."""
    env_text, env = desc.get("date filter"), desc.get("crawler env")
    if list(settings) == ["date_filtered"]:
        return desc
    desc = dict(desc)
    whole = "search over the whole corpus; expansion before the query date"
    if list(settings) == ["whole_corpus"]:
        if isinstance(env, dict):
            desc["crawler env"] = {**env, "search_date_filter": False}
        if env_text is not None:
            desc["date filter"] = whole + " (setting=whole_corpus)"
    elif env_text is not None:
        desc["date filter"] = f"date_filtered rows: {env_text}; <row>@whole_corpus rows: {whole}"
    return desc


def run_rows(specs: Sequence[RowSpec], queries: Sequence[ScholarQuery], out: Path,
             run_chunk: Callable[[RowSpec, list[ScholarQuery]], tuple[list[dict], Any]], chunk_size: int,
             progress: bool = True, identities: Optional[dict[str, dict]] = None) -> dict[str, list[dict]]:
    """Evaluate each row on the queries in chunks, appending per-query lines as they finish (resume-safe).
    ``identities``: each row's ``row_identity``, recorded beside its lines and checked when resuming."""
    (out / "per_query").mkdir(parents=True, exist_ok=True)
    results: dict[str, list[dict]] = {}
    for spec in specs:
        path = out / "per_query" / f"{spec.name}.jsonl"
        done = _read_done(path)
        if identities is not None:
            _check_identity(out / "per_query" / f"{spec.name}.row.json", identities[spec.name], bool(done))
        mine = list(queries[: spec.limit] if spec.limit is not None else queries)
        todo = [q for q in mine if q.qid not in done]
        if done:
            log.info("row %s: %d queries already done, %d to go", spec.name, len(done), len(todo))
        chunks = [todo[i:i + chunk_size] for i in range(0, len(todo), chunk_size)]
        for chunk in tqdm(chunks, desc=f"eval {spec.name}", unit="chunk", disable=not progress or len(chunks) < 2):
            rows, trajectories = run_chunk(spec, chunk)
            with path.open("a", encoding="utf-8") as f:
                for r in rows:
                    f.write(json.dumps({"row": spec.name, **r}) + "\n")
            if trajectories:
                write_trajectories(out / "trajectories" / f"{spec.name}.jsonl", trajectories, append=True)
            for r in rows:
                done[r["qid"]] = r
        results[spec.name] = [done[q.qid] for q in mine]
    return results


def pasa(cfg: DictConfig) -> dict:
    """The ``eval pasa`` task."""
    from scholar_agents.runtime.run_dir import run_dir
    from scholar_agents.pasa.commands import Resources, load_queries
    from scholar_agents.eval.pasa_plots import metrics_bars, recall_vs_actions

    from scholar_agents.validation import (
        check_queries_group, existing_dir, positive_int, positive_ints, reading,
    )

    check_queries_group(cfg.queries)
    positive_ints(cfg.ks, "ks")
    positive_int(cfg.chunk_queries, "chunk_queries", "queries per chunk")
    out = existing_dir(cfg.resume_dir, "resume_dir") if cfg.get("resume_dir") else run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    with reading("queries.path", cfg.queries.path):
        queries = load_queries(cfg.queries)
    queries = [q for q in queries if q.gold_ids]
    if not queries:
        raise ValueError(f"{cfg.queries.path}: no query with gold papers (answer_arxiv_id) to evaluate")
    settings = settings_of(cfg.get("setting"), bool(cfg.crawler.env.get("search_date_filter", True)))
    specs = row_specs(cfg.rows, settings, cfg.get("phrasings"))
    res = Resources(cfg)
    in_store = gold_in_store(queries, res.store)
    count_candidates = CandidateCounter(res.store, bool(cfg.search.get("keep_undated", True)))
    boot = BootstrapConfig(**(OmegaConf.to_container(cfg.bootstrap, resolve=True) if cfg.get("bootstrap") else {}))
    t_start = time.time()

    def run_chunk(spec: RowSpec, chunk: list[ScholarQuery]) -> tuple[list[dict], Any]:
        if spec.phrasing:  # the same queries (qid, date, gold) asked in a request form (issue 29)
            from scholar_agents.data_gen.request_forms import rewrite_query

            chunk = [rewrite_query(q, spec.phrasing) for q in chunk]
        # the before-date of this row's searches: the query's (PaSa §5.1) or none (whole corpus); expansion keeps
        # crawler.env.date_filter_expand either way
        filtered = spec.search_date_filter is not False and bool(cfg.crawler.env.date_filter)
        befores = [q.before if filtered else None for q in chunk]
        candidates = [count_candidates(b) for b in befores]
        if spec.method == "verified_teacher":
            return teacher_rows(res.search(spec.search), chunk, befores, in_store, candidates,
                                int(cfg.crawler.env.search_k)), None
        if spec.method in ("search", "paraphrase"):
            search = res.search(spec.search)
            t0 = time.perf_counter()
            texts = [q.question for q in chunk]
            extra: list[dict] = [{} for _ in chunk]
            if spec.method == "paraphrase":
                from scholar_agents.pasa.baselines import paraphrase_queries

                paras = paraphrase_queries(res.llm(spec.crawler_model), chunk)
                texts = [p.query for p in paras]
                extra = [{"searched": p.query, "fallback": p.fallback} for p in paras]
            from scholar_agents.pasa.baselines import search_rankings

            rankings = search_rankings(search, texts, befores, k=max(cfg.ks))
            rows = search_rows(rankings, chunk, in_store, time.perf_counter() - t0, candidates)
            return [{**r, **e} for r, e in zip(rows, extra)], None
        agent = res.agent(spec)
        results = agent.run(chunk, progress=False)
        trajs = [t for r in results for t in r.trajectories] if cfg.save_trajectories else None
        return agent_rows(results, chunk, in_store, candidates, agent.env.cfg.fallback_search), trajs

    kinds = {k: res.resolved_search_kind() if k == "auto" else k
             for k in {s.search or cfg.search.kind for s in specs}}
    identities = {s.name: row_identity(s, cfg, kinds[s.search or cfg.search.kind]) for s in specs}
    rows = run_rows(specs, queries, out, run_chunk, cfg.chunk_queries, progress=True, identities=identities)
    summary = summarize(rows, boot)
    common = None
    if len({len(r) for r in rows.values()}) > 1:  # rows ran on different numbers of queries: compare like with like
        shared = set.intersection(*({r["qid"] for r in rs} for rs in rows.values()))
        common = (len(shared), summarize({n: [r for r in rs if r["qid"] in shared] for n, rs in rows.items()}, boot))
    comps = comparisons(rows, boot, k=min(cfg.ks))
    cpairs = crawler_pairs(rows, boot)
    labels = {s.name: s.label or s.name for s in specs}
    meta = {
        "queries": f"{cfg.queries.path} ({len(queries)} queries with gold papers; offset {cfg.queries.offset}, "
                   f"limit {cfg.queries.limit})",
        **_as_run(res.describe(), settings),
        "setting": ", ".join(settings) + " (date_filtered = PaSa §5.1: search before the query date; whole_corpus "
                   "= ours: search over the whole corpus, expansion still date-filtered)",
        "gold papers in the corpus": f"{sum(in_store.values())} of {sum(len(set(q.gold_ids)) for q in queries)}",
        "rows": [OmegaConf.to_container(r, resolve=True) if isinstance(r, DictConfig) else r for r in cfg.rows],
        "wall time (s)": round(time.time() - t_start, 1),
    }
    md = write_report(out, summary, labels, meta, common, comps, boot, cpairs)
    (out / "summary.json").write_text(json.dumps(
        {"summary": summary, "common_queries": common and {"n": common[0], "summary": common[1]},
         "comparisons": comps, "crawler_pairs": cpairs, "meta": meta}, indent=2, default=str))
    metrics_bars({labels[n]: s for n, s in summary.items()}, out / "metrics.png")
    pts = {labels[n]: [(r["actions"], r["crawler_recall"]) for r in rs if r.get("actions") is not None]
           for n, rs in rows.items()}
    if any(pts.values()):
        recall_vs_actions({k: v for k, v in pts.items() if v}, out / "recall_vs_actions.png")
    print(md)
    log.info("report: %s", out / "report.md")
    return {"summary": summary, "output_dir": str(out)}
