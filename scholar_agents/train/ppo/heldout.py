"""The PPO run's held-out evaluation: greedy crawls of the held-out queries with the current policy, scored by
``eval pasa``'s code — crawler recall (gold papers in the queue) and crawler actions ([Search] + [Expand], Table 6).

Every rank crawls its consecutive share of the queries (:func:`.tensors.split_even`) on its own engine; rank 0
alone gathers the per-query rows and crawls in query order and summarises them: the same rows and metrics as one process crawling
them all, in a ``world``-th of the time, and no rank waits alone for the whole split."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from scholar_agents.eval.pasa.rows import agent_rows, gold_in_store
from scholar_agents.eval.pasa.stats import summarize
from scholar_agents.pasa.agent import AgentConfig, PaSaAgent
from scholar_agents.pasa.crawl_env import CrawlEnv
from scholar_agents.runtime import collectives
from scholar_agents.train.ppo.tensors import gather_to_main, split_even

log = logging.getLogger(__name__)


def evaluate_heldout(queries, store, search, env_cfg, crawler, tokenizer, rank: int, world: int, is_main: bool,
                     run_dir: Path, tag: str) -> dict:
    """Crawl, gather, summarise; rank 0 writes ``eval_<tag>.jsonl`` (per-query rows) and
    ``trajectories_eval_<tag>.jsonl`` (the crawls, for ``pasa serve``'s trees). Every rank returns after the same
    barrier; only rank 0's dict is filled."""
    if not queries:
        return {}
    t0 = time.perf_counter()
    mine = split_even(queries, world)[rank]
    rows: list[dict] = []
    trajs: list[dict] = []
    if mine:
        env = CrawlEnv(store, search, env_cfg, tokenizer=tokenizer)
        agent = PaSaAgent(env, crawler, None, AgentConfig(use_selector=False))
        results = agent.run(mine, progress=False)
        rows = agent_rows(results, mine, gold_in_store(mine, store))
        trajs = [t.to_dict() for r in results for t in r.trajectories]
    # to rank 0 only: every rank's engine is awake here, and a copy of every crawl on each would cost host memory
    rows = gather_to_main(rows)
    trajs = gather_to_main(trajs)
    out: dict = {}
    if is_main:
        s = summarize({"crawler": rows})["crawler"]
        out = {"crawler_recall": s.get("crawler_recall"), "crawler_actions": s.get("actions"),
               "sessions": s.get("sessions"), "queue": s.get("n_queue"), "queries": s.get("queries"),
               "seconds": round(time.perf_counter() - t0, 1)}
        (run_dir / f"eval_{tag}.jsonl").write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
        # the crawls themselves, for `pasa serve`'s trees: the same records as eval pasa's
        (run_dir / f"trajectories_eval_{tag}.jsonl").write_text(
            "".join(json.dumps(t, ensure_ascii=False, default=str) + "\n" for t in trajs))
        log.info("eval %s: crawler recall %.4f, actions %.2f on %d held-out queries (%d ranks)", tag,
                 out["crawler_recall"] or 0.0, out["crawler_actions"] or 0.0, len(queries), world)
    collectives.barrier()
    return out
