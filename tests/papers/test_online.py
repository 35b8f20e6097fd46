"""The optional online backend against a local fake of the Serper API on 127.0.0.1 (it stands for the outside
world; everything on our side — request, retries, mapping to stored papers, date filter — is real)."""

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from scholar_agents.papers.index import load_or_build_search
from scholar_agents.papers.online import OnlineSearchError
from scholar_agents.validation import UsageError

KEY = "test-key-5f1d0c"


class FakeSerper(BaseHTTPRequestHandler):
    requests: list = []
    fail_first: dict = {}

    def log_message(self, *args):  # keep the test output clean
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        FakeSerper.requests.append({"path": self.path, "body": body, "key": self.headers.get("X-API-KEY")})
        if self.headers.get("X-API-KEY") != KEY:
            return self._send(401, {"message": "Unauthorized."})
        if self.path == "/flaky" and not FakeSerper.fail_first.get("done"):
            FakeSerper.fail_first["done"] = True
            return self._send(503, {"message": "try later"})
        if self.path == "/limited" and not FakeSerper.fail_first.get("done"):  # Serper's rate limit, then OK
            FakeSerper.fail_first["done"] = True
            return self._send(429, {"message": "Too many requests"}, {"Retry-After": "1"})
        if self.path == "/always429":
            return self._send(429, {"message": "Too many requests"}, {"Retry-After": "0"})
        if self.path == "/garbled":
            return self._send(200, ["not", "a", "result", "object"])
        organic = [  # what Google returns for an arXiv-restricted query: abs/pdf links, other sites, noise
            {"title": "[1605.08527] Stochastic Optimization for Large-scale Optimal Transport",
             "link": "https://arxiv.org/abs/1605.08527v2", "position": 1},
            {"title": "Localized LoRA", "link": "https://arxiv.org/pdf/2506.00236", "position": 2},
            {"title": "Stochastic Optimization for Large-scale Optimal Transport",
             "link": "https://arxiv.org/abs/1605.08527", "position": 3},
            {"title": "A paper we do not have", "link": "https://arxiv.org/abs/2301.99999", "position": 4},
            {"title": "Large-Scale Optimal Transport and Mapping Estimation - arXiv",
             "link": "https://openreview.net/forum?id=B1zlp1bRW", "position": 5},
            {"title": "Optimal transport explained (blog)", "link": "https://example.com/ot", "position": 6},
        ]
        return self._send(200, {"searchParameters": body, "organic": organic[: body.get("num", 10)]})

    def _send(self, status, payload, headers=None):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def fake_serper():
    FakeSerper.requests, FakeSerper.fail_first = [], {}
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeSerper)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _cfg(url, path="/search", http=None, **online):
    return {"kind": "online", "online": {"endpoint": url + path, "http": {"backoff_s": 0.01, **(http or {})},
                                         **online}}


def test_results_map_to_stored_papers_with_pasa_operators(fake_serper, sample_store, monkeypatch, caplog):
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    with caplog.at_level(logging.DEBUG):
        search = load_or_build_search(_cfg(fake_serper), sample_store)
        hits = search.search("neural optimal transport solvers", k=5)
        filtered = search.search("neural optimal transport solvers", k=5, before="20200101")
    # arXiv abs/pdf links -> ids (version stripped, duplicates dropped); a non-arXiv result by its title;
    # an arXiv paper missing from the store and a non-paper page are dropped
    assert [h.paper_id for h in hits] == ["1605.08527", "2506.00236", "1711.02283"]
    assert [h.rank for h in hits] == [0, 1, 2] and hits[0].score > hits[1].score
    assert [h.paper_id for h in filtered] == ["1605.08527", "1711.02283"]  # the 2025 paper is after the date
    sent = [r["body"]["q"] for r in FakeSerper.requests]
    assert sent == ["neural optimal transport solvers site:arxiv.org",
                    "neural optimal transport solvers site:arxiv.org before:2020-01-01"]  # PaSa §5.1
    assert all(r["key"] == KEY for r in FakeSerper.requests)
    assert KEY not in caplog.text and KEY not in repr(search)
    batch = search.search_batch(["a", "b"], k=2, before=[None, "2020-01-01"])
    assert [[h.paper_id for h in hs] for hs in batch] == [["1605.08527", "2506.00236"], ["1605.08527", "1711.02283"]]


def test_missing_or_rejected_key_is_a_clear_error(fake_serper, sample_store, monkeypatch):
    monkeypatch.delenv("SERPER_API_KEY", raising=False)
    with pytest.raises(OnlineSearchError, match="environment variable SERPER_API_KEY"):
        load_or_build_search(_cfg(fake_serper), sample_store)
    monkeypatch.setenv("MY_SERPER", "wrong-key")
    search = load_or_build_search(_cfg(fake_serper, api_key_env="MY_SERPER"), sample_store)
    with pytest.raises(OnlineSearchError, match=r"rejected the API key from \$MY_SERPER") as err:
        search.search("anything")
    assert "wrong-key" not in str(err.value)


def test_transient_errors_are_retried_then_fail_clearly(fake_serper, sample_store, monkeypatch):
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    flaky = load_or_build_search(_cfg(fake_serper, "/flaky"), sample_store)
    assert [h.paper_id for h in flaky.search("x", k=1)] == ["1605.08527"]
    assert len(FakeSerper.requests) == 2  # 503, then 200
    # nothing listens: one line naming the backend and the way back, like the other live backends (exit 2)
    dead = load_or_build_search(_cfg("http://127.0.0.1:9", http={"max_retries": 1, "timeout_s": 2}), sample_store)
    with pytest.raises(OnlineSearchError, match=r"^search=online: cannot reach http://127\.0\.0\.1:9/search "
                                                r"\(\w+\); .* offline, use search=hybrid") as err:
        dead.search("x")
    assert isinstance(err.value, UsageError) and "\n" not in str(err.value)


def _cached(url, tmp_path, path="/search", **http):
    return _cfg(url, path, http={"cache_path": str(tmp_path / "http" / "online.sqlite"), **http})


def test_a_second_identical_search_sends_nothing_and_the_key_is_not_stored(fake_serper, sample_store, monkeypatch,
                                                                           tmp_path, caplog):
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    with caplog.at_level(logging.DEBUG):
        first = load_or_build_search(_cached(fake_serper, tmp_path), sample_store)
        hits = first.search("neural optimal transport solvers", k=5)
        n = len(FakeSerper.requests)
        again = load_or_build_search(_cached(fake_serper, tmp_path), sample_store)  # a crawl re-run: new session
        assert again.search("neural optimal transport solvers", k=5) == hits
        assert len(FakeSerper.requests) == n == 1  # zero requests reached Serper the second time
        assert again.stats == {"requests_sent": 0, "cache_hits": 1, "papers_added": 0, "skipped_requests": {}}
        again.search("neural optimal transport solvers", k=5, before="2020-01-01")  # another body: asked
    assert len(FakeSerper.requests) == 2 and first.stats["requests_sent"] == 1
    assert all(r["key"] == KEY for r in FakeSerper.requests)  # sent, but stored nowhere
    cache_bytes = b"".join(p.read_bytes() for p in (tmp_path / "http").iterdir())
    assert cache_bytes and KEY.encode() not in cache_bytes
    assert KEY not in caplog.text and KEY not in repr(again) and KEY not in repr(again.session)


def test_429_retry_after_then_200_succeeds_and_failures_are_counted_skips(fake_serper, sample_store, monkeypatch,
                                                                          tmp_path):
    monkeypatch.setenv("SERPER_API_KEY", KEY)
    limited = load_or_build_search(_cached(fake_serper, tmp_path / "a", "/limited"), sample_store)
    t = time.perf_counter()
    assert [h.paper_id for h in limited.search("x", k=1)] == ["1605.08527"]
    assert time.perf_counter() - t >= 0.95  # Retry-After: 1 was honoured
    assert [r["path"] for r in FakeSerper.requests] == ["/limited", "/limited"]
    assert limited.stats["requests_sent"] == 1 and limited.stats["skipped_requests"] == {}  # retries not counted
    # 429 forever: the retries are used up, the query gets no hits and is counted, the batch goes on
    always = load_or_build_search(_cached(fake_serper, tmp_path / "b", "/always429", max_retries=2), sample_store)
    assert always.search_batch(["x", "y"], k=1) == [[], []]
    assert always.stats["skipped_requests"] == {"http_429": 2}
    assert [r["path"] for r in FakeSerper.requests].count("/always429") == 6  # 1 + 2 retries per query
    garbled = load_or_build_search(_cached(fake_serper, tmp_path / "c", "/garbled"), sample_store)
    assert garbled.search("x") == [] and garbled.search("x") == []
    # a malformed answer is counted and evicted from the cache: the second search asked again
    assert garbled.stats["skipped_requests"] == {"malformed": 2} and garbled.stats["requests_sent"] == 2


def test_live_run_adds_missing_arxiv_results_to_a_writable_store(fake_serper, sample_store, monkeypatch, tmp_path):
    from scholar_agents.papers.live.store import open_live_store

    monkeypatch.setenv("SERPER_API_KEY", KEY)
    with pytest.raises(ValueError, match="needs a writable store"):
        load_or_build_search(_cfg(fake_serper, add_missing=True), sample_store)
    live = open_live_store(sample_store.path, tmp_path / "live.sqlite")
    search = load_or_build_search(_cfg(fake_serper, add_missing=True), live)
    hits = search.search("neural optimal transport solvers", k=5)
    # the arXiv result missing from the store is added (date of its id) instead of dropped; non-papers still are
    assert [h.paper_id for h in hits] == ["1605.08527", "2506.00236", "2301.99999", "1711.02283"]
    added = live.get("2301.99999")
    assert added.title == "A paper we do not have" and added.date == "2023-01" and added.source == "serper"
    assert "2301.99999" not in sample_store
    live.close()
