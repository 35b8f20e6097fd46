"""``scholar train crawler_sft``: the Crawler's imitation learning (PaSa §4.2, App. A.1) with the shared SFT recipe
(:mod:`scholar_agents.train.sft`). The data are Table 8 sessions — an S_q or S_{q+p} prompt
(``pasa.prompts.crawler_search_messages`` / ``crawler_expand_messages``) answered with
``[Search] q1 [Search] q2 [Stop]`` / ``[Expand] s1 [Stop]`` — as written by ``data_gen crawler_sessions``; the loss
is on the response only, and the result (``<output_dir>/final``) is an HF directory the crawl environment, PPO and
``vllm serve`` load directly.

``heldout.fraction > 0`` holds out a share of the *user queries* (``meta.qid``; every session of a query goes to the
same side) as the eval split: the held-out loss then measures generalisation to unseen queries, not to unseen
sessions of a seen query. The split files and ``train_qids.txt`` (for ``eval pasa queries.exclude_qids_file=``) are
written to ``<sft.output_dir>/split`` — a stable place, so that a resumed run trains on the same split.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

from omegaconf import DictConfig

from scholar_agents.plan.commands import startup_window_check
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.train.plan_runs import sft_run
from scholar_agents.train.sft import run_sft

log = logging.getLogger(__name__)


def split_sessions_by_query(train_file: str | Path, out_dir: str | Path, fraction: float, seed: int = 0) -> dict:
    """Split session JSONL (rows with ``meta.qid``) into ``train.jsonl`` / ``heldout.jsonl`` by user query.

    The held-out queries are the ``round(fraction * n_queries)`` (at least 1) with the smallest
    ``sha1(f"{seed}:{qid}")``: deterministic, independent of file order. Also writes ``train_qids.txt`` and
    ``heldout_qids.txt`` (one qid a line)."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"heldout.fraction must be in (0, 1), got {fraction}")
    train_file, out_dir = Path(train_file), Path(out_dir)
    rows: list[tuple[str, str]] = []
    for i, line in enumerate(train_file.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        qid = (json.loads(line).get("meta") or {}).get("qid")
        if not qid:
            raise ValueError(f"{train_file}:{i}: a held-out split by query needs meta.qid on every session "
                             f"(as written by data_gen crawler_sessions)")
        rows.append((str(qid), line))
    qids = sorted({q for q, _ in rows})
    if len(qids) < 2:
        raise ValueError(f"{train_file}: {len(qids)} distinct queries; a held-out split needs at least 2")
    n_held = min(len(qids) - 1, max(1, round(fraction * len(qids))))
    held = set(sorted(qids, key=lambda q: hashlib.sha1(f"{seed}:{q}".encode()).hexdigest())[:n_held])
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / f"{name}.jsonl" for name in ("train", "heldout")}
    with paths["train"].open("w", encoding="utf-8") as ft, paths["heldout"].open("w", encoding="utf-8") as fh:
        for qid, line in rows:
            (fh if qid in held else ft).write(line + "\n")
    (out_dir / "train_qids.txt").write_text("".join(f"{q}\n" for q in qids if q not in held))
    (out_dir / "heldout_qids.txt").write_text("".join(f"{q}\n" for q in sorted(held)))
    stats = {"queries": len(qids), "heldout_queries": len(held), "sessions": len(rows),
             "heldout_sessions": sum(q in held for q, _ in rows),
             "train_file": str(paths["train"]), "eval_file": str(paths["heldout"]),
             "train_qids_file": str(out_dir / "train_qids.txt")}
    (out_dir / "split.json").write_text(json.dumps(stats, indent=2))
    return stats


def crawler_sft(cfg: DictConfig) -> dict:
    startup_window_check(sft_run(cfg))  # under Slurm: the signal lead against one step + checkpoint (one log line)
    split = None
    fraction = float((cfg.get("heldout") or {}).get("fraction") or 0.0)
    if fraction > 0:
        if cfg.sft.get("eval_file"):
            raise ValueError("set either heldout.fraction or sft.eval_file, not both")
        split = split_sessions_by_query(cfg.sft.train_file, Path(cfg.sft.output_dir) / "split", fraction,
                                        int(cfg.heldout.get("seed") or 0))
        log.info("held out %d of %d queries (%d of %d sessions): %s", split["heldout_queries"], split["queries"],
                 split["heldout_sessions"], split["sessions"], split["eval_file"])
        cfg.sft.train_file, cfg.sft.eval_file = split["train_file"], split["eval_file"]
    summary = run_sft(cfg.sft, logging_cfg=cfg.get("logging"), report_dir=run_dir(cfg),
                      dist_timeout_minutes=(cfg.get("cluster") or {}).get("dist_timeout_minutes"))
    if split is not None:
        summary["split"] = split
    if summary.get("skipped"):
        log.info("crawler SFT already finished: %s", summary.get("final_dir"))
    else:
        log.info("crawler SFT: %d steps, loss %s, model in %s", summary["global_step"],
                 "n/a" if summary["train_loss"] is None else f"{summary['train_loss']:.4f}", summary["final_dir"])
    evals = [h for h in summary.get("log_history", []) if "eval_loss" in h]
    if evals:
        log.info("held-out eval loss by step: %s", ", ".join(f"{h['step']}: {h['eval_loss']:.4f}" for h in evals))
    return summary
