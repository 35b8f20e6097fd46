"""Which attention kernel a trained model loads with (``attn_implementation`` of ``from_pretrained``).

flash-attn is its own CUDA build (``pip install '.[flash]'``, compiled on the node) outside the ``gpu`` install, and
transformers raises at ``from_pretrained`` when ``flash_attention_2`` is asked for without it (it falls back to hub
kernels only with ``kernels`` installed and the hub reachable). So the 7B presets ask for ``auto``: flash attention
where the package imports and CUDA is there (the official PaSa command uses it), PyTorch's sdpa otherwise — both
exact attention, with the same activation memory in ``scholar plan``. One log line per process says which.
"""

from __future__ import annotations

import functools
import logging

from scholar_agents.validation import UsageError

log = logging.getLogger(__name__)

AUTO = "auto"


def flash_attn_status() -> tuple[bool, str]:
    """(usable, why): whether ``flash_attn`` imports and CUDA is available. A build against another torch fails
    at import with an undefined symbol (OSError/ImportError), so the import itself is the check."""
    try:
        import flash_attn
    except Exception as e:  # noqa: BLE001 - any import failure means "not usable here"
        return False, f"flash_attn does not import ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    import torch

    version = getattr(flash_attn, "__version__", "?")
    if not torch.cuda.is_available():
        return False, f"flash_attn {version} imports but CUDA is not available"
    return True, f"flash_attn {version} imports and CUDA is available"


@functools.lru_cache(maxsize=None)
def _resolve(requested: str | None, setting: str) -> str | None:
    if requested is None or requested == "":
        return None  # transformers' own default (sdpa where torch has it)
    if requested == AUTO:
        usable, why = flash_attn_status()
        chosen = "flash_attention_2" if usable else "sdpa"
        log.info("attention: %s (%s=auto: %s)", chosen, setting, why)
        return chosen
    if requested == "flash_attention_2":
        usable, why = flash_attn_status()
        if not usable:
            raise UsageError(f"{setting}=flash_attention_2 but {why}: use {setting}=auto (flash attention where it "
                             f"imports, else sdpa) or {setting}=sdpa, or install it on the GPU node "
                             f"(pip install '.[flash]', docs/cluster.md)")
    log.info("attention: %s (%s)", requested, setting)
    return requested


def resolve_attn_implementation(requested: str | None, setting: str = "attn_implementation") -> str | None:
    """The ``attn_implementation`` to pass to ``from_pretrained``: ``auto`` -> ``flash_attention_2`` when flash-attn
    imports and CUDA is available, else ``sdpa``; an explicit ``flash_attention_2`` that cannot load is refused in
    one line (a silent switch would make a run measure another kernel than it says); anything else (``sdpa``,
    ``eager``, ...) as asked; null = transformers' default. Logged once per process and setting."""
    return _resolve(None if requested is None else str(requested), setting)
