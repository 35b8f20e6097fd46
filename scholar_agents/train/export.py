"""``scholar train export export.source=<training output>``: one HF safetensors directory to serve (vLLM) or share.

Sources it understands (the directory layouts our trainers write):
- an SFT output dir (``sft.output_dir``: ``checkpoint-N/`` + ``final/``) -> ``final/``, else the newest checkpoint;
- an SFT ``final/`` or ``checkpoint-N/``: a full model, or a PEFT LoRA adapter (``sft.lora.merge_on_save=false``,
  ZeRO-3, or an intermediate checkpoint of a LoRA run);
- a PPO run dir, its ``checkpoints/`` root or one ``step_NNNNNN/`` (``train/ppo/checkpoint.py``) -> ``policy/``
  of the newest complete checkpoint (a full model, or the LoRA adapter of a ``ppo.lora.enabled`` run);
- any HF model directory or PEFT adapter directory.

A LoRA adapter is merged into its base (``merge_and_unload``, in fp32: adding a small low-rank delta to bf16
weights would round much of it away) and then cast to ``export.dtype``. The output has the weights
(safetensors only), config, tokenizer + chat template (the Selector and the Crawler render prompts with it),
``generation_config.json`` and a model card ``README.md`` (training config, data, metrics, git commit, the
validation result). It is written under a temporary name and renamed when complete.

Validation (``export.validate``), on the logits of a Selector and a Crawler prompt: (1) for LoRA, the merged model
against the *unmerged* PEFT model in fp32, so a wrong merge (wrong scaling, a missed module, a stale adapter) fails
the export instead of shipping; (2) the written directory, loaded back with transformers (tokenizer and chat
template rendering the same ids), against the model that was written. A 16-bit export's drift from the fp32 source
is measured and reported in the model card.

Push (``export.push=true`` + ``export.hub_repo_id``): uploads the directory to the Hugging Face Hub with the token
from ``HF_TOKEN`` (never from config, never logged); needs network and ``HF_HUB_OFFLINE=0`` set explicitly, since
every command runs hub-offline by default.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml
from omegaconf import MISSING, DictConfig, OmegaConf

from scholar_agents.llm.precision import DTYPE_NAMES, named_torch_dtype
from scholar_agents.runtime.run_dir import run_dir as run_output_dir
from scholar_agents.validation import read_jsonl

log = logging.getLogger(__name__)

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
    source: str = MISSING  # a training output (see the module docstring)
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
    if isinstance(node, ExportConfig):
        cfg = node
    else:
        cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ExportConfig), node))
    if cfg.dtype not in DTYPES:
        raise ValueError(f"export.dtype must be one of {DTYPES}, got {cfg.dtype!r}")
    if cfg.push and not cfg.hub_repo_id:
        raise ValueError("export.push=true needs export.hub_repo_id=<owner/name>")
    return cfg


# ---------------------------------------------------------------------------------------------------------------
# what the source is


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
    from scholar_agents.train.ppo.checkpoint import LATEST

    if (d / LATEST).is_file() or any(d.glob("step_*/COMPLETE")):
        return d
    if (d / "checkpoints").is_dir():
        return _ppo_checkpoint_root(d / "checkpoints")
    return None


def resolve_source(source: str | Path, base_model: Optional[str] = None) -> Source:
    """Find the model directory inside a training output (see the module docstring)."""
    from scholar_agents.train.ppo.checkpoint import COMPLETE, latest_checkpoint
    from scholar_agents.train.sft import FINAL_DIRNAME, last_checkpoint

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
        from scholar_agents.llm.factory import resolve_model_path

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


# ---------------------------------------------------------------------------------------------------------------
# the run's records, for the model card


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        log.warning("could not read %s (%s): left out of the model card", path, e)
        return None


def _last_jsonl_row(path: Path) -> Optional[dict]:
    rows = read_jsonl(path, on_bad=lambda line_no, reason: None)  # a line cut by a killed job is left out
    return rows[-1] if rows else None


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            out.update(flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = d
    return out


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def collect_run_records(src: Source, run_dir: Optional[str | Path] = None) -> dict:
    """Training config, data and metrics from the files our trainers write next to their models.

    SFT: ``final/SFT_DONE.json`` (summary), the newest ``checkpoint-N/trainer_state.json`` (log history);
    PPO: the step's ``trainer_state.json`` (config, step), the run dir's ``metrics.json`` / ``metrics.jsonl``;
    both: the Hydra run dir's ``.hydra/config.yaml`` (``export.run_dir`` when it is elsewhere)."""
    from scholar_agents.train.sft import last_checkpoint

    dirs = ([Path(run_dir).expanduser().resolve()] if run_dir else []) + src.record_dirs
    found: dict[str, Path] = {}
    for d in dirs:
        for name in ("SFT_DONE.json", "sft_summary.json", "trainer_state.json", "metrics.json", "metrics.jsonl",
                     ".hydra/config.yaml"):
            if name not in found and (d / name).is_file():
                found[name] = d / name
    if src.origin == "sft" and "trainer_state.json" not in found:
        ckpt = last_checkpoint(src.model_dir.parent)
        if ckpt and (Path(ckpt) / "trainer_state.json").is_file():
            found["trainer_state.json"] = Path(ckpt) / "trainer_state.json"

    rec: dict[str, Any] = {"files": {k: str(v) for k, v in sorted(found.items())}, "config": None, "data": {},
                           "metrics": {}}
    hydra_cfg = None
    if ".hydra/config.yaml" in found:
        hydra_cfg = yaml.safe_load(found[".hydra/config.yaml"].read_text()) or {}
    summary = None
    for name in ("SFT_DONE.json", "sft_summary.json"):
        if name in found and summary is None:
            summary = _read_json(found[name])
    state = _read_json(found["trainer_state.json"]) if "trainer_state.json" in found else None

    # Training config: the trainer's own section of the Hydra config, else what the checkpoint carries.
    if hydra_cfg:
        section = {k: hydra_cfg[k] for k in ("task_name", "sft", "ppo", "crawler", "llm", "selector")
                   if k in hydra_cfg}
        rec["config"] = section or hydra_cfg
    elif state and isinstance(state.get("config"), dict):  # PPO checkpoint: asdict(PPOConfig)
        rec["config"] = {"ppo": state["config"]}
    elif summary:
        rec["config"] = {k: v for k, v in summary.items() if k not in ("log_history",) and not _is_number(v)}

    # Data: every configured file the trainer read.
    flat_cfg = flatten(hydra_cfg or {}) | flatten({"sft": summary or {}})
    for k, v in flat_cfg.items():
        leaf = k.rsplit(".", 1)[-1]
        if (isinstance(v, str) and v and leaf.endswith(("_file", "_path", "queries", "papers"))
                and "model" not in leaf and not leaf.startswith("cache")):
            rec["data"][k] = v
    if summary:
        for k in ("train_examples", "train_examples_dropped_overlong", "effective_batch", "world_size"):
            if k in summary:
                rec["data"][k] = summary[k]

    # Metrics: summaries first, then the last logged values.
    metrics: dict[str, Any] = {}
    if summary:
        metrics.update({k: v for k, v in summary.items() if k in ("global_step", "train_loss", "train_seconds")})
    if state:
        history = state.get("log_history") or []
        for row in history:  # HF Trainer: the last value of each logged quantity
            for k, v in row.items():
                if _is_number(v) and k not in ("epoch", "step", "total_flos"):
                    metrics[f"log.{k}"] = v
        if "global_step" in state:
            metrics.setdefault("global_step", state["global_step"])
        if "step" in state:  # PPO
            metrics.setdefault("ppo_step", state["step"])
    if "metrics.json" in found and (m := _read_json(found["metrics.json"])):
        metrics.update({k: v for k, v in flatten(m).items() if _is_number(v)})
    if "metrics.jsonl" in found and (row := _last_jsonl_row(found["metrics.jsonl"])):
        metrics.update({f"last_step.{k}": v for k, v in row.items() if _is_number(v) and not k.startswith("timing")})
    rec["metrics"] = metrics
    return rec


def git_info() -> dict:
    """The commit of the code doing the export (the training commit is in the run's config when it was logged)."""
    repo = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout.strip())
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


# ---------------------------------------------------------------------------------------------------------------
# merge, save, validate


def _torch_dtype(name: str):
    return named_torch_dtype(name, "export.dtype", DTYPES)


def source_dtype(config_dir: Path) -> str:
    cfg = _read_json(config_dir / "config.json") or {}
    name = str(cfg.get("dtype") or cfg.get("torch_dtype") or "float32").removeprefix("torch.")
    return name if name in DTYPES[1:] else "float32"


def validation_prompts() -> list[list[dict]]:
    """A Selector (Table 15) and a Crawler (Table 7) prompt: what the exported model will be asked."""
    from scholar_agents.pasa.prompts import crawler_search_messages, selector_messages

    query = "Which papers study reinforcement learning for literature search agents?"
    return [
        selector_messages(query, "PaSa: An LLM Agent for Comprehensive Academic Paper Search",
                          "We introduce PaSa, an advanced paper search agent powered by large language models."),
        crawler_search_messages(query),
    ]


def _render_ids(tokenizer, prompts: list[list[dict]]) -> list[list[int]]:
    return [list(tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True,
                                               return_dict=True)["input_ids"]) for p in prompts]


def _logits(model, ids: list[list[int]]) -> list:
    import torch

    with torch.no_grad():
        return [model(input_ids=torch.tensor([x])).logits[0].float() for x in ids]


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


def compare_logits(ref: list, got: list, atol: float, rtol: float) -> dict:
    import torch

    max_abs = max(float((a - b).abs().max()) for a, b in zip(ref, got))
    scale = max(float(a.abs().max()) for a in ref)
    top1 = float(torch.cat([(a.argmax(-1) == b.argmax(-1)).float() for a, b in zip(ref, got)]).mean())
    bound = atol + rtol * scale
    return {"max_abs_logit_diff": max_abs, "max_abs_logit": scale, "tolerance": bound, "top1_agreement": top1,
            "ok": max_abs <= bound}


def _fail_unless(result: dict, what: str) -> None:
    if not result["ok"]:
        raise RuntimeError(f"export check failed: {what} by {result['max_abs_logit_diff']:.3g} > "
                           f"{result['tolerance']:.3g} (top-1 agreement {result['top1_agreement']:.4f})")


def check_saved_files(out: Path) -> dict:
    """The weights are safetensors only and no adapter leaked into them."""
    from safetensors import safe_open

    weights = sorted(out.glob("*.safetensors"))
    if not weights:
        raise RuntimeError(f"{out}: no *.safetensors written")
    if list(out.glob("*.bin")) or list(out.glob("*.pt")):
        raise RuntimeError(f"{out}: pickle weights written next to the safetensors")
    n_tensors = 0
    for w in weights:
        with safe_open(str(w), framework="pt") as f:
            keys = list(f.keys())
        leaked = [k for k in keys if "lora_" in k or ".base_layer." in k]
        if leaked:
            raise RuntimeError(f"{w.name}: adapter tensors left after the merge, e.g. {leaked[:3]}")
        n_tensors += len(keys)
    return {"weight_files": [w.name for w in weights], "tensors": n_tensors}


# ---------------------------------------------------------------------------------------------------------------
# the model card


def _yaml_block(obj: Any) -> str:
    return yaml.safe_dump(obj, sort_keys=False, allow_unicode=True, default_flow_style=False).rstrip()


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)


def model_card(cfg: ExportConfig, name: str, src: Source, records: dict, info: dict) -> str:
    front: dict[str, Any] = {"library_name": "transformers", "pipeline_tag": "text-generation"}
    config = records.get("config") or {}
    base = src.base_model or (config.get("sft") or {}).get("model") or (config.get("ppo") or {}).get("policy_model")
    if base and not str(base).startswith(("/", ".", "~", "embedded:")):
        front["base_model"] = str(base)  # a hub name; local paths and embedded: names mean nothing to the hub
    if cfg.card.license:
        front["license"] = cfg.card.license
    if cfg.card.language:
        front["language"] = list(cfg.card.language)
    front["tags"] = list(cfg.card.tags) + [t for t in (src.origin,) if t != "hf"]

    what = {"sft": "supervised fine-tuning (`scholar train selector_sft` / `crawler_sft`)",
            "ppo": "session-level PPO (`scholar train crawler_ppo`)", "hf": "an HF model directory"}[src.origin]
    lines = ["---", _yaml_block(front), "---", "", f"# {cfg.card.title or name}", ""]
    lines += [cfg.card.description or f"Exported by scholar-agents `train export` from {what}.", ""]

    lines += ["## Model", "", "| | |", "|---|---|",
              f"| architecture | {info['architecture']} |",
              f"| parameters | {info['parameters']:,} |",
              f"| dtype | {info['dtype']} |",
              f"| source | `{src.model_dir}` ({src.kind}, from {src.origin}) |"]
    if src.kind == "lora":
        a = src.adapter
        targets = a.get("target_modules")
        if isinstance(targets, list):  # PEFT stores full module paths: show the distinct layer kinds
            targets = ", ".join(sorted({str(t).rsplit(".", 1)[-1] for t in targets}))
        lines += [f"| base model | `{src.base_model}` |",
                  f"| LoRA (merged) | r={a.get('r')}, alpha={a.get('lora_alpha')}, targets: {targets} |"]
    lines += [f"| chat template | {'yes' if info['chat_template'] else 'no'} |", ""]

    lines += ["## Training data", ""]
    if records["data"]:
        lines += [f"- `{k}`: {_fmt(v)}" for k, v in records["data"].items()]
    else:
        lines += ["No data records were found next to the source (pass `export.run_dir=<training run dir>`)."]
    lines += [""]

    lines += ["## Metrics", ""]
    numeric = {k: v for k, v in records["metrics"].items() if _is_number(v)}
    if numeric:
        lines += ["| metric | value |", "|---|---|"] + [f"| {k} | {_fmt(v)} |" for k, v in numeric.items()]
    else:
        lines += ["No metrics were found next to the source."]
    lines += [""]

    lines += ["## Training configuration", ""]
    if records["config"]:
        lines += ["```yaml", _yaml_block(records["config"]), "```"]
    else:
        lines += ["No training configuration was found next to the source."]
    lines += [""]

    v = info.get("validation") or {}
    lines += ["## Export check", ""]
    if v:
        lines += [f"Logits on a Selector and a Crawler prompt ({v['tokens']} positions), fp32 compute:", ""]
        if "merge" in v:
            m = v["merge"]
            lines += [f"- merged vs unmerged LoRA model (fp32): max |Δ logit| = {m['max_abs_logit_diff']:.3g} "
                      f"(tolerance {m['tolerance']:.3g})"]
        sv = v["saved"]
        lines += [f"- this directory, loaded with transformers, vs the model that was written: max |Δ logit| = "
                  f"{sv['max_abs_logit_diff']:.3g} (tolerance {sv['tolerance']:.3g})"]
        if "dtype_drift" in v:
            d = v["dtype_drift"]
            lines += [f"- {info['dtype']} weights vs the fp32 source: max |Δ logit| = {d['max_abs_logit_diff']:.3g} "
                      f"(max |logit| {d['max_abs_logit']:.3g}), greedy next token agrees at "
                      f"{100 * d['top1_agreement']:.1f}% of positions"]
    else:
        lines += ["Not validated (`export.validate=false`)."]
    lines += [""]

    g = info["git"]
    lines += ["## Provenance", "",
              (f"- scholar-agents commit at export: `{g.get('commit')}`"
               f"{' + uncommitted changes' if g.get('dirty') else ''}"),
              f"- exported: {info['exported_at']}",
              f"- record files: {', '.join(f'`{p}`' for p in records['files'].values()) or 'none'}", ""]

    lines += ["## Usage", "", "```bash", f"vllm serve <this dir> --served-model-name {name}",
              f"scholar pasa search llm=openai_server llm.model=<this dir> llm.served_model_name={name} ...",
              "```", "",
              "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
              "tok = AutoTokenizer.from_pretrained(path)", "model = AutoModelForCausalLM.from_pretrained(path)",
              "```", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# push


def check_push_environment() -> str:
    """The token for a push (from HF_TOKEN only), checked before any work is done."""
    token = os.environ.get("HF_TOKEN")
    if not token:
        raise ValueError("export.push=true needs HF_TOKEN in the environment (a write token; never put it in config)")
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "false", "False", ""):
        raise ValueError("export.push=true needs network: every scholar command runs with HF_HUB_OFFLINE=1 unless "
                         "you export HF_HUB_OFFLINE=0 in the shell that runs the export")
    return token


def push_to_hub(out: Path, repo_id: str, private: bool) -> str:
    """Upload ``out``; the token never reaches a log line or an error message."""
    token = check_push_environment()
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type="model")
        commit = api.upload_folder(folder_path=str(out), repo_id=repo_id, repo_type="model",
                                   commit_message="scholar-agents train export", ignore_patterns=[EXPORT_REPORT])
    except Exception as e:  # noqa: BLE001 — re-raised without the request details that could carry the token
        raise RuntimeError(f"push to {repo_id} failed: {type(e).__name__}: {str(e).replace(token, '***')}") from None
    url = getattr(commit, "commit_url", None) or f"https://huggingface.co/{repo_id}"
    log.info("pushed %s to %s", out, url)
    return str(url)


# ---------------------------------------------------------------------------------------------------------------
# the command


def export_model(cfg: ExportConfig, default_root: Path) -> dict:
    """Resolve, merge, save, validate, write the card; returns the report (also ``<out>/export_report.json``)."""
    import torch

    if cfg.push:
        check_push_environment()  # fail before minutes of merging, not after
    src = resolve_source(cfg.source, cfg.base_model)
    name = cfg.name or default_name(src)
    out = Path(cfg.output_dir).expanduser() if cfg.output_dir else default_root / name
    out = out.resolve()
    if out == src.model_dir or src.model_dir in out.parents:
        raise ValueError(f"export.output_dir {out} must not be the source directory or inside it")
    if out.exists() and any(out.iterdir()) and not cfg.overwrite:
        raise FileExistsError(f"{out} already exists; pass export.overwrite=true or another export.output_dir")
    log.info("exporting %s (%s, from %s)%s -> %s", src.model_dir, src.kind, src.origin,
             f" merged into {src.base_model}" if src.kind == "lora" else "", out)

    tokenizer = load_tokenizer(src, cfg.chat_template)
    model = load_source_model(src)
    ids = _render_ids(tokenizer, validation_prompts()) if cfg.validate else []
    reference = _logits(model, ids) if cfg.validate else []
    validation: dict = {"tokens": sum(len(x) for x in ids)} if cfg.validate else {}
    if src.kind == "lora":
        model = model.merge_and_unload()  # fp32 merge: W + (alpha/r) B A
        if cfg.validate:  # check 1: the merge is exact (in fp32, before any cast)
            validation["merge"] = compare_logits(reference, _logits(model, ids), cfg.atol, cfg.rtol)
            _fail_unless(validation["merge"], "the merged model's logits differ from the unmerged adapter's")
    dtype = cfg.dtype if cfg.dtype != "auto" else source_dtype(
        src.model_dir if src.kind == "full" else Path(str(src.base_model)))
    expected = reference if src.kind == "full" or not cfg.validate else _logits(model, ids)
    if dtype != "float32":
        if cfg.validate:  # the rounded weights, computed in fp32 like the reload below: what must be written
            with torch.no_grad():  # round the parameters only: buffers (RoPE's inv_freq) are rebuilt in fp32 on load
                for prm in model.parameters():
                    prm.data = prm.data.to(_torch_dtype(dtype)).to(torch.float32)
            expected = _logits(model, ids)
            validation["dtype_drift"] = compare_logits(reference, expected, cfg.atol, cfg.rtol)
            drift = validation["dtype_drift"]
            log.info("%s cast: max |Δ logit| %.3g vs fp32 (max |logit| %.3g), top-1 agreement %.4f", dtype,
                     drift["max_abs_logit_diff"], drift["max_abs_logit"], drift["top1_agreement"])
            if drift["top1_agreement"] < cfg.min_top1_16bit:
                log.warning("the %s export's greedy next tokens agree with fp32 on only %.1f%% of positions",
                            dtype, 100 * drift["top1_agreement"])
        model = model.to(_torch_dtype(dtype))  # after the rounding above: exact
    gen = generation_config_for(src, model, tokenizer)
    model.generation_config = gen

    tmp = out.with_name(out.name + ".tmp")
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tokenizer.save_pretrained(str(tmp))
    gen.save_pretrained(str(tmp))
    files = check_saved_files(tmp)
    del model

    if cfg.validate:  # check 2: the directory loads with transformers and computes what was in memory
        from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

        exported = AutoModelForCausalLM.from_pretrained(str(tmp), dtype=torch.float32).eval()
        tok2 = AutoTokenizer.from_pretrained(str(tmp))
        GenerationConfig.from_pretrained(str(tmp))
        if _render_ids(tok2, validation_prompts()) != ids:
            shutil.rmtree(tmp)
            raise RuntimeError("the exported tokenizer / chat template renders the validation prompts differently "
                               "from the source's; nothing was written")
        validation["saved"] = compare_logits(expected, _logits(exported, ids), cfg.atol, cfg.rtol)
        del exported
        try:
            _fail_unless(validation["saved"], "the written directory's logits differ from the model in memory")
        except RuntimeError:
            shutil.rmtree(tmp)
            raise
        validation["ok"] = True
        # vs the source as trained (for LoRA: unmerged), whatever the dtype: what the model card reports
        validation["vs_source"] = validation.get("dtype_drift") or validation.get("merge") or validation["saved"]
        log.info("export check: merge %s, written vs memory max |Δ logit| %.3g (tolerance %.3g)",
                 "exact" if "merge" in validation else "n/a (full weights)",
                 validation["saved"]["max_abs_logit_diff"], validation["saved"]["tolerance"])

    hf_config = _read_json(tmp / "config.json") or {}
    n_params = sum(int(math.prod(t)) for t in _tensor_shapes(tmp))
    info = {
        "name": name,
        "source": str(src.given),
        "model_dir": str(src.model_dir),
        "kind": src.kind,
        "origin": src.origin,
        "base_model": src.base_model,
        "dtype": dtype,
        "architecture": ", ".join(hf_config.get("architectures") or ["?"]),
        "parameters": n_params,
        "chat_template": bool(tokenizer.chat_template),
        "git": git_info(),
        "exported_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "validation": validation,
        **files,
    }
    records = collect_run_records(src, cfg.run_dir)
    (tmp / "README.md").write_text(model_card(cfg, name, src, records, info), encoding="utf-8")
    report = {**info, "output_dir": str(out), "records": records["files"], "metrics": records["metrics"]}
    (tmp / EXPORT_REPORT).write_text(json.dumps(report, indent=2, default=str))

    if out.exists():
        shutil.rmtree(out)  # overwrite=true (checked above)
    os.replace(tmp, out)
    if cfg.push:
        report["hub_url"] = push_to_hub(out, str(cfg.hub_repo_id), cfg.hub_private)
    return report


def _tensor_shapes(d: Path):
    from safetensors import safe_open

    for w in sorted(d.glob("*.safetensors")):
        with safe_open(str(w), framework="pt") as f:
            for k in f.keys():  # noqa: SIM118 — safe_open handles are not dicts
                yield f.get_slice(k).get_shape()


def train_export(cfg: DictConfig) -> dict:
    ecfg = to_export_config(cfg.export)
    default_root = Path(str(cfg.paths.output_root)) / "exported"
    report = export_model(ecfg, default_root)
    run = run_output_dir(cfg)
    (run / "export_summary.json").write_text(json.dumps(report, indent=2, default=str))
    v = (report.get("validation") or {}).get("vs_source")
    log.info("exported %s -> %s (%s, %s params%s)", report["model_dir"], report["output_dir"], report["dtype"],
             f"{report['parameters']:,}", f", max |Δ logit| vs source {v['max_abs_logit_diff']:.3g}" if v else "")
    return report
