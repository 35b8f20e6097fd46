"""`scholar papers build` / `scholar papers search` on the real configs, shrunk to BM25 for speed."""

import json
import subprocess
import sys

import pytest

from scholar_agents.hydra_app import PACKAGE_DIR, compose
from scholar_agents.papers.commands import build, search
from scholar_agents.validation import UsageError

SAMPLE = PACKAGE_DIR / "assets" / "sample"


def _overrides(tmp_path):
    return ["papers=sample", f"papers.store={tmp_path}/store.sqlite", f"papers.index_dir={tmp_path}/index",
            "search=bm25", f"paths.output_dir={tmp_path}/out"]


def test_build_then_search_then_rebuild_only_what_changed(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    report = build(compose("papers_build", _overrides(tmp_path)))
    s = report["store"]
    assert s["status"] == "built" and s["papers"] > 3000 and s["with_sections"] >= 9
    assert s["resolved_references"] > 0 and report["index"]["bm25"]["status"] == "built"
    assert json.loads((tmp_path / "out" / "build_report.json").read_text())["store"]["papers"] == s["papers"]
    again = build(compose("papers_build", _overrides(tmp_path)))
    assert again["store"]["status"] == "reused" and again["index"]["bm25"]["status"] == "loaded"

    out = search(compose("papers_search", _overrides(tmp_path) + [
        "query=Stochastic Optimization for Large-scale Optimal Transport", "k=3", "before=2020-01-01"]))
    printed = capsys.readouterr().out
    assert "1605.08527" in printed and "Stochastic Optimization for Large-scale Optimal Transport" in printed
    saved = json.loads((tmp_path / "out" / "search_results.json").read_text())
    hits = saved["results"][0]["hits"]
    assert hits[0]["paper_id"] == "1605.08527" and len(hits) == 3 and saved["results"][0]["before"] == "2020-01-01"
    assert all(h["date"] < "2020-01-01" for h in hits)

    # PaSa-format query file: each query is filtered by its own published_time
    qfile = tmp_path / "q.jsonl"
    qfile.write_text("".join((SAMPLE / "autoscholarquery_dev.jsonl").read_text().splitlines(True)[:2]))
    res = search(compose("papers_search", _overrides(tmp_path) + [f"queries_file={qfile}", "k=5"]))["results"]
    first = json.loads(qfile.read_text().splitlines()[0])
    assert res[0]["qid"] == first["qid"] and res[0]["before"] == "2021-10-31"
    assert all(h["date"] < "2021-10-31" for h in res[0]["hits"])

    # another source list (an optional, missing file does not count) -> the store is rebuilt
    changed = build(compose("papers_build", _overrides(tmp_path) + [
        "papers.sources=[{format: arxiv_jsonl, path: " + str(SAMPLE / "papers.jsonl.gz") + "},"
        "{format: unarxive, path: /nonexistent.jsonl, optional: true}]"]))
    assert changed["store"]["status"] == "built" and changed["store"]["with_sections"] == 0
    assert changed["index"]["bm25"]["status"] == "built"


def test_bad_input_fails_clearly(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        build(compose("papers_build", _overrides(tmp_path) + ["papers.sources=[{format: arxiv_jsonl, path: /nope.gz}]"]))
    with pytest.raises(UsageError, match="unknown format"):
        build(compose("papers_build", _overrides(tmp_path) + ["papers.sources=[{format: bibtex, path: /nope}]"]))
    with pytest.raises(UsageError, match="query="):
        search(compose("papers_search", _overrides(tmp_path)))
    with pytest.raises(UsageError, match="scholar papers build"):
        search(compose("papers_search", _overrides(tmp_path) + ["query=x"]))


def test_module_entry_point_help():
    out = subprocess.run([sys.executable, "-m", "scholar_agents.papers", "build", "--help"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "task_name: papers_build" in out.stdout and "papers: base_papers, pasa_db, sample, shared_corpus" in out.stdout
