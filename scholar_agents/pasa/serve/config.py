"""``serve`` config group: where ``scholar pasa serve`` listens and what it lets a page do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class ServeConfig:
    # Ours: loopback by default (a shared node's other users cannot reach it); any other address needs the token.
    host: str = "127.0.0.1"
    port: int = 8765
    # The Runs view opens run directories under this root only (no path traversal, symlinks resolved first).
    runs_root: str = "outputs"
    save_runs: bool = True  # every finished page search is a run under <runs_root>/page_searches/ (as pasa search)
    # Searches waiting behind the running one (one model in memory: searches run one at a time); beyond it a
    # submit is refused with one line (HTTP 429).
    max_queue: int = 4
    # a new search from a page cancels the one that page is running (false: both run, the second queued behind)
    replace_running: bool = True
    max_query_chars: int = 1000  # a longer query is refused (PaSa's AutoScholarQuery questions are < 400)
    # The environment variable holding the access token; required when host is not a loopback address. The token
    # itself is never in the config, the logs or the page's HTML.
    token_env: str = "SCHOLAR_SERVE_TOKEN"
    # A PaSa query file whose gold papers (answer_arxiv_id) are marked in trees, matched by qid (runs) or by the
    # question's text (live search); null = no gold.
    gold_queries: Optional[str] = None
    # Build the store, index and models at start-up (true: the first search does not pay for loading).
    preload: bool = True
    # Warm the Crawler and the Selector once when they load (one short generation, one Selector batch), so the first
    # search costs what later ones cost; false = the first search pays it (bench/serve_first_search.py's baseline).
    warm_up: bool = True
    finished_jobs_kept: int = 100  # finished searches whose events and results stay readable
    open_browser: bool = False
