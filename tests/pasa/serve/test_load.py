"""Load on a real `scholar pasa serve` on 127.0.0.1 (tiny model, queue bound 3): concurrent searches and malformed
requests at once, bounded in count and time. None is lost (every accepted search streams to its end, every refused
one got a one-line 429), none crashes the server, the bound holds."""

import concurrent.futures as cf
import json
import time

import httpx

N_SEARCHES = 10
MALFORMED = [
    ("POST", "/api/search", {"content": b"{not json"}, 400),
    ("POST", "/api/search", {"json": {"query": "q" * 200_000}}, 400),
    ("POST", "/api/search", {"json": {"query": "gnn", "before": "2023-13-45"}}, 400),
    ("POST", "/api/search", {"json": {"query": "gnn", "search.kind": "dense"}}, 400),
    ("POST", "/api/search", {"json": None}, 400),
    ("GET", "/api/run", {"params": {"path": "../../../etc"}}, 400),
    ("GET", "/api/run", {"params": {"path": "/etc"}}, 400),
    ("GET", "/api/run/tree", {"params": {"path": "eval_pasa/tiny", "row": "../../x", "qid": "1"}}, 400),
    ("GET", "/api/search/s9999/events", {}, 400),
    ("POST", "/api/search/s9999/cancel", {}, 400),
    ("GET", "/api/search", {}, 405),
]


def _events(client: httpx.Client, url: str, job: str) -> list[dict]:
    out = []
    with client.stream("GET", f"{url}/api/search/{job}/events", timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


def test_concurrent_searches_and_malformed_requests(tiny_server):
    url = tiny_server
    t0 = time.time()
    with httpx.Client(timeout=60) as client, cf.ThreadPoolExecutor(16) as pool:
        searches = [pool.submit(client.post, f"{url}/api/search", json={"query": f"graph neural networks {i}"})
                    for i in range(N_SEARCHES)]
        bad = [(pool.submit(client.request, m, url + path, **kw), want) for m, path, kw, want in MALFORMED * 3]
        answers = [f.result() for f in searches]
        for f, want in bad:
            r = f.result()
            assert r.status_code == want, (r.request.url, r.status_code, r.text[:200])
            assert "error" in r.json() or "detail" in r.json()
        accepted = [r.json()["id"] for r in answers if r.status_code == 200]
        refused = [r for r in answers if r.status_code == 429]
        assert len(accepted) + len(refused) == N_SEARCHES, [r.status_code for r in answers]
        assert accepted and refused, "10 searches at once against a bound of 3 waiting: some must be refused"
        assert all("queue is full" in r.json()["error"] for r in refused)
        finals = list(pool.map(lambda j: _events(client, url, j), accepted))
        for events in finals:  # none lost: each stream complete, in order, ending with the result
            assert [e["i"] for e in events] == list(range(len(events)))
            assert [e["kind"] for e in events][-2:] == ["result", "done"], [e["kind"] for e in events]
        status = client.get(f"{url}/api/status").json()
        assert status["worker_alive"] and status["running"] is None and status["waiting"] == 0
        assert status["max_waiting_seen"] <= 3  # serve.max_queue
        # still serving after the load: a new search goes through
        job = client.post(f"{url}/api/search", json={"query": "after the load"}).json()["id"]
        assert _events(client, url, job)[-1]["kind"] == "done"
    assert time.time() - t0 < 180
