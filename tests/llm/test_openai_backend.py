"""The openai backend against a local fake of an OpenAI-compatible server (the outside world): retries with
backoff, timeouts, bounded concurrency, the API key, and the request it sends. The real vLLM server is exercised
in tests/llm/test_vllm_backend.py."""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from transformers import AutoTokenizer

from scholar_agents.llm import SamplingParams, build_llm
from scholar_agents.llm.config import LLMConfig
from scholar_agents.llm.openai_backend import ServerError
from tests.fixtures.llm import TINY_TOKENIZER_DIR

ANSWER = "graph neural networks"
OLD_SERVER_P = (0.11, 0.23, 0.37, 0.41, 0.53, 0.67, 0.71)  # the echo path's P(candidate id) = OLD_SERVER_P[id % 7]


class FakeServer:
    """Speaks the parts of vLLM's completions API the backend uses. ``failures`` is a list of what the first
    requests get instead of an answer: an HTTP status, "drop" (close the connection) or "slow" (answer late)."""

    def __init__(self, failures=(), delay_s=0.0, model="fake-model", candidate_extension=True):
        self.failures = list(failures)
        self.candidate_extension = candidate_extension  # False: a vLLM before `logprob_token_ids` (0.19)
        self.delay_s = delay_s
        self.model = model
        self.tok = AutoTokenizer.from_pretrained(str(TINY_TOKENIZER_DIR))
        self.requests: list[dict] = []
        self.auth: list[str | None] = []
        self.inflight = self.max_inflight = 0
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep pytest output clean
                pass

            def _reply(self, status, body):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                self._reply(200, {"data": [{"id": server.model}]})

            def do_POST(self):
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(payload)
                    server.auth.append(self.headers.get("Authorization"))
                    failure = server.failures.pop(0) if server.failures else None
                    server.inflight += 1
                    server.max_inflight = max(server.max_inflight, server.inflight)
                try:
                    if failure == "drop":
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    if failure == "slow":
                        time.sleep(1.5)
                    elif isinstance(failure, int):
                        headers_retry = {"error": {"message": f"fake failure {failure}"}}
                        self._reply(failure, headers_retry)
                        return
                    time.sleep(server.delay_s)
                    self._reply(200, server.answer(payload))
                finally:
                    with server.lock:
                        server.inflight -= 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def answer(self, payload: dict) -> dict:
        if payload.get("echo"):  # each prompt (token ids) echoed with its prompt logprobs, then one new token
            choices = []
            for i, ids in enumerate(payload["prompt"]):
                # None for the first token, then each prompt token's logprob (the last one: the candidate's)
                lps = [None] + [-7.0] * (len(ids) - 2) + [math.log(OLD_SERVER_P[ids[-1] % len(OLD_SERVER_P)]), -0.1]
                choices.append({"index": i, "text": "x", "logprobs": {
                    "token_logprobs": lps, "tokens": [f"token_id:{t}" for t in ids] + ["token_id:0"]}})
            return {"choices": choices}
        if payload.get("logprob_token_ids") and not self.candidate_extension:  # ignored: the top-k is elsewhere
            top = {"token_id:1": math.log(0.6), "token_id:2": math.log(0.3)}
            return {"choices": [{"index": 0, "text": "x", "logprobs": {"top_logprobs": [top]}}]}
        if payload.get("logprob_token_ids"):
            ids = payload["logprob_token_ids"]
            top = {f"token_id:{t}": math.log(0.5 / (k + 1)) for k, t in enumerate(ids)}
            return {"choices": [{"index": 0, "text": "x", "logprobs": {"top_logprobs": [top]}}]}
        ids = self.tok.encode(ANSWER, add_special_tokens=False)
        choices = []
        for j in range(payload.get("n", 1)):
            c = {"index": j, "text": ANSWER, "token_ids": ids,
                 "prompt_token_ids": self.tok.encode(payload["prompt"], add_special_tokens=False)}
            if payload.get("logprobs") is not None:
                c["logprobs"] = {"token_logprobs": [-0.5] * len(ids)}
            choices.append(c)
        return {"choices": choices}

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def fake():
    servers = []

    def start(**kw):
        servers.append(FakeServer(**kw))
        return servers[-1]

    yield start
    for s in servers:
        s.close()


def _llm(base_url, **kw):
    cfg = dict(backend="openai", model=str(TINY_TOKENIZER_DIR), base_url=base_url, retry_backoff_s=0.01,
               max_retries=3, timeout_s=10.0)
    return build_llm(LLMConfig(**{**cfg, **kw}))


def test_sends_our_rendered_chat_to_the_completions_endpoint(fake):
    server = fake()
    llm = _llm(server.base_url)
    chat = [{"role": "user", "content": "Find papers on retrieval."}]
    gen = llm.generate([chat], SamplingParams(max_new_tokens=9, stop=("\n",), logprobs=True, n=2))[0]
    sent = server.requests[-1]
    assert sent["model"] == "fake-model"  # discovered from /v1/models
    assert sent["prompt"] == llm.render(chat) and sent["prompt"].endswith("<|im_start|>assistant\n")
    assert sent["add_special_tokens"] is False and sent["include_stop_str_in_output"] is True
    assert (sent["max_tokens"], sent["n"], sent["stop"], sent["logprobs"]) == (9, 2, ["\n"], 0)
    assert [c.text for c in gen.completions] == [ANSWER, ANSWER]
    assert gen.prompt_token_ids == llm.prompt_token_ids(chat)
    assert gen.completions[0].logprobs == [-0.5] * len(gen.completions[0].token_ids)
    llm.close()


@pytest.mark.parametrize("failures", [[503, 500], [429], ["drop", 502], ["slow"]])
def test_transient_failures_are_retried(fake, failures):
    server = fake(failures=failures)
    llm = _llm(server.base_url, served_model_name="fake-model", timeout_s=0.5)
    gen = llm.generate(["Hello"], SamplingParams(max_new_tokens=4))[0]
    assert gen.text == ANSWER
    assert llm.retries == len(failures) and len(server.requests) == len(failures) + 1
    llm.close()


def test_gives_up_after_max_retries_with_the_last_error(fake):
    server = fake(failures=[503] * 10)
    llm = _llm(server.base_url, served_model_name="fake-model", max_retries=2)
    with pytest.raises(ServerError, match=r"after 3 attempts.*HTTP 503"):
        llm.generate(["Hello"], SamplingParams(max_new_tokens=4))
    assert len(server.requests) == 3
    llm.close()


def test_client_errors_are_not_retried(fake):
    server = fake(failures=[400])
    llm = _llm(server.base_url, served_model_name="fake-model")
    with pytest.raises(ServerError, match="HTTP 400.*fake failure"):
        llm.generate(["Hello"], SamplingParams(max_new_tokens=4))
    assert len(server.requests) == 1 and llm.retries == 0
    llm.close()


def test_unreachable_server_fails_clearly():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ServerError, match="ConnectError"):
        _llm(f"http://127.0.0.1:{port}/v1", max_retries=1)  # discovering the model already needs the server


def test_concurrency_is_bounded(fake):
    server = fake(delay_s=0.2)
    llm = _llm(server.base_url, served_model_name="fake-model", max_concurrency=3)
    gens = llm.generate([f"prompt {i}" for i in range(9)], SamplingParams(max_new_tokens=4))
    assert [g.prompt_text for g in gens] == [f"prompt {i}" for i in range(9)]  # results in the caller's order
    assert 2 <= server.max_inflight <= 3
    llm.close()


def test_api_key_comes_from_the_environment_and_is_never_logged(fake, monkeypatch, caplog):
    monkeypatch.setenv("SCHOLAR_TEST_API_KEY", "sk-very-secret")
    server = fake(failures=[503])
    with caplog.at_level(logging.DEBUG):
        llm = _llm(server.base_url, api_key_env="SCHOLAR_TEST_API_KEY")
        llm.generate(["Hello"], SamplingParams(max_new_tokens=4))
    assert set(server.auth) == {"Bearer sk-very-secret"}
    assert "sk-very-secret" not in caplog.text and "retry" in caplog.text
    llm.close()


def test_next_token_probs_use_exact_candidate_logprobs(fake):
    server = fake()
    llm = _llm(server.base_url)
    probs = llm.next_token_probs(["Is it?", [{"role": "user", "content": "x"}]], ["True", "False"])
    sent = server.requests[-1]
    assert sent["max_tokens"] == 1 and sent["logprob_token_ids"] == llm.candidate_token_ids(["True", "False"])
    assert probs.shape == (2, 2)
    assert probs[0].tolist() == pytest.approx([0.5, 0.25])
    llm.close()


def test_a_server_without_logprob_token_ids_scores_each_candidate_as_an_echoed_prompt_token(fake, caplog):
    """vLLM 0.19 (the CUDA 12 lock's) ignores `logprob_token_ids` and answers with its own top-k: the backend then
    sends prompt + candidate as token ids with `echo` and reads the candidate's prompt logprob, once told."""
    server = fake(candidate_extension=False)
    llm = _llm(server.base_url)
    cand = llm.candidate_token_ids(["True", "False"])
    prompts = ["Is it?", [{"role": "user", "content": "x"}]]
    with caplog.at_level(logging.WARNING):
        probs = llm.next_token_probs(prompts, ["True", "False"])
    expected = [OLD_SERVER_P[c % len(OLD_SERVER_P)] for c in cand]
    assert probs.tolist() == [pytest.approx(expected)] * 2
    echoed = [r["prompt"] for r in server.requests if r.get("echo")]
    # the prompts go out concurrently, so the server sees them in either order
    assert sorted(echoed) == sorted([[llm.prompt_token_ids(p) + [c] for c in cand] for p in prompts])
    assert sum("ignored `logprob_token_ids`" in r.message for r in caplog.records) == 1
    n = len(server.requests)
    llm.next_token_probs(["Again?"], ["True", "False"])
    assert [bool(r.get("echo")) for r in server.requests[n:]] == [True]  # no second try of the extension
    llm.close()


def test_bad_openai_configs_raise(fake):
    with pytest.raises(ValueError, match="base_url"):
        _llm("127.0.0.1:8000/v1")
    with pytest.raises(ValueError, match="max_concurrency"):
        _llm("http://127.0.0.1:1/v1", max_concurrency=0)
