"""The training run's records, for the model card: :func:`collect_run_records` reads the config, data files and
metrics our trainers write next to their models (``SFT_DONE.json``, ``trainer_state.json``, ``metrics.json`` /
``metrics.jsonl``, the Hydra run dir's ``.hydra/config.yaml``), and :func:`git_info` the commit of the code doing
the export; a record that cannot be read is left out of the card with a warning, never an error.
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
from pathlib import Path
from typing import Any, Optional

import yaml

from scholar_agents.train.export.sources import Source
from scholar_agents.train.sft_checkpoints import last_checkpoint
from scholar_agents.validation import read_jsonl

log = logging.getLogger(__name__)


def read_json(path: Path) -> Optional[dict]:
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


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and not (isinstance(v, float) and math.isnan(v))


def collect_run_records(src: Source, run_dir: Optional[str | Path] = None) -> dict:
    """Training config, data and metrics from the files our trainers write next to their models.

    SFT: ``final/SFT_DONE.json`` (summary), the newest ``checkpoint-N/trainer_state.json`` (log history);
    PPO: the step's ``trainer_state.json`` (config, step), the run dir's ``metrics.json`` / ``metrics.jsonl``;
    both: the Hydra run dir's ``.hydra/config.yaml`` (``export.run_dir`` when it is elsewhere)."""
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
            summary = read_json(found[name])
    state = read_json(found["trainer_state.json"]) if "trainer_state.json" in found else None

    # Training config: the trainer's own section of the Hydra config, else what the checkpoint carries.
    if hydra_cfg:
        section = {k: hydra_cfg[k] for k in ("task_name", "sft", "ppo", "crawler", "llm", "selector")
                   if k in hydra_cfg}
        rec["config"] = section or hydra_cfg
    elif state and isinstance(state.get("config"), dict):  # PPO checkpoint: asdict(PPOConfig)
        rec["config"] = {"ppo": state["config"]}
    elif summary:
        rec["config"] = {k: v for k, v in summary.items() if k not in ("log_history",) and not is_number(v)}

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
                if is_number(v) and k not in ("epoch", "step", "total_flos"):
                    metrics[f"log.{k}"] = v
        if "global_step" in state:
            metrics.setdefault("global_step", state["global_step"])
        if "step" in state:  # PPO
            metrics.setdefault("ppo_step", state["step"])
    if "metrics.json" in found and (m := read_json(found["metrics.json"])):
        metrics.update({k: v for k, v in flatten(m).items() if is_number(v)})
    if "metrics.jsonl" in found and (row := _last_jsonl_row(found["metrics.jsonl"])):
        metrics.update({f"last_step.{k}": v for k, v in row.items() if is_number(v) and not k.startswith("timing")})
    rec["metrics"] = metrics
    return rec


def git_info() -> dict:
    """The commit of the code doing the export (the training commit is in the run's config when it was logged)."""
    repo = Path(__file__).resolve().parents[3]  # train/export/records.py -> the repository
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=10, check=True).stdout.strip())
        return {"commit": commit, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
