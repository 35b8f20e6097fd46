"""The live search and [Expand] backends (arXiv API, Semantic Scholar, arXiv HTML) against a replaying server on
127.0.0.1 that answers in each API's documented format (tests/assets/online/README.md): paging, PaSa's date filter,
papers added to the store, the response cache (a re-run sends nothing), 429 + Retry-After, timeouts, malformed and
empty answers, and the one-line error when the service is unreachable. Nothing here talks to the real services."""

import time

import pytest

from scholar_agents.papers.index import SearchConfig, load_or_build_search
from scholar_agents.papers.live.arxiv_api import ArxivApiConfig, ArxivApiSearch, content_terms, search_query
from scholar_agents.papers.live.http import HttpConfig, LiveServiceUnreachable
from scholar_agents.papers.live.semantic_scholar import SemanticScholarConfig, SemanticScholarSearch
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.store import PaperStore
from scholar_agents.validation import UsageError
from tests.fixtures.live_http import Reply, asset, free_port, serve_replay

ATOM = "application/atom+xml"


@pytest.fixture
def store(tmp_path):
    s = PaperStore(tmp_path / "live.sqlite")
    s.add([Paper("1810.04805", "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding",
                 "We introduce BERT.", "2018-10-11", source="arxiv"),
           Paper("1802.05365", "Deep contextualized word representations", "ELMo.", "2018-02-15", source="arxiv")])
    yield s
    s.close()


def http(tmp_path, **kw):
    return HttpConfig(cache_path=str(tmp_path / "http" / "cache.sqlite"), timeout_s=5, backoff_s=0.01, **kw)


def arxiv_pages(params):
    """The arXiv API: page 1 (2 of 3 results) at start=0, page 2 at start=2."""
    return Reply(body=asset("arxiv_page1.xml" if params["start"] == "0" else "arxiv_page2.xml"), content_type=ATOM)


def make_arxiv(url, tmp_path, store, **http_kw):
    return ArxivApiSearch(ArxivApiConfig(endpoint=url + "/api/query", page_size=2, min_interval_s=0.0,
                                         http=http(tmp_path, **http_kw)), store)


def test_arxiv_api_pages_filters_by_date_and_stores_the_papers(tmp_path, store):
    with serve_replay({"/api/query": arxiv_pages}) as (url, server):
        search = make_arxiv(url, tmp_path, store)
        hits = search.search("low rank adaptation", k=3, before="2021-09-30")
    # page 1 then page 2 (start=2); 2110.04366 (2021-10-08) is after the query date: dropped locally too
    assert [h.paper_id for h in hits] == ["2106.09685", "1706.03762"]
    assert [r.params["start"] for r in server.log] == ["0", "2"]
    assert [r.params["max_results"] for r in server.log] == ["2", "1"]
    q = server.log[0].params["search_query"]
    # match=any_terms (the default): the content words OR-ed, ranked by arXiv's relevance sort
    assert q == "(all:low OR all:rank OR all:adaptation) AND submittedDate:[190001010000 TO 202109292359]"
    assert server.log[0].params["sortBy"] == "relevance"
    lora = store.get("2106.09685")  # PaSa §5.1 date filter through the API's submittedDate, and one store
    assert lora.title == "LoRA: Low-Rank Adaptation of Large Language Models" and lora.date == "2021-06-17"
    assert lora.source == "arxiv_api" and lora.authors == ["Edward J. Hu", "Yelong Shen"]
    assert lora.categories == ["cs.CL", "cs.AI", "cs.LG"] and lora.abstract.startswith("An important paradigm")
    assert "2110.04366" not in store
    assert search.stats == {"requests_sent": 2, "cache_hits": 0, "papers_added": 2, "skipped_requests": {}}


def test_query_syntax_is_neutralised():
    # punctuation and the query syntax split words; AND/OR/NOT and one-character words are dropped
    assert search_query('graph "neural" (nets): AND ti:x*', None, "all_terms") == \
        "all:graph AND all:neural AND all:nets AND all:ti"
    with pytest.raises(ValueError, match="empty arXiv query"):
        search_query("():", None)


def test_natural_language_queries_keep_their_content_words():
    q = "Graph neural networks for molecular property prediction?"
    assert search_query(q, None) == \
        "all:graph OR all:neural OR all:networks OR all:molecular OR all:property OR all:prediction"
    assert search_query(q, "2021-01-01", "all_terms") == ("(all:graph AND all:neural AND all:networks AND "
                                                          "all:molecular AND all:property AND all:prediction) "
                                                          "AND submittedDate:[190001010000 TO 202012312359]")
    # scikit-learn's stop-words drop question words; Lucene's short list keeps "which"; hyphens split, words once
    q = "Which papers adapt low-rank updates to the low-resource setting?"
    assert content_terms(q) == ["papers", "adapt", "low", "rank", "updates", "resource", "setting"]
    assert content_terms(q, "lucene")[:2] == ["which", "papers"] and content_terms(q, "none")[-2:] == ["resource",
                                                                                                        "setting"]
    with pytest.raises(ValueError, match="empty arXiv query"):
        content_terms("Which of these are they?")


def _empty_for_and(params):
    """An arXiv that finds nothing for the AND query and page 1 for anything else."""
    empty = " AND all:" in params["search_query"]
    return Reply(body=asset("arxiv_empty.xml" if empty else "arxiv_page1.xml"), content_type=ATOM)


def test_match_switch_sends_or_and_and_falls_back(tmp_path, store):
    with serve_replay({"/api/query": _empty_for_and}) as (url, server):
        def make(match, sub):
            return ArxivApiSearch(ArxivApiConfig(endpoint=url + "/api/query", page_size=2, min_interval_s=0.0,
                                                 match=match, http=http(tmp_path / sub)), store)

        strict = make("all_terms", "a")
        assert strict.search("low rank adaptation of language models", k=2) == []
        assert [r.params["search_query"] for r in server.log] == \
            ["all:low AND all:rank AND all:adaptation AND all:language AND all:models"]
        server.log.clear()
        fallback = make("all_then_any", "b")
        hits = fallback.search("low rank adaptation of language models", k=2, before="2022-01-01")
        # AND found nothing: the same terms OR-ed (one more request), its papers are the hits
        assert [h.paper_id for h in hits] == ["2106.09685", "1706.03762"]
        date = " AND submittedDate:[190001010000 TO 202112312359]"
        assert [r.params["search_query"] for r in server.log] == [
            "(all:low AND all:rank AND all:adaptation AND all:language AND all:models)" + date,
            "(all:low OR all:rank OR all:adaptation OR all:language OR all:models)" + date]
        assert fallback.stats["any_terms_fallbacks"] == 1 and fallback.stats["skipped_requests"] == {}
        server.log.clear()
        # one term: AND found it (no fallback, one request); only stop-words: no request, counted
        assert [h.paper_id for h in fallback.search("LoRA", k=2)] == ["2106.09685", "1706.03762"]
        assert fallback.search("Which of these are they?") == []
        assert [r.params["search_query"] for r in server.log] == ["all:lora"]
        assert fallback.stats["any_terms_fallbacks"] == 1 and fallback.stats["skipped_requests"] == {"empty_query": 1}
    with pytest.raises(UsageError, match=r"search.arxiv_api.match must be one of .*'any_terms'"):
        make("relevance", "c")
    with pytest.raises(UsageError, match=r"search.arxiv_api.stop_words must be one of"):
        ArxivApiSearch(ArxivApiConfig(stop_words="nltk", http=http(tmp_path / "d")), store)


def test_a_query_with_nothing_searchable_sends_nothing(tmp_path, store):
    with serve_replay({"/api/query": arxiv_pages}) as (url, server):
        search = make_arxiv(url, tmp_path, store)
        assert search.search("():") == [] and server.log == []
    assert search.stats["skipped_requests"] == {"empty_query": 1}


def test_a_second_identical_search_sends_no_request(tmp_path, store):
    with serve_replay({"/api/query": arxiv_pages}) as (url, server):
        first = make_arxiv(url, tmp_path, store).search("low rank adaptation", k=3)
        n = len(server.log)
        again = make_arxiv(url, tmp_path, store)  # a new session on the same cache file (a crawl re-run)
        second = again.search("low rank adaptation", k=3)
    assert n == 2 and len(server.log) == n  # zero requests reached the service the second time
    assert second == first and again.stats["cache_hits"] == 2 and again.stats["requests_sent"] == 0


def test_429_retry_after_is_honoured_and_bounded(tmp_path, store):
    page = Reply(body=asset("arxiv_page1.xml"), content_type=ATOM)
    routes = {"/a/api/query": lambda p: [Reply(429, b"Rate exceeded.", "text/plain", {"Retry-After": "1"}), page],
              "/b/api/query": lambda p: [Reply(429, b"Rate exceeded.", "text/plain", {"Retry-After": "3600"}), page],
              "/c/api/query": lambda p: Reply(429, b"Rate exceeded.", "text/plain", {"Retry-After": "0"})}
    with serve_replay(routes) as (url, server):
        t = time.perf_counter()
        a = make_arxiv(url + "/a", tmp_path / "a", store).search("lora", k=2)
        waited_a = time.perf_counter() - t
        t = time.perf_counter()
        b = make_arxiv(url + "/b", tmp_path / "b", store, max_retry_after_s=0.2).search("lora", k=2)
        waited_b = time.perf_counter() - t
        c_search = make_arxiv(url + "/c", tmp_path / "c", store, max_retries=2)
        c = c_search.search("lora", k=2)
    assert [h.paper_id for h in a] == [h.paper_id for h in b] == ["2106.09685", "1706.03762"]
    assert waited_a >= 0.95  # Retry-After: 1 was honoured
    assert waited_b < 3  # Retry-After: 3600 was cut to max_retry_after_s
    assert server.paths().count("/a/api/query") == 2 and server.paths().count("/b/api/query") == 2
    # always 429: the retries are used up, the query gets no hits and is counted, nothing raises
    assert c == [] and c_search.stats["skipped_requests"] == {"http_429": 1}
    assert server.paths().count("/c/api/query") == 3


def test_malformed_empty_and_error_feeds(tmp_path, store):
    routes = {"/bad/api/query": lambda p: Reply(body=asset("arxiv_malformed.xml"), content_type=ATOM),
              "/empty/api/query": lambda p: Reply(body=asset("arxiv_empty.xml"), content_type=ATOM),
              "/err200/api/query": lambda p: Reply(body=asset("arxiv_error.xml"), content_type=ATOM),
              "/err400/api/query": lambda p: Reply(400, asset("arxiv_error.xml"), ATOM),
              "/half/api/query": lambda p: Reply(body=asset("arxiv_page1.xml" if p["start"] == "0"
                                                            else "arxiv_malformed.xml"), content_type=ATOM)}
    with serve_replay(routes) as (url, server):
        bad = make_arxiv(url + "/bad", tmp_path / "bad", store)
        assert bad.search("lora") == [] and bad.search("lora") == []
        # a malformed body is not cached: the second search asked again
        assert server.paths().count("/bad/api/query") == 2 and bad.stats["skipped_requests"] == {"malformed": 2}
        empty = make_arxiv(url + "/empty", tmp_path / "empty", store)
        assert empty.search("zzqx") == [] and empty.stats["skipped_requests"] == {}  # empty is an answer
        err = make_arxiv(url + "/err200", tmp_path / "e1", store)
        assert err.search("lora") == [] and err.stats["skipped_requests"] == {"malformed": 1}
        err = make_arxiv(url + "/err400", tmp_path / "e2", store)
        assert err.search("lora") == [] and err.stats["skipped_requests"] == {"http_400": 1}
        half = make_arxiv(url + "/half", tmp_path / "half", store)
        hits = half.search("lora", k=3)
    # page 2 was malformed: page 1's papers are kept and the failure is counted
    assert [h.paper_id for h in hits] == ["2106.09685", "1706.03762"]
    assert half.stats["skipped_requests"] == {"malformed": 1}


def test_a_timeout_is_a_counted_skip(tmp_path, store):
    with serve_replay({"/api/query": lambda p: Reply(body=asset("arxiv_page1.xml"), delay_s=1.0)}) as (url, server):
        search = ArxivApiSearch(ArxivApiConfig(endpoint=url + "/api/query", min_interval_s=0.0,
                                               http=HttpConfig(timeout_s=0.2, max_retries=1, backoff_s=0.01)), store)
        t = time.perf_counter()
        assert search.search("lora") == []
        assert time.perf_counter() - t < 3
    assert search.stats["skipped_requests"] == {"timeout": 1} and len(server.log) == 2  # one retry on read timeout


def test_unreachable_service_is_one_clear_usage_error(tmp_path, store):
    dead = f"http://127.0.0.1:{free_port()}"
    search = make_arxiv(dead, tmp_path, store)
    with pytest.raises(LiveServiceUnreachable) as err:
        search.search("lora")
    msg = str(err.value)
    assert isinstance(err.value, UsageError) and "\n" not in msg
    assert msg.startswith(f"search=arxiv_api: cannot reach {dead}/api/query") and "use search=hybrid" in msg
    s2 = SemanticScholarSearch(SemanticScholarConfig(endpoint=dead, min_interval_s=0, http=http(tmp_path)), store)
    with pytest.raises(LiveServiceUnreachable, match=r"^search=semantic_scholar: cannot reach .* use search=hybrid"):
        s2.search("lora")


def test_live_search_needs_a_writable_store(tmp_path, store):
    ro = PaperStore(store.path, readonly=True)
    with pytest.raises(ValueError, match="needs a writable store"):
        load_or_build_search(SearchConfig(kind="arxiv_api"), ro)
    ro.close()


# ---- Semantic Scholar ----

def s2_routes():
    return {"/graph/v1/paper/search": lambda p: Reply(body=asset("s2_search_page1.json" if p["offset"] == "0"
                                                                 else "s2_search_page2.json")),
            "/graph/v1/paper/ARXIV:2106.09685/references": lambda p: Reply(body=asset("s2_references.json"))}


def make_s2(url, tmp_path, store):
    return SemanticScholarSearch(SemanticScholarConfig(endpoint=url + "/graph/v1", page_size=2, min_interval_s=0,
                                                       http=http(tmp_path)), store)


def test_semantic_scholar_search_pages_ids_date_and_key(tmp_path, store, monkeypatch, caplog):
    key = "s2-test-key-93e1"
    monkeypatch.setenv("SEMANTIC_SCHOLAR_API_KEY", key)
    with serve_replay(s2_routes()) as (url, server):
        search = make_s2(url, tmp_path, store)
        hits = search.search("parameter efficient fine-tuning", k=3, before="2021-09-30")
        again = make_s2(url, tmp_path, store).search("parameter efficient fine-tuning", k=3, before="2021-09-30")
    # arXiv id where S2 knows one, else s2:<paperId>; the 2021-10 paper is after the date (re-applied locally)
    assert [h.paper_id for h in hits] == ["2106.09685", "s2:8323c591e119eb09b28b29fd6c7bc76bd889df7a"]
    assert again == hits and len(server.log) == 2  # offset 0 then `next` = 2; the re-run came from the cache
    assert [r.params["offset"] for r in server.log] == ["0", "2"]
    assert server.log[0].params["publicationDateOrYear"] == ":2021-09-29"
    assert server.log[0].params["fields"] == "title,abstract,externalIds,publicationDate,year,authors"
    assert all(r.headers.get("x-api-key") == key for r in server.log)
    prefix = store.get("s2:8323c591e119eb09b28b29fd6c7bc76bd889df7a")
    assert prefix.date == "2021" and prefix.source == "semantic_scholar" and prefix.abstract == ""
    cache_bytes = b"".join(p.read_bytes() for p in (tmp_path / "http").iterdir())
    assert key.encode() not in cache_bytes and key not in caplog.text and key not in repr(search)


def test_semantic_scholar_rejected_key_names_the_variable(tmp_path, store, monkeypatch):
    monkeypatch.setenv("SEMANTIC_SCHOLAR_API_KEY", "wrong")
    forbidden = {"/graph/v1/paper/search": lambda p: Reply(403, b'{"message": "Forbidden"}')}
    with serve_replay(forbidden) as (url, _), \
            pytest.raises(LiveServiceUnreachable, match=r"rejected the API key from \$SEMANTIC_SCHOLAR_API_KEY") as e:
        make_s2(url, tmp_path, store).search("x")
    assert "wrong" not in str(e.value)


def test_semantic_scholar_malformed_json_is_counted(tmp_path, store):
    with serve_replay({"/graph/v1/paper/search": lambda p: Reply(body=b'{"total": 3, "data": [')}) as (url, _):
        search = make_s2(url, tmp_path, store)
        assert search.search("x") == [] and search.stats["skipped_requests"] == {"malformed": 1}
