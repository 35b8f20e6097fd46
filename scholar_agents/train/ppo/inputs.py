"""Everything session-level PPO needs that is not a trained model, built once from the composed config where
``train crawler_ppo`` starts: the typed configs (one conversion, :func:`scholar_agents.typed_config.typed`), the
paper store and search backend, the Selector (Eq. 2's reward model), the training and held-out queries and, for a
known-answer task, its answer. The trainer takes a finished :class:`PPOInputs` and reads no ``DictConfig``.

The store and search indexes are opened here, BEFORE the trainer starts the process group, so no rank waits in a
collective (NCCL's watchdog) while another builds. A job's first step builds them (`scholar papers prepare`) and
every rank opens that finished build writing nothing and taking no lock (``papers.prebuilt``, pasa/resources.py);
without that step, the first rank builds under the store's and each index's file lock (papers/corpus.py,
papers/index.py) and the others wait on it, which is safe only where those locks are cluster-wide. The rank's GPU is
selected first so that an embedder or the Selector lands on it."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from omegaconf import DictConfig, OmegaConf

from scholar_agents.data_gen.request_forms import rewrite_query
from scholar_agents.llm.config import LLMConfig
from scholar_agents.pasa.crawl_env import CrawlConfig
from scholar_agents.pasa.crawler import CrawlerConfig
from scholar_agents.pasa.queries import ScholarQuery, load_queries
from scholar_agents.pasa.resources import Resources
from scholar_agents.runtime.cluster import ClusterConfig
from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.known_task import KnownTask
from scholar_agents.typed_config import typed
from scholar_agents.validation import UsageError, reading

log = logging.getLogger(__name__)


@dataclass
class PPOInputs:
    ppo: PPOConfig
    env: CrawlConfig  # the crawl environment's rules (crawler.env)
    eval_policy: CrawlerConfig  # the held-out evaluation's greedy Crawler (crawler.policy)
    rollout_llm: LLMConfig  # the rollout backend (llm); its model is replaced by the policy's
    dist_timeout_minutes: float  # cluster.dist_timeout_minutes
    store: Any  # PaperStore
    search: Any  # SearchBackend
    # The Selector (Eq. 2's reward model), built by the trainer once its process group exists (a vLLM Selector
    # engine under torchrun joins that group); None without ppo.use_selector.
    build_selector: Optional[Callable[[], Any]]
    train_queries: list[ScholarQuery]
    eval_queries: list[ScholarQuery]  # held-out, with gold papers
    known_task: Optional[KnownTask]
    wandb: Optional[dict]  # logging.wandb
    config: dict  # the composed config, resolved: what the run log records

    def rollout_policy(self) -> CrawlerConfig:
        """The sampling Crawler: the evaluation's policy with PPO's temperature / top-p / token budget and
        log-probs (unconstrained: a grammar would change the distribution the log-probs are taken from)."""
        p, e = self.ppo, self.eval_policy
        return CrawlerConfig(max_new_tokens=p.max_new_tokens or e.max_new_tokens, temperature=p.temperature,
                             top_p=p.top_p, seed=p.seed, logprobs=True, batch_sessions=e.batch_sessions,
                             constrained=e.constrained, search=e.search)


def train_phrasings(queries: list[ScholarQuery], forms) -> list[ScholarQuery]:
    """``queries.train.phrasings``: every training query asked in each of these request forms
    (``data_gen.request_forms``; same qid, date and gold papers), so a step samples (query, form) pairs and the policy
    is trained on how researchers ask, not only on AutoScholarQuery's phrasing. null / [] = as written."""
    if not forms:
        return queries

    forms = [forms] if isinstance(forms, str) else list(forms)  # `phrasings=multi_sentence` is one form
    return [rewrite_query(q, form) for q in queries for form in forms]


def build_ppo_inputs(cfg: DictConfig) -> PPOInputs:
    """The ``train crawler_ppo`` root config -> :class:`PPOInputs` (refusing what PPO cannot train on)."""
    import torch

    p = typed(PPOConfig, cfg.ppo, "ppo")
    env = typed(CrawlConfig, cfg.crawler.env, "crawler.env")
    for switch in ("fallback_search", "search_user_query"):  # the environment's searches, not sampled actions
        if getattr(env, switch):
            raise UsageError(f"crawler.env.{switch}=true cannot be used for PPO: a search of the user's query by "
                             "the environment is not an action of the policy (no tokens, no log-prob). Train "
                             f"with crawler.env.{switch}=false")
    with reading("queries.train.path", cfg.queries.train.path):
        train_queries = train_phrasings(load_queries(cfg.queries.train), cfg.queries.train.get("phrasings"))
    if not train_queries:
        raise UsageError(f"queries.train.path={cfg.queries.train.path!r}: no training query in it (offset "
                         f"{cfg.queries.train.get('offset')}, limit {cfg.queries.train.get('limit')})")
    with reading("queries.eval.path", cfg.queries.eval.path):
        eval_queries = [q for q in load_queries(cfg.queries.eval) if q.gold_ids]
    overlap = {q.qid for q in train_queries} & {q.qid for q in eval_queries}
    if overlap:
        raise UsageError(f"{len(overlap)} queries are both training and held-out queries (e.g. "
                         f"{sorted(overlap)[:3]}): set queries.train / queries.eval to disjoint ranges")
    if torch.cuda.is_available() and "LOCAL_RANK" in os.environ:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]) % max(torch.cuda.device_count(), 1))
    t0 = time.perf_counter()
    res = Resources(cfg)
    search = res.search()
    log.info("paper store and search index ready in %.1f s (built or loaded before the process group)",
             time.perf_counter() - t0)
    cluster = cfg.get("cluster")
    timeout = float((cluster or {}).get("dist_timeout_minutes") or ClusterConfig.dist_timeout_minutes)
    logging_cfg = cfg.get("logging") or {}
    wandb = logging_cfg.get("wandb")
    return PPOInputs(
        ppo=p, env=env, eval_policy=typed(CrawlerConfig, cfg.crawler.policy, "crawler.policy"),
        rollout_llm=typed(LLMConfig, cfg.llm, "llm config"), dist_timeout_minutes=timeout, store=res.store,
        search=search, build_selector=res.selector if p.use_selector else None, train_queries=train_queries,
        eval_queries=eval_queries, known_task=KnownTask.load(p.known_task) if p.known_task else None,
        wandb=OmegaConf.to_container(wandb, resolve=True) if isinstance(wandb, DictConfig) else wandb,
        config=OmegaConf.to_container(cfg, resolve=True))
