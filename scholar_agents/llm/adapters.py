"""PEFT LoRA adapters on a base model (``llm.adapter``; ours): the embedded default Crawler is SmolLM2 plus the
LoRA adapter shipped in ``scholar_agents/assets/crawler_adapter`` (made by ``scripts/train_default_crawler.sh``).

- hf backend: the adapter is loaded with PEFT (safetensors only) and merged into the base weights, so generation
  runs at the base model's speed (:func:`apply_adapter`);
- vllm backend: merged once into a cached plain checkpoint under ``<cache>/models/merged/`` (the same
  once-per-cache-dir conversion as the embedded GGUF -> HF one), which vLLM loads like any model
  (:func:`merged_checkpoint`); no LoRA serving path;
- openai backend: refused (the server holds the weights: serve the merged checkpoint instead).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from scholar_agents.llm.embedded import convert_once, default_cache_dir

log = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


def resolve_adapter(path: str) -> Path:
    """The adapter directory, checked: PEFT config + safetensors weights (a pickled ``adapter_model.bin`` is never
    loaded), a LoRA adapter. Raises ``ValueError`` naming what is missing."""
    d = Path(str(path)).expanduser()
    if not d.is_dir():
        raise ValueError(f"llm.adapter={path}: not a directory (a PEFT LoRA adapter: {ADAPTER_CONFIG} + "
                         f"{ADAPTER_WEIGHTS}); null = the base model")
    if not (d / ADAPTER_CONFIG).is_file():
        raise ValueError(f"llm.adapter={path}: {ADAPTER_CONFIG} is missing")
    if not (d / ADAPTER_WEIGHTS).is_file():
        raise ValueError(f"llm.adapter={path}: {ADAPTER_WEIGHTS} is missing (adapters are loaded from safetensors "
                         f"only)")
    cfg = json.loads((d / ADAPTER_CONFIG).read_text())
    if cfg.get("peft_type") != "LORA":
        raise ValueError(f"llm.adapter={path}: peft_type {cfg.get('peft_type')!r}; only LoRA adapters are supported")
    return d


def adapter_fingerprint(path: str | Path) -> str:
    """A content hash of the adapter's config and weights (a few MB): the response cache and the merged-checkpoint
    cache key on it, so a retrained adapter never reuses the old one's outputs."""
    d = Path(path)
    h = hashlib.sha256()
    for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
        h.update(name.encode())
        h.update((d / name).read_bytes())
    return h.hexdigest()[:16]


def apply_adapter(model, adapter_dir: str | Path):
    """``model`` with the LoRA adapter merged into its weights (a plain transformers model again)."""
    from peft import PeftModel

    peft_model = PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=False, use_safetensors=True)
    merged = peft_model.merge_and_unload()
    merged.eval()
    log.info("LoRA adapter %s merged into the model", adapter_dir)
    return merged


def merged_checkpoint(model_path: str, adapter_dir: str | Path, cache_dir: str | Path | None = None) -> Path:
    """A plain HF checkpoint of ``model_path`` + the adapter, merged once per (base, adapter) into
    ``<cache>/models/merged/<adapter dir name>-<fingerprint>`` (for vLLM, which then loads it as any model)."""
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    base_key = hashlib.sha256(str(Path(model_path).resolve()).encode()).hexdigest()[:8]
    target = root / "models" / "merged" / f"{Path(adapter_dir).name}-{adapter_fingerprint(adapter_dir)}-{base_key}"

    def merge(out: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        apply_adapter(model, adapter_dir).save_pretrained(str(out), safe_serialization=True)
        AutoTokenizer.from_pretrained(model_path).save_pretrained(str(out))
        gen = Path(model_path) / "generation_config.json"
        if gen.is_file():
            (out / "generation_config.json").write_text(gen.read_text())

    return convert_once(target, merge)
