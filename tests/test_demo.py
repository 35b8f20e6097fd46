"""`scholar demo`: its stages are the real commands in subprocesses; the report is built from their outputs."""

import json

from scholar_agents.demo import run
from scholar_agents.hydra_app import compose


def test_demo_subset_runs_real_commands_reports_and_resumes(tmp_path, tiny_model_dir):
    run_dir = tmp_path / "demo"
    overrides = ["stages=[index,search_bm25,select]", "n_queries=4", f"paths.output_dir={run_dir}",
                 f"llm.model={tiny_model_dir}", "llm.dtype=float32", "llm.max_model_len=1024", "llm.cache_path=null",
                 "select.top_k=3", "select.search_stage=search_bm25"]
    report = run(compose("demo", overrides))
    assert set(report["stages"]) == {"index", "search_bm25", "select"}
    assert (run_dir / "index" / ".done").is_file() and (run_dir / "search_bm25" / "stage.log").is_file()
    search = report["search"]["search_bm25"]
    assert search["queries"] == 4 and 0.0 <= search["recall@20"] <= 1.0 and search["recall@20"] >= search["recall@1"]
    assert report["select"]["pairs"] == 12  # 4 queries x top 3 hits, each scored in one forward pass
    md = (run_dir / "report.md").read_text()
    assert "search_bm25" in md and "recall@20" in md and (run_dir / "search_recall.png").is_file()

    # resume: every stage is done, so nothing is re-run and the same figures come back
    (run_dir / "search_bm25" / "stage.log").write_text("kept")
    again = run(compose("demo", [*overrides, f"resume_dir={run_dir}"]))
    assert (run_dir / "search_bm25" / "stage.log").read_text() == "kept"
    assert again["search"] == report["search"] and again["select"]["auc"] == report["select"]["auc"] or (
        again["select"]["auc"] != again["select"]["auc"])  # NaN when a query set has no gold among the hits
    assert json.loads((run_dir / "report.json").read_text())["stages"].keys() == report["stages"].keys()


def test_demo_pipeline_stages_reference_each_others_outputs():
    """The default stage list is the whole pipeline, and every `{run}/<stage>/...` an override reads is written by an
    earlier stage of that list (a typo would only show after minutes of CPU)."""
    cfg = compose("demo", [])
    stages = list(cfg.stages)
    for must in ("index", "synth_queries", "selector_sft", "crawler_sft", "ppo", "export", "eval_pasa"):
        assert must in stages
    for i, name in enumerate(stages):
        spec = cfg.stage_specs.get(name)
        if spec is None:
            continue
        for o in spec.get("overrides", []):
            for part in str(o).split("{run}/")[1:]:
                producer = part.split("/")[0]
                if producer != name:
                    assert producer in stages[:i], f"{name} reads {producer}'s output before it runs"


def test_demo_report_puts_held_out_agent_rows_beside_search_with_intervals(tmp_path, tmp_path_factory,
                                                                           tiny_model_dir):
    """The demo report's PaSa section is read from a real `eval pasa` run (tiny model, the sample) in the demo's
    eval_pasa/ dir: both settings, the agent rows beside the search rows with intervals and the paired comparison;
    the PPO note is read from the PPO stage's metrics.json and says when the policy never moved."""
    from scholar_agents.demo import _pasa_section, _ppo_note, _shipped_crawler_section
    from scholar_agents.eval.pasa.command import pasa
    from scholar_agents.eval.pasa.report import phrasing_report

    run_dir = tmp_path / "demo"
    (run_dir / "eval_pasa").mkdir(parents=True)
    rows = ("[{name: search_bm25, method: search, search: bm25, label: 'Search-only (BM25)'}, "
            "{name: agent_sft, method: agent, instructed_prompts: true, limit: 2, label: 'Agent after crawler SFT'}]")
    pasa(compose("eval_pasa", [
        f"paths.cache_dir={tmp_path_factory.getbasetemp() / 'pasa_cache'}", f"resume_dir={run_dir / 'eval_pasa'}",
        "search=bm25", f"rows={rows}", "setting=both", "queries.offset=70", "queries.limit=3",
        "phrasings=[original,imperative]",
        f"llm.model={tiny_model_dir}", "llm.dtype=float32", "llm.max_model_len=1024",
        f"selector_llm.model={tiny_model_dir}", "selector_llm.dtype=float32", "selector_llm.max_model_len=1024",
        "crawler.env.max_sessions=1", "crawler.policy.max_new_tokens=8"]))
    text = "\n".join(_pasa_section(run_dir))
    for needle in ("Agent after crawler SFT [whole corpus]", "Search-only (BM25) [whole corpus]",
                   "Crawler vs search-only, paired", "Equal budget", "whole_corpus"):
        assert needle in text, needle
    assert text.count("| Agent after crawler SFT") >= 2  # the row table and the comparison table
    # the per-form tables shipped beside the adapter (scripts/crawler_phrasings.sh) reach the report
    asset = tmp_path / "asset"
    asset.mkdir()
    (asset / "evaluation.md").write_text(phrasing_report([run_dir / "eval_pasa"], "Measured here."))
    shipped = "\n".join(_shipped_crawler_section(asset))
    assert "Measured here." in shipped and "| imperative | agent_sft~imperative |" in shipped
    assert "| original | agent_sft |" in shipped and _shipped_crawler_section(tmp_path) == []

    (run_dir / "ppo").mkdir()
    metrics = {"train": {"steps": 3, "session_return_first": 0.5, "session_return_last": 0.75},
               "ppo": {"policy_freeze_steps": 3, "total_steps": 3}}
    (run_dir / "ppo" / "metrics.json").write_text(json.dumps(metrics))
    note = _ppo_note(run_dir)
    assert "value warm-up only" in note and "frozen for all 3 steps" in note and "0.750 at step 3" in note
    assert "100 steps" in note and "plateaued" in note  # the long run's verdict, not only the 30-step table
    assert "ppo.estimator=grpo|rloo" in note  # the report says why no estimator takes policy steps
    assert "ppo.forced_members" in note and "no more gold" in note  # ... nor forcing a second search
    metrics["ppo"]["policy_freeze_steps"] = 1
    (run_dir / "ppo" / "metrics.json").write_text(json.dumps(metrics))
    assert _ppo_note(run_dir).startswith("PPO stage: 2 policy update steps after 1 value warm-up steps")
