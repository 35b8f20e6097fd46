"""`eval pasa setting=date_filtered|whole_corpus|both`: the realistic setting searches the whole
corpus beside PaSa §5.1's date-filtered one, and every row states how many papers each query searched over."""

import json

import pytest

from scholar_agents.eval.pasa.rows import CandidateCounter, row_specs, settings_of
from scholar_agents.hydra_app import compose
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.store import PaperStore
from scholar_agents.validation import UsageError


def test_candidate_counts_follow_the_indexes_date_rules(tmp_path):
    store = PaperStore(tmp_path / "p.sqlite")
    store.add([Paper("a", "A", "", "2019-01-10"), Paper("b", "B", "", "2020"), Paper("c", "C", "", "2020-06-30"),
               Paper("d", "D", "", "2021-03-01"), Paper("u", "U", "", "")])
    count = CandidateCounter(store)
    assert count(None) == 5  # whole corpus
    # before 2020-06-30: a, b ("2020" = its first day) and the undated u; c (on the date) and d (after) are out
    assert count("2020-06-30") == 3 and count("20200630") == 3
    assert count("2019-01-10") == 1  # strictly before: only u
    assert CandidateCounter(store, keep_undated=False)("2020-06-30") == 2
    store.close()


def test_settings_expand_the_rows_once_per_setting():
    rows = [{"name": "s", "method": "search", "label": "Search"}]
    assert settings_of(None, True) == ["date_filtered"] and settings_of(None, False) == ["whole_corpus"]
    with pytest.raises(UsageError):
        settings_of("everything")
    [only] = row_specs(rows, settings_of("whole_corpus"))
    assert only.name == "s" and only.search_date_filter is False  # alone it keeps its name (outputs unchanged)
    a, b = row_specs(rows, settings_of("both"))
    assert (a.name, a.search_date_filter) == ("s", True)
    assert (b.name, b.search_date_filter, b.label) == ("s@whole_corpus", False, "Search [whole corpus]")


def test_a_rerank_budget_follows_its_agent_row_into_each_form_and_setting():
    """budget_of names the agent row of the same request form and setting: a re-rank of the multi_sentence queries
    searches as many papers as the multi_sentence crawl held, not the original one's."""
    rows = [{"name": "agent", "method": "agent"}, {"name": "rr", "method": "search_rerank", "budget_of": "agent"}]
    specs = {s.name: s for s in row_specs(rows, settings_of("both"), ["original", "multi_sentence"])}
    assert specs["rr"].budget_of == "agent"
    assert specs["rr~multi_sentence"].budget_of == "agent~multi_sentence"
    assert specs["rr@whole_corpus"].budget_of == "agent@whole_corpus"
    assert specs["rr~multi_sentence@whole_corpus"].budget_of == "agent~multi_sentence@whole_corpus"
    assert all(s.budget_of in specs for s in specs.values() if s.budget_of)


def test_eval_pasa_both_settings_side_by_side(tmp_path, tmp_path_factory):
    from scholar_agents.eval.pasa.command import pasa
    from scholar_agents.papers.store import PaperStore

    out = tmp_path / "out"
    cfg = compose("eval_pasa", [
        f"paths.cache_dir={tmp_path_factory.getbasetemp() / 'pasa_cache'}", f"paths.output_dir={out}", "search=bm25",
        "rows=[{name: search_bm25, method: search, search: bm25}, {name: teacher, method: verified_teacher}]",
        "setting=both", "queries.limit=4"])
    summary = pasa(cfg)["summary"]
    assert set(summary) == {"search_bm25", "search_bm25@whole_corpus", "teacher", "teacher@whole_corpus"}
    with PaperStore(cfg.papers.store, readonly=True) as store:
        n_papers = len(store)
    filt = [json.loads(x) for x in (out / "per_query" / "search_bm25.jsonl").read_text().splitlines()]
    whole = [json.loads(x) for x in (out / "per_query" / "search_bm25@whole_corpus.jsonl").read_text().splitlines()]
    assert [r["candidates_searched"] for r in whole] == [n_papers] * 4
    assert all(0 < r["candidates_searched"] <= n_papers for r in filt)
    assert summary["search_bm25@whole_corpus"]["candidates_searched_median"] == n_papers
    # the sample's dev queries are dated before much of the corpus: the settings search different corpora (on the
    # sample, later papers crowd the gold out of the whole-corpus top 100: 0.46 vs 0.95 recall@100 measured)
    assert any(r["candidates_searched"] < n_papers for r in filt)
    assert summary["search_bm25@whole_corpus"]["recall_at_100"] != summary["search_bm25"]["recall_at_100"]
    # the verified teacher's ceiling (an oracle: <= 3 searches of crawler.env.search_k hits — the agent's page, 20
    # in eval pasa — chosen with the gold papers) is at least what the user query's own top k finds, query by query,
    # in both settings
    k = cfg.crawler.env.search_k
    assert k == 20
    for name in ("teacher", "teacher@whole_corpus"):
        rows = [json.loads(x) for x in (out / "per_query" / f"{name}.jsonl").read_text().splitlines()]
        assert len(rows) == 4 and all(1 <= r["actions"] <= 3 and r["n_queue"] <= 3 * k for r in rows)
        assert all(r["crawler_recall"] >= r["raw_query_recall_at_k"] - 1e-9 for r in rows)
    assert [json.loads(x)["candidates_searched"] for x in
            (out / "per_query" / "teacher.jsonl").read_text().splitlines()] == [r["candidates_searched"] for r in filt]
    report = (out / "report.md").read_text()
    assert "Candidates searched (mean / median)" in report and "[whole corpus]" in report
    assert "whole_corpus = ours" in report
    # the date-filter line says how each setting's rows searched, not only what crawler.env says
    assert "<row>@whole_corpus rows: search over the whole corpus; expansion before the query date" in report


def test_report_env_line_follows_the_setting_the_rows_ran():
    """A whole-corpus-only run reports the env's search date filter as off (the rows searched the whole corpus),
    whatever crawler.env.search_date_filter says; a date-filtered run keeps it; the input is not modified."""
    from scholar_agents.eval.pasa.command import _as_run

    desc = {"crawler env": {"search_date_filter": True, "search_k": 10}, "search": "bm25",
            "date filter": "before each query's date"}
    whole = _as_run(desc, ["whole_corpus"])
    assert whole["crawler env"] == {"search_date_filter": False, "search_k": 10} and whole["search"] == "bm25"
    assert whole["date filter"].startswith("search over the whole corpus")
    assert _as_run(desc, ["date_filtered"]) == desc
    both = _as_run(desc, ["date_filtered", "whole_corpus"])
    assert both["crawler env"]["search_date_filter"] is True and "<row>@whole_corpus rows" in both["date filter"]
    assert desc["crawler env"]["search_date_filter"] is True and desc["date filter"] == "before each query's date"


def test_a_crawler_switch_added_later_with_its_default_does_not_block_a_resume(tmp_path):
    """A run dir recorded before a crawler switch existed (e.g. crawler.env.search_user_query) resumes when the
    switch keeps its default; set otherwise, it is a different row and is refused."""
    import json

    from scholar_agents.eval.pasa.command import _check_identity

    new = {"method": "agent", "crawler.env": {"search_k": 10, "search_user_query": False},
           "crawler.policy": {"max_new_tokens": 96}}
    path = tmp_path / "agent.row.json"
    path.write_text(json.dumps({"method": "agent", "crawler.env": {"search_k": 10},
                                "crawler.policy": {"max_new_tokens": 96}}))
    _check_identity(path, new, True)  # the old run had the default behaviour
    changed = {**new, "crawler.env": {"search_k": 10, "search_user_query": True}}
    with pytest.raises(ValueError, match="crawler.env differ"):
        _check_identity(path, changed, True)
    with pytest.raises(ValueError, match="crawler.env differ"):
        _check_identity(path, {**new, "crawler.env": {"search_k": 20, "search_user_query": False}}, True)
