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
