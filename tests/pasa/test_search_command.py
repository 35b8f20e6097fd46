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


def _card(tmp_path, name, mark):
    """A copy of the bundled embedding Selector whose card holds ``mark`` (what selector_reader_threshold.py
    writes)."""
    import shutil

    from scholar_agents.pasa.selectors.embedding import BUNDLED_DIR

    d = tmp_path / name
    shutil.copytree(BUNDLED_DIR, d)
    meta = json.loads((d / "selector_meta.json").read_text())
    (d / "selector_meta.json").write_text(json.dumps({**meta, "mark": mark}))
    return d


def test_pasa_search_marks_what_the_card_fitted_for_a_reader_or_nothing(tmp_path, tmp_path_factory, tiny_crawler):
    """`pasa search` (selector.mark=card) marks "selected" at the card's reader mark and says what it was fitted
    for; a card where no threshold reached its target marks nothing and says why; eval pasa's agent keeps the
    decision threshold."""
    from scholar_agents.pasa.commands import search

    final, _, _ = tiny_crawler
    base = {"target_precision": 0.6, "target_rule": "stated", "min_marked": 10, "f1_threshold": 0.27,
            "heldout": {"all": {"precision": 0.61, "recall": 0.34}}}
    everything = _card(tmp_path, "every", {**base, "threshold": 0.0})
    nothing = _card(tmp_path, "none", {**base, "threshold": None, "why_none": "no threshold reached precision 0.60"})
    common = [f"paths.cache_dir={tmp_path_factory.getbasetemp() / 'pasa_cache'}", "search=bm25",
              f"llm.model={final}", "llm.cache_path=null", "llm.dtype=float32", "llm.max_model_len=1024",
              "query=graph neural networks for molecules", "before=2023-01-01", "crawler.env.max_sessions=2",
              "crawler.policy.max_new_tokens=24"]
    runs = {}
    for name, card in (("every", everything), ("none", nothing)):
        cfg = compose("pasa_search", [*common, f"selector.model={card}", f"paths.output_dir={tmp_path / name}"])
        [runs[name]] = search(cfg)["results"]
    assert runs["every"]["papers"] and all(p["selected"] for p in runs["every"]["papers"])
    assert runs["every"]["mark"] == ("mark fitted for precision 0.60 on real crawls' hits; held-out crawls: "
                                     "precision 0.61, recall 0.34")
    assert f"{len(runs['every']['papers'])} selected (mark fitted for precision 0.60" in \
        (tmp_path / "every" / "results.md").read_text()
    assert not any(p["selected"] for p in runs["none"]["papers"])
    assert runs["none"]["mark"].startswith("nothing marked: no threshold reached precision 0.60")
    assert "· 0 selected (nothing marked: no threshold reached" in (tmp_path / "none" / "results.md").read_text()
    # the same card under eval pasa (selector.mark=threshold) or an explicit threshold: the decision threshold
    from scholar_agents.pasa.selectors.factory import build_selector

    ev = build_selector(compose("eval_pasa", ["selector=embedding", f"selector.model={nothing}"]).selector)
    assert ev.mark.threshold == pytest.approx(0.2660445894303386) and ev.mark.note == ""
    by_hand = build_selector(compose("pasa_search", [f"selector.model={nothing}", "selector.threshold=0.4"]).selector)
    assert by_hand.mark.threshold == pytest.approx(0.4)
