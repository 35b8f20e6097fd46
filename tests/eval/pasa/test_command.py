"""`eval pasa` end to end on the tiny model and the bundled sample: search-only, paraphrase + search and agent rows
through one harness, per-query JSONL, the report with its setting, plots, and resuming an interrupted run."""

import json

import pytest

from scholar_agents.hydra_app import compose
from tests.fixtures.pasa_eval import tiny_eval_overrides


def test_eval_pasa_rows_report_and_resume(tmp_path, tmp_path_factory, tiny_model_dir):
    from scholar_agents.eval.pasa.command import pasa

    out = tmp_path / "out"
    rows = ('[{name: search_bm25, method: search, search: bm25}, '
            '{name: paraphrase_bm25, method: paraphrase, search: bm25}, '
            '{name: agent_no_expand, method: agent, expand: false, instructed_prompts: true, limit: 2}]')
    overrides = tiny_eval_overrides(tmp_path_factory, out, tiny_model_dir, rows, "queries.limit=3", "chunk_queries=2",
                                    "crawler.env.max_sessions=1", "crawler.policy.max_new_tokens=8")
    res = pasa(compose("eval_pasa", overrides))
    summary = res["summary"]
    assert set(summary) == {"search_bm25", "paraphrase_bm25", "agent_no_expand"}
    s = summary["search_bm25"]
    assert s["queries"] == 3 and s["crawler_recall"] is None and 0 <= s["recall_at_100"] <= 1
    assert s["recall_at_20"] <= s["recall_at_50"] <= s["recall_at_100"]
    a = summary["agent_no_expand"]
    assert a["crawler_recall"] is not None and a["sessions"] == 1.0 and a["queries"] == 2
    lines = (out / "per_query" / "search_bm25.jsonl").read_text().splitlines()
    assert len(lines) == 3 and json.loads(lines[0])["row"] == "search_bm25"
    assert "fallback" in json.loads((out / "per_query" / "paraphrase_bm25.jsonl").read_text().splitlines()[0])
    report = (out / "report.md").read_text()
    for needle in ("| Method |", "On the 2 queries every row ran", "corpus", "date filter", "citation source",
                   "percentile-bootstrap interval", "Crawler vs search-only, paired on the same queries"):
        assert needle in report
    lo, hi = s["recall_at_100_ci"]
    assert lo <= s["recall_at_100"] <= hi
    assert "gold_ranks" in json.loads(lines[0])
    comps = json.loads((out / "summary.json").read_text())["comparisons"]
    assert {(c["crawler"], c["search"]) for c in comps} == {("agent_no_expand", "search_bm25"),
                                                            ("agent_no_expand", "paraphrase_bm25")}
    assert all(c["queries"] == 2 and c["equal_budget"]["n"] == 2 for c in comps)
    assert (out / "metrics.png").stat().st_size > 1000
    assert (out / "trajectories" / "agent_no_expand.jsonl").is_file()

    # resuming: finished rows are read back, not recomputed
    before = (out / "per_query" / "agent_no_expand.jsonl").read_text()
    res2 = pasa(compose("eval_pasa", overrides + [f"resume_dir={out}"]))
    assert (out / "per_query" / "agent_no_expand.jsonl").read_text() == before
    assert res2["summary"]["search_bm25"] == summary["search_bm25"]

    # a crash mid-append leaves a cut-off last line: dropped on resume, the rest kept
    bm25 = out / "per_query" / "search_bm25.jsonl"
    bm25.write_text(bm25.read_text() + '{"row": "search_bm25", "qid": "cut-o')
    res3 = pasa(compose("eval_pasa", overrides + [f"resume_dir={out}"]))
    assert len(bm25.read_text().splitlines()) == 3 and res3["summary"]["search_bm25"] == summary["search_bm25"]
    # resuming a row under other settings would mix two configurations in one mean: refused, naming the key
    agent = out / "per_query" / "agent_no_expand.jsonl"
    with pytest.raises(ValueError, match=r"row 'agent_no_expand' was run with other settings \(crawler.env differ"):
        pasa(compose("eval_pasa", overrides + [f"resume_dir={out}", "crawler.env.search_k=5"]))
    assert agent.read_text() == before and len(bm25.read_text().splitlines()) == 3


def test_resume_drops_only_a_cut_off_last_line(tmp_path):
    """The per-query file of a killed run: its last line may be cut (dropped, the file rewritten without it); a broken
    line anywhere else, or two at the end, is an error naming the first one."""
    from scholar_agents.eval.pasa.command import _read_done

    f = tmp_path / "row.jsonl"
    good = '{"qid": "a", "recall": 1}\n\n{"qid": "b", "recall": 0}\n'
    f.write_text(good + '{"qid": "c", "rec')
    assert _read_done(f) == {"a": {"qid": "a", "recall": 1}, "b": {"qid": "b", "recall": 0}}
    assert f.read_text() == good
    assert _read_done(f) == {"a": {"qid": "a", "recall": 1}, "b": {"qid": "b", "recall": 0}} and f.read_text() == good
    f.write_text(good + '{"recall": 1}\n\n')  # a record without its qid, last: dropped the same way
    assert list(_read_done(f)) == ["a", "b"] and f.read_text() == good
    for broken, line in (('{"qid": "a"}\n{"qid": \n{"qid": "b"}\n', 2), ('{"qid": "a"}\n[1]\n{"qid": "b"}\n', 2),
                         ('{"qid": "a"}\n{"q": 1}\n{"qid": "b"}\n', 2), ('{"qid": "a"}\n{"qid"\n{"qid": "b"', 2)):
        f.write_text(broken)
        with pytest.raises(ValueError, match=rf"row\.jsonl:{line}: not a per-query result line .*fix or delete that"):
            _read_done(f)
        assert f.read_text() == broken  # left as it was
    assert _read_done(tmp_path / "none.jsonl") == {}


def test_a_wrong_bootstrap_value_is_one_line_before_any_model_loads(tmp_path, tmp_path_factory, monkeypatch):
    """eval pasa types `bootstrap` with typed() before Resources loads the store, the index and the models: the
    error names the key, and nothing is loaded or written."""
    import pytest

    from scholar_agents.eval.pasa import command as eval_pasa
    from scholar_agents.hydra_app import compose
    from scholar_agents.validation import UsageError

    def never(*a, **k):
        raise AssertionError("Resources was built before the config was checked")

    monkeypatch.setattr(eval_pasa, "Resources", never)
    out = tmp_path / "out"
    overrides = tiny_eval_overrides(tmp_path_factory, out, "unused-model", "[{name: s, method: search}]",
                                    "bootstrap.samples=many")
    with pytest.raises(UsageError, match="bootstrap.samples"):
        eval_pasa.pasa(compose("eval_pasa", overrides))
