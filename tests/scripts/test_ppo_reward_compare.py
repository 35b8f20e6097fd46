"""scripts/ppo_reward_compare.py: two PPO runs' metrics side by side — the steady part's means, step 1, the held-out
recall — and the per-step plot. Run directories written in train crawler_ppo's metrics.jsonl / metrics.json format."""

import json

import pytest

from tests.fixtures.script_loader import load_script


@pytest.fixture(scope="module")
def compare():
    return load_script("ppo_reward_compare")


def _run(path, selector_only, gold, recall):
    path.mkdir(parents=True)
    rows = [{"step": i + 1, "reward/selector_only_hits": s, "reward/gold_hits": g, "reward/papers_added": 20.0,
             "rollout/session_return": 1.5 * s + g, "rollout/actions_per_session": 2.0, "actor/kl_to_sft": 0.01 * i,
             "timing_s/step": 10.0} for i, (s, g) in enumerate(zip(selector_only, gold))]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "metrics.json").write_text(json.dumps({"eval_start": {"crawler_recall": recall[0], "queries": 39},
                                                   "eval": {"crawler_recall": recall[1], "queries": 39}}))
    return path


def test_steady_means_start_at_the_given_step_and_the_table_names_each_run(compare, tmp_path):
    a = _run(tmp_path / "a", [20, 18, 10, 12], [0.0, 1.0, 0.5, 1.5], (0.2, 0.25))
    b = _run(tmp_path / "b", [8, 6, 4, 6], [0.5, 0.5, 1.0, 1.0], (0.2, 0.21))
    rows = compare.main([f"old={a}", f"new={b}", "--out", str(tmp_path / "out")])
    assert rows["old"]["selector_only_hits_step1"] == 20 and rows["old"]["selector_only_hits"] == pytest.approx(11.0)
    assert rows["new"]["gold_hits"] == pytest.approx(1.0) and rows["new"]["kl_end"] == pytest.approx(0.03)
    assert (rows["old"]["recall_start"], rows["old"]["recall_end"]) == (0.2, 0.25)
    md = (tmp_path / "out" / "reward_compare.md").read_text()
    assert md.splitlines()[0] == "| | old | new |"
    assert "| gold hits / session, steps 3–end | 1.00 | 1.00 |" in md
    assert (tmp_path / "out" / "reward_compare.png").stat().st_size > 1000
    with pytest.raises(SystemExit, match="name=<run dir>"):
        compare.main([str(a), "--out", str(tmp_path / "x")])
