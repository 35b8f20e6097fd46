"""The crawl environment (PaSa §4.2, Table 1) stepped with hand-written actions on a hand-made store whose
answers are known: search with the before-date, expansion resolving references (ids and titles) with the same
date filter, de-duplication, depth limit, budgets, and records consistent with token ids."""


import pytest

from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.trajectory import S_Q, S_QP
from tests.fixtures.crawl import QUERY, gen, run_session
from tests.paths import TEST_ASSETS

TINY_TOKENIZER = TEST_ASSETS / "tiny_tokenizer"


def test_search_applies_the_before_date_and_schedules_expand_sessions(toy):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=5))
    [state] = env.reset([QUERY])
    [s], [rec] = run_session(env, [state], "[Search] graph neural networks molecules [Stop]")
    assert s.start_state == S_Q and rec.start_state == S_Q and rec.depth == 0
    added = rec.actions[0].added
    assert "A" in added and "X" not in added  # X is published after the query date
    assert all(store.get(p).date < "2020-06-30" for p in added)
    assert rec.actions[1].kind == "stop"
    assert [e.depth for e in state.traj.queue] == [1] * len(added)
    # only papers with sections get an S_q+p session (A here; B too if the search found it)
    nxt = env.next_sessions([state], 10)
    assert nxt and all(x.start_state == S_QP and x.paper.sections for x in nxt)
    on_a = [x for x in nxt if x.paper.paper_id == "A"][0]
    assert on_a.depth == 1 and on_a.parent_session_id == rec.session_id
    content = on_a.prompt[0]["content"]
    assert "Sections: [\"1 Introduction\", \"Related Work\"]" in content and QUERY.question in content


def test_expand_resolves_ids_and_titles_filters_dates_and_dedups(toy):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=1))
    [state] = env.reset([QUERY])
    env.step([env.search_session(state)], [gen("[Search] molecule property prediction graph [Stop]")])
    assert state.traj.paper_ids == ["A"]
    state.pending.popleft()  # run the expand session on A explicitly (the PPO sampler's way)
    sess = env.expand_session(state, "A", depth=1, parent_session_id=state.traj.sessions[0].session_id,
                              parent_action_index=0)
    [rec] = env.step([sess], [gen("[Expand] introduction [Expand] \"Related Work\" [Expand] Conclusion [Stop]")])
    intro, related, concl, stop = rec.actions
    assert intro.added == ["B", "C"]  # C resolved from its cited title (case and final period differ)
    assert intro.dropped_by_date == 1  # X (2021) is after the query date: expansion is date-filtered too
    assert related.added == ["D"] and related.unresolved == 1  # the cat paper is not in the store
    assert related.duplicates == 1  # B again
    assert concl.status == "unknown_section" and concl.added == []
    assert state.traj.paper_ids == ["A", "B", "C", "D"]
    assert [e.depth for e in state.traj.queue] == [1, 2, 2, 2]
    assert rec.parent_session_id == state.traj.sessions[0].session_id
    assert state.traj.sessions[0].child_session_ids == [rec.session_id]
    assert state.traj.n_moves == 3  # one search, two expands


def test_official_switch_leaves_expansion_unfiltered(toy):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(date_filter_expand=False))
    [state] = env.reset([QUERY])
    [rec] = env.step([env.expand_session(state, "A")], [gen("[Expand] 1 Introduction [Stop]")])
    assert rec.actions[0].added == ["B", "C", "X"]


def test_whole_corpus_search_finds_later_papers_but_expansion_never_does(toy):
    """crawler.env.search_date_filter=false (ours, the realistic setting): [Search] ranks the whole corpus, so X
    (2021, after the query date) is found; an [Expand] citing X still drops it (date_filter_expand), PaSa §5.1."""
    store, search = toy
    query = "graph neural networks for molecules future survey"
    for search_filter, x_found in [(True, False), (False, True)]:
        env = CrawlEnv(store, search, CrawlConfig(search_k=9, search_date_filter=search_filter))
        [state] = env.reset([QUERY])
        [rec] = env.step([env.search_session(state)], [gen(f"[Search] {query} [Stop]")])
        assert ("X" in rec.actions[0].added) is x_found
        assert state.before == "2020-06-30"  # the query keeps its date for expansion either way
        [state] = env.reset([QUERY])
        [rec] = env.step([env.expand_session(state, "A")], [gen("[Expand] 1 Introduction [Stop]")])
        assert rec.actions[0].added == ["B", "C"] and rec.actions[0].dropped_by_date == 1


def test_depth_limit_stops_the_paper_tree(toy):
    store, search = toy
    for max_depth, expected in [(2, {"A"}), (3, {"A", "B"})]:
        env = CrawlEnv(store, search, CrawlConfig(search_k=1, max_depth=max_depth))
        [state] = env.reset([QUERY])
        texts = {S_Q: "[Search] molecule property prediction graph [Stop]"}
        expanded = set()
        while True:
            sessions = env.next_sessions([state], 4)
            if not sessions:
                break
            outs = []
            for s in sessions:
                if s.start_state == S_Q:
                    outs.append(gen(texts[S_Q]))
                else:
                    expanded.add(s.paper.paper_id)
                    outs.append(gen(" ".join(f"[Expand] {h}" for h in s.paper.outline) + " [Stop]"))
            env.step(sessions, outs)
        assert expanded == expected
        assert max(e.depth for e in state.traj.queue) == max_depth
        assert env.done(state)


def test_budgets_end_a_query_early(toy):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=2, max_actions=1))
    [state] = env.reset([QUERY])
    [_], [rec] = run_session(env, [state], "[Search] graph molecules [Search] message passing [Stop]")
    assert [a.status for a in rec.actions] == ["executed", "over_budget", "executed"]
    assert env.next_sessions([state], 4) == [] and state.traj.stopped_by == "max_actions"

    env = CrawlEnv(store, search, CrawlConfig(search_k=5, max_queue=2))
    [state] = env.reset([QUERY])
    [_], [rec] = run_session(env, [state], "[Search] graph neural networks molecules [Stop]")
    assert len(state.traj.queue) == 2 and rec.actions[0].dropped_queue_full >= 1
    assert env.next_sessions([state], 4) == [] and state.traj.stopped_by == "max_queue"

    env = CrawlEnv(store, search, CrawlConfig(search_k=5, max_gen_tokens=3))
    [state] = env.reset([QUERY])
    run_session(env, [state], "[Search] graph neural networks molecules [Stop]")
    assert env.next_sessions([state], 4) == [] and state.traj.stopped_by == "max_gen_tokens"


def test_invalid_actions_are_counted_and_never_crash_a_batch(toy):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=2, max_actions_per_session=2))
    states = env.reset([QUERY, ScholarQuery("q2", "attention transformers", before=None)])
    sessions = env.next_sessions(states, 8)
    assert [s.state.query.qid for s in sessions] == ["q1", "q2"]  # both queries advance in one batch
    recs = env.step(sessions, [
        gen("I think you should search for graphs."),  # no action at all
        gen("[Expand] Introduction [Search] attention [Search] attention [Search] transformers "
            "[Search] images [Stop] trailing", finish="stop"),
    ])
    assert recs[0].actions == [] and recs[0].grammar_errors[0]["code"] == "no_action"
    statuses = [a.status for a in recs[1].actions]
    assert statuses == ["not_allowed", "executed", "duplicate_action", "executed", "session_action_limit",
                        "executed"]
    assert [e["code"] for e in recs[1].grammar_errors] == ["text_after_stop"]
    assert states[0].traj.grammar_errors == {"no_action": 1}
    assert states[1].traj.action_statuses["not_allowed"] == 1
    # a wrong number of generations is a caller bug, not LLM output: that one raises
    with pytest.raises(ValueError):
        env.step(sessions, [gen("[Stop]")])


def test_expand_disabled_is_the_table5_ablation(toy):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=5, expand=False))
    [state] = env.reset([QUERY])
    run_session(env, [state], "[Search] graph neural networks molecules [Stop]")
    assert env.next_sessions([state], 4) == [] and env.done(state)
    [rec] = env.step([env.expand_session(state, "A")], [gen("[Expand] Related Work [Stop]")])
    assert rec.actions[0].status == "expand_disabled"


def test_records_align_actions_with_token_ids(toy):
    from transformers import AutoTokenizer

    store, search = toy
    tok = AutoTokenizer.from_pretrained(str(TINY_TOKENIZER))
    env = CrawlEnv(store, search, CrawlConfig(search_k=2), tokenizer=tok)
    [state] = env.reset([QUERY])
    text = "[Search] graph neural networks é molecules [Search] message passing [Stop]"
    ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
    [rec] = env.step([env.search_session(state)], [gen(text, token_ids=ids)])
    assert rec.token_spans_ok and rec.response_token_ids == ids
    for a in rec.actions:
        assert tok.decode(ids[a.token_start:a.token_end]).strip() == text[a.char_start:a.char_end]
    assert rec.actions[-1].token_end <= len(ids)
    # the record round-trips through JSON
    from scholar_agents.pasa.trajectory import SessionRecord

    assert SessionRecord.from_dict(rec.to_dict()) == rec


def test_a_seeded_query_queues_its_paper_and_expands_it_after_the_search(toy):
    """"More like this": the seed paper is in the queue at depth 1 from the start, and after the
    S_q session (its title searched by the Crawler) it gets an S_q+p session of its own where it has sections."""
    from scholar_agents.pasa.queries import seeded_query
    from scholar_agents.validation import UsageError

    store, search = toy
    q = seeded_query(store, "A", before=QUERY.before, qid="more")
    assert q.question == store.get("A").title and q.seed_papers == ["A"]
    env = CrawlEnv(store, search, CrawlConfig(search_k=1))
    [state] = env.reset([q])
    assert [e.paper_id for e in state.traj.queue] == ["A"] and state.traj.queue[0].depth == 1
    first, second = env.next_sessions([state], 2)
    assert first.start_state == S_Q and second.start_state == S_QP and second.paper.paper_id == "A"
    env.step([first, second], [gen("[Search] graph networks for molecules [Stop]"), gen("[Expand] introduction [Stop]")])
    assert "A" in state.in_queue and {"B", "C"} <= state.in_queue  # the seed's cited papers were added
    assert [e.paper_id for e in state.traj.queue].count("A") == 1  # the search finding A again adds no duplicate
    with pytest.raises(UsageError, match="not in the paper store"):
        seeded_query(store, "no-such-paper")
