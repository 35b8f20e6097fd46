"""Any OpenAI-compatible server (``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server``).

Chats are rendered with OUR tokenizer's chat template and sent to ``/v1/completions`` as text, so the server
sees exactly the prompt a trained checkpoint saw in training (the chat endpoint would apply whatever template
the server was started with). Requests run on a bounded thread pool (``max_concurrency``), time out after
``timeout_s`` and are retried with exponential backoff on connection errors, 429 and 5xx.

vLLM's extensions to the completions API are used when the server has them: ``return_token_ids`` (the exact
generated ids; otherwise the text is re-tokenised locally), ``include_stop_str_in_output`` (we cut at stop
strings ourselves, like the other backends), ``add_special_tokens`` and ``logprob_token_ids`` (exact
next-token log-probabilities of the candidates, not a top-k cut). A server without ``logprob_token_ids`` (vLLM 0.19,
the CUDA 12 lock's) ignores it; ``next_token_probs`` then sends each candidate as the prompt's last token with
``echo`` and reads its prompt logprob: the same full-vocabulary probability, one batched request per prompt.
The API key is read from the environment variable named by ``api_key_env`` and never logged.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any, Sequence

import httpx
import numpy as np

from scholar_agents.llm.base import LLM, Generation, Prompt, SamplingParams, repetition_controls
from scholar_agents.llm.cache import model_identity
from scholar_agents.llm.cancel import current_event, raise_if_cancelled
from scholar_agents.llm.completions import build_completion, end_of_sequence_ids
from scholar_agents.llm.config import LLMConfig
from scholar_agents.llm.constraints import OutputConstraint, warn_unconstrained
from scholar_agents.runtime.progress import progress_bar

log = logging.getLogger(__name__)

_RETRY_STATUS = {408, 409, 425, 429}  # plus every 5xx


class ServerError(RuntimeError):
    """The server answered, but not with a usable completion."""


class OpenAIBackend(LLM):
    def __init__(self, cfg: LLMConfig, tokenizer_path: str):
        from transformers import AutoTokenizer

        if cfg.max_concurrency < 1:
            raise ValueError(f"llm.max_concurrency must be >= 1, got {cfg.max_concurrency}")
        if cfg.max_retries < 0:
            raise ValueError(f"llm.max_retries must be >= 0, got {cfg.max_retries}")
        if not cfg.base_url.startswith(("http://", "https://")):
            raise ValueError(f"llm.base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got "
                             f"{cfg.base_url!r}")
        self.cfg = cfg
        self._tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, trust_remote_code=cfg.trust_remote_code)
        self.eos_token_ids = end_of_sequence_ids(self._tokenizer, tokenizer_path)
        headers = {}
        key = os.environ.get(cfg.api_key_env) if cfg.api_key_env else None
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            base_url=cfg.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(cfg.timeout_s, connect=min(cfg.timeout_s, 30.0)),
            limits=httpx.Limits(max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency),
        )
        self._pool = ThreadPoolExecutor(max_workers=cfg.max_concurrency, thread_name_prefix="openai-llm")
        self._lock = threading.Lock()
        self.retries = 0  # requests re-sent after a transient failure (for logs and tests)
        self._structured_extension = True  # vLLM's `structured_outputs` field; off once a server rejects it
        self._candidate_extension = True  # vLLM's `logprob_token_ids` field; off once a server ignores it
        self.served_model = cfg.served_model_name or self._discover_model()
        self.model_id = model_identity(cfg.model, None, "openai", self.served_model, cfg.base_url)
        log.info("openai backend: %s at %s", self.served_model, cfg.base_url)

    @property
    def tokenizer(self):
        return self._tokenizer

    # ---- HTTP ----

    def _request(self, method: str, path: str, payload: dict | None = None) -> dict:
        last: str = ""
        for attempt in range(self.cfg.max_retries + 1):
            wait = None
            try:
                resp = self._client.request(method, path, json=payload)
            except httpx.TransportError as e:  # refused, reset, timed out: the server may be (re)starting
                last = f"{type(e).__name__}: {e}"
            else:
                if resp.status_code == 200:
                    return resp.json()
                body = resp.text[:500]
                if resp.status_code not in _RETRY_STATUS and resp.status_code < 500:
                    raise ServerError(f"{method} {self.cfg.base_url}/{path} -> HTTP {resp.status_code}: {body}")
                last = f"HTTP {resp.status_code}: {body}"
                retry_after = resp.headers.get("retry-after")
                if retry_after and retry_after.replace(".", "", 1).isdigit():
                    wait = float(retry_after)
            if attempt == self.cfg.max_retries:
                break
            if wait is None:
                # Exponential backoff with jitter, so that many threads do not retry in lock-step.
                wait = self.cfg.retry_backoff_s * (2**attempt) * (1 + 0.25 * random.random())
            with self._lock:
                self.retries += 1
            log.warning("%s %s failed (%s); retry %d/%d in %.1fs", method, path, last, attempt + 1,
                        self.cfg.max_retries, wait)
            time.sleep(min(wait, 60.0))
        raise ServerError(f"{method} {self.cfg.base_url}/{path} failed after {self.cfg.max_retries + 1} attempts: "
                          f"{last}")

    def _discover_model(self) -> str:
        """The served model's name when the config does not give one: the only model the server lists."""
        models = [m["id"] for m in self._request("GET", "models").get("data", [])]
        if len(models) == 1:
            return models[0]
        if self.cfg.model in models:
            return self.cfg.model
        raise ValueError(f"server {self.cfg.base_url} serves {models}; set llm.served_model_name to one of them")

    def _map(self, fn, items: list, desc: str) -> list:
        event = current_event()
        if len(items) <= 1 and event is None:
            return [fn(x) for x in items]
        futures = [self._pool.submit(fn, x) for x in items]
        if event is not None:  # a cancel (llm/cancel.py) returns at once; requests in flight end unread
            pending = set(futures)
            while pending:
                _, pending = wait(pending, timeout=0.1)
                if event.is_set():
                    for f in futures:
                        f.cancel()
                    raise_if_cancelled()
        return [f.result() for f in progress_bar(futures, desc=desc, leave=False, disable=len(items) < 32)]

    # ---- generation ----

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams | None = None) -> list[Generation]:
        params = params or SamplingParams()
        ids = [self.prompt_token_ids(p) for p in prompts]
        self.check_prompt_lengths(ids, params.max_new_tokens, self.cfg.max_model_len)
        return self._map(lambda job: self._generate_one(*job, params), list(zip(prompts, ids)), "openai generate")

    def _generate_one(self, prompt: Prompt, prompt_ids: list[int], params: SamplingParams) -> Generation:
        text = self.render(prompt)
        payload: dict[str, Any] = {
            "model": self.served_model,
            "prompt": text,
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": params.n,
            "stop": list(params.stop) or None,
            "seed": params.seed,
            "logprobs": 0 if params.logprobs else None,
            "return_token_ids": True,
            "include_stop_str_in_output": True,
            "skip_special_tokens": True,
            "add_special_tokens": isinstance(prompt, str),
            **repetition_controls(params, self.cfg),  # llm.frequency_penalty (OpenAI's own)
        }
        base = {k: v for k, v in payload.items() if v is not None}
        payload = {**base, **self._constraint_fields(params.constraint)} if params.constraint is not None else base
        try:
            data = self._request("POST", "completions", payload)
        except ServerError as e:
            if "structured_outputs" not in payload or "HTTP 400" not in str(e) or "structured_outputs" not in str(e):
                raise
            # Not a vLLM server: the standard `response_format` for a JSON schema, free generation otherwise.
            self._structured_extension = False
            warn_unconstrained("openai", params.constraint.kind, f"server rejected `structured_outputs`: {e}")
            data = self._request("POST", "completions", {**base, **self._constraint_fields(params.constraint)})
        except ServerError as e:
            if "structured_outputs" not in payload or "HTTP 400" not in str(e) or "structured_outputs" not in str(e):
                raise
            # Not a vLLM server: keep the standard `response_format` (JSON) or generate freely.
            self._structured_extension = False
            warn_unconstrained("openai", params.constraint.kind, f"server rejected `structured_outputs`: {e}")
            payload.pop("structured_outputs")
            data = self._request("POST", "completions", payload)
        choices = sorted(data.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != params.n:
            raise ServerError(f"asked for {params.n} completions, the server returned {len(choices)}")
        prompt_ids = choices[0].get("prompt_token_ids") or prompt_ids
        comps = []
        for c in choices:
            ids = c.get("token_ids")
            if ids is None:  # a server without vLLM's return_token_ids
                ids = self.tokenizer.encode(c["text"], add_special_tokens=False)
            lps = None
            if params.logprobs:
                lps = (c.get("logprobs") or {}).get("token_logprobs")
                if lps is None or len(lps) != len(ids):
                    raise ServerError(f"server returned {None if lps is None else len(lps)} logprobs for "
                                      f"{len(ids)} tokens")
            comps.append(build_completion(self.tokenizer, ids, lps, params.stop, self.eos_token_ids))
        return Generation(prompt_text=text, prompt_token_ids=list(prompt_ids), completions=comps)

    def _constraint_fields(self, constraint: OutputConstraint) -> dict[str, Any]:
        """Request fields for a constraint: vLLM's ``structured_outputs`` extension (every kind; JSON as a grammar
        without free whitespace), or, on a server without it, OpenAI's standard ``response_format`` for a JSON
        schema (vLLM would refuse both at once: they are two constraints to it)."""
        if self._structured_extension:
            return {"structured_outputs": constraint.vllm_structured_outputs()}
        if constraint.json_schema is not None:
            return {"response_format": {"type": "json_schema",
                                        "json_schema": {"name": "output", "schema": constraint.schema,
                                                        "strict": True}}}
        warn_unconstrained("openai", constraint.kind, "the server has no `structured_outputs` extension")
        return {}

    # ---- scoring ----

    def next_token_probs(self, prompts: Sequence[Prompt], candidates: Sequence[str]) -> np.ndarray:
        cand = self.candidate_token_ids(candidates)
        self.check_prompt_lengths([self.prompt_token_ids(p) for p in prompts], 1, self.cfg.max_model_len)
        rows = self._map(lambda p: self._probs_one(p, cand), list(prompts), "openai next-token probs")
        return np.asarray(rows, dtype=np.float64).reshape(len(prompts), len(cand))

    def _probs_one(self, prompt: Prompt, cand: list[int]) -> list[float]:
        if self._candidate_extension:
            probs = self._probs_by_candidate_ids(prompt, cand)
            if probs is not None:
                return probs
            with self._lock:
                if self._candidate_extension:
                    self._candidate_extension = False
                    log.warning("openai backend: %s ignored `logprob_token_ids` (a vLLM older than the extension, "
                                "e.g. 0.19): scoring each candidate as a prompt token instead (echo + prompt "
                                "logprobs, one request per prompt)", self.cfg.base_url)
        return self._probs_by_echo(prompt, cand)

    def _probs_by_candidate_ids(self, prompt: Prompt, cand: list[int]) -> list[float] | None:
        """vLLM's ``logprob_token_ids``: the candidates' exact next-token log-probabilities. None when the answer
        lacks a candidate: a server without the extension ignores the field and returns its top-k only."""
        payload = {
            "model": self.served_model,
            "prompt": self.render(prompt),
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": len(cand),
            "logprob_token_ids": cand,
            "return_tokens_as_token_ids": True,  # keys "token_id:<id>" instead of ambiguous token strings
            "add_special_tokens": isinstance(prompt, str),
        }
        data = self._request("POST", "completions", payload)
        try:
            top = data["choices"][0]["logprobs"]["top_logprobs"][0]
        except (KeyError, IndexError, TypeError) as e:
            raise ServerError(f"no logprobs in the server's answer: {str(data)[:300]}") from e
        by_id = {int(k.split(":", 1)[1]): v for k, v in top.items() if k.startswith("token_id:")}
        if any(c not in by_id for c in cand):
            return None
        return [float(np.exp(by_id[c])) for c in cand]

    def _probs_by_echo(self, prompt: Prompt, cand: list[int]) -> list[float]:
        """The same probabilities from any vLLM: the prompt's token ids followed by one candidate, sent back with
        ``echo`` and prompt logprobs; the candidate's entry is log P(candidate | prompt) over the full vocabulary,
        exact whatever the top-k holds. Token ids, not text, so the server cannot re-tokenise the boundary."""
        ids = self.prompt_token_ids(prompt)
        payload = {
            "model": self.served_model,
            "prompt": [ids + [c] for c in cand],
            "max_tokens": 1,
            "temperature": 0.0,
            "echo": True,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
        }
        data = self._request("POST", "completions", payload)
        choices = sorted(data.get("choices", []), key=lambda c: c.get("index", 0))
        if len(choices) != len(cand):
            raise ServerError(f"asked to echo {len(cand)} prompts, the server returned {len(choices)} choices")
        out = []
        for c, choice in zip(cand, choices):
            lp = choice.get("logprobs") or {}
            values, tokens = lp.get("token_logprobs") or [], lp.get("tokens") or []
            if len(values) <= len(ids) or values[len(ids)] is None:
                raise ServerError(
                    f"the server echoed no prompt logprob for candidate id {c} ({len(values)} values for a "
                    f"{len(ids) + 1}-token prompt): next_token_probs needs vLLM's `logprob_token_ids` extension or "
                    f"`echo` with prompt logprobs")
            if len(tokens) > len(ids) and str(tokens[len(ids)]).startswith("token_id:") \
                    and int(str(tokens[len(ids)]).split(":", 1)[1]) != c:
                raise ServerError(f"the server echoed token {tokens[len(ids)]} where candidate id {c} was sent")
            out.append(float(np.exp(values[len(ids)])))
        return out

    def close(self) -> None:
        pool = getattr(self, "_pool", None)
        if pool is not None:
            pool.shutdown(wait=True)
            self._client.close()
            self._pool = None
