"""Every structured-config schema, registered in Hydra's ConfigStore as ``base_<group>`` so that a YAML preset
starting with ``defaults: [base_<group>, _self_]`` is type-checked against its dataclass.

Add one line per schema; the dataclass lives next to the code it configures.
"""

from scholar_agents.data_gen.autoscholarquery.command import AutoScholarQueryConfig
from scholar_agents.data_gen.crawl_tasks import CrawlTaskConfig
from scholar_agents.data_gen.crawler_sessions import CrawlerSessionsConfig
from scholar_agents.data_gen.selector_pairs import SelectorPairsConfig
from scholar_agents.llm.config import EmbedderConfig, LLMConfig
from scholar_agents.pasa.crawler import CrawlerPreset
from scholar_agents.papers.corpus import PapersConfig
from scholar_agents.papers.index import SearchConfig
from scholar_agents.papers.live.fulltext import ExpandConfig
from scholar_agents.runtime.cluster import ClusterConfig
from scholar_agents.pasa.selectors.llm import SelectorConfig
from scholar_agents.pasa.serve.config import ServeConfig
from scholar_agents.scipip.config import SciPIPConfig
from scholar_agents.thought.config import ThoughtConfig
from scholar_agents.train.sft import SFTRecipeConfig
from scholar_agents.runtime.slurm_probe import SlurmProbeConfig
from scholar_agents.train.ppo.config import PPOConfig

# (group, name, dataclass)
SCHEMAS = [
    ("llm", "base_llm", LLMConfig),
    ("embedder", "base_embedder", EmbedderConfig),
    ("search", "base_search", SearchConfig),
    ("expand", "base_expand", ExpandConfig),
    ("papers", "base_papers", PapersConfig),
    ("selector", "base_selector", SelectorConfig),
    ("sft", "base_sft", SFTRecipeConfig),
    ("scipip", "base_scipip", SciPIPConfig),
    ("thought", "base_thought", ThoughtConfig),
    ("probe", "base_probe", SlurmProbeConfig),
    ("data_gen", "base_autoscholarquery", AutoScholarQueryConfig),
    ("data_gen", "base_crawler_sessions", CrawlerSessionsConfig),
    ("data_gen", "base_selector_pairs", SelectorPairsConfig),
    ("crawl_task", "base_crawl_task", CrawlTaskConfig),
    ("crawler", "base_crawler", CrawlerPreset),
    ("ppo", "base_ppo", PPOConfig),
    ("cluster", "base_cluster", ClusterConfig),
    ("serve", "base_serve", ServeConfig),
]
