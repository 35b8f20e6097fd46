"""One HTTP session per live service: an on-disk response cache, retries that honour 429 Retry-After, a minimum
interval between real requests, timeouts, and errors a crawl can act on.

Built from maintained pieces: ``requests-cache`` (a SQLite cache in front of ``requests``: a crawl re-run sends no
request at all) and urllib3's ``Retry`` (backoff, ``Retry-After``), mounted on the session's adapter. The interval
is enforced in that adapter, so cache hits never wait. Errors:

- the host cannot be reached (offline, DNS, refused) -> :class:`LiveServiceUnreachable`, a ``UsageError``: one
  line naming the backend and the switch back to offline work (``scholar`` exits 2);
- 401/403 -> :class:`LiveServiceUnreachable` too, naming the environment variable of the key;
- a timeout, 429/5xx after the retries, 404, a malformed body -> :class:`LiveRequestFailed`: callers count it as
  a skipped request and go on. 200 and 404 answers are cached (a paper with no HTML stays without); a malformed
  body is evicted from the cache so that a re-run asks again; errors are never cached.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

INSTALL_HINT = 'the live search/expand backends need the `online` extra: pip install -e ".[online]"'


@dataclass
class HttpConfig:
    """How every live service is called (the services' own settings are in their configs)."""

    cache_path: str | None = None  # SQLite response cache (requests-cache); null = no cache
    cache_expire_days: float | None = None  # null = never expire (papers' metadata and text do not change)
    timeout_s: float = 30.0  # connect and read timeout of one request
    max_retries: int = 3  # on 429 and 5xx, honouring Retry-After
    backoff_s: float = 1.0  # urllib3 backoff factor: waits backoff_s * 2^(n-1) between retries
    max_retry_after_s: float = 60.0  # a longer Retry-After is cut to this (bounded wait)
    user_agent: str = "scholar-agents/0.1 (PaSa reimplementation; research crawler)"


class LiveServiceUnreachable(UsageError):
    """The live service cannot be used at all (no network, or the key is refused): the run stops here."""


class LiveRequestFailed(RuntimeError):
    """One request failed after its retries (timeout, 429/5xx, 404, malformed body): skipped and counted."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason  # timeout | http_<status> | malformed


def _import_requests_cache():
    try:
        import requests_cache
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise UsageError(INSTALL_HINT) from e
    return requests_cache


class LiveSession:
    """``get(url, params)``, or ``post(url, json_body)`` (Serper), on one service. ``backend`` names it in errors
    (``search=arxiv_api``) and ``offline`` is the switch that avoids it (``search=hybrid``); ``headers`` may carry
    an API key (never logged, never part of the cache key or of the cached request: ``secret_headers`` are redacted
    by requests-cache). A POST is cached like a GET, keyed on its (normalised) JSON body."""

    def __init__(self, http: HttpConfig, backend: str, offline: str, min_interval_s: float = 0.0,
                 headers: dict[str, str] | None = None, secret_headers: tuple[str, ...] = ()):
        import requests
        from requests.adapters import HTTPAdapter
        from urllib3.util.retry import Retry

        requests_cache = _import_requests_cache()
        self.http = http
        self.backend = backend
        self.offline = offline
        self.requests_sent = 0  # real requests (cache misses), retries not counted
        self.cache_hits = 0
        lock = threading.Lock()
        self._count_lock = threading.Lock()
        last = [0.0]
        session_self = self

        class _Throttled(HTTPAdapter):
            """Spaces out the requests that reach the network (the cache answers before this adapter)."""

            def send(self, request, **kw):
                with lock:
                    wait = last[0] + min_interval_s - time.monotonic()
                    if wait > 0:
                        time.sleep(wait)
                    last[0] = time.monotonic()
                    session_self.requests_sent += 1
                return super().send(request, **kw)

        class _BoundedRetry(Retry):
            def get_retry_after(self, response):
                after = super().get_retry_after(response)
                return None if after is None else min(after, http.max_retry_after_s)

        retry = _BoundedRetry(total=http.max_retries, connect=1, read=http.max_retries, status=http.max_retries,
                              backoff_factor=http.backoff_s, status_forcelist=(429, 500, 502, 503, 504),
                              allowed_methods=("GET", "POST"), respect_retry_after_header=True, raise_on_status=False)
        if http.cache_path:
            from pathlib import Path

            Path(http.cache_path).parent.mkdir(parents=True, exist_ok=True)
            expire = -1 if http.cache_expire_days is None else http.cache_expire_days * 86400
            # requests-cache redacts a header only under its exact spelling: every spelling used here is listed
            wanted = {h.lower() for h in secret_headers}
            secret = sorted(set(secret_headers) | {h for h in (headers or {}) if h.lower() in wanted})
            self.session = requests_cache.CachedSession(
                http.cache_path, backend="sqlite", expire_after=expire, allowable_codes=(200, 404),
                allowable_methods=("GET", "POST"), ignored_parameters=secret, match_headers=False,
                stale_if_error=False)
        else:
            self.session = requests.Session()
        adapter = _Throttled(max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.session.headers["User-Agent"] = http.user_agent
        self.session.headers.update(headers or {})
        self._requests = requests

    def __repr__(self) -> str:  # no headers: they may hold a key
        return f"LiveSession(backend={self.backend!r}, cache={self.http.cache_path!r})"

    def get(self, url: str, params: dict[str, Any] | None = None, key_env: str | None = None):
        """The 200 response, or an exception as described in the module doc."""
        return self._request("GET", url, key_env, params=params)

    def post(self, url: str, json_body: dict[str, Any], key_env: str | None = None):
        """``get`` for a JSON POST (retried, rate-limited and cached the same way; the body is the cache key)."""
        return self._request("POST", url, key_env, json=json_body)

    def _request(self, method: str, url: str, key_env: str | None, **kw):
        requests = self._requests
        from urllib3.exceptions import ReadTimeoutError

        try:
            r = self.session.request(method, url, timeout=self.http.timeout_s, **kw)
        except requests.exceptions.RetryError as e:  # retries used up on 429/5xx (raise_on_status=False: rare)
            raise LiveRequestFailed(f"{self.backend}: {url}: retries exhausted ({e})", "retries") from None
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError) as e:
            # A slow answer (a read timeout, also when urllib3 gave up retrying it) skips this request; failing to
            # connect at all (refused, DNS, connect timeout: offline) stops the run with one line.
            reason = getattr(e.args[0], "reason", None) if e.args else None
            if isinstance(e, requests.exceptions.ReadTimeout) or isinstance(reason, ReadTimeoutError):
                raise LiveRequestFailed(f"{self.backend}: {url.split('?')[0]} timed out after "
                                        f"{self.http.timeout_s}s", "timeout") from None
            cause = type(reason or e).__name__
            raise LiveServiceUnreachable(
                f"{self.backend}: cannot reach {url.split('?')[0]} ({cause}); this backend needs network "
                f"access: offline, use {self.offline}") from None
        if getattr(r, "from_cache", False):
            with self._count_lock:  # a backend may call from several threads (search=online)
                self.cache_hits += 1
        if r.status_code == 200:
            return r
        if r.status_code in (401, 403):
            where = f" the API key from ${key_env}" if key_env else " the request"
            raise LiveServiceUnreachable(f"{self.backend}: {url.split('?')[0]} rejected{where} "
                                         f"(HTTP {r.status_code}); check the key or use {self.offline}")
        raise LiveRequestFailed(f"{self.backend}: {url.split('?')[0]}: HTTP {r.status_code} after "
                                f"{self.http.max_retries} retries" if r.status_code in (429, 500, 502, 503, 504)
                                else f"{self.backend}: {url.split('?')[0]}: HTTP {r.status_code}",
                                f"http_{r.status_code}")

    def parsed(self, response, parse: Callable[[Any], Any]):
        """``parse(response)``; a body that does not parse raises :class:`LiveRequestFailed` ("malformed") and is
        evicted from the cache (a re-run asks the service again instead of replaying the bad body)."""
        try:
            return parse(response)
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            cache = getattr(self.session, "cache", None)
            if cache is not None:
                cache.delete(requests=[response.request])
            raise LiveRequestFailed(f"{self.backend}: malformed response from {response.url.split('?')[0]}: "
                                    f"{type(e).__name__}: {str(e)[:160]}", "malformed") from None
