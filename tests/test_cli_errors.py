"""Bad command-line input, through the real ``scholar`` entry point: one clear line on stderr, exit status 2, no
traceback — and the full trace with HYDRA_FULL_ERROR=1. Each command checks its inputs before loading any index
or model, so these runs take about a second each."""

import os
import subprocess
import sys

import pytest

from scholar_agents.validation import UsageError, parse_date, positive_int, positive_ints
from tests.paths import REPO

ROOT = REPO


def scholar(tmp_path, *args, env=None):
    return subprocess.run([sys.executable, "-m", "scholar_agents", *args, f"hydra.run.dir={tmp_path}/run"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env={**os.environ, "HYDRA_FULL_ERROR": "0", **(env or {})})


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad_inputs")
    (d / "malformed.jsonl").write_text('{"question": "gnn", "qid": "a"}\n{"question": "x", broken\n')
    (d / "empty.jsonl").write_text("")
    (d / "bad_date.jsonl").write_text('{"question": "gnn", "qid": "a", "source_meta": {"published_time": "20231345"}}\n')
    return d


CASES = [
    (["papers", "search", "query=gnn", "before=2023-13-45"], "before='2023-13-45' is not a calendar date"),
    (["papers", "search", "query=gnn", "k=-1"], "k must be a positive integer (the number of hits per query), got -1"),
    (["papers", "search", "query=gnn", "k=0"], "k must be a positive integer (the number of hits per query), got 0"),
    (["papers", "search", "query=gnn", "k=ten"], "k must be an integer, got 'ten'"),
    (["papers", "search", "queries_file={d}/missing.jsonl"], "queries_file='{d}/missing.jsonl': no such file"),
    (["papers", "search", "queries_file={d}/malformed.jsonl"], "{d}/malformed.jsonl:2: invalid JSON"),
    (["papers", "search", "queries_file={d}/bad_date.jsonl"], "{d}/bad_date.jsonl:1: source_meta.published_time"),
    (["papers", "search"], "give query='...' or queries_file=path.jsonl"),
    (["papers", "build", "papers.sources=[{format: arxiv_jsonl, path: /nope.gz}]"], "path='/nope.gz': no such file"),
    (["pasa", "search", "query=gnn", "before=20230230"], "before=20230230 is not a calendar date"),
    (["pasa", "search", "queries.path={d}/malformed.jsonl"], "{d}/malformed.jsonl:2: invalid JSON"),
    (["eval", "pasa", "ks=[20,0]"], "ks[1] must be a positive integer, got 0"),
    (["eval", "selector"], "data.path is required"),
    (["data_gen", "crawler_sessions", "data_gen.queries={d}/missing.jsonl"], "no such file"),
    (["data_gen", "crawler_sessions", "crawler.env.prompt_style=official"], "keep crawler.env.prompt_style=paper"),
    (["data_gen", "crawler_sessions", "data_gen.teacher=oracle"], "data_gen.teacher must be one of llm, verified"),
    (["data_gen", "selector_pairs", "data_gen.crawl_queries=oracle"], "data_gen.crawl_queries must be llm or verified"),
    (["eval", "pasa", "setting=everything"], "setting must be date_filtered, whole_corpus, both or null"),
    # a model config or DeepSpeed JSON the plan cannot read: one line naming the key, before any estimate
    (["plan", "crawler_ppo", "cluster=h100_80gb", "ppo.policy_model=/nope/ckpt"],
     "ppo.policy_model: no config.json for model '/nope/ckpt'"),
    (["plan", "selector_sft", "cluster=h100_80gb", "sft.model=/nope/model"], "sft.model: no config.json for model"),
    (["plan", "crawler_ppo", "cluster=h100_80gb", "ppo.deepspeed=/nope.json"],
     "ppo.deepspeed=/nope.json does not exist"),
    (["plan", "crawler_ppo", "cluster=h100_80gb", "ppo.plan_seq_len=0"], "ppo.plan_seq_len must be a positive integer"),
    # flash attention asked for by name where it cannot load (`auto` is the presets' choice)
    (["train", "crawler_ppo", "ppo.attn_implementation=flash_attention_2"],
     "ppo.attn_implementation=flash_attention_2 but flash_attn does not import"),
    # whole crawls without a budget under a critic-free estimator: no step bound (refused before any model loads)
    (["train", "crawler_ppo", "ppo.estimator=grpo", "crawler.env.max_sessions=null", "crawler.env.max_queue=null"],
     "ppo.estimator=grpo trains on whole crawls, and crawler.env.max_sessions and max_queue are null (depth 3)"),
    (["plan", "crawler_ppo", "cluster=h100_80gb", "ppo.estimator=rloo", "crawler=pasa_paper"],
     "ppo.estimator=rloo trains on whole crawls, and crawler.env.max_sessions and max_queue are null"),
    (["eval", "pasa", "phrasings=[original,shouting]"], "phrasings must be distinct request forms of original"),
    # pasa serve: a non-loopback bind without its token, runs under a missing root
    (["pasa", "serve", "serve.host=0.0.0.0"], "serve.host=0.0.0.0 is not a loopback address: set a token in"),
    (["pasa", "serve", "serve.runs_root=/nope/runs"], "serve.runs_root=/nope/runs: no such directory"),
    # checked before the embedder or the LLM loads (these runs end in about a second)
    (["thought", "run"], "thought run needs queries=<JSONL of {id, query}>"),
    (["thought", "run", "queries={d}/missing.jsonl"], "queries='{d}/missing.jsonl': no such file"),
    (["thought", "run", "queries={d}/malformed.jsonl", "knowledge=[{d}/nope.jsonl.gz]"],
     "knowledge[0]='{d}/nope.jsonl.gz': no such file"),
    (["scipip", "ideas", "scipip.store_path={d}/nope.sqlite"], "no such paper store; `scholar papers build` writes it"),
    (["scipip", "build_db", "scipip.store_path={d}/nope.sqlite"], "no such paper store"),
    # a value a config dataclass refuses (its __post_init__), checked for every schema'd group before the task runs
    (["train", "crawler_ppo", "ppo.estimator=foo"], "ppo.estimator must be one of ('paper_mc', 'gae', 'grpo', 'rloo')"),
    (["pasa", "search", "query=gnn", "crawler.env.max_actions=-1"], "max_actions must be >= 0 or null, got -1"),
    (["eval", "pasa", "crawler.env.max_actions=-1"], "max_actions must be >= 0 or null, got -1"),
    # values that used to fail only after the work: checked before the store, the index or the first crawl
    (["eval", "pasa", "ks=[10,20,50,100]"], "ks=[10, 20, 50, 100]: the rows report recall at [20, 50, 100] only"),
    (["eval", "pasa", "queries.path={d}/empty.jsonl"], "no query with gold papers (answer_arxiv_id) to evaluate"),
    (["pasa", "search", "queries.path={d}/empty.jsonl"], "empty.jsonl': no query in it"),
    (["train", "crawler_ppo", "queries.train.path={d}/empty.jsonl"], "empty.jsonl': no training query in it"),
    (["train", "crawler_ppo", "crawler.env.fallback_search=true"], "crawler.env.fallback_search=true cannot be used"),
    # names the builders refused only when they ran (after the store, an index, a row's crawls)
    (["eval", "pasa", "rows=[{name: a, method: serach}]"], "rows[0].method must be one of search, paraphrase"),
    (["eval", "pasa", "rows=[{name: a, method: search, search: bm52}]"], "rows[0].search must be one of bm25, dense"),
    (["eval", "pasa", "rows=[{name: a, method: agent, ranking: score}]"], "rows[0].ranking must be one of selector"),
    (["eval", "pasa", "rows=[{name: a, method: search, serach: bm25}]"], "rows[0] (a): unknown field(s) ['serach']"),
    (["eval", "pasa", "rows=[{name: r, method: search_rerank, budget_of: a}, {name: a, method: agent}]"],
     "rows[0].budget_of='a' names no row listed before it (none)"),
    (["eval", "pasa", "rows=[{name: a, method: search}, {name: a, method: agent}]"], "a second row named 'a'"),
    (["eval", "pasa", "agent.ranking=score"], "agent.ranking must be one of selector, crawl, fusion, got 'score'"),
    (["eval", "pasa", "search.kind=bm52"], "search.kind must be one of bm25, dense, hybrid"),
    (["pasa", "search", "query=gnn", "selector.kind=lexical"], "selector.kind must be one of llm, cross_encoder"),
    (["pasa", "search", "query=gnn", "selector.mark=cards"], "selector.mark must be one of threshold, card"),
    (["pasa", "search", "query=gnn", "llm.backend=vlm"], "llm.backend must be one of hf, vllm, openai, got 'vlm'"),
    (["eval", "pasa", "selector_llm.backend=openia"], "selector_llm.backend must be one of hf, vllm, openai"),
    (["papers", "search", "query=gnn", "search.kind=semantic"], "search.kind must be one of bm25, dense, hybrid"),
    (["train", "crawler_ppo", "selector.kind=lexical"], "selector.kind must be one of llm, cross_encoder"),
    (["demo", "run", "stages=[indx]"], "unknown demo stages ['indx']; known: ['index'"),
]


@pytest.mark.parametrize("args,message", CASES, ids=[" ".join(a) for a, _ in CASES])
def test_bad_input_is_one_line_and_exit_2(tmp_path, bad_files, args, message):
    out = scholar(tmp_path, *[a.replace("{d}", str(bad_files)) for a in args])
    assert out.returncode == 2, out.stderr[-2000:]
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stdout + out.stderr, out.stderr[-2000:]
    assert lines[0].startswith(f"scholar {args[0]} {args[1]}: error: ")
    assert message.replace("{d}", str(bad_files)) in lines[0]


def test_tensor_parallel_colocated_rollouts_are_refused_before_loading_naming_the_alternative(tmp_path):
    """Colocated vLLM rollout engines with TP > 1: every rank rolls out its own queries, so
    a TP group would not see the same prompts; refused in one line (the alternative: TP 1, one engine per rank)."""
    out = scholar(tmp_path, "train", "crawler_ppo", "llm=smollm2_vllm", "llm.tensor_parallel_size=2",
                  env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"})  # one node: no two-node network refusal first
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-2000:]
    assert "llm.tensor_parallel_size=2 with rollout engines colocated in 2 training ranks is not supported" \
        in out.stderr
    assert "use llm.tensor_parallel_size=1" in out.stderr


def test_hydra_full_error_shows_the_trace(tmp_path):
    out = scholar(tmp_path, "papers", "search", "query=gnn", "k=0", env={"HYDRA_FULL_ERROR": "1"})
    assert out.returncode != 0 and "Traceback" in out.stderr
    assert "UsageError: k must be a positive integer" in out.stderr


def test_validators():
    assert [parse_date(v, "d") for v in ("20230228", "2023-02-28", "2023-02", "2023", None, "")] == [
        "2023-02-28", "2023-02-28", "2023-02", "2023", None, None]
    assert parse_date("20240229", "d", full=True) == "2024-02-29"  # a leap day
    for bad in ("20230229", "2023-00", "23-01-01", "yesterday"):
        with pytest.raises(UsageError):
            parse_date(bad, "d")
    with pytest.raises(UsageError, match="YYYY-MM-DD or YYYYMMDD"):
        parse_date("2023-02", "d", full=True)
    assert positive_int("7", "k") == 7 and positive_ints([20, "50"], "ks") == [20, 50]
    for bad in (True, 1.5, "1e3", None):
        with pytest.raises(UsageError, match="must be an integer"):
            positive_int(bad, "k")
    assert issubclass(UsageError, ValueError)  # library callers catching ValueError keep working
