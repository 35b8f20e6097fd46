"""Cancelling LLM work in flight: a caller (``pasa serve``'s job runner) binds a ``threading.Event`` for the
duration of its calls with :func:`cancel_scope`; once the event is set, the hf backend stops decoding at the next
token (a transformers StoppingCriteria) and between scoring batches, and raises :class:`GenerationCancelled`
instead of returning cut-off text that a caller would parse as an answer.

A context variable rather than a parameter: the crawl, the Crawler and the Selector between the page and the
backend need not carry it, and another thread's calls (a rationale beside a search) are never cancelled by it.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from typing import Iterator, Optional

_EVENT: contextvars.ContextVar[Optional[threading.Event]] = contextvars.ContextVar("scholar_llm_cancel",
                                                                                 default=None)


class GenerationCancelled(Exception):
    """The bound cancel event was set while the LLM worked: its output was dropped."""


@contextlib.contextmanager
def cancel_scope(event: Optional[threading.Event]) -> Iterator[None]:
    """LLM calls made in this thread inside the block stop once ``event`` is set (None: never)."""
    token = _EVENT.set(event)
    try:
        yield
    finally:
        _EVENT.reset(token)


def current_event() -> Optional[threading.Event]:
    return _EVENT.get()


def cancel_requested() -> bool:
    event = _EVENT.get()
    return event is not None and event.is_set()


def raise_if_cancelled(what: str = "generation") -> None:
    if cancel_requested():
        raise GenerationCancelled(f"{what} cancelled")
