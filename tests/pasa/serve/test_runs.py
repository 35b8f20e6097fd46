"""What the Runs view reads from a run directory (``scholar_agents.pasa.serve.runs``), without the app: per-query
rows and trajectories, and a malformed line as one UsageError that names the file but not where it lies."""

import pytest

from scholar_agents.pasa.serve.runs import load_rows, load_trajectories
from scholar_agents.validation import UsageError


def test_rows_and_trajectories_of_an_eval_run_and_a_malformed_line(tmp_path):
    run = tmp_path / "eval_pasa" / "tiny"
    (run / "per_query").mkdir(parents=True)
    (run / "trajectories").mkdir()
    (run / "per_query" / "agent.jsonl").write_text('{"qid": "a", "recall": 1.0}\n\n{"qid": "b", "recall": 0.5}\n')
    (run / "trajectories" / "agent.jsonl").write_text('{"qid": "a", "queue": []}\n{"qid": "b", "queue": [1]}\n')
    assert load_rows(run) == {"agent": [{"qid": "a", "recall": 1.0}, {"qid": "b", "recall": 0.5}]}
    assert load_trajectories(run, "agent", "b") == [{"qid": "b", "queue": [1]}]
    (run / "per_query" / "agent.jsonl").write_text('{"qid": "a", "recall": 1.0}\n{"qid": "b", "rec\n')
    with pytest.raises(UsageError, match=r"^agent\.jsonl:2: invalid JSON at column \d+: ") as e:
        load_rows(run)
    assert str(tmp_path) not in str(e.value)


def test_repeated_page_searches_collapse_into_their_newest_run(tmp_path):
    """The Runs list shows a question asked again (same words up to case and spaces, same before-date) once: its
    newest run, with how often it was asked and the older runs' paths; other runs pass unchanged."""
    import json
    import os

    from scholar_agents.pasa.serve.runs import collapse_repeats, find_runs

    def page_search(name, query, before, mtime):
        d = tmp_path / "page_searches" / name
        d.mkdir(parents=True)
        (d / "results.json").write_text(json.dumps([{"query": query, "before": before, "papers": []}]))
        (d / "trajectories.jsonl").write_text("")
        os.utime(d, (mtime, mtime))

    page_search("1_s1", "GNNs for molecules", None, 100)
    page_search("2_s2", "gnns  for Molecules", None, 200)
    page_search("3_s3", "GNNs for molecules", "2023-01-01", 300)
    page_search("4_s4", "other question", None, 400)
    found = find_runs(tmp_path)
    assert [r["path"] for r in found][:4] == [f"page_searches/{n}" for n in ("4_s4", "3_s3", "2_s2", "1_s1")]
    listed = collapse_repeats(found)
    assert [(r["path"], r["repeats"], r["older"]) for r in listed] == [
        ("page_searches/4_s4", 1, []), ("page_searches/3_s3", 1, []),
        ("page_searches/2_s2", 2, ["page_searches/1_s1"])]
