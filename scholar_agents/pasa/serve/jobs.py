"""Searches in a bounded queue with one worker: one model in memory, so one crawl runs at a time; the others wait
with a visible position; a cancelled search leaves the queue, or (running) says "cancelling" at once and stops at
its next token, scoring batch or crawl step (llm/cancel.py), and frees its slot. A search may replace another
(the page's new search): the old one is cancelled and says by what, the new one says it waits for it to stop.

A job's events are an append-only list: a page's event stream reads from any index, so a reconnect loses nothing.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
FINISHED = (DONE, FAILED, CANCELLED)


class QueueFull(Exception):
    """A search was refused: ``serve.max_queue`` searches already wait behind the running one."""


class Cancelled(Exception):
    """Raised inside a running search (from its event callback) when the page cancelled it. ``partial``: what the
    search had when it stopped (set by the service), shown as the cancelled search's result."""

    partial: Optional[dict] = None


@dataclass
class Job:
    id: str
    query: str
    before: Optional[str]
    state: str = QUEUED
    events: list[tuple[str, dict]] = field(default_factory=list)
    error: Optional[str] = None
    result: Any = None
    submitted: float = field(default_factory=time.perf_counter)
    cancel_requested: threading.Event = field(default_factory=threading.Event)
    seed_paper: Optional[str] = None  # "more like this": the paper the crawl starts from
    replaced_by: Optional[str] = None  # the search that cancelled this one by replacing it


class SearchQueue:
    """``submit`` -> Job (or QueueFull beyond ``max_queue`` waiting); the worker thread runs ``run(job, emit)``
    for one job at a time; ``emit(kind, data)`` appends an event and wakes the job's readers."""

    def __init__(self, run: Callable[[Job, Callable[[str, dict], None]], Any], max_queue: int, kept: int = 100):
        if max_queue < 0:
            raise ValueError(f"max_queue must be >= 0, got {max_queue}")
        self._run = run
        self.max_queue = max_queue
        self._kept = kept
        self._cond = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._running: Optional[Job] = None
        self._ids = itertools.count(1)
        self._stop = False
        self.max_waiting_seen = 0  # the largest number ever waiting (the load test checks the bound with it)
        self._thread = threading.Thread(target=self._loop, name="pasa-serve-worker", daemon=True)
        self._thread.start()

    # ---- the page's side ----

    def submit(self, query: str, before: Optional[str], seed_paper: Optional[str] = None,
               replaces: Optional[str] = None) -> Job:
        """Queue a search; ``replaces``: the id of a search it supersedes (cancelled first, so its slot counts)."""
        with self._cond:
            old = self._jobs.get(replaces) if replaces else None
            old = old if old is not None and old.state not in FINISHED else None
            job_id = f"s{next(self._ids)}"
            if old is not None:
                old.replaced_by = job_id
                self._cancel(old)
            # an idle worker takes the next job at once: it does not count against the bound
            if len(self._waiting) >= self.max_queue + (self._running is None):
                raise QueueFull(f"the queue is full ({len(self._waiting)} searches waiting, serve.max_queue="
                                f"{self.max_queue}): try again when one has finished")
            job = Job(job_id, query, before, seed_paper=seed_paper)
            self._jobs[job.id] = job
            self._waiting.append(job)
            self.max_waiting_seen = max(self.max_waiting_seen, len(self._waiting) - (self._running is None))
            queued = {"position": self._position(job)}
            if old is not None and old.state == RUNNING:  # the page says why this one waits
                queued["waits_for"] = old.id
            job.events.append(("queued", queued))
            self._forget_old()
            self._cond.notify_all()
        return job

    def get(self, job_id: str) -> Optional[Job]:
        with self._cond:
            return self._jobs.get(job_id)

    def cancel(self, job_id: str) -> Optional[Job]:
        with self._cond:
            job = self._jobs.get(job_id)
            if job is not None and job.state not in FINISHED:
                self._cancel(job)
            return job

    def _cancel(self, job: Job) -> None:
        """Under the lock. A queued job ends now; a running one says "cancelling" at once (its worker sees the
        event at its next token, batch or step)."""
        first = not job.cancel_requested.is_set()
        job.cancel_requested.set()
        if job.state == QUEUED:
            self._waiting.remove(job)
            self._finish(job, CANCELLED)
            for i, other in enumerate(self._waiting, 1):  # everyone behind moves up
                other.events.append(("position", {"position": i}))
        elif first:
            job.events.append(("cancelling", {"replaced_by": job.replaced_by} if job.replaced_by else {}))
        self._cond.notify_all()

    def position(self, job: Job) -> int:
        with self._cond:
            return self._position(job)

    def wait_events(self, job: Job, since: int, timeout: float) -> tuple[list[tuple[str, dict]], bool]:
        """Events from index ``since`` on (waiting up to ``timeout`` for one), and whether the job is finished."""
        with self._cond:
            if len(job.events) <= since and job.state not in FINISHED:
                self._cond.wait(timeout)
            return job.events[since:], job.state in FINISHED

    def status(self) -> dict:
        with self._cond:
            return {"running": self._running.id if self._running else None, "waiting": len(self._waiting),
                    "max_queue": self.max_queue, "max_waiting_seen": self.max_waiting_seen,
                    "worker_alive": self._thread.is_alive()}

    def close(self, timeout: float = 30.0) -> bool:
        """Stop the worker: the running search is cancelled (it stops at its next token or batch) and the worker
        is joined, so that no thread is still freeing a search's tensors while the interpreter shuts down (a
        worker left to exit then aborted the process: "terminate called without an active exception", rc 134).
        Returns whether the worker has ended within ``timeout`` seconds."""
        with self._cond:
            self._stop = True
            if self._running is not None:
                self._running.cancel_requested.set()
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the search worker did not stop within %.0f s", timeout)
            return False
        return True

    # ---- the worker ----

    def _position(self, job: Job) -> int:
        """0 = running; n = n-th in line (1 = next)."""
        if job.state != QUEUED:
            return 0
        return list(self._waiting).index(job) + 1 if job in self._waiting else 0

    def _emit(self, job: Job) -> Callable[[str, dict], None]:
        def emit(kind: str, data: dict) -> None:
            if job.cancel_requested.is_set():
                raise Cancelled()
            with self._cond:
                job.events.append((kind, data))
                self._cond.notify_all()
        return emit

    def _finish(self, job: Job, state: str, error: Optional[str] = None) -> None:
        job.state, job.error = state, error
        data = {"error": error} if error else {}
        if state == CANCELLED and job.replaced_by:
            data["replaced_by"] = job.replaced_by
        job.events.append((state, data))

    def _forget_old(self) -> None:
        finished = [j for j in self._jobs.values() if j.state in FINISHED]
        for j in finished[: max(len(finished) - self._kept, 0)]:
            del self._jobs[j.id]

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._stop:
                    self._cond.wait()
                if self._stop:
                    return
                job = self._waiting.popleft()
                job.state = RUNNING
                self._running = job
                job.events.append(("running", {}))
                for i, other in enumerate(self._waiting, 1):  # everyone behind moves up
                    other.events.append(("position", {"position": i}))
                self._cond.notify_all()
            state, error = DONE, None
            try:
                job.result = self._run(job, self._emit(job))
            except Cancelled as c:
                state = CANCELLED
                job.result = c.partial
            except UsageError as e:  # the user's input, found wrong late: one line, no traceback
                log.warning("search %s: %s", job.id, e)
                state, error = FAILED, str(e).splitlines()[0][:500]
            except Exception as e:  # noqa: BLE001 — a failed crawl is shown in the page; the server lives on
                log.exception("search %s failed", job.id)
                state, error = FAILED, f"{type(e).__name__}: {e}".splitlines()[0][:500]
            with self._cond:
                if state == DONE and job.cancel_requested.is_set():
                    state = CANCELLED
                if state == DONE or (state == CANCELLED and job.result is not None):
                    job.events.append(("result", job.result))
                self._finish(job, state, error)
                self._running = None
                self._cond.notify_all()
