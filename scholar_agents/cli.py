"""``scholar <group> <command> [hydra overrides]`` — one console script for every entry point.

Each command is a task function taking the composed Hydra config; its root config is ``conf/<config>.yaml``.
``scholar --help`` lists the commands; ``scholar <group> <command> --help`` is Hydra's own help for it.
"""

from __future__ import annotations

import importlib
import sys

from scholar_agents.hydra_app import run_task
from scholar_agents.runtime import stack_dump
from scholar_agents.runtime.library_bars import library_bars_off_unless_terminal

# (group, command) -> ("module:function", root config name, one-line description)
COMMANDS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("papers", "build"): ("scholar_agents.papers.commands:build", "papers_build", "load corpus files into the paper store and build search indexes"),
    ("papers", "prepare"): ("scholar_agents.pasa.commands:prepare", "papers_prepare", "build the paper store and search index `train crawler_ppo <the same overrides>` reads, once, before its ranks start (they then open them writing nothing)"),
    ("papers", "search"): ("scholar_agents.papers.commands:search", "papers_search", "search the paper store (BM25 / dense / hybrid, before-date filter)"),
    ("train", "selector_sft"): ("scholar_agents.train.selector.sft:selector_sft", "train_selector_sft", "fine-tune the PaSa Selector on chat SFT pairs (TRL, answer-only loss, full or LoRA)"),
    ("train", "selector_lexical"): ("scholar_agents.train.selector.lexical:selector_lexical", "train_selector_lexical", "fit the lexical Selector (a logistic regression over BM25 / coverage / bigram features, C and threshold chosen on a dev split) on labelled pairs"),
    ("train", "selector_embedding"): ("scholar_agents.train.selector.embedding:selector_embedding", "train_selector_embedding", "fit the embedding Selector (embedded MiniLM, a query adapter chosen on a dev split, calibration, threshold) on labelled pairs"),
    ("train", "selector_cross_encoder"): ("scholar_agents.train.selector.cross_encoder:selector_cross_encoder", "train_selector_cross_encoder", "fine-tune a cross-encoder Selector (embedded MiniLM, 1-logit head, BCE) on labelled pairs; fits its threshold on a dev split"),
    ("eval", "selector"): ("scholar_agents.eval.selector:selector", "eval_selector", "Selector precision/recall/F1/AUC and a reliability diagram on labelled pairs"),
    ("scipip", "build_db"): ("scholar_agents.scipip.commands:build_db", "scipip_build_db", "SciPIP literature DB: LLM summaries, keywords, concise methods, embeddings, co-citations (resumable)"),
    ("scipip", "retrieve"): ("scholar_agents.scipip.commands:retrieve", "scipip_retrieve", "SciPIP SKC retrieval (semantics + keywords + co-citation, clustering) with stage sizes"),
    ("scipip", "ideas"): ("scholar_agents.scipip.commands:ideas", "scipip_ideas", "SciPIP dual-path idea generation (brainstorm + retrieval, integration, expansion)"),
    ("eval", "ideas"): ("scholar_agents.eval.ideas:eval_ideas", "scipip_eval_ideas", "LLM-judge idea ratings (% >= 4 per metric) and pairwise win rates"),
    ("thought", "run"): ("scholar_agents.thought.commands:run", "thought_run", "Thought-Retriever over a query file: batch / served mode, sharded answer + ordered merge"),
    ("thought", "calibrate"): ("scholar_agents.thought.calibrate:calibrate", "thought_calibrate", "cosine quantiles of the configured embedder on a corpus, to carry thresholds (ε 0.85, SciPIP's τ 0.8) to it"),
    ("data_gen", "autoscholarquery"): ("scholar_agents.data_gen.autoscholarquery.command:autoscholarquery", "data_gen_autoscholarquery", "AutoScholarQuery from related-work sections (PaSa Table 16): PaSa JSONL splits + stats (resumable)"),
    ("data_gen", "crawler_sessions"): ("scholar_agents.data_gen.crawler_sessions:crawler_sessions", "data_gen_crawler_sessions", "Crawler imitation sessions (PaSa App. A.1): [Search]/[Expand] chats for SFT (resumable)"),
    ("data_gen", "selector_pairs"): ("scholar_agents.data_gen.selector_pairs:selector_pairs", "data_gen_selector_pairs", "Selector SFT pairs (PaSa App. B): teacher-labelled positives + simulated-crawl negatives (resumable)"),
    ("data_gen", "crawl_tasks"): ("scholar_agents.data_gen.crawl_tasks:crawl_tasks", "data_gen_crawl_tasks", "Known-answer crawl tasks for PPO learning tests (one_hop / two_hops / cost / selector): corpus, queries, uniform SFT sessions"),
    ("data_gen", "academiceval"): ("scholar_agents.data_gen.academiceval:build", "data_gen_academiceval", "AcademicEval Abstract-single / Abstract-multi / Related-multi from full-text papers and related-work sets"),
    ("eval", "academiceval"): ("scholar_agents.eval.academiceval:evaluate", "eval_academiceval", "Thought-Retriever vs baselines on AcademicEval: ROUGE-L, judge win rate, root-source P/R, analyses"),
    ("slurm", "probe"): ("scholar_agents.runtime.slurm_probe:probe", "slurm_probe", "tiny resumable training job that checks a Slurm allocation: launch, rendezvous, preemption, resume"),
    ("sweep", "report"): ("scholar_agents.eval.sweep_report:sweep_report", "sweep_report", "gather a multirun's metrics JSON into one Markdown table + PNG plot (PaSa Table 6 style)"),
    ("pasa", "search"): ("scholar_agents.pasa.commands:search", "pasa_search", "PaSa end to end: crawl (search + citation expansion), Selector ranking; JSON + table, ensembles"),
    ("pasa", "serve"): ("scholar_agents.pasa.serve.command:serve", "pasa_serve", "the PaSa agent in a local web page: live search (streamed crawl, ranked list), crawl trees, run comparison"),
    ("train", "crawler_sft"): ("scholar_agents.train.crawler_sft:crawler_sft", "train_crawler_sft", "imitation learning for the PaSa Crawler on Table 8 sessions (TRL SFT, response-only loss)"),
    ("train", "export"): ("scholar_agents.train.export.command:train_export", "train_export", "merge LoRA, write an HF safetensors dir + tokenizer/chat template/generation config/model card, check it loads (optional hub push)"),
    ("train", "crawler_ppo"): ("scholar_agents.train.crawler_ppo:crawler_ppo", "train_crawler_ppo", "session-level PPO for the PaSa Crawler with the Selector as auxiliary reward (Eqs. 1-8, resumable, torchrun)"),
    ("eval", "pasa"): ("scholar_agents.eval.pasa.command:pasa", "eval_pasa", "PaSa crawler recall / precision / recall@k vs search-only and paraphrase baselines, ablations"),
    ("plan", "crawler_ppo"): ("scholar_agents.train.plan_runs:plan", "plan", "per-GPU memory plan of `train crawler_ppo` with the same overrides (cluster=<name>); exits 1 naming the fix if it does not fit"),
    ("plan", "selector_sft"): ("scholar_agents.train.plan_runs:plan_sft", "plan_selector_sft", "per-GPU memory plan of `train selector_sft` with the same overrides (cluster=<name>); exits 1 naming the fix"),
    ("plan", "crawler_sft"): ("scholar_agents.train.plan_runs:plan_sft", "plan_crawler_sft", "per-GPU memory plan of `train crawler_sft` with the same overrides (cluster=<name>); exits 1 naming the fix"),
    ("llm", "serve"): ("scholar_agents.llm.serve:serve", "llm_serve", "an OpenAI-compatible vLLM server for a model dir (train export's output), the same command on the CUDA and CPU installs"),
    ("demo", "run"): ("scholar_agents.demo:run", "demo", "the main job end to end on the embedded defaults"),
}

# `scholar <group> <overrides>` for a group with several commands: `scholar plan ppo=...` plans crawler PPO
DEFAULT_COMMAND = {"plan": "crawler_ppo"}


def usage() -> str:
    lines = ["usage: scholar <group> <command> [hydra overrides ...]", "", "commands:"]
    for (group, command), (_, _, desc) in sorted(COMMANDS.items()):
        lines.append(f"  {group + ' ' + command:32s} {desc}")
    lines += [f"  (`scholar {g} <overrides>` = `scholar {g} {c} <overrides>`)" for g, c in DEFAULT_COMMAND.items()]
    lines += ["", "Each command is a Hydra app: `scholar <group> <command> --help` shows its config,",
              "`key=value` overrides it, `-m key=a,b` sweeps it."]
    return "\n".join(lines)


def resolve(argv: list[str]) -> tuple[tuple[str, str], list[str]]:
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(usage())
        raise SystemExit(0)
    group = argv[0]
    commands = sorted(c for g, c in COMMANDS if g == group)
    if not commands:
        raise SystemExit(f"unknown command group {group!r}\n\n{usage()}")
    if len(argv) > 1 and (group, argv[1]) in COMMANDS:
        return (group, argv[1]), argv[2:]
    if len(commands) == 1:  # `scholar demo` == `scholar demo run`
        return (group, commands[0]), argv[1:]
    if group in DEFAULT_COMMAND and (len(argv) == 1 or "=" in argv[1] or argv[1].startswith("-")):
        return (group, DEFAULT_COMMAND[group]), argv[1:]
    got = argv[1] if len(argv) > 1 else "nothing"
    raise SystemExit(f"`scholar {group}` takes one of: {', '.join(commands)} (got {got})\n\n{usage()}")


def main(argv: list[str] | None = None) -> None:
    library_bars_off_unless_terminal()  # first: tqdm reads TQDM_DISABLE when it is imported, and the task imports it

    stack_dump.install()  # `kill -QUIT <pid>`: every thread's stack to stderr, the job goes on
    argv = list(sys.argv[1:] if argv is None else argv)
    (group, command), rest = resolve(argv)
    target, config_name, _ = COMMANDS[(group, command)]
    module_name, func_name = target.split(":")
    task = getattr(importlib.import_module(module_name), func_name)
    prog = f"scholar {group} {command}"
    run_task(task, config_name, rest, prog=prog)
    if "torch.distributed" in sys.modules:  # a training job under torchrun / srun started a process group
        # lazy: imports torch (the CLI starts without it)
        from scholar_agents.runtime.collectives import close_before_exit

        close_before_exit()


if __name__ == "__main__":
    main()
