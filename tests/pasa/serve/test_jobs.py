"""The search queue's worker (pasa/serve/jobs.py) on a plain run function, no model."""

import threading
import time

from scholar_agents.pasa.serve.jobs import CANCELLED, SearchQueue


def test_close_cancels_the_running_search_and_waits_for_the_worker_to_end():
    """A worker left running after close() was still freeing a search's tensors while the interpreter shut down,
    which aborted bench/serve_cancel.py at exit (rc 134): close() cancels the running search and returns once the
    worker has ended."""
    started = threading.Event()

    def run(job, emit):
        started.set()
        assert job.cancel_requested.wait(5)
        time.sleep(0.3)  # the step in flight finishes after the cancel, as a generation does at its next token
        emit("session", {})  # raises Cancelled

    queue = SearchQueue(run, max_queue=1)
    job = queue.submit("graph neural networks", None)
    assert started.wait(5)
    t0 = time.perf_counter()
    assert queue.close(timeout=5) is True
    assert time.perf_counter() - t0 >= 0.25  # it waited for the step in flight
    assert not queue.status()["worker_alive"] and job.state == CANCELLED


def test_close_gives_up_after_its_timeout_and_says_so(caplog):
    release = threading.Event()

    def run(job, emit):
        release.wait(10)  # a step that ignores the cancel

    queue = SearchQueue(run, max_queue=1)
    queue.submit("q", None)
    time.sleep(0.05)
    assert queue.close(timeout=0.1) is False
    assert "did not stop within" in caplog.text
    release.set()
