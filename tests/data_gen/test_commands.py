"""End to end: the three data_gen commands on the bundled sample, composed from their REAL root configs.

The teacher LLM is reached as PaSa reached GPT-4o: over an OpenAI-compatible HTTP API. A scripted teacher
server (the outside world, faked at the HTTP boundary) answers the three prompts (Tables 7, 15, 16) with
well-formed, repairable and unusable outputs, so that the tests can assert on real counts through our openai
backend, response cache, parsers, paper store and search. The tiny random Qwen2 runs the hf backend end to end
(its outputs are noise: every parse failure must be counted, nothing may crash).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path
from typing import ClassVar

import pytest

from scholar_agents.data_gen.autoscholarquery.command import autoscholarquery
from scholar_agents.data_gen.crawler_sessions import crawler_sessions
from scholar_agents.data_gen.selector_pairs import selector_pairs
from scholar_agents.hydra_app import compose
from scholar_agents.pasa.actions import parse_response
from scholar_agents.pasa.selectors.llm import parse_judgement
from tests.fixtures.openai_http import ScriptedCompletions, serve
from tests.paths import TEST_ASSETS

TINY_TOKENIZER = TEST_ASSETS / "tiny_tokenizer"


def _continue(prompt: str, answer: str) -> str:
    """The rest of ``answer`` after the part the prompt already holds (a response prefix written for the model)."""
    for k in range(min(len(answer), 64), 0, -1):
        if prompt.endswith(answer[:k]):
            return answer[k:]
    return answer


def teacher_answer(prompt: str) -> str:
    """What the scripted teacher writes for a rendered prompt."""
    if prompt.rstrip().endswith("Reason:"):  # a decision forced to True: only the rationale is asked for
        return " The paper matches the query."
    if "Output format: Decision: True/False" in prompt:  # Table 15
        title = re.search(r"Title: (.*)\n", prompt).group(1)
        decision = len(title) % 3 != 0  # deterministic, mixed decisions
        return f"{decision}\nReason: The paper {'addresses' if decision else 'does not address'} the query."
    if "The format of the list is" in prompt:  # Table 7
        q = re.search(r"User Query: (.*?) The semantics", prompt, re.DOTALL).group(1)
        words = re.findall(r"[A-Za-z]{4,}", q)
        if len(words) % 4 == 0:  # no list at all: counted as a teacher failure
            return "" if prompt.endswith(("[", "of ")) else "I cannot help with that."
        return _continue(prompt, json.dumps(["A survey of " + " ".join(words[:4]), " ".join(words[-3:])]))
    if "[OUTPUT]:" in prompt:  # Table 16
        section = prompt.rsplit("[End of examples]\n", 1)[1].rsplit("[OUTPUT]:", 1)[0]
        heading = section.strip().splitlines()[0]
        ids = sorted({int(x) for x in re.findall(r"\\cite\{(\d+)\}", section)})
        if len(ids) % 5 == 4:
            return _continue(prompt, '[{"question": "Which paper')  # cut inside the first item: unusable
        items = [{"question": f"Which papers study part {i // 2} of the topic '{heading}'?",
                  "answer": [f"\\cite{{{j}}}" for j in ids[i:i + 2]]} for i in range(0, len(ids), 2)]
        text = json.dumps(items).replace("\\\\cite", "\\cite")  # LaTeX escapes, as models write them
        if len(ids) % 2:
            text += "\n\nI hope these help."
        return _continue(prompt, text)
    raise AssertionError(f"unexpected prompt: {prompt[:200]!r}")


class _Teacher(ScriptedCompletions):
    model_id = "teacher"
    calls: ClassVar[Counter] = Counter()  # requests served, across the module's tests

    def do_POST(self):
        req = self.request_json()
        _Teacher.calls["completions"] += 1
        if "logprob_token_ids" in req:  # vLLM's exact next-token log-probabilities: the teacher's P("True")
            p_true = 0.7 if teacher_answer(req["prompt"]).startswith("True") else 0.2
            ids = req["logprob_token_ids"]  # [id of "True", id of "False"]
            top = {f"token_id:{ids[0]}": math.log(p_true), f"token_id:{ids[1]}": math.log(0.9 - p_true)}
            self.send_json({"choices": [{"index": 0, "text": "", "logprobs": {"top_logprobs": [top]}}]})
            return
        self.send_json({"choices": [{"index": 0, "text": teacher_answer(req["prompt"]), "finish_reason": "stop"}]})


@pytest.fixture(scope="module")
def teacher_url():
    with serve(_Teacher) as url:
        yield url






SEARCH = ["search=bm25"]  # BM25 keeps the tests off MiniLM encoding; the default (hybrid) is used in the show runs


def _teacher_llm(url, tmp_path):
    return ["llm=openai_server", f"llm.base_url={url}", f"llm.model={TINY_TOKENIZER}", "llm.max_concurrency=4",
            "llm.max_retries=0", f"llm.cache_path={tmp_path}/llm_cache.sqlite", "llm.max_model_len=4096"]


def _rows(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def test_autoscholarquery_refuses_a_wrong_typed_resolution_setting_before_any_work(tmp_path):
    from omegaconf import OmegaConf

    from scholar_agents.validation import UsageError

    cfg = compose("data_gen_autoscholarquery", [f"out_dir={tmp_path / 'asq'}"])
    cfg = OmegaConf.create(OmegaConf.to_container(cfg))  # untyped, as a config built in code is
    cfg.data_gen.resolution.min_score = "high"
    with pytest.raises(UsageError) as e:
        autoscholarquery(cfg)
    assert str(e.value) == "data_gen.resolution.min_score: Value 'high' of type 'str' could not be converted to Float"
    assert not (tmp_path / "asq").exists()  # no passage read, no shard written


def test_autoscholarquery_end_to_end_and_resume(teacher_url, corpus, tmp_path):
    out = tmp_path / "asq"
    overrides = [f"out_dir={out}", "limit=12", "data_gen.shard_size=5", *corpus, *_teacher_llm(teacher_url, tmp_path)]
    cfg = compose("data_gen_autoscholarquery", overrides)
    res = autoscholarquery(cfg)
    st = res["stats"]
    assert st["passages"]["total"] == 12 and st["shards"] == {"total": 3, "resumed": 0, "computed": 3}
    assert st["llm_prompts_this_run"] == 12
    p = st["parsing"]
    assert p["outputs"] == 12 and p["usable"] + p["unusable"] == 12
    assert p["failures"] == {"truncated_before_first_item": p["unusable"]} and p["unusable"] > 0
    assert p["repairs"]["invalid_escape"] > 0  # "\cite{1}" inside JSON strings
    assert p["repairs"].get("trailing_text", 0) > 0
    rows = {s: _rows(out / f"{s}.jsonl") for s in ("train", "dev", "test")}
    total = sum(len(r) for r in rows.values())
    assert total == st["queries"]["total"] > 0
    sources = {s: {r["source_meta"]["source_paper_id"] for r in rs} for s, rs in rows.items()}
    assert not (sources["train"] & sources["dev"]) and not (sources["train"] & sources["test"])
    assert not (sources["dev"] & sources["test"])
    seen = set()
    for split, rs in rows.items():
        for i, r in enumerate(rs):
            assert list(r)[:5] == ["qid", "question", "answer", "answer_arxiv_id", "source_meta"]
            assert r["qid"] == f"AutoScholarQuery_{split}_{i}"
            assert r["answer_arxiv_id"] and len(r["answer"]) == len(r["answer_arxiv_id"])
            assert re.fullmatch(r"\d{8}", r["source_meta"]["published_time"])
            key = r["question"].lower()
            assert key not in seen
            seen.add(key)
    assert st["dropped_questions"].get("duplicate_question", 0) > 0  # the teacher repeats question templates
    assert st["resolution_of_answer_citations"]["rate"] > 0
    assert (out / "stats.md").read_text().count("PaSa ") >= 5  # Table 11 rows next to ours
    per_source = st["per_source_paper"]  # queries per source paper add up to the totals, split by source paper
    assert sum(r["passages"] for r in per_source) == 12
    assert sum(r["queries_kept"] for r in per_source) == st["queries"]["total"]
    assert all(r["split"] is None for r in per_source if not r["queries_kept"])
    assert {r["source_id"]: r["split"] for r in per_source if r["queries_kept"]} == {
        sid: s for s, ids in sources.items() for sid in ids}
    by_format = st["queries_by_source_format"]
    assert sum(c["queries_kept"] for c in by_format.values()) == st["queries"]["total"]
    assert sum(c["source_papers"] for c in by_format.values()) == len(per_source)
    assert "## Queries per source" in (out / "stats.md").read_text()
    failures = _rows(out / "parse_failures.jsonl")
    assert len(failures) == p["unusable"] and all(f["raw_output"] for f in failures)

    # Resume: the same command again reads every shard back and makes zero LLM calls.
    calls = _Teacher.calls["completions"]
    again = autoscholarquery(compose("data_gen_autoscholarquery", overrides))["stats"]
    assert again["llm_prompts_this_run"] == 0 and again["shards"] == {"total": 3, "resumed": 3, "computed": 0}
    assert _Teacher.calls["completions"] == calls
    assert {s: _rows(out / f"{s}.jsonl") for s in rows} == rows  # deterministic

    # Other generation settings in the same out_dir are refused instead of mixed in.
    with pytest.raises(ValueError, match="different settings"):
        autoscholarquery(compose("data_gen_autoscholarquery", overrides + ["data_gen.max_new_tokens=100"]))


def test_crawler_sessions_end_to_end(teacher_url, corpus, tmp_path):
    out = tmp_path / "cs"
    overrides = [f"out_dir={out}", "limit=20", "data_gen.shard_size=8", "data_gen.teacher=llm", *corpus, *SEARCH,
                 *_teacher_llm(teacher_url, tmp_path)]
    res = crawler_sessions(compose("data_gen_crawler_sessions", overrides))
    st = res["stats"]
    c = st["counts"]
    assert st["user_queries"] == 20 and c["teacher_query_prompts"] == 20
    assert c["search_sessions"] + c.get("user_queries_without_teacher_queries", 0) == 20
    assert c.get("user_queries_without_teacher_queries", 0) > 0
    rows = _rows(out / "train.jsonl")
    kinds = Counter(r["meta"]["kind"] for r in rows)
    assert kinds["search"] == c["search_sessions"] and kinds.get("expand", 0) == c.get("expand_sessions", 0)
    assert c["search_hits"] > 0 and c["search_hits_with_sections"] <= c["search_hits"]
    for r in rows:
        user, answer = r["messages"]
        parsed = parse_response(answer["content"])
        assert parsed.ok and parsed.stopped, answer["content"]
        if r["meta"]["kind"] == "search":
            assert user["content"].startswith("Please, generate some mutually exclusive queries")
            assert all(a.kind == "search" for a in parsed.moves) and parsed.moves
        else:
            assert user["content"].startswith("You are conducting research on")
            heads = [a.argument for a in parsed.moves]
            assert heads == r["meta"]["gold_sections"] + r["meta"]["random_sections"] or \
                sorted(heads) == sorted(set(r["meta"]["gold_sections"] + r["meta"]["random_sections"]))
    calls = _Teacher.calls["completions"]
    again = crawler_sessions(compose("data_gen_crawler_sessions", overrides))["stats"]
    assert again["llm_prompts_this_run"] == 0 and _Teacher.calls["completions"] == calls
    assert _rows(out / "train.jsonl") == rows
    # Rebuilding the index gives the same hits: it is not a setting of the data, the run still resumes.
    rebuilt = crawler_sessions(compose("data_gen_crawler_sessions", [*overrides, "search.rebuild=true"]))["stats"]
    assert rebuilt["llm_prompts_this_run"] == 0 and rebuilt["shards"]["computed"] == 0
    with pytest.raises(ValueError, match="different settings"):  # a setting of the search is one
        crawler_sessions(compose("data_gen_crawler_sessions", [*overrides, "search.k=3"]))


def test_crawler_sessions_verified_teacher_end_to_end(corpus, tmp_path):
    """The CPU preset's teacher=verified: no LLM, searches checked against the gold papers; stats over the TRAIN
    sessions only (held-out user queries excluded)."""
    out = tmp_path / "cs_verified"
    overrides = [f"out_dir={out}", "limit=16", "data_gen.shard_size=8", "data_gen.eval_fraction=0.25", *corpus,
                 *SEARCH, "llm.model=/nonexistent/never/loaded"]
    cfg = compose("data_gen_crawler_sessions", overrides)
    assert cfg.data_gen.teacher == "verified"
    st = crawler_sessions(cfg)["stats"]
    assert st["teacher"] == "verified" and st["llm_prompts_this_run"] == 0
    train = [r for r in _rows(out / "train.jsonl") if r["meta"]["kind"] == "search"]
    held = [r for r in _rows(out / "eval.jsonl") if r["meta"]["kind"] == "search"]
    assert train and held
    for r in train + held:
        m = r["meta"]
        parsed = parse_response(r["messages"][1]["content"])
        assert parsed.ok and parsed.stopped
        assert [a.argument for a in parsed.moves] == [k["query"] for k in m["verified"]]
        assert 1 <= len(m["verified"]) <= 3
        if not m["fallback_raw_query"]:
            assert all(k["marginal_recall"] > 0 for k in m["verified"])
            assert m["teacher_recall"] == pytest.approx(sum(k["marginal_recall"] for k in m["verified"]))
        # the first kept query gains at least what the user query alone finds in its top k
        assert m["teacher_recall"] >= m["raw_query_recall_at_k"] - 1e-9
    v = st["verified_teacher"]
    assert v["search_sessions"] == len(train)  # train only
    assert v["mean_teacher_recall"] == pytest.approx(sum(r["meta"]["teacher_recall"] for r in train) / len(train))
    assert v["mean_teacher_recall"] >= v["mean_raw_query_recall_at_10"]
    assert "mean_raw_query_recall_at_30" in v and len(v["mean_marginal_recall_by_position"]) == 3
    assert sum(v["kept_queries_by_source"].values()) == sum(len(r["meta"]["verified"]) for r in train)


def _check_pairs(rows):
    for r in rows:
        user, answer = r["messages"]
        assert user["content"].startswith("You are an elite researcher in the field of AI, conducting research on")
        j = parse_judgement(answer["content"])
        assert answer["content"].split("\n")[0] in ("True", "False")  # decision token first
        assert j.decision == r["meta"]["label"] == (r["meta"]["kind"] == "positive")
        assert answer["content"].split("\n")[1].startswith("Reason: ") and j.rationale
        if r["meta"]["kind"] == "negative":
            assert r["meta"]["paper_id"] not in _gold_ids(r["meta"]["qid"])


def test_selector_pairs_end_to_end(teacher_url, corpus, tmp_path):
    base = ["limit=24", "data_gen.shard_size=12", "data_gen.max_negative_candidates=3", *corpus, *SEARCH,
            *_teacher_llm(teacher_url, tmp_path)]

    # The paper's procedure: the teacher writes decision + rationale; contradicting decisions are dropped.
    out = tmp_path / "sp"
    paper_rule = ["data_gen.keep_rejected_positives=false", "data_gen.keep_selected_negatives=false"]
    st = selector_pairs(compose("data_gen_selector_pairs", [f"out_dir={out}", "data_gen.decision_source=generate",
                                                            "data_gen.eval_fraction=0.25", *base, *paper_rule]))["stats"]
    c = st["counts"]
    train, held = _rows(out / "train.jsonl"), _rows(out / "eval.jsonl")
    assert not {r["meta"]["qid"] for r in train} & {r["meta"]["qid"] for r in held}
    assert len(train) + len(held) == st["pairs"] == c["positive_pairs"] + c["negative_pairs"]
    assert c["positive_pairs"] > 0 and c["negative_pairs"] > 0
    assert c["positive_rejected_teacher_false"] > 0  # contradicts the AutoScholarQuery label -> rejected
    assert c["negative_dropped_teacher_selected"] > 0  # the teacher selects it -> not a negative
    _check_pairs(train + held)

    # next_token: decisions from the teacher's P("True"), rationales generated after them; the scripted teacher's
    # probabilities agree with its written decisions, so with the paper's rule the same pairs come out.
    st2 = selector_pairs(compose("data_gen_selector_pairs", [f"out_dir={tmp_path / 'nt'}", *base, *paper_rule]))
    c2 = st2["stats"]["counts"]
    assert c2["teacher_next_token_prompts"] == c2["teacher_judgement_prompts"] == c["teacher_judgement_prompts"]
    rows2 = _rows(tmp_path / "nt" / "train.jsonl")
    _check_pairs(rows2)
    assert {(r["meta"]["qid"], r["meta"]["paper_id"]) for r in rows2} == \
        {(r["meta"]["qid"], r["meta"]["paper_id"]) for r in train + held}

    # The CPU preset (small teachers): labels from the data, the teacher's disagreements kept with a rationale
    # written for the data's label, and counted.
    c3 = selector_pairs(compose("data_gen_selector_pairs", [f"out_dir={tmp_path / 'cpu'}", *base]))["stats"]["counts"]
    assert c3["positive_pairs_forced_true"] == c["positive_rejected_teacher_false"]
    assert c3["negative_pairs_forced_false"] == c["negative_dropped_teacher_selected"]
    assert c3["positive_pairs"] == c["positive_pairs"] + c["positive_rejected_teacher_false"]
    assert c3["negative_pairs"] == c["negative_pairs"] + c["negative_dropped_teacher_selected"]
    _check_pairs(_rows(tmp_path / "cpu" / "train.jsonl"))


def test_selector_pairs_negatives_from_the_verified_teachers_searches(teacher_url, corpus, tmp_path):
    """data_gen.crawl_queries=verified: the simulated crawl runs the verified Crawler teacher's searches
    (no Table 7 prompt); its negatives are non-gold papers of the searches that found the gold ones."""
    from scholar_agents.data_gen.verified_teacher import candidate_queries, verify_queries
    from scholar_agents.papers.index import load_or_build_search
    from scholar_agents.papers.store import PaperStore

    out = tmp_path / "spv"
    cfg = compose("data_gen_selector_pairs", [f"out_dir={out}", "limit=12", "data_gen.max_negative_candidates=null",
                                              "data_gen.crawl_queries=verified", "data_gen.expand_hits=false",
                                              "data_gen.queue_prob=1.0", *corpus, *SEARCH,
                                              *_teacher_llm(teacher_url, tmp_path)])
    c = selector_pairs(cfg)["stats"]["counts"]
    assert "teacher_query_prompts" not in c and c["crawl_verified_queries"] >= 12
    rows = _rows(out / "train.jsonl")
    _check_pairs(rows)
    negatives = [r for r in rows if r["meta"]["kind"] == "negative"]
    assert negatives
    # every negative is a hit of one of its query's verified searches (queue_prob 1, no expansion)
    from scholar_agents.pasa.queries import load_pasa_queries

    queries = {q.qid: q for q in load_pasa_queries(cfg.data_gen.queries, limit=12)}
    with PaperStore(cfg.papers.store, readonly=True) as store:
        search = load_or_build_search(cfg.search, store, None, cfg.papers.index_dir)
        for r in negatives:
            q = queries[r["meta"]["qid"]]
            [v] = verify_queries(search, [q], [candidate_queries(q.question, q.gold_titles)], [q.before], 10, 3)
            hits = {h.paper_id for hs in search.search_batch(v.queries, k=10, before=q.before) for h in hs}
            assert r["meta"]["paper_id"] in hits


def _gold_ids(qid):
    from scholar_agents.hydra_app import PACKAGE_DIR

    for line in (PACKAGE_DIR / "assets" / "sample" / "autoscholarquery_dev.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["qid"] == qid:
            return set(d["answer_arxiv_id"])
    raise KeyError(qid)


def test_autoscholarquery_on_the_tiny_model_counts_noise(tiny_model_dir, corpus, tmp_path):
    """hf backend, random weights: outputs are noise; each one is counted as a parse failure, nothing crashes."""
    out = tmp_path / "tiny"
    overrides = [f"out_dir={out}", "limit=3", f"llm.model={tiny_model_dir}", "llm.dtype=float32", "llm.device=cpu",
                 "llm.max_model_len=1024", f"llm.cache_path={tmp_path}/c.sqlite", "data_gen.fewshot.num_examples=1",
                 "data_gen.max_passage_chars=300", "data_gen.max_new_tokens=16", *corpus]
    st = autoscholarquery(compose("data_gen_autoscholarquery", overrides))["stats"]
    p = st["parsing"]
    assert p["outputs"] + p["prompt_too_long"] == 3 and p["outputs"] > 0
    assert p["unusable"] + p["usable"] == p["outputs"]
    again = autoscholarquery(compose("data_gen_autoscholarquery", overrides))["stats"]
    assert again["llm_prompts_this_run"] == 0 and again["shards"]["computed"] == 0


def test_crawler_sessions_request_forms_reuse_the_verified_searches(corpus, tmp_path):
    """Each verified search session is also asked in request forms (same gold, same searches,
    same split); the topic candidate comes first; bad form names are refused before anything runs."""
    from scholar_agents.data_gen.request_forms import rewrite, topic
    from scholar_agents.validation import UsageError

    out = tmp_path / "cs_forms"
    overrides = [f"out_dir={out}", "limit=12", "data_gen.shard_size=6", "data_gen.eval_fraction=0.25", *corpus,
                 *SEARCH, "llm.model=/nonexistent/never/loaded", "data_gen.topic_candidate=true",
                 "data_gen.request_forms=[imperative,looking_for,multi_sentence]", "data_gen.request_forms_per_query=2"]
    st = crawler_sessions(compose("data_gen_crawler_sessions", overrides))["stats"]
    rows = [r for f in ("train.jsonl", "eval.jsonl") for r in _rows(out / f) if r["meta"]["kind"] == "search"]
    originals = {r["meta"]["qid"]: r for r in rows if "form" not in r["meta"]}
    copies = [r for r in rows if "form" in r["meta"]]
    assert originals and len(copies) == 2 * len(originals)  # two of the three forms per query
    for r in copies:
        m, o = r["meta"], originals[r["meta"]["qid"]]
        assert m["user_query"] == rewrite(o["meta"]["user_query"], m["form"]) != o["meta"]["user_query"]
        assert m["user_query"] in r["messages"][0]["content"]
        assert r["messages"][1]["content"] == o["messages"][1]["content"]  # the same verified searches
    # the split is by query: a query's forms are where its original is
    for name in ("train.jsonl", "eval.jsonl"):
        qids = {r["meta"]["qid"] for r in _rows(out / name)}
        assert all(c["meta"]["qid"] in qids for c in copies if c["meta"]["qid"] in
                   {r["meta"]["qid"] for r in _rows(out / name) if "form" not in r["meta"]})
    v = st["verified_teacher"]
    assert v["search_sessions"] == len([r for r in _rows(out / "train.jsonl")
                                        if r["meta"]["kind"] == "search" and "form" not in r["meta"]])
    assert "topic" in v["kept_queries_by_source"]  # the topic ties the question and comes first
    kept_topic = [k for o in originals.values() for k in o["meta"]["verified"] if k["source"] == "topic"]
    assert all(k["query"] == topic(o["meta"]["user_query"]) for o in originals.values()
               for k in o["meta"]["verified"] if k["source"] == "topic") and kept_topic
    assert sum(st["counts"][f"search_sessions_{f}"] for f in ("imperative", "looking_for", "multi_sentence")) \
        == len(copies)
    with pytest.raises(UsageError, match="unknown"):
        crawler_sessions(compose("data_gen_crawler_sessions", [*overrides, "data_gen.request_forms=[imperativ]"]))
    # `original` among the forms: each query asked once, in one drawn phrasing (the CPU recipe)
    once = tmp_path / "cs_once"
    st1 = crawler_sessions(compose("data_gen_crawler_sessions", [
        *overrides, f"out_dir={once}", "data_gen.request_forms=[original,imperative,looking_for,multi_sentence]",
        "data_gen.request_forms_per_query=1"]))["stats"]
    one = [r for f in ("train.jsonl", "eval.jsonl") for r in _rows(once / f) if r["meta"]["kind"] == "search"]
    assert sorted(r["meta"]["qid"] for r in one) == sorted(originals)  # one session per query
    drawn = Counter(r["meta"].get("form", "original") for r in one)
    assert len(drawn) >= 2 and sum(drawn.values()) == len(originals)
    assert all(st1["counts"].get(f"search_sessions_{f}", 0) == n for f, n in drawn.items())
    # the teacher's figures are per query, whichever phrasing was kept
    assert st1["verified_teacher"]["mean_teacher_recall"] == pytest.approx(v["mean_teacher_recall"])
