"""The ``export`` config of ``scholar train export`` (``conf/train_export.yaml``): :class:`ExportConfig` with its
model card settings, the dtypes an export may be cast to, the name of the report written beside the weights, and
:func:`to_export_config`, which checks the combinations a dataclass cannot (a push needs a hub repo id).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from scholar_agents.llm.precision import DTYPE_NAMES
from scholar_agents.typed_config import typed

DTYPES = ("auto", *DTYPE_NAMES)
EXPORT_REPORT = "export_report.json"


@dataclass
class ModelCardSettings:
    title: Optional[str] = None  # null = the export name
    description: Optional[str] = None  # one paragraph on top of the card; null = what the source was
    license: Optional[str] = None  # front-matter license (e.g. apache-2.0, the Qwen2.5 licence); null = omitted
    language: list = field(default_factory=lambda: ["en"])
    tags: list = field(default_factory=lambda: ["scholar-agents", "pasa"])


@dataclass
class ExportConfig:
    source: str = MISSING  # a training output (see sources.py)
    base_model: Optional[str] = None  # LoRA only: the base to merge into; null = the adapter's base_model_name_or_path
    name: Optional[str] = None  # null = derived from the source path (e.g. selector_sft)
    output_dir: Optional[str] = None  # null = <paths.output_root>/exported/<name>
    overwrite: bool = False  # replace an existing export at output_dir
    dtype: str = "auto"  # auto = the source's dtype (config.json); float32 | bfloat16 | float16
    chat_template: Optional[str] = None  # a .jinja file when the source's tokenizer has none
    run_dir: Optional[str] = None  # the training run's Hydra dir (config, metrics) when it is not next to the source
    validate: bool = True
    # |Δ logit| <= atol + rtol * max|logit| for the two exact checks (merged vs unmerged in fp32; written vs in
    # memory). The drift a 16-bit cast causes is measured and reported, not bounded: it is ~5% of the logit scale
    # on SmolLM2 in bf16 (measured), the same for a correct and a broken export.
    atol: float = 1.0e-3
    rtol: float = 1.0e-4
    min_top1_16bit: float = 0.9  # warn when the 16-bit export's greedy tokens agree less often with fp32
    push: bool = False
    hub_repo_id: Optional[str] = None  # e.g. my-org/pasa-selector-7b
    hub_private: bool = True
    card: ModelCardSettings = field(default_factory=ModelCardSettings)


def to_export_config(node: Any) -> ExportConfig:
    cfg = typed(ExportConfig, node, "export")
    if cfg.dtype not in DTYPES:
        raise ValueError(f"export.dtype must be one of {DTYPES}, got {cfg.dtype!r}")
    if cfg.push and not cfg.hub_repo_id:
        raise ValueError("export.push=true needs export.hub_repo_id=<owner/name>")
    return cfg
