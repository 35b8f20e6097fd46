"""scripts/ppo_eval_vs_search.py: a PPO evaluation against search cut at the crawl's own number of papers, and
later evaluations against earlier ones, paired over the queries they share."""

import json
import subprocess
import sys

from tests.paths import REPO


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_equal_budget_and_paired_rows(tmp_path):
    search = _write(tmp_path / "search.jsonl", [
        {"qid": "a", "gold_ranks": [1, 30], "n_gold_ids": 2}, {"qid": "b", "gold_ranks": [5], "n_gold_ids": 1},
        {"qid": "c", "gold_ranks": [], "n_gold_ids": 1}])
    start = _write(tmp_path / "eval_start.jsonl", [
        {"qid": "a", "crawler_recall": 0.5, "n_queue": 20, "actions": 1},  # search at 20 papers: 0.5
        {"qid": "b", "crawler_recall": 0.0, "n_queue": 10, "actions": 1},  # search at 10: 1.0
        {"qid": "c", "crawler_recall": 1.0, "n_queue": 10, "actions": 2}])  # search at 10: 0.0
    end = _write(tmp_path / "eval_end.jsonl", [
        {"qid": "a", "crawler_recall": 1.0, "n_queue": 40, "actions": 3},  # search at 40: 1.0
        {"qid": "b", "crawler_recall": 1.0, "n_queue": 10, "actions": 1},
        {"qid": "c", "crawler_recall": 1.0, "n_queue": 10, "actions": 1}])
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "ppo_eval_vs_search.py"), str(search),
                        f"start={start}", f"end={end}"], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    out = p.stdout
    assert "| start | 3 | 13.3 | 1.33 | 0.500 vs 0.500: **+0.000**" in out
    assert "| end | 3 | 20.0 | 1.67 | 1.000 vs 0.667: **+0.333**" in out
    assert "| end | start | 3 | 1.000 vs 0.500: **+0.500**" in out


def test_usage_and_bad_lines_are_one_line_errors(tmp_path):
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "ppo_eval_vs_search.py"), "x.jsonl"],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 2 and "equal budget" in p.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "ppo_eval_vs_search.py"), str(bad), f"a={bad}"],
                       capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 1 and "bad.jsonl:1: not JSON" in p.stderr
