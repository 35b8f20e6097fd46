"""The model card (``README.md``) of an export: hub front matter (base model, licence, tags), the model, its
training data, metrics and configuration (``records.py``), the export check's result, the provenance and how to
serve it, written by :func:`model_card`.
"""

from __future__ import annotations

from typing import Any

import yaml

from scholar_agents.train.export.config import ExportConfig
from scholar_agents.train.export.records import is_number
from scholar_agents.train.export.sources import Source


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
    numeric = {k: v for k, v in records["metrics"].items() if is_number(v)}
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

    lines += ["## Usage", "", "```bash", f"vllm serve <this dir> --served-model-name {name}   # CUDA install; on either: scholar llm serve model=<this dir> served_model_name={name}",
              f"scholar pasa search llm=openai_server llm.model=<this dir> llm.served_model_name={name} ...",
              "```", "",
              "```python", "from transformers import AutoModelForCausalLM, AutoTokenizer",
              "tok = AutoTokenizer.from_pretrained(path)", "model = AutoModelForCausalLM.from_pretrained(path)",
              "```", ""]
    return "\n".join(lines)
