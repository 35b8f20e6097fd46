"""``scholar train export``, the command: :func:`train_export` (the task function) and :func:`export_model`, which
resolves the source, loads it in fp32, merges a LoRA adapter, casts, saves under a temporary name, validates,
writes the model card and ``export_report.json``, renames the directory into place and pushes when asked. What each
step does is in its module (see the package docstring).
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import os
import shutil
from pathlib import Path

from omegaconf import DictConfig

from scholar_agents.runtime.run_dir import run_dir as run_output_dir
from scholar_agents.train.export.config import EXPORT_REPORT, ExportConfig, to_export_config
from scholar_agents.train.export.hub import check_push_environment, push_to_hub
from scholar_agents.train.export.load import (
    generation_config_for,
    load_source_model,
    load_tokenizer,
    source_dtype,
    torch_dtype,
)
from scholar_agents.train.export.model_card import model_card
from scholar_agents.train.export.records import collect_run_records, git_info, read_json
from scholar_agents.train.export.sources import default_name, resolve_source
from scholar_agents.train.export.validate import (
    check_saved_files,
    compare_logits,
    fail_unless,
    prompt_logits,
    render_ids,
    validation_prompts,
)

log = logging.getLogger(__name__)


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
    ids = render_ids(tokenizer, validation_prompts()) if cfg.validate else []
    reference = prompt_logits(model, ids) if cfg.validate else []
    validation: dict = {"tokens": sum(len(x) for x in ids)} if cfg.validate else {}
    if src.kind == "lora":
        model = model.merge_and_unload()  # fp32 merge: W + (alpha/r) B A
        if cfg.validate:  # check 1: the merge is exact (in fp32, before any cast)
            validation["merge"] = compare_logits(reference, prompt_logits(model, ids), cfg.atol, cfg.rtol)
            fail_unless(validation["merge"], "the merged model's logits differ from the unmerged adapter's")
    dtype = cfg.dtype if cfg.dtype != "auto" else source_dtype(
        src.model_dir if src.kind == "full" else Path(str(src.base_model)))
    expected = reference if src.kind == "full" or not cfg.validate else prompt_logits(model, ids)
    if dtype != "float32":
        if cfg.validate:  # the rounded weights, computed in fp32 like the reload below: what must be written
            with torch.no_grad():  # round the parameters only: buffers (RoPE's inv_freq) are rebuilt in fp32 on load
                for prm in model.parameters():
                    prm.data = prm.data.to(torch_dtype(dtype)).to(torch.float32)
            expected = prompt_logits(model, ids)
            validation["dtype_drift"] = compare_logits(reference, expected, cfg.atol, cfg.rtol)
            drift = validation["dtype_drift"]
            log.info("%s cast: max |Δ logit| %.3g vs fp32 (max |logit| %.3g), top-1 agreement %.4f", dtype,
                     drift["max_abs_logit_diff"], drift["max_abs_logit"], drift["top1_agreement"])
            if drift["top1_agreement"] < cfg.min_top1_16bit:
                log.warning("the %s export's greedy next tokens agree with fp32 on only %.1f%% of positions",
                            dtype, 100 * drift["top1_agreement"])
        model = model.to(torch_dtype(dtype))  # after the rounding above: exact
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
        if render_ids(tok2, validation_prompts()) != ids:
            shutil.rmtree(tmp)
            raise RuntimeError("the exported tokenizer / chat template renders the validation prompts differently "
                               "from the source's; nothing was written")
        validation["saved"] = compare_logits(expected, prompt_logits(exported, ids), cfg.atol, cfg.rtol)
        del exported
        try:
            fail_unless(validation["saved"], "the written directory's logits differ from the model in memory")
        except RuntimeError:
            shutil.rmtree(tmp)
            raise
        validation["ok"] = True
        # vs the source as trained (for LoRA: unmerged), whatever the dtype: what the model card reports
        validation["vs_source"] = validation.get("dtype_drift") or validation.get("merge") or validation["saved"]
        log.info("export check: merge %s, written vs memory max |Δ logit| %.3g (tolerance %.3g)",
                 "exact" if "merge" in validation else "n/a (full weights)",
                 validation["saved"]["max_abs_logit_diff"], validation["saved"]["tolerance"])

    hf_config = read_json(tmp / "config.json") or {}
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
