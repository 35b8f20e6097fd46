"""scripts/expand_vs_search_table.py reads eval pasa's summary.json of every <set>/<setting> run below a folder:
equal-budget comparisons, oracle vs oracle-without-following pairs, and the agent vs re-rank pairs."""

import json
import subprocess
import sys

from tests.paths import REPO


def _diff(d, lo, hi, a=0.0):
    return {"n": 3, "mean_a": a, "mean_b": a - d, "diff": d, "ci": [lo, hi], "verdict": ""}


def test_a_run_becomes_one_table(tmp_path):
    run = tmp_path / "heldout" / "whole_corpus"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({
        "summary": {"oracle": {"crawler_recall": 0.4}, "oracle_no_follow": {"crawler_recall": 0.3},
                    "agent": {"crawler_recall": 0.25}},
        "comparisons": [{"crawler": "oracle", "search": "search_bm25", "queries": 3, "queue_mean": 40.0,
                         "actions_mean": 3.0, "crawler_recall_vs_recall_at_k": _diff(0.2, 0.1, 0.3),
                         "equal_budget": _diff(0.15, -0.01, 0.3)}],
        "crawler_pairs": [{"row": "oracle_no_follow", "minus": "oracle", "queries": 3,
                           "crawler_recall": _diff(-0.1, -0.2, -0.05)}],
        "rerank_pairs": [{"row": "agent", "minus": "rerank_bm25", "queries": 3, "queue_mean": 28.0,
                          "rerank_papers_mean": 28.0, "recall_at_10": _diff(0.02, -0.01, 0.05, a=0.5),
                          "ndcg_at_10": _diff(0.03, 0.01, 0.05)}],
    }))
    # per-query rows of two agents: after RL one query better, two the same as its SFT start
    (run / "per_query").mkdir()
    for row, r10 in (("agent_rl", [1.0, 0.5, 0.5]), ("agent_related_sft", [0.0, 0.5, 0.5]),
                     ("agent", [0.5, 0.5, 0.5]), ("agent_k10", [0.5, 0.5, 0.0])):
        (run / "per_query" / f"{row}.jsonl").write_text("".join(
            json.dumps({"row": row, "qid": f"q{i}", "selector_recall_at_10": v, "selector_ndcg_at_10": v}) + "\n"
            for i, v in enumerate(r10)))
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "expand_vs_search_table.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    assert "| agent_rl | agent_related_sft | 3 | +0.333 (+0.000 to +1.000) tie |" in out
    assert "| agent_related_sft | agent_rl |" not in out  # after RL minus its start, not the other way round
    assert "| agent_k10 | agent | 3 | -0.167 (-0.500 to +0.000) tie |" in out  # the supplement minus the page
    assert "| agent | agent_k10 |" not in out
    assert "#### heldout / whole_corpus" in out
    assert "| oracle | search_bm25 | 3 | 40.0 | 3.00 | 0.400 | +0.200 (+0.100 to +0.300) **above** | " \
           "+0.150 (-0.010 to +0.300) tie |" in out
    assert "-0.100 (-0.200 to -0.050) **below**" in out  # following nothing loses what following found
    assert ("| agent | rerank_bm25 | 3 | 28.0 | 28.0 | 0.500, 0.480 | +0.020 (-0.010 to +0.050) tie | "
            "+0.030 (+0.010 to +0.050) **above** |") in out
    empty = subprocess.run([sys.executable, str(REPO / "scripts" / "expand_vs_search_table.py"), str(tmp_path / "x")],
                           capture_output=True, text=True)
    assert empty.returncode == 2 and "no run with a summary.json" in empty.stderr
