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

This module is the command: the task function, the resumable runner and each row's recorded identity. The
rows are ``eval/pasa/rows.py``, the statistics ``eval/pasa/stats.py``, the Markdown ``eval/pasa/report.py``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from omegaconf import DictConfig, OmegaConf

from scholar_agents.data_gen.request_forms import rewrite_query
from scholar_agents.eval.bootstrap import BootstrapConfig
from scholar_agents.eval.pasa.metrics import RECALL_KS
from scholar_agents.eval.pasa.oracle import gold_blind_oracle
from scholar_agents.eval.pasa.plots import metrics_bars, recall_vs_actions
from scholar_agents.eval.pasa.report import write_report
from scholar_agents.eval.pasa.rows import (  # noqa: I001
    CandidateCounter, METHODS, PHRASING_SEP, RowSpec, WHOLE_CORPUS_SUFFIX, agent_rows, gold_in_store, oracle_rows,
    rerank_rows, row_specs, search_rows, settings_of, teacher_rows,
)
from scholar_agents.eval.pasa.stats import comparisons, crawler_pairs, ranking_pairs, rerank_pairs, summarize
from scholar_agents.papers.index import KINDS
from scholar_agents.pasa.baselines import paraphrase_queries, search_rankings
from scholar_agents.pasa.crawl_env import CrawlConfig
from scholar_agents.pasa.crawler import CrawlerConfig
from scholar_agents.pasa.kinds import check_kinds
from scholar_agents.pasa.queries import ScholarQuery, load_queries
from scholar_agents.pasa.ranking import RANKINGS
from scholar_agents.pasa.resources import Resources, pasa_setup
from scholar_agents.pasa.selectors.llm import SelectorPair
from scholar_agents.pasa.trajectory import write_trajectories
from scholar_agents.runtime.progress import progress_bar
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.typed_config import typed
from scholar_agents.validation import (
    UsageError, check_queries_group, existing_dir, jsonl_records, one_of, optional_positive_int, positive_int,
    positive_ints, reading,
)

log = logging.getLogger(__name__)


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
    if spec.method in ("verified_teacher", "gold_blind_oracle", "agent"):
        ident["crawler.env"] = OmegaConf.to_container(cfg.crawler.env, resolve=True)
    if spec.method == "agent":
        ident["crawler.policy"] = OmegaConf.to_container(cfg.crawler.policy, resolve=True)
        ident["agent"] = OmegaConf.to_container(cfg.agent, resolve=True) if cfg.get("agent") else None
        ident["selector"] = OmegaConf.to_container(cfg.selector, resolve=True) if cfg.get("selector") else None
    if spec.method in ("agent", "paraphrase"):
        ident["llm.model"] = spec.crawler_model or cfg.llm.get("model")
    if spec.method == "search_rerank":
        ident["selector"] = OmegaConf.to_container(cfg.selector, resolve=True) if cfg.get("selector") else None
    if spec.method == "agent" and cfg.get("selector_llm"):
        ident["selector_llm.model"] = cfg.selector_llm.get("model")
    return json.loads(json.dumps(ident, default=str))


def _with_new_defaults(old: dict[str, Any], identity: dict[str, Any]) -> dict[str, Any]:
    """``old`` with the crawler switches added since it was recorded filled in, where the current value is the
    switch's default (the behaviour the old run had): a new field with its default does not block a resume."""
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
        for chunk in progress_bar(chunks, desc=f"eval {spec.name}", unit="chunk",
                                  disable=not progress or len(chunks) < 2):
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


def check_rows(rows: Any, resume_dir: Optional[str] = None) -> None:
    """Each ``rows[]`` entry's fields and names, before any row runs: an unknown method, search kind or ranking,
    or a ``budget_of`` naming no earlier row, otherwise fails only when its row's turn comes, after the rows
    before it have crawled (a row of ``resume_dir`` with results also counts as run)."""
    rows = OmegaConf.to_container(rows, resolve=True) if OmegaConf.is_config(rows) else rows
    if not isinstance(rows, list) or not rows:
        raise UsageError(f"rows must be a non-empty list of rows, e.g. rows='[{{name: bm25, method: search}}]', "
                         f"got {rows!r}")
    fields = {f.name for f in dataclasses.fields(RowSpec)}
    earlier: list[str] = []
    for i, r in enumerate(rows):
        key = f"rows[{i}]"
        if not isinstance(r, dict) or not r.get("name"):
            raise UsageError(f"{key} needs a name and a method, e.g. {{name: bm25, method: search}}, got {r!r}")
        unknown = sorted(set(r) - fields)
        if unknown:
            raise UsageError(f"{key} ({r['name']}): unknown field(s) {unknown}; a row has {sorted(fields)}")
        one_of(r.get("method"), f"{key}.method", METHODS)
        if r.get("search") is not None:
            one_of(r["search"], f"{key}.search", KINDS)
        if r.get("ranking") is not None:
            one_of(r["ranking"], f"{key}.ranking", RANKINGS)
        for n in ("limit", "ensemble", "rerank_k", "max_searches"):
            optional_positive_int(r.get(n), f"{key}.{n}")
        # budget_of reads that row's per-query results: it must have run already (a row listed before)
        base = str(r.get("budget_of") or "").removesuffix(WHOLE_CORPUS_SUFFIX).split(PHRASING_SEP)[0]
        done = resume_dir and (Path(str(resume_dir)) / "per_query" / f"{r.get('budget_of')}.jsonl").exists()
        if base and base not in earlier and not done:
            raise UsageError(f"{key}.budget_of={r['budget_of']!r} names no row listed before it "
                             f"({', '.join(earlier) or 'none'})")
        if r["name"] in earlier:
            raise UsageError(f"{key}: a second row named {r['name']!r}; row names must be unique")
        earlier.append(str(r["name"]))


def pasa(cfg: DictConfig) -> dict:
    """The ``eval pasa`` task."""
    check_queries_group(cfg.queries)
    check_kinds(cfg)
    check_rows(cfg.rows, cfg.get("resume_dir"))
    positive_ints(cfg.ks, "ks")
    unknown = sorted(set(int(k) for k in cfg.ks) - set(RECALL_KS))
    if unknown:  # every row's recall@k columns are RECALL_KS: another k would fail in the report, after the crawls
        raise UsageError(f"ks={list(cfg.ks)}: the rows report recall at {list(RECALL_KS)} only, not at {unknown}; "
                         f"choose among those, e.g. ks=[20,50]")
    positive_int(cfg.chunk_queries, "chunk_queries", "queries per chunk")
    out = existing_dir(cfg.resume_dir, "resume_dir") if cfg.get("resume_dir") else run_dir(cfg)
    out.mkdir(parents=True, exist_ok=True)
    with reading("queries.path", cfg.queries.path):
        queries = load_queries(cfg.queries)
    queries = [q for q in queries if q.gold_ids]
    if not queries:
        raise UsageError(f"queries.path={cfg.queries.path!r}: no query with gold papers (answer_arxiv_id) to evaluate")
    settings = settings_of(cfg.get("setting"), bool(cfg.crawler.env.get("search_date_filter", True)))
    specs = row_specs(cfg.rows, settings, cfg.get("phrasings"))
    boot = typed(BootstrapConfig, cfg.get("bootstrap"), "bootstrap")  # before any model is loaded
    res = Resources(pasa_setup(cfg))
    in_store = gold_in_store(queries, res.store)
    count_candidates = CandidateCounter(res.store, bool(cfg.search.get("keep_undated", True)))
    t_start = time.time()

    def run_chunk(spec: RowSpec, chunk: list[ScholarQuery]) -> tuple[list[dict], Any]:
        if spec.phrasing:  # the same queries (qid, date, gold) asked in a request form
            chunk = [rewrite_query(q, spec.phrasing) for q in chunk]
        # the before-date of this row's searches: the query's (PaSa §5.1) or none (whole corpus); expansion keeps
        # crawler.env.date_filter_expand either way
        filtered = spec.search_date_filter is not False and bool(cfg.crawler.env.date_filter)
        befores = [q.before if filtered else None for q in chunk]
        candidates = [count_candidates(b) for b in befores]
        if spec.method == "verified_teacher":
            return teacher_rows(res.search(spec.search), chunk, befores, in_store, candidates,
                                int(cfg.crawler.env.search_k)), None
        if spec.method == "gold_blind_oracle":
            env_cfg = typed(CrawlConfig, cfg.crawler.env, "crawler.env")
            budget = spec.max_searches or env_cfg.max_actions or 5
            t0 = time.perf_counter()
            crawls = gold_blind_oracle(res.search(spec.search), res.store, chunk, befores, env_cfg, budget,
                                       follow=10 if spec.follow is None else spec.follow)
            wall = (time.perf_counter() - t0) / max(len(chunk), 1)
            return oracle_rows(crawls, chunk, in_store, candidates, wall), None
        if spec.method == "search_rerank":
            if spec.budget_of:  # the same number of papers as that row's crawl, query by query
                budget = {r["qid"]: int(r.get("n_queue") or 0)
                          for r in _read_done(out / "per_query" / f"{spec.budget_of}.jsonl").values()}
                missing = [q.qid for q in chunk if q.qid not in budget]
                if missing:
                    raise UsageError(f"row {spec.name}: budget_of={spec.budget_of} has no result for "
                                     f"{len(missing)} queries (e.g. {missing[0]}): list that row before this one")
                ks = [max(budget[q.qid], 1) for q in chunk]
            else:
                ks = [spec.rerank_k or 20] * len(chunk)
            search = res.search(spec.search)
            t0 = time.perf_counter()
            full = search_rankings(search, [q.question for q in chunk], befores, k=max(ks))
            rankings = [r[:k] for r, k in zip(full, ks)]
            papers = res.store.get_many(sorted({p for r in rankings for p in r}), with_sections=False)
            kind = kinds[spec.search or cfg.search.kind]
            pairs = [SelectorPair.of(q.question, papers[p], qid=q.qid, found_by=kind)
                     for q, r in zip(chunk, rankings) for p in r if p in papers]
            flat = list(res.selector().score(pairs)) if pairs else []
            scores, i = [], 0
            for r in rankings:
                n = sum(p in papers for p in r)
                scores.append([float(x) for x in flat[i:i + n]])
                i += n
            rankings = [[p for p in r if p in papers] for r in rankings]
            wall = (time.perf_counter() - t0) / max(len(chunk), 1)
            return rerank_rows(rankings, scores, chunk, in_store, wall, candidates), None
        if spec.method in ("search", "paraphrase"):
            search = res.search(spec.search)
            t0 = time.perf_counter()
            texts = [q.question for q in chunk]
            extra: list[dict] = [{} for _ in chunk]
            if spec.method == "paraphrase":
                paras = paraphrase_queries(res.llm(spec.crawler_model), chunk)
                texts = [p.query for p in paras]
                extra = [{"searched": p.query, "fallback": p.fallback} for p in paras]

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
    rpairs = ranking_pairs(rows, boot)
    methods = {s.name: s.method for s in specs}
    rrpairs = rerank_pairs(rows, methods, boot)
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
    md = write_report(out, summary, labels, meta, common, comps, boot, cpairs, rpairs, rrpairs, methods)
    (out / "summary.json").write_text(json.dumps(
        {"summary": summary, "common_queries": common and {"n": common[0], "summary": common[1]},
         "comparisons": comps, "crawler_pairs": cpairs, "ranking_pairs": rpairs,
         "rerank_pairs": rrpairs, "meta": meta}, indent=2, default=str))
    metrics_bars({labels[n]: s for n, s in summary.items()}, out / "metrics.png")
    pts = {labels[n]: [(r["actions"], r["crawler_recall"]) for r in rs if r.get("actions") is not None]
           for n, rs in rows.items()}
    if any(pts.values()):
        recall_vs_actions({k: v for k, v in pts.items() if v}, out / "recall_vs_actions.png")
    print(md)
    log.info("report: %s", out / "report.md")
    return {"summary": summary, "output_dir": str(out)}
