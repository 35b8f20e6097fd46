"""What an export's source is: :func:`resolve_source` finds the model directory inside a training output (an SFT
output dir, ``final/`` or ``checkpoint-N/``; a PPO run dir, its ``checkpoints/`` or one ``step_NNNNNN/``; any HF
model or PEFT adapter directory) and returns a :class:`Source`: the full model or LoRA adapter to export, the base
an adapter merges into, and the directories where the run's records lie. :func:`default_name` names the export.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from scholar_agents.llm.factory import resolve_model_path
from scholar_agents.train.sft import FINAL_DIRNAME
from scholar_agents.train.sft_checkpoints import last_checkpoint

log = logging.getLogger(__name__)


@dataclass
class Source:
    """A resolved training output: the model directory to export and where its run's records are."""

    given: Path
    model_dir: Path  # the full model or the adapter
    kind: str  # "full" | "lora"
    origin: str  # "sft" | "ppo" | "hf"
    base_model: Optional[str] = None  # lora: the resolved base directory / hub name
    record_dirs: list[Path] = field(default_factory=list)  # where to look for config / metrics, nearest first
    adapter: dict = field(default_factory=dict)  # lora: adapter_config.json


def _has_weights(d: Path) -> bool:
    return (d / "config.json").is_file() and (
        any(d.glob("*.safetensors")) or any(d.glob("pytorch_model*.bin")))


def _is_adapter(d: Path) -> bool:
    return (d / "adapter_config.json").is_file()


def _ppo_checkpoint_root(d: Path) -> Optional[Path]:
    # lazy: ppo.checkpoint imports torch (importing this module stays light)
    from scholar_agents.train.ppo.checkpoint import LATEST

    if (d / LATEST).is_file() or any(d.glob("step_*/COMPLETE")):
        return d
    if (d / "checkpoints").is_dir():
        return _ppo_checkpoint_root(d / "checkpoints")
    return None


def resolve_source(source: str | Path, base_model: Optional[str] = None) -> Source:
    """Find the model directory inside a training output (the layouts of the package docstring)."""
    # lazy: ppo.checkpoint imports torch (importing this module stays light)
    from scholar_agents.train.ppo.checkpoint import COMPLETE, latest_checkpoint

    given = Path(source).expanduser().resolve()
    if not given.is_dir():
        raise FileNotFoundError(f"export.source: no directory {given}")
    d, origin = given, "hf"
    if (d / COMPLETE).is_file() and (d / "policy").is_dir():  # one PPO checkpoint
        d, origin = d / "policy", "ppo"
    elif (root := _ppo_checkpoint_root(d)) is not None:  # a PPO run dir or its checkpoints/
        ckpt = latest_checkpoint(root)
        if ckpt is None:
            raise ValueError(f"{root} holds no complete PPO checkpoint (no step_*/COMPLETE)")
        d, origin = ckpt / "policy", "ppo"
    elif (d / FINAL_DIRNAME).is_dir():  # an SFT output dir
        d, origin = d / FINAL_DIRNAME, "sft"
    elif not (_has_weights(d) or _is_adapter(d)) and (ckpt := last_checkpoint(d)):  # SFT dir, unfinished
        d, origin = Path(ckpt), "sft"
        log.warning("%s has no %s/: exporting its newest checkpoint %s", given, FINAL_DIRNAME, d.name)
    if origin == "hf":
        if (d / "SFT_DONE.json").is_file() or d.name.startswith("checkpoint-"):
            origin = "sft"
        elif d.name == "policy" and (d.parent / COMPLETE).is_file():
            origin = "ppo"

    if origin == "ppo":  # policy/ -> step dir -> checkpoints root -> run dir
        records = [d, d.parent, d.parent.parent, d.parent.parent.parent]
    else:  # final/ or checkpoint-N/ -> sft.output_dir
        records = [d, d.parent]

    if _is_adapter(d):
        adapter = json.loads((d / "adapter_config.json").read_text())
        base = base_model or adapter.get("base_model_name_or_path")
        if not base:
            raise ValueError(f"{d}/adapter_config.json names no base model; pass export.base_model=<HF dir>")
        base = resolve_model_path(str(base))
        if not Path(base).is_dir() and (base.startswith(("/", ".", "~")) or os.environ.get("HF_HUB_OFFLINE") == "1"):
            raise FileNotFoundError(f"the adapter's base model {base!r} is not a local directory (moved, or a hub "
                                    f"name with HF_HUB_OFFLINE=1); pass export.base_model=<HF dir of the base>")
        return Source(given, d, "lora", origin, base_model=base, record_dirs=records, adapter=adapter)
    if _has_weights(d):
        return Source(given, d, "full", origin, record_dirs=records)
    raise ValueError(f"{d} is neither an HF model directory (config.json + *.safetensors) nor a PEFT adapter "
                     f"(adapter_config.json), nor an SFT output dir (final/, checkpoint-N/) or a PPO run / "
                     f"checkpoint dir (latest, step_*/policy/)")


def default_name(src: Source) -> str:
    """A readable export name: the SFT run name, the PPO run dir's name, else the directory's own."""
    if src.origin == "sft":
        return src.model_dir.parent.name
    if src.origin == "ppo":
        return f"{src.record_dirs[3].name}_{src.model_dir.parent.name}"
    return src.model_dir.name
