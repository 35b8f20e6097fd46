"""Device and dtype choice for local models.

Measured on the project's 2-core AMX machines (ARCHITECTURE.md): a SmolLM2 forward is ~3.6x faster in bf16 than
in fp32, but CPUs without native bf16 (no AMX / AVX512-BF16) emulate it and are slower than fp32, so "auto"
must detect the instruction set rather than assume.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

# The package's one dtype map. DTYPE_NAMES: torch's spellings (``torch.<name>``), the only names the training
# settings (sft.model_dtype, ppo.model_dtype, export.dtype) take; llm.dtype also takes the aliases.
DTYPE_NAMES = ("float32", "bfloat16", "float16")
_DTYPES = {"bfloat16": "bfloat16", "bf16": "bfloat16", "float16": "float16", "fp16": "float16",
           "half": "float16", "float32": "float32", "fp32": "float32", "float": "float32"}


@functools.lru_cache(maxsize=1)
def cpu_supports_bf16() -> bool:
    """True when the CPU computes bf16 natively (Intel AMX-BF16 or AVX512-BF16)."""
    import torch.cpu

    for probe in ("_is_amx_tile_supported", "_is_avx512_bf16_supported"):  # private torch API: probe, fall back
        fn = getattr(torch.cpu, probe, None)
        if fn is not None and fn():
            return True
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        flags = cpuinfo.read_text(errors="ignore")
        return "amx_bf16" in flags or "avx512_bf16" in flags
    return False


def resolve_device(name: str) -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; anything else is passed through."""
    if name != "auto":
        return name
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_dtype_name(name: str, device: str) -> str:
    """``auto`` -> bf16 on bf16-capable GPUs and CPUs, fp16 on older GPUs, fp32 on other CPUs."""
    if name != "auto":
        if name not in _DTYPES:
            raise ValueError(f"unknown dtype {name!r}; use auto, bfloat16, float16 or float32")
        return _DTYPES[name]
    import torch

    if device.startswith("cuda"):
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    return "bfloat16" if cpu_supports_bf16() else "float32"


def resolve_torch_dtype(name: str, device: str):
    import torch

    return getattr(torch, resolve_dtype_name(name, device))


def named_torch_dtype(name: str, setting: str, choices: Sequence[str] = DTYPE_NAMES):
    """``torch.<name>`` for a setting that takes torch's spellings only (:data:`DTYPE_NAMES`); any other name is one
    ``ValueError("<setting> must be <choices, |-joined>, got <name>")``. ``choices`` is what the message lists: a
    setting whose ``auto`` the caller resolves first lists it too."""
    if name not in DTYPE_NAMES:
        raise ValueError(f"{setting} must be {'|'.join(choices)}, got {name!r}")
    import torch

    return getattr(torch, name)
