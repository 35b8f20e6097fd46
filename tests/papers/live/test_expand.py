"""[Expand] on the live literature: sections and cited papers from arXiv's LaTeXML HTML and from Semantic Scholar's
references, stored on demand for the crawl environment, with PaSa's date filter on the expanded papers; a second
identical crawl sends no request; the live store is a copy that leaves the corpus store closed. The services are a
replaying server on 127.0.0.1 (tests/assets/online/README.md)."""


import pytest

from scholar_agents.hydra_app import compose
from scholar_agents.llm import Completion, Generation
from scholar_agents.papers.live.ar5iv import parse_html
from scholar_agents.papers.live.arxiv_api import ArxivApiConfig, ArxivApiSearch
from scholar_agents.papers.live.fulltext import ExpandConfig, build_fulltext
from scholar_agents.papers.live.http import HttpConfig, LiveServiceUnreachable
from scholar_agents.papers.live.store import open_live_store
from scholar_agents.papers.paper import Paper
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.crawl_env import CrawlConfig, CrawlEnv
from scholar_agents.pasa.queries import ScholarQuery
from scholar_agents.validation import UsageError
from tests.fixtures.live_http import Reply, asset, free_port, serve_replay

LORA = "2106.09685"
QUERY = ScholarQuery("q1", "low rank adaptation of language models", before="2021-09-30")
SEEDS = [Paper("1810.04805", "BERT: Pre-training of Deep Bidirectional Transformers for Language Understanding",
               "We introduce BERT.", "2018-10-11", source="arxiv"),
         Paper("1802.05365", "Deep contextualized word representations", "ELMo.", "2018-02-15", source="arxiv")]


def new_store(path):
    s = PaperStore(path)
    s.add(SEEDS)
    return s


def gen(text):
    return Generation(prompt_text="p", prompt_token_ids=[1], completions=[Completion(text, [7, 7], None, "stop")])


def routes():
    return {"/api/query": lambda p: Reply(body=asset("arxiv_page1.xml" if p["start"] == "0" else "arxiv_page2.xml"),
                                          content_type="application/atom+xml"),
            f"/html/{LORA}": lambda p: Reply(body=asset(f"ar5iv_{LORA}.html"), content_type="text/html"),
            f"/graph/v1/paper/ARXIV:{LORA}/references": lambda p: Reply(body=asset("s2_references.json"))}


def http(tmp_path):
    return HttpConfig(cache_path=str(tmp_path / "http.sqlite"), timeout_s=5, backoff_s=0.01)


def test_latexml_html_gives_top_level_sections_and_their_cited_entries():
    doc = parse_html(asset(f"ar5iv_{LORA}.html"))
    assert doc.title == "LoRA: Low-Rank Adaptation of Large Language Models"
    assert doc.abstract.startswith("An important paradigm")  # the "Abstract" heading is not part of it
    assert [h for h, _ in doc.sections] == ["Introduction", "Problem Statement", "Our Method"]
    intro = doc.sections[0][1]  # in order of first citation; the subsection's citations count for section 1
    assert [(e.key, e.arxiv_id) for e in intro] == [("bib.bib3", "1706.03762"), ("bib.bib1", None),
                                                     ("bib.bib2", "2110.04366"), ("bib.bib4", None)]
    assert intro[1].title == "BERT: Pre-training of deep bidirectional transformers for language understanding"
    assert intro[3].title == "A workshop note on quaternion tokenizers that nobody indexed"
    assert [e.key for e in doc.sections[1][1]] == ["bib.bib1"] and doc.sections[2][1] == []
    with pytest.raises(ValueError, match="no LaTeXML document"):
        parse_html(b"<html><body><h1>Redirecting to the abstract page</h1></body></html>")


def crawl(url, tmp_path, store):
    """One [Search] (arXiv API) then the first S_q+p session's [Expand] Introduction (its text from the HTML)."""
    search = ArxivApiSearch(ArxivApiConfig(endpoint=url + "/api/query", page_size=2, min_interval_s=0,
                                           http=http(tmp_path)), store)
    fulltext = build_fulltext({"kind": "ar5iv", "ar5iv": {"endpoints": [url + "/html/{id}"], "min_interval_s": 0,
                                                          "http": http(tmp_path)}}, store)
    env = CrawlEnv(store, search, CrawlConfig(search_k=3), fulltext=fulltext)
    [state] = env.reset([QUERY])
    [s] = env.next_sessions([state], 1)
    [rec] = env.step([s], [gen("[Search] low rank adaptation [Stop]")])
    sessions = env.next_sessions([state], 10)
    [exp] = env.step(sessions, [gen("[Expand] Introduction [Stop]")])
    return rec, sessions, exp, fulltext


def test_search_then_expand_from_the_html_with_the_date_filter(tmp_path):
    store = new_store(tmp_path / "s1.sqlite")
    with serve_replay(routes()) as (url, server):
        rec, sessions, exp, fulltext = crawl(url, tmp_path, store)
        n_requests = len(server.log)
        # a second identical crawl on a fresh store: every answer comes from the cache (404 included)
        rec2, _, exp2, fulltext2 = crawl(url, tmp_path, new_store(tmp_path / "s2.sqlite"))
    assert rec.actions[0].added == [LORA, "1706.03762"]  # 2110.04366 (2021-10) is after the query date
    # only LoRA has HTML; 1706.03762's page is a 404: no sections, no session, counted
    assert [x.paper.paper_id for x in sessions] == [LORA]
    assert sessions[0].paper.outline == ["Introduction", "Problem Statement", "Our Method"]
    assert fulltext.stats["skipped_papers"] == {"http_404": 1} and fulltext.stats["papers_fetched"] == 1
    ar = exp.actions[0]
    assert ar.status == "executed" and ar.candidates == 4
    # Transformer: already queued; BERT: matched by title in the store; 2110.04366: cited by arXiv id, dated by
    # its id (2021-10), dropped by PaSa's date filter on expansion (§5.1); the workshop note: unresolved
    assert ar.added == ["1810.04805"] and ar.duplicates == 1 and ar.dropped_by_date == 1 and ar.unresolved == 1
    cited = store.get("2110.04366")
    assert cited.date == "2021-10" and cited.source == "ar5iv_ref" and cited.title.startswith("Towards a unified")
    lora = store.get(LORA)
    assert lora.source == "arxiv_api,ar5iv" and [r.paper_id for r in lora.sections[1].references] == ["1810.04805"]
    assert n_requests == 4 and len(server.log) == n_requests  # 2 API pages + 2 HTML pages, then nothing
    assert fulltext2.stats["cache_hits"] == 2 and fulltext2.stats["requests_sent"] == 0
    assert exp2.actions[0].added == ar.added and rec2.actions[0].added == rec.actions[0].added


def test_semantic_scholar_references_as_intent_sections(tmp_path):
    store = new_store(tmp_path / "s.sqlite")
    store.add([Paper(LORA, "LoRA: Low-Rank Adaptation of Large Language Models", "LoRA.", "2021-06-17")])
    with serve_replay(routes()) as (url, server):
        fulltext = build_fulltext({"kind": "semantic_scholar", "semantic_scholar": {
            "endpoint": url + "/graph/v1", "min_interval_s": 0, "http": http(tmp_path)}}, store)
        env = CrawlEnv(store, None, CrawlConfig(), fulltext=fulltext)
        [state] = env.reset([QUERY])
        fulltext.ensure([LORA])
        fulltext.ensure([LORA])  # tried once per run
        [rec] = env.step([env.expand_session(state, LORA)], [gen("[Expand] References [Stop]")])
    assert len(server.log) == 1 and server.log[0].params["fields"].startswith("contexts,intents")
    lora = store.get(LORA)
    assert lora.outline == ["Background", "Methodology", "Result", "References"]
    assert [r.paper_id for r in lora.sections[1].references] == ["s2:8323c591e119eb09b28b29fd6c7bc76bd889df7a"]
    ar = rec.actions[0]
    # ELMo had no S2 id: matched by title in the store; the 2021-10 paper is after the query date
    assert ar.added == ["1706.03762", "s2:8323c591e119eb09b28b29fd6c7bc76bd889df7a", "1802.05365"]
    assert ar.dropped_by_date == 1 and ar.unresolved == 0
    assert store.get("s2:8323c591e119eb09b28b29fd6c7bc76bd889df7a").date == "2021-01-01"


def test_expand_offline_is_one_clear_error_and_store_fetches_nothing(tmp_path):
    store = new_store(tmp_path / "s.sqlite")
    store.add([Paper(LORA, "LoRA", "LoRA.", "2021-06-17")])
    ft = build_fulltext({"kind": "ar5iv", "ar5iv": {"endpoints": [f"http://127.0.0.1:{free_port()}/html/{{id}}"],
                                                    "http": http(tmp_path)}}, store)
    with pytest.raises(LiveServiceUnreachable, match=r"^expand=ar5iv: cannot reach .* offline, use expand=store"):
        ft.ensure([LORA])
    assert build_fulltext({"kind": "store"}, store) is None
    with pytest.raises(UsageError, match="expand.kind must be one of store, ar5iv, semantic_scholar"):
        ExpandConfig(kind="google")


def test_the_live_store_is_a_copy_and_the_corpus_store_stays_closed(tmp_path):
    corpus = new_store(tmp_path / "corpus.sqlite")
    corpus.set_meta("sources", "v1")
    corpus.close()
    live = open_live_store(tmp_path / "corpus.sqlite", tmp_path / "live.sqlite")
    live.add([Paper(LORA, "LoRA", source="arxiv_api")])
    live.close()
    with PaperStore(tmp_path / "corpus.sqlite", readonly=True) as c:
        assert LORA not in c and len(c) == 2
    live = open_live_store(tmp_path / "corpus.sqlite", tmp_path / "live.sqlite")
    assert LORA in live and len(live) == 3  # kept across runs
    live.close()
    with PaperStore(tmp_path / "corpus.sqlite") as c:
        c.set_meta("sources", "v2")  # the corpus store was rebuilt from other files
    live = open_live_store(tmp_path / "corpus.sqlite", tmp_path / "live.sqlite")
    assert LORA not in live and len(live) == 2  # re-seeded
    live.close()
    with pytest.raises(ValueError, match="must differ"):
        open_live_store(tmp_path / "corpus.sqlite", tmp_path / "corpus.sqlite")


def test_presets_compose_and_closed_corpus_stays_the_default():
    for root in ("pasa_search", "eval_pasa"):
        default = compose(root, [])
        assert default.expand.kind == "store" and default.search.kind == "auto"  # hybrid on the sample
        cfg = compose(root, ["search=arxiv_api", "expand=ar5iv", "paths.cache_dir=/c"])
        assert cfg.search.arxiv_api.http.cache_path == "/c/http/arxiv_api.sqlite"
        assert cfg.expand.ar5iv.http.cache_path == "/c/http/ar5iv.sqlite"
        assert cfg.papers.live_store == "/c/stores/sample+live.sqlite"
        cfg = compose(root, ["search=semantic_scholar", "expand=semantic_scholar"])
        assert cfg.search.kind == "semantic_scholar" and cfg.expand.semantic_scholar.api_key_env == \
            "SEMANTIC_SCHOLAR_API_KEY"
