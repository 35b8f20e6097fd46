"""Readers for PaSa's released files, on tiny fixtures in the released format (tests/assets/pasa_release/)."""

import json

import pytest

from scholar_agents.data_gen.pasa_release import (
    load_pasa_queries,
    load_sft_crawler,
    load_sft_selector,
    parse_session_response,
)
from scholar_agents.data_gen.shards import ShardedRun, held_out_keys, shards_of
from scholar_agents.pasa.actions import parse_response
from scholar_agents.pasa.prompts import selector_messages, selector_target
from scholar_agents.pasa.selectors.llm import parse_judgement
from tests.paths import TEST_ASSETS

REL = TEST_ASSETS / "pasa_release"


def test_autoscholarquery_release():
    qs = load_pasa_queries(REL / "AutoScholarQuery" / "dev.jsonl")
    assert [q.qid for q in qs] == ["AutoScholarQuery_dev_0", "AutoScholarQuery_dev_1", "AutoScholarQuery_dev_2"]
    assert qs[0].before == "2023-02-28" and qs[0].gold_ids == ["2210.05663", "2302.07241", "2211.15654"]


def test_sft_selector_release():
    exs = list(load_sft_selector(REL / "sft_selector" / "train.jsonl"))
    assert [e.decision for e in exs] == [True, False]
    assert exs[0].title == "CLIP-Fields: Weakly Supervised Semantic Fields for Robotic Memory"
    assert exs[0].user_query.startswith("Could you list the works exploit knowledge")
    assert exs[0].rationale.startswith("The paper directly studies")
    # the released prompt is byte-identical to Table 15 as we render it
    assert selector_messages(exs[0].user_query, exs[0].title, exs[0].abstract)[0] == exs[0].messages[0]
    assert len(list(load_sft_selector(REL / "sft_selector" / "train.jsonl", limit=1))) == 1


def test_sft_crawler_release_and_conversion_to_the_paper_grammar():
    search, expand, empty = load_sft_crawler(REL / "sft_crawler" / "train.jsonl")
    assert search.kind == "search" and search.stop_token == "[StopSearch]" and len(search.arguments) == 3
    assert expand.kind == "expand" and expand.arguments == ["2 Related Work", "2.1 Regularization"]
    assert expand.sections[:2] == ["1 Introduction", "2 Related Work"] and expand.user_query.startswith("Which studies")
    assert empty.arguments == [] and empty.stop_token == "[StopExpand]"
    for ex in (search, expand, empty):
        converted = ex.as_paper_format()
        parsed = parse_response(converted[-1]["content"])
        assert parsed.ok and parsed.stopped
        assert [a.argument for a in parsed.moves] == ex.arguments
        assert ex.user_query in converted[0]["content"]


def test_released_response_tokens():
    assert parse_session_response("[Search]a b\n[Search] c\n[StopSearch]") == (["search", "search"], ["a b", "c"],
                                                                              "[StopSearch]")
    assert parse_session_response("[Expand] 3 Method [Stop] junk") == (["expand"], ["3 Method"], "[Stop]")


def test_malformed_release_records_raise_with_file_and_line(tmp_path):
    f = tmp_path / "train.jsonl"
    f.write_text(json.dumps({"messages": [{"role": "user", "content": "hello"}]}) + "\n")
    with pytest.raises(ValueError, match=r"train\.jsonl:1"):
        list(load_sft_crawler(f))
    f.write_text('{"messages": [{"role": "user", "content": "Please generate ... User Query: q"}, '
                 '{"role": "assistant", "content": "[Expand]x[StopExpand]"}]}\n')
    with pytest.raises(ValueError, match=r"train\.jsonl:1: a search-session prompt"):
        list(load_sft_crawler(f))
    f.write_text("not json\n")
    with pytest.raises(ValueError, match=r"train\.jsonl:1: invalid JSON"):
        list(load_sft_selector(f))


def test_selector_target_is_decision_first_and_round_trips():
    t = selector_target(True, "  It studies\nexactly this. ")
    assert t == "True\nReason: It studies exactly this."
    j = parse_judgement(selector_target(False, "Off topic."))
    assert j.decision is False and j.rationale == "Off topic."
    with pytest.raises(ValueError):
        selector_target(True, "  ")


def test_sharded_run_resumes_and_refuses_other_settings(tmp_path):
    run = ShardedRun(tmp_path, {"model": "a"})
    assert not run.done(0, ["x", "y"])
    run.save(0, ["x", "y"], [{"v": 1}], {"n": 1})
    again = ShardedRun(tmp_path, {"model": "a"})
    assert again.done(0, ["x", "y"]) and not again.done(0, ["x", "y", "z"])  # a grown shard is recomputed
    assert again.load(0) == ([{"v": 1}], {"n": 1})
    with pytest.raises(ValueError, match="different settings.*model"):
        ShardedRun(tmp_path, {"model": "b"})
    fresh = ShardedRun(tmp_path, {"model": "b"}, overwrite=True)
    assert not fresh.done(0, ["x", "y"])
    assert [(i, list(s)) for i, s in shards_of([1, 2, 3, 4, 5], 2)] == [(0, [1, 2]), (1, [3, 4]), (2, [5])]
    assert held_out_keys(["a", "b", "c", "d"], 0.5, 0) == held_out_keys(["d", "c", "b", "a"], 0.5, 0)
    assert len(held_out_keys(["a", "b", "c", "d"], 0.5, 0)) == 2 and held_out_keys(["a"], 0.0, 0) == set()
