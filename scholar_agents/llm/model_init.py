"""Where a model's weights come from: its checkpoint (``pretrained``) or random draws from its ``config.json``
(``random``).

``random`` builds ``AutoModel*.from_config(AutoConfig.from_pretrained(dir))`` in the training dtype, seeded, so a
7B-shaped model with fewer layers trains (memory and speed checks, ``scripts/gpu_check.sh``) without a multi-GB
random checkpoint written first. The directory needs a ``config.json`` and, for the commands that read
text, a tokenizer; its ``vocab_size`` may exceed the tokenizer's (ids the tokenizer lacks decode to nothing).
Under ZeRO-3 (an ``HfDeepSpeedConfig`` alive) transformers' ``_from_config`` builds the model partitioned
(``deepspeed.zero.Init``), as ``from_pretrained`` does.
"""

from __future__ import annotations

from pathlib import Path

import torch

INITS = ("pretrained", "random")


def check_init(init: str, key: str) -> str:
    if init not in INITS:
        raise ValueError(f"{key} must be one of {list(INITS)}, got {init!r}")
    return init


def _from_config(auto_cls, path: str | Path, seed: int, **kwargs):
    from transformers import AutoConfig

    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(f"random init reads the architecture from {path}/config.json, which does not exist")
    config = AutoConfig.from_pretrained(str(path))
    # One seed for every model drawn from the same config: the policy, its reference and the value backbone (which
    # builds the same decoder first) start from the same weights, as they would from one checkpoint.
    # (only this rank's device: forking every visible GPU's RNG would open a CUDA context on each of them)
    with torch.random.fork_rng(devices=[torch.cuda.current_device()] if torch.cuda.is_available() else []):
        torch.manual_seed(seed)
        return auto_cls.from_config(config, **kwargs)


def load_causal_lm(path: str | Path, init: str = "pretrained", seed: int = 0, **kwargs):
    """``AutoModelForCausalLM`` from ``path``: its weights, or (``init="random"``) seeded random ones from its config.
    ``kwargs``: ``dtype``, ``attn_implementation``."""
    from transformers import AutoModelForCausalLM

    if check_init(init, "init") == "random":
        return _from_config(AutoModelForCausalLM, path, seed, **kwargs)
    return AutoModelForCausalLM.from_pretrained(str(path), **kwargs)


def load_base_model(path: str | Path, init: str = "pretrained", seed: int = 0, **kwargs):
    """The same for ``AutoModel`` (a backbone without the LM head: PPO's value model)."""
    from transformers import AutoModel

    if check_init(init, "init") == "random":
        return _from_config(AutoModel, path, seed, **kwargs)
    return AutoModel.from_pretrained(str(path), **kwargs)
