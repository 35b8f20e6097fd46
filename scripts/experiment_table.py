"""What an `experiment=` preset (or any command line) really runs: the composed config's key values.

    python scripts/experiment_table.py summary train crawler_ppo experiment=pasa_crawler_ppo ppo.alpha=1.5
    python scripts/experiment_table.py get train crawler_ppo experiment=pasa_crawler_ppo --key selector_llm.model
    python scripts/experiment_table.py table            # the docs/cluster.md table (every experiment x its roots)

`summary` is what the sbatch templates print in dry-run mode (SCHOLAR_DRY_RUN=1); `get` is how they read one value
of the composed config (the Selector checkpoint their vLLM server loads); `table` regenerates the Markdown table of
docs/cluster.md, next to the papers' values. Composition is Hydra's own (`--cfg job` composes the same config).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from scholar_agents.cli import COMMANDS  # noqa: E402
from scholar_agents.hydra_app import CONF_DIR, _register_resolvers, register_configs  # noqa: E402

EXPERIMENT_DIR = CONF_DIR / "experiment"
# The environment variables the experiments read for cluster-only paths; `table` prints them as `$NAME`.
CLUSTER_ENV = ("PASA_DATA", "PASA_PAPER_DB", "SCHOLAR_SELECTOR_URL", "ACADEMICEVAL_DIR", "SCIPIP_STORE",
               "SCIPIP_BACKGROUNDS", "SCHOLAR_OUTPUTS")

# The papers' settings, per experiment (cited; "—" = the paper does not say or the row does not apply).
PAPER = {
    "pasa_selector_sft": "Qwen2.5-7B-Instruct; PaSa Selector SFT data (19,812 pairs); 8 H100; lr 1e-5, batch 4/GPU, "
                         "1 epoch (PaSa App. B, §5.1)",
    "pasa_selector_sft_a6000": "as pasa_selector_sft on 8 H100 (the paper ran no A6000)",
    "pasa_crawler_sft": "Qwen2.5-7B-Instruct; 12,989 session trajectories; 8 H100; lr 1e-5, batch 4/GPU, 1 epoch "
                        "(PaSa App. A.1)",
    "pasa_crawler_sessions": "Table 7 teacher (GPT-4o in the paper) writes the search sessions; expand sessions on "
                             "sections citing gold papers; AutoScholarQuery train (PaSa App. A.1)",
    "pasa_crawler_ppo": "Crawler SFT policy + value (Qwen2.5-7B), Selector RM; AutoScholarQuery train; 16 H100; "
                        "α 1.5, lr 1e-6, 2 epochs/step, fwd batch 1 x acc 16, 250 steps (50 frozen) (PaSa Table 9)",
    "pasa_crawler_grpo": "— (ours: the paper trains with a value model; its crawls have no budget besides depth)",
    "pasa_eval": "PaSa-7b Crawler + Selector; AutoScholarQuery test (Table 2), RealScholarQuery (Table 3); "
                 "Google search (PaSa §5.2)",
    "pasa_eval_ours": "as pasa_eval, our checkpoints",
    "thought_academiceval": "Mixtral-8x7B (4,096 tokens), Contriever; chunks 500, K 8, ε 0.85, 2,000-token "
                            "context; AcademicEval (Thought-Retriever §4)",
    "scipip_7b": "GPT-4o / GPT-4o-mini, jina-embeddings-v3; TopK 5, τ 0.8, nPapers 10; 34 NLP backgrounds "
                 "(SciPIP §4, Table 2)",
}


def command_words(group: str, command: str) -> str:
    """The root config of `scholar <group> <command>`."""
    try:
        return COMMANDS[(group, command)][1]
    except KeyError:
        raise SystemExit(f"unknown command `scholar {group} {command}`; see `scholar --help`") from None


def compose(config_name: str, overrides: list[str]) -> DictConfig:
    """The config `scholar <cmd> <overrides> --cfg job` prints (Hydra's compose, hydra node included for choices)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    _register_resolvers()
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return hydra_compose(config_name=config_name, overrides=overrides, return_hydra_config=True)


def value(cfg: DictConfig, key: str) -> object:
    """One resolved value; `???` when required and not given; the resolution error (e.g. an unset env var) as text;
    None when the key does not exist in this command's config."""
    parent_key, _, leaf = key.rpartition(".")
    parent = OmegaConf.select(cfg, parent_key, throw_on_resolution_failure=False) if parent_key else cfg
    if not isinstance(parent, DictConfig) or leaf not in parent.keys():
        return None
    if OmegaConf.is_missing(parent, leaf):
        return f"??? (required: pass {key}=...)"
    try:
        got = parent[leaf]
        return OmegaConf.to_container(got, resolve=True) if OmegaConf.is_config(got) else got
    except Exception as exc:  # noqa: BLE001 — shown to the user as what is missing
        unset = re.search(r"Environment variable '(\w+)' not found", str(exc))
        return f"<unset: export {unset.group(1)}>" if unset else f"<{exc.__class__.__name__}: {str(exc).splitlines()[0]}>"


def zero_stage(path: object) -> object:
    """The ZeRO stage of a DeepSpeed JSON (None = no DeepSpeed)."""
    if not path or not isinstance(path, str) or path.startswith("<"):
        return path or None
    try:
        return json.loads(Path(path).read_text())["zero_optimization"]["stage"]
    except (OSError, KeyError, ValueError) as exc:
        return f"<unreadable {path}: {exc}>"


def summary(cfg: DictConfig) -> dict[str, object]:
    """The key values of a composed job config: models, corpus, queries, GPUs, ZeRO stage, batch sizes, steps."""
    out: dict[str, object] = {}
    choices = OmegaConf.to_container(cfg.hydra.runtime.choices) if "hydra" in cfg else {}
    out["experiment"] = choices.get("experiment")
    out["cluster"] = f"{value(cfg, 'cluster.name')}: {value(cfg, 'cluster.nodes')} node(s) x " \
                     f"{value(cfg, 'cluster.gpus_per_node')} GPU(s) of {value(cfg, 'cluster.gpu_memory_gib')} GiB"
    if "sft" in cfg:
        world = value(cfg, "sft.expected_world_size")
        per, acc = value(cfg, "sft.per_device_train_batch_size"), value(cfg, "sft.gradient_accumulation_steps")
        out |= {"model": value(cfg, "sft.model"), "data": value(cfg, "sft.train_file"),
                "output": value(cfg, "sft.output_dir"), "GPUs (processes)": world,
                "ZeRO stage": zero_stage(value(cfg, "sft.deepspeed")),
                "batch": f"{per}/GPU x accumulation {acc} x {world} GPUs = {_product(per, acc, world)}",
                "lr": value(cfg, "sft.learning_rate"),
                "steps": f"{value(cfg, 'sft.num_train_epochs')} epoch(s) (max_steps {value(cfg, 'sft.max_steps')})",
                "max tokens": value(cfg, "sft.max_length"), "save_steps": value(cfg, "sft.save_steps")}
    if "ppo" in cfg:
        out |= {"model": f"policy {value(cfg, 'ppo.policy_model')}",
                "rollout engine": f"{value(cfg, 'llm.backend')} (gpu_memory_utilization "
                                  f"{value(cfg, 'llm.gpu_memory_utilization')})",
                "ZeRO stage": zero_stage(value(cfg, "ppo.deepspeed")),
                "batch": (f"{value(cfg, 'ppo.queries_per_step')} queries/GPU/step -> "
                          + (f"{value(cfg, 'ppo.estimator')}: {value(cfg, 'ppo.group_size')} whole crawls each, "
                             f"<= {value(cfg, 'crawler.env.max_sessions')} sessions (max_sessions) / "
                             f"{value(cfg, 'crawler.env.max_queue')} queued (max_queue)"
                             if value(cfg, 'ppo.estimator') in ("grpo", "rloo") else
                             f"sessions {value(cfg, 'ppo.queries_per_step')} search + "
                             f"{value(cfg, 'ppo.expand_sessions')} expand")
                          + f"; forward {value(cfg, 'ppo.forward_batch_size')} x accumulation "
                            f"{value(cfg, 'ppo.grad_accum')}"),
                "lr": value(cfg, "ppo.lr"), "alpha": value(cfg, "ppo.alpha"),
                # grpo/rloo have no value model to warm up: the trainer forces policy_freeze_steps to 0
                "steps": f"{value(cfg, 'ppo.total_steps')} ("
                         + ("policy trained from step 1, no value warm-up"
                            if value(cfg, 'ppo.estimator') in ("grpo", "rloo")
                            else f"{value(cfg, 'ppo.policy_freeze_steps')} policy frozen")
                         + f"), {value(cfg, 'ppo.ppo_epochs')} epochs/step"}
    elif "llm" in cfg and "sft" not in cfg:
        out["model"] = value(cfg, "llm.model")
        tp, dp = value(cfg, "llm.tensor_parallel_size"), value(cfg, "llm.data_parallel_size")
        if value(cfg, "llm.backend") == "vllm":
            out["GPUs (processes)"] = f"vLLM: tensor parallel {tp} x data parallel {dp} = {_product(tp, dp)} GPUs"
    if "selector_llm" in cfg:
        out["selector"] = f"{value(cfg, 'selector_llm.backend')} {value(cfg, 'selector_llm.model')}" + (
            f" at {value(cfg, 'selector_llm.base_url')}" if value(cfg, "selector_llm.backend") == "openai" else "")
        out["selector abstracts"] = value(cfg, "selector.max_abstract_chars") or "full"
    if "papers" in cfg:
        out["corpus"] = f"{value(cfg, 'papers.name')}: " + ", ".join(
            str(s.get("path")) for s in (value(cfg, "papers.sources") or []))
        out["search"] = f"{value(cfg, 'search.kind')}, embedder {value(cfg, 'embedder.model')}"
    elif "embedder" in cfg:
        out["embedder"] = value(cfg, "embedder.model")
    if "queries" in cfg:
        if value(cfg, "queries.train") is not None:
            out["queries"] = f"train {value(cfg, 'queries.train.path')} (limit {value(cfg, 'queries.train.limit')}); " \
                             f"eval {value(cfg, 'queries.eval.path')} (limit {value(cfg, 'queries.eval.limit')})"
        elif isinstance(cfg.queries, DictConfig):
            out["queries"] = f"{value(cfg, 'queries.path')} (limit {value(cfg, 'queries.limit')})"
        else:
            out["queries"] = value(cfg, "queries")
    if "datasets" in cfg:
        out["datasets"] = ", ".join(str(value(d, "path")) for d in cfg.datasets)
    if "thought" in cfg:
        out["thought"] = f"chunk {value(cfg, 'thought.chunk_size')}, K {value(cfg, 'thought.top_k')}, " \
                         f"ε {value(cfg, 'thought.epsilon')}, budget {value(cfg, 'thought.token_budget')}, " \
                         f"batch {value(cfg, 'thought.batch_size')}"
    if "scipip" in cfg:
        out["scipip"] = f"store {value(cfg, 'scipip.store_path')}; backgrounds {value(cfg, 'scipip.backgrounds_path')} " \
                        f"(first {value(cfg, 'scipip.num_backgrounds')})"
    return {k: v for k, v in out.items() if v is not None}


def _product(*xs: object) -> object:
    try:
        n = 1
        for x in xs:
            n *= int(x)  # type: ignore[arg-type]
        return n
    except (TypeError, ValueError):
        return "?"


def experiment_roots() -> dict[str, list[str]]:
    """experiment name -> the root configs it is written for (its `# roots:` header line)."""
    out = {}
    for path in sorted(EXPERIMENT_DIR.glob("*.yaml")):
        m = re.search(r"^# roots: (.+)$", path.read_text(), re.M)
        if not m:
            raise ValueError(f"{path}: no `# roots: <root config> ...` header line")
        out[path.stem] = m.group(1).split()
    return out


def root_command(config_name: str) -> str:
    for (group, command), (_, name, _) in COMMANDS.items():
        if name == config_name:
            return f"{group} {command}"
    raise KeyError(config_name)


def table() -> str:
    """docs/cluster.md's table: every experiment with its first root, next to the paper's values."""
    for name in CLUSTER_ENV:  # cluster-only paths print as the variable they come from
        os.environ[name] = "$" + name
    cols = ["model", "corpus", "queries", "data", "datasets", "GPUs (processes)", "ZeRO stage", "batch", "steps"]
    lines = ["| experiment (`scholar <cmd>`) | " + " | ".join(cols) + " | paper |",
             "|" + "---|" * (len(cols) + 2)]
    for name, roots in experiment_roots().items():
        cfg = compose(roots[0], [f"experiment={name}"])
        s = summary(cfg)
        cells = [str(s.get(c, "")).replace("|", "\\|") for c in cols]
        if not cells[5] and "cluster" in s:
            cells[5] = s["cluster"]
        lines.append(f"| `{name}` (`{root_command(roots[0])}`) | " + " | ".join(cells) + f" | {PAPER.get(name, '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=["summary", "get", "table"])
    parser.add_argument("words", nargs="*", help="<group> <command> [overrides...]")
    parser.add_argument("--key", help="get: the dotted config key")
    args, unknown = parser.parse_known_args(argv)
    if args.mode == "table":
        print(table())
        return 0
    words = [*args.words, *unknown]
    if len(words) < 2:
        parser.error("give the command: <group> <command> [overrides...]")
    cfg = compose(command_words(words[0], words[1]), words[2:])
    if args.mode == "get":
        if not args.key:
            parser.error("get needs --key")
        got = value(cfg, args.key)
        if got is None or (isinstance(got, str) and (got.startswith("<") or got.startswith("???"))):
            print(f"[experiment_table] {args.key} of `scholar {words[0]} {words[1]}`: {got}", file=sys.stderr)
            return 2
        print(got)
        return 0
    for key, val in summary(cfg).items():
        print(f"  {key:18s} {val}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
