"""The source loaded for the merge: :func:`load_source_model` gives the model as trained in fp32 (a full model, or the
base with the LoRA adapter applied but not merged), :func:`load_tokenizer` its tokenizer with a chat template,
:func:`generation_config_for` the generation config the export ships (with the eos / pad ids vLLM stops on), and
:func:`source_dtype` the dtype ``export.dtype=auto`` keeps.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from scholar_agents.llm.precision import named_torch_dtype
from scholar_agents.train.export.config import DTYPES
from scholar_agents.train.export.records import read_json
from scholar_agents.train.export.sources import Source


def torch_dtype(name: str):
    return named_torch_dtype(name, "export.dtype", DTYPES)


def source_dtype(config_dir: Path) -> str:
    cfg = read_json(config_dir / "config.json") or {}
    name = str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32").removeprefix("torch.")
    return name if name in DTYPES[1:] else "float32"


def load_source_model(src: Source):
    """The source as trained, in fp32: a full model, or the base with the adapter applied but NOT merged."""
    import torch
    from transformers import AutoModelForCausalLM

    if src.kind == "full":
        return AutoModelForCausalLM.from_pretrained(str(src.model_dir), dtype=torch.float32).eval()
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(str(src.base_model), dtype=torch.float32)
    return PeftModel.from_pretrained(base, str(src.model_dir)).eval()


def load_tokenizer(src: Source, chat_template: Optional[str]):
    from transformers import AutoTokenizer

    if (src.model_dir / "tokenizer_config.json").is_file():
        tok_dir = src.model_dir
    elif src.base_model:
        tok_dir = Path(str(src.base_model))
    else:
        raise ValueError(f"{src.model_dir} has no tokenizer (tokenizer_config.json); save it with the model")
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    if chat_template:
        tok.chat_template = Path(chat_template).expanduser().read_text()
    if not tok.chat_template:
        raise ValueError(f"the tokenizer in {tok_dir} has no chat template and the Selector / Crawler prompts are "
                         f"chats; pass export.chat_template=<file.jinja>")
    return tok


def generation_config_for(src: Source, model, tokenizer):
    from transformers import GenerationConfig

    for d in (src.model_dir, Path(str(src.base_model)) if src.base_model else None):
        if d is not None and (d / "generation_config.json").is_file():
            gen = GenerationConfig.from_pretrained(str(d))
            break
    else:
        gen = getattr(model, "generation_config", None) or GenerationConfig()
    # vLLM and HF generate stop on these: a missing eos makes a served model ramble until max_tokens.
    if gen.eos_token_id is None:
        gen.eos_token_id = tokenizer.eos_token_id
    if gen.pad_token_id is None:
        gen.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return gen
