"""`scholar pasa search` on the live literature, end to end and offline: the Crawler and the Selector are a scripted
OpenAI-compatible server, arXiv (API + HTML) a replaying server, both on 127.0.0.1. The crawl searches the arXiv
API, expands a paper from its HTML, the Selector ranks the queue; a re-run sends no request to arXiv; an unreachable
service ends `scholar pasa search` with one line naming the backend and exit status 2."""

import json
import math
import os
import re
import subprocess
import sys

import pytest

from scholar_agents.hydra_app import compose
from tests.fixtures.live_http import Reply, asset, free_port, serve_replay
from tests.fixtures.openai_http import ScriptedCompletions, serve
from tests.paths import REPO

ROOT = REPO
TOKENIZER = ROOT / "tests" / "assets" / "tiny_tokenizer"
LORA = "2106.09685"


class _Agent(ScriptedCompletions):
    """Crawler: search in S_q, expand the Introduction in S_q+p. Selector: P("True") = 0.8 for every paper."""

    def do_POST(self):
        req = self.request_json()
        if "logprob_token_ids" in req:
            ids = req["logprob_token_ids"]
            top = {f"token_id:{ids[0]}": math.log(0.8), f"token_id:{ids[1]}": math.log(0.2)}
            self.send_json({"choices": [{"index": 0, "text": "", "logprobs": {"top_logprobs": [top]}}]})
            return
        text = "[Expand] Introduction [Stop]" if "Introduction" in req["prompt"] else \
            "[Search] low rank adaptation [Stop]"
        self.send_json({"choices": [{"index": 0, "text": text, "finish_reason": "stop"}]})


def arxiv_routes():
    return {"/api/query": lambda p: Reply(body=asset("arxiv_page1.xml" if p["start"] == "0" else "arxiv_page2.xml"),
                                          content_type="application/atom+xml"),
            f"/html/{LORA}": lambda p: Reply(body=asset(f"ar5iv_{LORA}.html"), content_type="text/html")}


@pytest.fixture(scope="module")
def corpus_store(tmp_path_factory):
    """One sample corpus store for the module (built by the first command); each test has its own live store."""
    return tmp_path_factory.mktemp("corpus") / "sample.sqlite"


def overrides(cache, arxiv_url, llm_url, corpus):
    llm = [f"model={TOKENIZER}", f"base_url={llm_url}", "cache_path=null", "max_retries=0"]
    return [f"paths.cache_dir={cache}", f"papers.store={corpus}", "search=arxiv_api", "expand=ar5iv",
            f"search.arxiv_api.endpoint={arxiv_url}/api/query", "search.arxiv_api.min_interval_s=0",
            "search.arxiv_api.page_size=2", f"expand.ar5iv.endpoints=['{arxiv_url}/html/{{id}}']",
            "expand.ar5iv.min_interval_s=0", "llm=openai_server", "llm@selector_llm=openai_server",
            "selector=cpu",  # the LLM Selector, answered by the fake server (the order below is its P("True"))
            *[f"llm.{o}" for o in llm], *[f"selector_llm.{o}" for o in llm],
            "crawler.policy.constrained=false", "crawler.env.search_k=3", "crawler.env.max_sessions=3",
            # the recorded arXiv answers are those of the Crawler's one search (pasa search also searches the
            # user's words by default: a second live search the recording does not hold)
            "crawler.env.search_user_query=false",
            "query=low rank adaptation of language models", "before=2021-09-30"]


def test_pasa_search_on_the_live_arxiv_and_its_rerun_from_the_cache(tmp_path, corpus_store):
    from scholar_agents.pasa.commands import search

    with serve(_Agent) as llm_url, serve_replay(arxiv_routes()) as (arxiv_url, server):
        cfg = compose("pasa_search", [*overrides(tmp_path / "cache", arxiv_url, llm_url, corpus_store),
                                      f"paths.output_dir={tmp_path / 'run1'}"])
        res = search(cfg)
        n = len(server.log)
        again = search(compose("pasa_search", [*overrides(tmp_path / "cache", arxiv_url, llm_url, corpus_store),
                                                f"paths.output_dir={tmp_path / 'run2'}"]))
    [r] = res["results"]
    ids = [p["paper_id"] for p in r["papers"]]
    # searched: LoRA, the Transformer; expanded from LoRA's Introduction: BERT (its cited title matched the sample
    # corpus); 2110.04366 is after the query date, neither searched nor expanded into the queue
    assert ids == [LORA, "1706.03762", "1810.04805"]
    # what found each, as the Selector saw it (selector=provenance routes on it)
    assert [p["found_by"] for p in r["papers"]] == ["arxiv_api", "arxiv_api", "expand"]
    assert all(p["date"] < "2021-09-30" for p in r["papers"] if p["date"])
    assert res["live"]["search=arxiv_api"]["requests_sent"] == 2
    assert res["live"]["expand=ar5iv"] == {"requests_sent": 3, "cache_hits": 0, "papers_fetched": 1,
                                           "skipped_papers": {"http_404": 2}}  # only LoRA has HTML
    live = json.loads((tmp_path / "run1" / "live.json").read_text())
    assert live == res["live"]
    assert len(server.log) == n  # the re-run: the papers are in the live store and the answers in the cache
    assert again["live"]["search=arxiv_api"]["requests_sent"] == 0
    assert [p["paper_id"] for p in again["results"][0]["papers"]] == ids
    # the corpus store is untouched: what was fetched went into the live copy
    from scholar_agents.papers.store import PaperStore

    with PaperStore(cfg.papers.store, readonly=True) as corpus, \
            PaperStore(cfg.papers.live_store, readonly=True) as live_store:
        assert LORA not in corpus and LORA in live_store and live_store.get(LORA).sections


@pytest.mark.parametrize("backend", ["search", "expand"])
def test_offline_pasa_search_is_one_line_naming_the_backend(tmp_path, backend, corpus_store):
    dead = f"http://127.0.0.1:{free_port()}"
    with serve(_Agent) as llm_url, serve_replay(arxiv_routes()) as (arxiv_url, _):
        args = overrides(tmp_path / "cache", dead if backend == "search" else arxiv_url, llm_url, corpus_store)
        if backend == "expand":
            args = [a for a in args if not a.startswith("expand.ar5iv.endpoints")]
            args.append(f"expand.ar5iv.endpoints=['{dead}/html/{{id}}']")
        out = subprocess.run([sys.executable, "-m", "scholar_agents", "pasa", "search", *args,
                              f"hydra.run.dir={tmp_path}/run"], capture_output=True, text=True, timeout=300,
                             cwd=ROOT, env={**os.environ, "HYDRA_FULL_ERROR": "0"}, check=False)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "Traceback" not in out.stdout + out.stderr, out.stderr[-3000:]
    # one error line (progress bars of the store build share stderr; the error ends one of their lines)
    errors = re.findall(r"scholar pasa search: error: (.*)", out.stderr)
    want = ("search=arxiv_api: cannot reach", "use search=hybrid") if backend == "search" else \
        ("expand=ar5iv: cannot reach", "use expand=store")
    assert len(errors) == 1 and all(w in errors[0] for w in want), out.stderr[-3000:]


def test_eval_pasa_row_on_the_live_arxiv(tmp_path, corpus_store):
    """`eval pasa` accepts a live backend per row (`search: arxiv_api`): Table 2's search-only row on arXiv."""
    from scholar_agents.eval.pasa.command import pasa

    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"qid": "q1", "question": "low rank adaptation of language models",
                                   "answer_arxiv_id": [LORA, "2110.04366"],
                                   "source_meta": {"published_time": "20210930"}}) + "\n")
    with serve_replay(arxiv_routes()) as (arxiv_url, server):
        cfg = compose("eval_pasa", [
            f"paths.cache_dir={tmp_path / 'cache'}", f"papers.store={corpus_store}", f"paths.output_dir={tmp_path / 'run'}",
            f"queries.path={queries}",
            f"search.arxiv_api.endpoint={arxiv_url}/api/query", "search.arxiv_api.min_interval_s=0",
            "rows=[{name: arxiv, method: search, search: arxiv_api}]", "ks=[20]"])
        res = pasa(cfg)
        n = len(server.log)
        cfg.paths.output_dir = str(tmp_path / "run2")
        again = pasa(cfg)  # the row's kind is not the search preset's: its answers are cached all the same
    assert len(server.log) == n == 2 and again["summary"]["arxiv"]["recall_at_20"] == 0.5
    assert (tmp_path / "cache" / "http" / "arxiv_api.sqlite").is_file()
    s = res["summary"]["arxiv"]
    # LoRA is found; 2110.04366 is a gold paper published after the query date: the date filter keeps it out
    assert s["queries"] == 1 and s["recall_at_20"] == 0.5
    assert server.log[0].params["search_query"].endswith("TO 202109292359]")
    report = (tmp_path / "run" / "report.md").read_text()
    assert "live backends" in report and "search=arxiv_api" in report
