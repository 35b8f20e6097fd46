"""Searches in a bounded queue with one worker: one model in memory, so one crawl runs at a time; the others wait
with a visible position; a cancelled search leaves the queue (or stops at its next crawl step) and frees its slot.

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

    def submit(self, query: str, before: Optional[str], seed_paper: Optional[str] = None) -> Job:
        with self._cond:
            # an idle worker takes the next job at once: it does not count against the bound
            if len(self._waiting) >= self.max_queue + (self._running is None):
                raise QueueFull(f"the queue is full ({len(self._waiting)} searches waiting, serve.max_queue="
                                f"{self.max_queue}): try again when one has finished")
            job = Job(f"s{next(self._ids)}", query, before, seed_paper=seed_paper)
            self._jobs[job.id] = job
            self._waiting.append(job)
            self.max_waiting_seen = max(self.max_waiting_seen, len(self._waiting) - (self._running is None))
            job.events.append(("queued", {"position": self._position(job)}))
            self._forget_old()
            self._cond.notify_all()
        return job

    def get(self, job_id: str) -> Optional[Job]:
        with self._cond:
            return self._jobs.get(job_id)

    def cancel(self, job_id: str) -> Optional[Job]:
        with self._cond:
            job = self._jobs.get(job_id)
            if job is None or job.state in FINISHED:
                return job
            job.cancel_requested.set()
            if job.state == QUEUED:
                self._waiting.remove(job)
                self._finish(job, CANCELLED)
            self._cond.notify_all()
            return job

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

    def close(self) -> None:
        with self._cond:
            self._stop = True
            if self._running is not None:
                self._running.cancel_requested.set()
            self._cond.notify_all()

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
        job.events.append((state, {"error": error} if error else {}))

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
