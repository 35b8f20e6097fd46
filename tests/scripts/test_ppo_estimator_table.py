"""scripts/ppo_estimator_table.py: the comparison table from the runs' own files — budget per step,
the training signal, held-out recall by step and the paired difference against the start on the same queries."""

import json
import subprocess
import sys

from tests.paths import REPO


def _run(root, name, gold, evals, extra=None):
    run = root / name / "main"
    run.mkdir(parents=True)
    rows = [{**(extra or {}), "step": i + 1, "rollout/sessions": 8.0, "rollout/response_tokens": 20.0, "rollout/search_sessions": 8.0,
             "timing_s/step": 100.0, "reward/gold_hits": g, "rollout/search_per_session": 1.0,
             "group/flat_share": 0.25, "group/return_std": 0.5, "actor/kl_to_sft": 0.01,
             "group/gold_differs_share": 0.4, "reward/session_reward": 2 * g, "rollout/expand_per_session": 1.0}
            for i, g in enumerate(gold)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for tag, recalls in evals.items():
        (run / f"eval_{tag}.jsonl").write_text("".join(
            json.dumps({"qid": f"q{i}", "crawler_recall": r}) + "\n" for i, r in enumerate(recalls)))


def test_the_table_pairs_the_last_held_out_figure_with_the_start(tmp_path):
    _run(tmp_path, "grpo", [0.1] * 5 + [0.9] * 5, {"start": [0.0, 0.5, 1.0, 0.5], "step000010": [0.5, 0.5, 1.0, 1.0]})
    _run(tmp_path, "rloo", [0.2] * 3, {"start": [0.0, 0.5, 1.0, 0.5]})
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "ppo_estimator_table.py"), str(tmp_path),
                          "--estimators", "grpo", "rloo", "gae"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "estimators.md").read_text()
    grpo = next(line for line in table.splitlines() if line.startswith("| `grpo`"))
    assert "| 10 |" in grpo and "0.10 → 0.90" in grpo and "160" in grpo  # steps, gold first → last 5, 8 x 20 tokens
    assert "| 0.10 → 0.90 | 0.25 | 0.40 |" in grpo  # Eq. 1 reward per search or expand (2g / 2), flat, gold differs
    assert "0: 0.500, 10: 0.750" in grpo and "+0.250" in grpo and "4 queries, step 10" in grpo
    rloo = next(line for line in table.splitlines() if line.startswith("| `rloo`"))
    assert rloo.rstrip().endswith("| — |")  # only the start evaluation: nothing to pair yet
    assert "`gae`" not in table  # not run yet
    assert (tmp_path / "estimators.png").stat().st_size > 0


def test_forced_members_get_their_own_block_table(tmp_path):
    """ppo.forced_members runs: free and forced crawls apart, in blocks of 10 steps, and a third panel."""
    forced = {"group/free_searches_per_crawl": 1.0, "group/forced_searches_per_crawl": 2.5,
              "group/free_gold_hits_per_crawl": 0.5, "group/forced_gold_hits_per_crawl": 0.75,
              "group/free_reward_per_crawl": 0.6, "group/forced_reward_per_crawl": 0.8}
    _run(tmp_path, "rloo", [0.2] * 12, {"start": [0.0, 0.5]}, extra=forced)
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "ppo_estimator_table.py"), str(tmp_path),
                          "--estimators", "rloo"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    table = (tmp_path / "estimators.md").read_text()
    assert "| 1–10 | 1.00 / 2.50 | 0.50 / 0.75 | 0.60 / 0.80 |" in table and "| 11–12 |" in table
