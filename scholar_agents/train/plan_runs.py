"""``scholar plan``'s entry, and the training commands' start-up checks' input: the composed config typed once, by
the dataclasses of the runs it plans, then handed to :mod:`scholar_agents.plan.commands`. ``PPOConfig`` and
``SFTRecipeConfig`` live on this floor, above plan/, which never imports them: it reads the typed values only."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from scholar_agents.llm.config import LLMConfig
from scholar_agents.pasa.crawl_env import CrawlConfig
from scholar_agents.pasa.crawler import CrawlerConfig
from scholar_agents.plan import commands
from scholar_agents.plan.commands import PPORun, SFTRun
from scholar_agents.runtime.cluster import to_cluster_config
from scholar_agents.train.ppo.config import to_ppo_config
from scholar_agents.train.sft import SFTRecipeConfig
from scholar_agents.typed_config import typed


def ppo_run(cfg: DictConfig) -> PPORun:
    """The groups of a composed ``train crawler_ppo`` config that ``scholar plan`` reads, each typed by its own
    dataclass (a wrong value: one line naming its key)."""
    # a Selector served elsewhere (openai) takes no memory here: its node, whose base_url may name a variable set
    # only on the cluster ($SCHOLAR_SELECTOR_URL), is not read
    sel = cfg.get("selector_llm")
    in_process = sel is not None and sel.get("backend") in ("hf", "vllm")
    return PPORun(ppo=to_ppo_config(cfg.ppo), llm=typed(LLMConfig, cfg.llm, "llm"),
                  cluster=to_cluster_config(cfg.cluster),
                  env=typed(CrawlConfig, cfg.crawler.env, "crawler.env"),
                  policy=typed(CrawlerConfig, cfg.crawler.policy, "crawler.policy"),
                  selector_llm=typed(LLMConfig, sel, "selector_llm") if in_process else None)


# The recipe's data and output paths: no input of a plan, which is made before they exist and often where they are
# not (`???` until the data are generated; ${oc.env:PASA_DATA}/... set only on the cluster). They are typed empty;
# the training run reads and checks them itself (train/sft.py).
SFT_PATHS = ("train_file", "eval_file", "output_dir")


def sft_run(cfg: DictConfig) -> SFTRun:
    """The ``sft`` recipe (but for :data:`SFT_PATHS`) and the cluster of a composed ``train selector_sft`` /
    ``crawler_sft`` config, typed."""
    recipe = {"train_file": "", "output_dir": ""}
    for key in cfg.sft.keys():  # (not items(): it would resolve the paths too)
        if key not in SFT_PATHS:
            value = cfg.sft[key]
            recipe[key] = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    return SFTRun(sft=typed(SFTRecipeConfig, recipe, "sft"), cluster=to_cluster_config(cfg.cluster))


def plan(cfg: DictConfig) -> dict:
    """``scholar plan [crawler_ppo]``: the per-GPU memory plan of ``train crawler_ppo`` with the same overrides."""
    return commands.plan(ppo_run(cfg))


def plan_sft(cfg: DictConfig) -> dict:
    """``scholar plan selector_sft`` / ``crawler_sft``: the per-GPU memory plan of that SFT run."""
    return commands.plan_sft(sft_run(cfg))
