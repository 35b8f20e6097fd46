"""scripts/related_follow_stats.py: related sessions are told from sectioned ones by their outline, [Expand]s are
counted by outline entry, and gold is what the related searches added."""

from tests.fixtures.script_loader import load_script


def _load():
    return load_script("related_follow_stats")


def _session(state, outline, actions):
    prompt = [{"role": "user", "content": f"... Sections: {outline}"}] if outline else [{"role": "user", "content": "q"}]
    return {"start_state": state, "prompt": prompt, "actions": actions}


def test_follow_stats_counts_related_sessions_and_the_gold_they_add():
    m = _load()
    traj = [{"qid": "q1", "sessions": [
        _session("S_q", None, [{"kind": "search", "argument": "x", "added": ["g1", "n1"], "found_by": "search"}]),
        _session("S_q+p", '["Title", "Key phrase: a b"]', [
            {"kind": "expand", "argument": "Title", "added": ["n2", "g2"], "found_by": "related"},
            {"kind": "expand", "argument": "Key phrase: a b", "added": ["n3"], "found_by": "related"},
            {"kind": "stop", "argument": "", "added": [], "found_by": None}]),
        _session("S_q+p", '["Title"]', [{"kind": "stop", "argument": "", "added": [], "found_by": None}]),
        _session("S_q+p", '["Introduction", "Method"]', [  # a paper with sections: not a related session
            {"kind": "expand", "argument": "Method", "added": ["g3"], "found_by": "expand"}]),
    ]}, {"qid": "q2", "sessions": []}]
    c = m.follow_stats(traj, {"q1": {"g1", "g2", "g3"}, "q2": {"g9"}})
    assert c == {"queries": 2, "related_sessions": 2, "sessions_following": 1, "expands_title": 1,
                 "expands_key_phrase": 1, "papers_added": 3, "gold_added": 1, "followed_papers_adding_gold": 1,
                 "queries_following": 1}
    assert "| agent | 2 | 2 | 1 | 1 / 1 | 3 | 1 | 1 of 1 |" in m.table({"agent": c})


def test_the_record_field_decides_over_the_prompt():
    m = _load()
    stop = [{"kind": "stop", "argument": "", "added": [], "found_by": None}]
    # the record's field wins: a sectioned paper whose first heading happens to be "Title" is not related,
    # a related session written with another prompt style still is; without the field the prompt decides
    sessions = [{**_session("S_q+p", '["Title", "Method"]', stop), "related": False},
                {**_session("S_q+p", None, stop), "related": True},
                _session("S_q+p", '["Title"]', stop)]
    c = m.follow_stats([{"qid": "q", "sessions": sessions}], {})
    assert c["related_sessions"] == 2 and "sessions_following" not in c


def test_action_returns_price_each_class_of_action_with_eq1():
    m = _load()
    traj = [{"qid": "q1", "sessions": [
        _session("S_q", None, [{"kind": "search", "argument": "x", "added": ["g1", "n1"], "found_by": "search",
                                "status": "executed"},
                               {"kind": "search", "argument": "y", "added": [], "found_by": "search",
                                "status": "executed"}]),
        _session("S_q+p", '["Title"]', [
            {"kind": "expand", "argument": "Title", "added": ["g2", "n2"], "found_by": "related", "status": "executed"},
            {"kind": "expand", "argument": "Key phrase: a", "added": ["n3"], "found_by": "related",
             "status": "executed"},
            {"kind": "expand", "argument": "Nope", "added": [], "found_by": None, "status": "unknown_section"}]),
    ]}]
    r = m.action_returns(traj, {"q1": {"g1", "g2"}})
    assert r["search"] == {"actions": 2, "gold": 1, "gold_per_action": 0.5, "return_per_action": 1.5 * 0.5 - 0.1}
    assert r["related expand"]["actions"] == 2 and r["related expand"]["gold"] == 1
    assert abs(r["related expand"]["return_per_action"] - (1.5 * 0.5 - 0.1)) < 1e-12
    assert "| agent | related expand | 2 | 1 | 0.500 | +0.650 |" in m.returns_table({"agent": r})
