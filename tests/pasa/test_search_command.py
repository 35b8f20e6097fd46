"""`train crawler_sft` and `pasa search` end to end on the tiny model: the Crawler is fine-tuned (shared SFT recipe)
until it writes Table 8 actions, then the agent crawls the bundled sample corpus, the Selector scores every queued
paper, and the results come out as JSON, a table and trajectories."""

import json
from pathlib import Path

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.pasa.actions import SEARCH, render_response
from scholar_agents.pasa.prompts import crawler_search_messages
from scholar_agents.pasa.queries import load_pasa_queries
from tests.paths import REPO

SAMPLE = REPO / "scholar_agents" / "assets" / "sample"
RESPONSE = render_response(SEARCH, ["graph neural networks"])


@pytest.fixture(scope="module")
def tiny_crawler(tmp_path_factory, tiny_model_dir):
    """The tiny random Qwen2 taught one Table 8 response with `train crawler_sft`: 10 steps at a constant high lr are
    the fewest after which its greedy answer is the action (the end-to-end test needs a searching crawler)."""
    from scholar_agents.train.crawler_sft import crawler_sft

    d = tmp_path_factory.mktemp("crawler_sft")
    data = d / "sessions.jsonl"
    with data.open("w") as f:
        for q in load_pasa_queries(SAMPLE / "autoscholarquery_dev.jsonl", limit=16):
            msgs = crawler_search_messages(q.question) + [{"role": "assistant", "content": RESPONSE}]
            f.write(json.dumps({"messages": msgs}) + "\n")
    overrides = [f"sft.model={tiny_model_dir}", f"sft.train_file={data}", f"sft.output_dir={d / 'ckpt'}",
                 "sft.max_steps=10", "sft.learning_rate=1e-2", "sft.lr_scheduler_type=constant",
                 "sft.per_device_train_batch_size=8",
                 "sft.warmup_ratio=0", "sft.save_steps=10", "sft.logging_steps=2", "sft.max_length=512",
                 "sft.bf16=false", "logging.wandb.enabled=false", f"paths.output_dir={d / 'run'}"]
    cfg = compose("train_crawler_sft", overrides)
    summary = crawler_sft(cfg)
    return Path(summary["final_dir"]), cfg, summary


def test_crawler_sft_writes_an_hf_dir_and_resumes(tiny_crawler):
    from scholar_agents.train.crawler_sft import crawler_sft

    final, cfg, summary = tiny_crawler
    assert (final / "config.json").is_file() and (final / "SFT_DONE.json").is_file()
    assert (final / "tokenizer_config.json").is_file()
    assert summary["global_step"] == 10
    losses = [h["loss"] for h in summary["log_history"] if "loss" in h]
    assert losses[-1] < losses[0]
    assert crawler_sft(cfg)["skipped"] is True  # a finished run is not retrained


def test_pasa_search_end_to_end(tmp_path, tmp_path_factory, tiny_crawler, tiny_model_dir):
    from scholar_agents.pasa.commands import search

    final, _, _ = tiny_crawler
    out = tmp_path / "out"
    cfg = compose("pasa_search", [
        # one sample store + index for every PaSa test of the session (built once, then reused)
        f"paths.cache_dir={tmp_path_factory.getbasetemp() / 'pasa_cache'}", f"paths.output_dir={out}", "search=bm25",
        f"llm.model={final}", "llm.cache_path=null", "llm.dtype=float32", "llm.max_model_len=1024",
        f"selector_llm.model={tiny_model_dir}", "selector_llm.cache_path=null", "selector_llm.dtype=float32",
        "selector_llm.max_model_len=1024", "selector.threshold=0.0",
        "query=graph neural networks for molecules", "before=2023-01-01",
        "crawler.env.max_sessions=3", "crawler.policy.max_new_tokens=24",
        "agent.rationales=true", "agent.rationale_limit=2", "selector.rationale_max_new_tokens=8",
    ])
    res = search(cfg)
    [r] = res["results"]
    assert r["actions"] >= 1 and r["papers"], "the fine-tuned crawler should search and fill the queue"
    scores = [p["score"] for p in r["papers"]]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    assert all(p["selected"] for p in r["papers"])  # threshold 0: everything is accepted
    assert all(p["date"] < "2023-01-01" for p in r["papers"] if p["date"])
    assert [p["rationale"] is not None for p in r["papers"][:3]] == [True, True, False][:len(r["papers"])]
    assert (out / "results.md").read_text().count("| ") > 3
    traj = [json.loads(l) for l in (out / "trajectories.jsonl").read_text().splitlines()]
    assert traj[0]["sessions"][0]["actions"][0]["kind"] == "search"
