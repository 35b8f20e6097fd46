"""scripts/page_vs_search.py on small synthetic inputs: the blind pool (the union of the top 10s, shuffled, nothing
that names a system or a rank) and the relevant@10 table (per request, means, the page minus each search)."""

import json
import subprocess
import sys

import pytest

from tests.fixtures.script_loader import load_script
from tests.paths import REPO, TEST_ASSETS

SCRIPT = REPO / "scripts" / "page_vs_search.py"

pvs = load_script("page_vs_search")

# two requests; ids shared across systems so the unions are smaller than 3 x the list lengths
RANKED = {
    "a": {"request": "speculative decoding", "systems": {
        "page": ["p1", "p2", "p3"], "bm25": ["p2", "p4"], "hybrid": ["p1", "p4", "p5"]}},
    "b": {"request": "video diffusion", "systems": {
        "page": [f"v{i}" for i in range(12)],  # longer than 10: only the first 10 enter the pool
        "bm25": ["v0", "w1"], "hybrid": ["w2"]}},
}
PAPERS = {pid: {"title": f"title of {pid}", "abstract": f"abstract of {pid}"}
          for pid in ["p1", "p2", "p3", "p4", "p5", "w1", "w2", *[f"v{i}" for i in range(12)]]}


def _key(ranked=RANKED):
    return {"k": 10, "requests": [{"request_id": rid, "request": r["request"], "systems": r["systems"]}
                                  for rid, r in ranked.items()]}


def test_the_pool_is_the_union_of_the_top_10s_with_nothing_but_id_title_abstract():
    pool = pvs.blind_pool(RANKED, PAPERS, seed=3)
    by = {r["request_id"]: r for r in pool["requests"]}
    assert {p["paper_id"] for p in by["a"]["papers"]} == {"p1", "p2", "p3", "p4", "p5"}
    assert len(by["b"]["papers"]) == 12  # v0..v9, w1, w2: v10 and v11 ranked below 10
    assert "v10" not in {p["paper_id"] for p in by["b"]["papers"]}
    for r in pool["requests"]:
        assert set(r) == {"request_id", "request", "papers"}
        assert all(set(p) == {"paper_id", "title", "abstract"} for p in r["papers"])
    text = json.dumps(pool)
    for word in ("page", "bm25", "hybrid", "rank", "source", "system", "score"):
        assert word not in text


def test_the_pool_order_is_the_seed_s_not_the_systems():
    swapped = {rid: {"request": r["request"], "systems": dict(reversed(list(r["systems"].items())))}
               for rid, r in RANKED.items()}
    first = pvs.blind_pool(RANKED, PAPERS, seed=3)
    assert first == pvs.blind_pool(swapped, PAPERS, seed=3)  # which system comes first leaves no trace
    orders = {tuple(p["paper_id"] for p in pvs.blind_pool(RANKED, PAPERS, seed=s)["requests"][1]["papers"])
              for s in range(5)}
    assert len(orders) > 1  # the seed shuffles
    with pytest.raises(ValueError, match="no title and abstract"):
        pvs.blind_pool(RANKED, {k: v for k, v in PAPERS.items() if k != "p5"}, seed=3)


def test_relevant_at_10_per_request_means_and_the_page_minus_each_search():
    relevant = {"a": {"p1", "p4", "p5"}, "b": {"v0", "v1", "v2", "w1", "w2", "v10"}}
    pool = pvs.blind_pool(RANKED, PAPERS, seed=0)
    judged = {r["request_id"]: {p["paper_id"]: p["paper_id"] in relevant[r["request_id"]] for p in r["papers"]}
              for r in pool["requests"]}
    res = pvs.score(_key(), judged)
    a, b = res["requests"]
    assert a["relevant_at_k"] == {"page": 1, "bm25": 1, "hybrid": 3}
    assert a["page_minus"] == {"bm25": 0, "hybrid": -2}
    assert b["relevant_at_k"] == {"page": 3, "bm25": 2, "hybrid": 1}  # v10 is relevant but ranked 11th
    assert b["listed"] == {"page": 10, "bm25": 2, "hybrid": 1}
    assert a["pool"] == 5 and a["pool_relevant"] == 3
    assert res["total"] == {"page": 4, "bm25": 3, "hybrid": 4}
    assert res["mean"] == {"page": 2.0, "bm25": 1.5, "hybrid": 2.0}
    assert res["page_minus_total"] == {"bm25": 1, "hybrid": 0}
    assert res["page_minus_mean"] == {"bm25": 0.5, "hybrid": 0.0}
    assert res["page_lost_to"] == {"bm25": [], "hybrid": ["a"]}
    md = pvs.markdown(res)
    assert "| a: speculative decoding | 1 | 1 | 3 | +0 | -2 | 3 of 5 |" in md
    assert "| **total** | 4 | 3 | 4 | +1 | +0 | |" in md
    assert "| **mean** | 2.00 | 1.50 | 2.00 | +0.50 | +0.00 | |" in md
    assert "the page lost to hybrid: a" in md
    assert "b bm25: 2; b hybrid: 1" in md


def test_judgments_of_another_pool_are_refused():
    judged = {"a": {p: True for p in ["p1", "p2", "p3", "p4"]},  # p5 unjudged
              "b": {p: False for p in [*[f"v{i}" for i in range(10)], "w1", "w2"]}}
    with pytest.raises(ValueError, match=r"a: .*1 listed papers unjudged \['p5'\]"):
        pvs.score(_key(), judged)
    judged["a"]["p5"] = True
    judged["b"]["x9"] = True  # judged, but in no top 10
    with pytest.raises(ValueError, match=r"b: .*1 judged papers in no top 10 \['x9'\]"):
        pvs.score(_key(), judged)
    with pytest.raises(ValueError, match="a judgment is true or false"):
        pvs.read_judgments({"requests": {"a": {"judgments": {"p1": {"relevant": "yes"}}}}})


def test_score_on_the_command_line_writes_the_table(tmp_path):
    key = tmp_path / "key.json"
    key.write_text(json.dumps(_key()))
    judgments = {"how_judged": "synthetic", "requests": {
        "a": {"judgments": {p: {"relevant": p in ("p1", "p2"), "reason": "r"} for p in ["p1", "p2", "p3", "p4", "p5"]}},
        "b": {"judgments": {p: p == "w2" for p in [*[f"v{i}" for i in range(10)], "w1", "w2"]}}}}
    jf = tmp_path / "judged.json"
    jf.write_text(json.dumps(judgments))
    out = tmp_path / "out"
    run = subprocess.run([sys.executable, str(SCRIPT), "score", "--key", str(key), "--judgments", str(jf),
                          "--out", str(out)], capture_output=True, text=True, check=True)
    assert "| b: video diffusion | 0 | 0 | 1 | +0 | -1 | 1 of 12 |" in run.stdout
    assert (out / "result.md").read_text() in run.stdout
    saved = json.loads((out / "result.json").read_text())
    assert saved["how_judged"] == "synthetic" and saved["total"] == {"page": 2, "bm25": 1, "hybrid": 2}
    del judgments["requests"]["b"]
    jf.write_text(json.dumps(judgments))
    bad = subprocess.run([sys.executable, str(SCRIPT), "score", "--key", str(key), "--judgments", str(jf),
                          "--out", str(out)], capture_output=True, text=True)
    assert bad.returncode == 2 and "b: no judgments for this request" in bad.stderr


def test_a_setting_that_changes_results_is_a_difference():
    page = {"crawler": {"env": {"search_k": 20, "search_user_query": True}}, "agent": {"ranking": "selector"},
            "serve": {"port": 1}}
    plain = {"crawler": {"env": {"search_k": 10, "search_user_query": True}}, "agent": {"ranking": "selector"}}
    assert pvs.setting_differences(page, plain) == {"crawler.env.search_k": [20, 10]}  # serve.* changes no result
    assert pvs.setting_differences(page, page) == {}


@pytest.mark.parametrize("name", ["page_requests_judged.json", "page_requests_judged_by_backend.json"])
def test_the_committed_judgments_say_how_and_why(name):
    data = json.loads((TEST_ASSETS / name).read_text())
    assert "blind to source" in data["how_judged"]
    judged = pvs.read_judgments(data)
    assert set(judged) == {rid for rid, _ in pvs.REQUESTS}
    for rid, r in data["requests"].items():
        assert r["request"] == dict(pvs.REQUESTS)[rid]
        assert all(j["reason"].strip() and "\n" not in j["reason"] for j in r["judgments"].values())
        assert len(r["judgments"]) >= 10  # at least one system's full top 10
