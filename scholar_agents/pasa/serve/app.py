"""The routes of ``scholar pasa serve``: the page, the search queue and its event stream, the runs view.

Every refusal is one JSON line ``{"error": "..."}`` with a 4xx status, shown as it is in the page; an unexpected
exception is a 500 with its one-line message, and the server keeps serving."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import re
from pathlib import Path
from typing import Optional

from fastapi import FastAPI, Query, Request
from fastapi.responses import FileResponse, JSONResponse, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from scholar_agents.pasa.serve import runs
from scholar_agents.pasa.serve.jobs import FINISHED, QueueFull, SearchQueue
from scholar_agents.pasa.serve.tree import build_tree
from scholar_agents.validation import UsageError, parse_date

log = logging.getLogger(__name__)
STATIC = Path(__file__).parent / "static"
SEARCH_FIELDS = ("query", "before", "seed_paper", "replaces")
# a paper id of a store: arXiv ids (2405.15318, hep-th/9901001) and loaders' stable ids; no path parts
SEED_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,40}(/[A-Za-z0-9._-]{1,20})?")
JOB_ID = re.compile(r"s[0-9]{1,9}")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def check_search(body: object, max_chars: int) -> tuple[str, Optional[str], Optional[str], Optional[str]]:
    """A submitted search as (query, before, seed_paper, replaces), or a one-line UsageError, before anything is
    queued. ``seed_paper`` ("more like this", a paper id of the store: the service checks that it is there) may come
    without a query: the paper's title is then the question. ``replaces``: the page's running search this one
    supersedes."""
    if not isinstance(body, dict):
        raise UsageError('send a JSON object {"query": "...", "before": "YYYY-MM-DD" (optional)}')
    extra = sorted(set(body) - set(SEARCH_FIELDS))
    if extra:
        raise UsageError(f"unknown field(s) {', '.join(extra)}: a search takes query, before, seed_paper and "
                         f"replaces; the backends, models and budgets are the server's command-line overrides")
    seed = body.get("seed_paper")
    if seed is not None and (not isinstance(seed, str) or not SEED_ID.fullmatch(seed) or ".." in seed):
        raise UsageError("seed_paper: a paper id of this corpus, e.g. 2405.15318 (letters, digits, '.', '_', '-', "
                         "one '/')")
    query = body.get("query")
    if seed is not None and (query is None or (isinstance(query, str) and not query.strip())):
        query = ""  # the seed paper's title, filled in by the service
    elif not isinstance(query, str) or not query.strip():
        raise UsageError("query: type a question (a non-empty string)")
    query = " ".join(query.split())
    if len(query) > max_chars:
        raise UsageError(f"query: {len(query)} characters, at most {max_chars} (serve.max_query_chars)")
    before = body.get("before")
    if before is not None and not isinstance(before, str):
        raise UsageError("before: a date string YYYY-MM-DD")
    before = parse_date(before, "before", full=True)
    replaces = body.get("replaces")
    if replaces is not None and (not isinstance(replaces, str) or not JOB_ID.fullmatch(replaces)):
        raise UsageError("replaces: the id of a search of this server (s1, s2, ...)")
    return query, before, seed, replaces


def create_app(cfg, service, token: Optional[str] = None) -> FastAPI:
    """The app over a :class:`~scholar_agents.pasa.serve.service.SearchService` (``service.run`` is the queue's
    worker). ``token``: required on every /api/ call (header ``X-Token`` or ``?token=``; EventSource cannot set
    headers) when set."""
    scfg = cfg.serve
    runs_root = Path(str(scfg.runs_root))
    queue = SearchQueue(service.run, int(scfg.max_queue), int(scfg.finished_jobs_kept))
    app = FastAPI(title="scholar pasa serve", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.queue, app.state.service = queue, service
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.middleware("http")
    async def guard(request: Request, call_next):
        if token and request.url.path.startswith("/api/"):
            given = request.headers.get("x-token") or request.query_params.get("token") or ""
            if not hmac.compare_digest(given.encode(), token.encode()):
                return _error(401, "this server needs its access token: open the page as /?token=<token>")
        try:
            return await call_next(request)
        except UsageError as e:
            return _error(400, str(e))
        except QueueFull as e:
            return _error(429, str(e))
        except Exception as e:  # noqa: BLE001 — one line to the page, the trace to the log; the server lives on
            log.exception("%s %s failed", request.method, request.url.path)
            return _error(500, f"{type(e).__name__}: {e}".splitlines()[0][:500])

    @app.get("/")
    async def index():
        return FileResponse(STATIC / "index.html")

    @app.get("/api/setting")
    async def setting():
        return {**service.setting(), "max_query_chars": int(scfg.max_query_chars), "runs_root": str(runs_root),
                "max_queue": queue.max_queue, "corpus": service.corpus(),
                "replace_running": bool(scfg.get("replace_running", True))}

    @app.get("/api/status")
    async def status():
        return queue.status()

    @app.post("/api/search")
    async def submit(request: Request):
        try:
            body = json.loads(await request.body() or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise UsageError('the request body is not JSON: send {"query": "..."}') from None
        query, before, seed, replaces = check_search(body, int(scfg.max_query_chars))
        if seed is not None:  # in the store, checked now: not a failed search later
            seed = await run_in_threadpool(service.check_seed, seed)
        job = queue.submit(query, before, seed_paper=seed, replaces=replaces)
        return {"id": job.id, "position": queue.position(job), "state": job.state}

    def _job(job_id: str):
        job = queue.get(job_id)
        if job is None:
            raise UsageError(f"no search {job_id!r} (finished searches are kept for a while only)")
        return job

    @app.get("/api/search/{job_id}")
    async def job_state(job_id: str):
        job = _job(job_id)
        return {"id": job.id, "state": job.state, "position": queue.position(job), "error": job.error,
                "events": len(job.events), "result": job.result if job.state == "done" else None}

    @app.post("/api/search/{job_id}/cancel")
    async def cancel(job_id: str):
        job = queue.cancel(_job(job_id).id)
        return {"id": job.id, "state": job.state, "cancel_requested": job.cancel_requested.is_set()}

    @app.get("/api/search/{job_id}/events")
    async def events(job_id: str, request: Request, since: int = 0):
        """Server-sent events: every event of the search from index ``since`` (a reconnect resumes), each as
        ``data: {"i", "kind", "data"}``; the stream ends after the final one (done, failed or cancelled)."""
        job = _job(job_id)

        async def stream():
            i, idle = max(since, 0), 0.0
            while True:
                new = job.events[i:]
                for kind, data in new:
                    yield f"id: {i}\ndata: {json.dumps({'i': i, 'kind': kind, 'data': data}, default=str)}\n\n"
                    i += 1
                if job.state in FINISHED and i >= len(job.events):
                    return
                if await request.is_disconnected():
                    return
                idle = 0.0 if new else idle + 0.1
                if idle >= 10:  # a comment keeps proxies from closing a quiet stream
                    yield ": keep-alive\n\n"
                    idle = 0.0
                await asyncio.sleep(0.1)

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/api/search/{job_id}/rationale")
    async def rationale(job_id: str, paper_id: str):
        job = _job(job_id)
        listed = [p for p in (job.result or {}).get("papers", []) if p["paper_id"] == paper_id]
        if job.state != "done" or not listed:
            raise UsageError(f"paper {paper_id!r} is not in the results of search {job_id}")
        # the retriever that found it: selector=provenance judges it as the list did
        return await run_in_threadpool(service.rationale, job.query, paper_id, listed[0].get("found_by", ""))

    # ---- runs ----

    @app.get("/api/runs")
    async def list_runs():
        found = await run_in_threadpool(runs.find_runs, runs_root)
        return {"root": str(runs_root), "runs": runs.collapse_repeats(found)}

    @app.get("/api/run")
    async def open_run(path: str, with_run: Optional[str] = Query(None, alias="with")):
        """One run's table, or (``with=<another run>``) both side by side: two page searches, two evals."""
        questions = {qid: q.question for qid, q in service.gold.items()}
        paths = [path] + ([with_run] if with_run and with_run != path else [])
        return await run_in_threadpool(runs.open_runs, runs_root, paths, questions)

    @app.get("/api/run/tree")
    async def run_tree(path: str, row: str, qid: str):
        d = runs.resolve_under(runs_root, path)
        trajs = await run_in_threadpool(runs.load_trajectories, d, row, qid)
        if not trajs:
            raise UsageError(f"row {row!r} of {path!r} kept no trajectory of query {qid!r}")
        gold = service.gold_for(qid=qid, question=trajs[0].get("user_query"))
        ranked = [p | {"gold": p["paper_id"] in gold} for p in runs.load_ranked(d, qid)]
        return {"row": row, "qid": qid, "trees": [build_tree(t, service.paper_info, gold) for t in trajs],
                "ranked": ranked}

    @app.on_event("shutdown")
    async def _close():
        queue.close()

    return app
