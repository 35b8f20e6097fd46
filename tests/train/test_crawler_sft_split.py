"""The crawler-SFT held-out split is by user query (every session of a query on one side, deterministic), and its
train_qids.txt / the session JSONL itself keep those queries out of `eval pasa`."""

import json

import pytest
from omegaconf import OmegaConf

from scholar_agents.pasa.queries import load_queries
from scholar_agents.train.crawler_sft import split_sessions_by_query


def _sessions(path, qids_and_counts):
    with path.open("w") as f:
        for qid, n in qids_and_counts:
            for i in range(n):
                f.write(json.dumps({"messages": [{"role": "user", "content": f"{qid} {i}"},
                                                 {"role": "assistant", "content": "[Search] x [Stop]"}],
                                    "meta": {"qid": qid}}) + "\n")


def test_split_keeps_every_session_of_a_query_together_and_is_deterministic(tmp_path):
    data = tmp_path / "train.jsonl"
    _sessions(data, [(f"q{i}", 1 + i % 3) for i in range(20)])
    a = split_sessions_by_query(data, tmp_path / "a", 0.25, seed=0)
    b = split_sessions_by_query(data, tmp_path / "b", 0.25, seed=0)
    assert a["heldout_queries"] == 5 and a["queries"] == 20
    assert (tmp_path / "a" / "heldout.jsonl").read_text() == (tmp_path / "b" / "heldout.jsonl").read_text()
    held = {json.loads(l)["meta"]["qid"] for l in (tmp_path / "a" / "heldout.jsonl").read_text().splitlines()}
    train = {json.loads(l)["meta"]["qid"] for l in (tmp_path / "a" / "train.jsonl").read_text().splitlines()}
    assert held and not held & train and len(held | train) == 20
    assert set((tmp_path / "a" / "train_qids.txt").read_text().split()) == train
    n_lines = sum(1 for _ in data.open())
    assert a["sessions"] == n_lines and a["heldout_sessions"] == sum(1 + int(q[1:]) % 3 for q in held)
    c = split_sessions_by_query(data, tmp_path / "c", 0.25, seed=1)
    assert set((tmp_path / "c" / "heldout_qids.txt").read_text().split()) != held  # the seed matters


def test_split_refuses_sessions_without_qid_and_bad_fractions(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"messages": []}) + "\n")
    with pytest.raises(ValueError, match="meta.qid"):
        split_sessions_by_query(data, tmp_path / "out", 0.2)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        split_sessions_by_query(data, tmp_path / "out", 1.0)


def test_eval_queries_exclude_training_sessions_by_meta_qid(tmp_path):
    queries = tmp_path / "q.jsonl"
    queries.write_text("".join(json.dumps({"qid": f"q{i}", "question": f"question {i}"}) + "\n" for i in range(6)))
    sessions = tmp_path / "sessions.jsonl"
    _sessions(sessions, [("q1", 2), ("q4", 1)])
    qcfg = OmegaConf.create({"path": str(queries), "exclude_qids_file": str(sessions), "offset": 0, "limit": 3})
    assert [q.qid for q in load_queries(qcfg)] == ["q0", "q2", "q3"]  # excluded first, then the limit
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"messages": []}) + "\n")
    with pytest.raises(ValueError, match="meta.qid"):
        load_queries(OmegaConf.merge(qcfg, {"exclude_qids_file": str(bad)}))
