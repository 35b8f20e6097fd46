"""``scholar pasa search``: the end-to-end PaSa agent on one query or a query file (the pieces it runs on are
built by :class:`scholar_agents.pasa.resources.Resources`); ``scholar papers prepare``: those pieces' store and
search index, built once before the ranks of a training job start."""

from __future__ import annotations

import json
import logging

from omegaconf import DictConfig

from scholar_agents.pasa.kinds import check_kinds
from scholar_agents.pasa.queries import ScholarQuery, load_queries, seeded_query
from scholar_agents.pasa.resources import Resources, pasa_setup
from scholar_agents.pasa.search_run import write_search_run
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.validation import UsageError, check_queries_group, optional_positive_int, parse_date, reading

log = logging.getLogger(__name__)


def search(cfg: DictConfig) -> dict:
    """``scholar pasa search query="..." [before=YYYY-MM-DD]`` or ``queries.path=<PaSa JSONL>``: crawl, select,
    rank; writes ``results.json``, ``results.md`` and ``trajectories.jsonl`` and prints the tables."""
    optional_positive_int(cfg.get("top"), "top", "rows per query in the printed table; null = all")
    check_kinds(cfg)
    setup = pasa_setup(cfg)  # typed once, before any query file is read or anything loads
    res = None
    if cfg.get("seed_paper"):
        res = Resources(setup)
        queries = [seeded_query(res.store, str(cfg.seed_paper), cfg.get("query"),
                                parse_date(cfg.get("before"), "before", full=True))]
    elif cfg.get("query"):
        queries = [ScholarQuery("query", str(cfg.query), before=parse_date(cfg.get("before"), "before", full=True))]
    elif cfg.queries.get("path"):
        check_queries_group(cfg.queries)
        with reading("queries.path", cfg.queries.path):
            queries = load_queries(cfg.queries)
        if not queries:
            raise UsageError(f"queries.path={cfg.queries.path!r}: no query in it (offset "
                             f"{cfg.queries.get('offset')}, limit {cfg.queries.get('limit')})")
    else:
        raise UsageError('give query="<your question>" (and optionally before=YYYY-MM-DD) or queries.path=<file>')
    res = res or Resources(setup)
    agent = res.agent()
    results = agent.run(queries)
    out = run_dir(cfg)
    setting = res.describe()
    tables = write_search_run(out, results, setting, top=cfg.top)
    # what the agent ran with (the search backend its Crawler's data were verified on, the adapter)
    print(f"searched with: {setting['search']}\ncrawler: {setting['crawler']}\nselector: {setting['selector']}\n")
    payload = [r.to_dict() for r in results]
    print(tables)
    live = res.live_stats()
    if live:
        (out / "live.json").write_text(json.dumps(live, indent=1))
        log.info("live backends: %s", json.dumps(live))
    log.info("results: %s", out / "results.json")
    return {"output_dir": str(out), "results": payload, **({"live": live} if live else {})}


def prepare(cfg: DictConfig) -> dict:
    """``scholar papers prepare <the overrides of train crawler_ppo>`` (root ``papers_prepare`` = that run's config):
    build the paper store and the search index the run reads, in one process, before its ranks start
    (slurm/crawler_ppo.sbatch's first step); the ranks then open them as a finished build (``papers.prebuilt``)."""
    setup = pasa_setup(cfg)
    setup.papers.prebuilt = False  # this process is the one that builds
    res = Resources(setup)
    backend = res.search()
    report = {"store": res.build_info, "index_dir": res.index_dir, "index": getattr(backend, "build_info", {})}
    parts = [f"{k}: {v['status']}" for k, v in report["index"].items() if isinstance(v, dict) and "status" in v]
    print(f"paper store {setup.papers.store} ({len(res.store)} papers) [{res.build_info.get('status')}]; search "
          f"index {res.index_dir}: {', '.join(parts) or 'none'}; the ranks open them with papers.prebuilt=true")
    res.store.close()
    return report
