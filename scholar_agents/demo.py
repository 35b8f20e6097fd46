"""``scholar demo`` — the main job, end to end on the embedded defaults (SmolLM2, MiniLM, the bundled sample).

The demo is a pipeline of the project's real commands, each run exactly as a user would type it
(``python -m scholar_agents <group> <command> overrides``) into its own sub-directory of the demo's run dir, followed
by the demo's own analysis of their outputs. Stages, their commands and overrides are listed in ``conf/demo.yaml``;
``stages=[index,search_bm25]`` runs a subset, ``resume_dir=<a previous demo run>`` skips the stages that finished
there. The default pipeline: index -> search -> synthesised queries -> Selector pairs + Crawler sessions -> Selector
SFT -> Crawler SFT -> PPO (value warm-up) -> export -> evaluation on held-out queries (21.4 min measured on 2 idle
CPU cores from an empty cache). At the end it writes ``report.md`` (+ ``report.json`` and plots) and prints where
they are: the held-out agent rows (after SFT, after PPO) beside the search-only rows with bootstrap 95 % intervals in
both settings, the Selectors beside their zero-shot baselines, what the PPO stage did, and the wall time.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from scholar_agents.eval.metrics import roc_auc
from scholar_agents.eval.pasa.report import comparisons_table, crawler_pairs_table, markdown_table
from scholar_agents.eval.pasa.rows import WHOLE_CORPUS_SUFFIX
from scholar_agents.eval.selector import scorer_table
from scholar_agents.llm import build_llm
from scholar_agents.papers.corpus import to_papers_config
from scholar_agents.papers.store import PaperStore
from scholar_agents.pasa.selectors.llm import Selector, SelectorPair
from scholar_agents.runtime.run_dir import run_dir
from scholar_agents.validation import UsageError, read_jsonl

log = logging.getLogger(__name__)
DONE = ".done"


def _run_command(name: str, spec: DictConfig, stage_dir: Path, run_dir: Path) -> dict[str, Any]:
    """Run one stage's CLI command in a subprocess, tee its output to ``stage_dir/stage.log``. ``{run}`` in an
    override is the demo's run dir (later stages read what earlier ones wrote there)."""
    overrides = [str(o).replace("{run}", str(run_dir)) for o in spec.get("overrides", [])]
    args = [sys.executable, "-m", "scholar_agents", *spec.command, *overrides, f"hydra.run.dir={stage_dir}"]
    log.info("stage %s: %s", name, " ".join(args[2:]))
    t = time.perf_counter()
    with (stage_dir / "stage.log").open("w") as logf:
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stdout is not None
        for line in proc.stdout:
            logf.write(line)
            if spec.get("echo", True):
                sys.stdout.write(f"  [{name}] {line}")
        rc = proc.wait()
    if rc != 0:
        raise RuntimeError(f"demo stage {name!r} failed (exit {rc}); its log: {stage_dir / 'stage.log'}")
    return {"seconds": time.perf_counter() - t}


def _recall_at(hits: list[str], gold: set[str], k: int) -> float:
    return len(set(hits[:k]) & gold) / len(gold) if gold else float("nan")


def _search_metrics(results_path: Path, gold: dict[str, set[str]], ks: list[int]) -> dict[str, Any]:
    data = json.loads(results_path.read_text())
    per_k = {k: [] for k in ks}
    for r in data["results"]:
        g = gold.get(r["qid"], set())
        if not g:
            continue
        ids = [h["paper_id"] for h in r["hits"]]
        for k in ks:
            per_k[k].append(_recall_at(ids, g, k))
    return {f"recall@{k}": (sum(v) / len(v) if v else float("nan")) for k, v in per_k.items()} | {
        "queries": len(per_k[ks[0]])}


def _select_stage(cfg: DictConfig, search_results: Path, gold: dict[str, set[str]], out: Path) -> dict[str, Any]:
    """Score each query's top hits with the Selector (SmolLM2, one forward pass per pair: P("True")) and measure
    how well P("True") separates gold papers from the other hits (AUC) — the untrained base model's baseline."""
    data = json.loads(search_results.read_text())
    pcfg = to_papers_config(cfg.papers)
    pairs, labels = [], []
    with PaperStore(pcfg.store, readonly=True) as store:
        for r in data["results"]:
            ids = [h["paper_id"] for h in r["hits"][: int(cfg.select.top_k)]]
            papers = store.get_many(ids, with_sections=False)
            for pid in ids:
                if pid in papers:
                    pairs.append(SelectorPair.of(r["query"], papers[pid], label=pid in gold.get(r["qid"], set()),
                                                 qid=r["qid"]))
                    labels.append(pid in gold.get(r["qid"], set()))
    llm = build_llm(cfg.llm)
    selector = Selector.from_config(llm, cfg.selector)
    t = time.perf_counter()
    scores = selector.score(pairs, show_progress=True)
    seconds = time.perf_counter() - t
    rows = [{"qid": p.qid, "paper_id": p.paper_id, "title": p.title, "gold": bool(y), "p_true": float(s)}
            for p, y, s in zip(pairs, labels, scores)]
    (out / "selector_scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    decided = scores >= selector.threshold
    tp = int(sum(d and y for d, y in zip(decided, labels)))
    metrics = {
        "pairs": len(pairs),
        "gold_pairs": int(sum(labels)),
        "auc": roc_auc(labels, scores.tolist()) if 0 < sum(labels) < len(labels) else float("nan"),
        "selected": int(decided.sum()),
        "precision": tp / int(decided.sum()) if decided.sum() else float("nan"),
        "recall": tp / int(sum(labels)) if sum(labels) else float("nan"),
        "pairs_per_second": len(pairs) / seconds if seconds else float("nan"),
        "model": llm.model_id,
    }
    llm.close()
    return metrics


def _dig(obj: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            return None
        obj = obj[part]
    return obj


def _stage_metrics(spec: DictConfig, stage_dir: Path) -> dict[str, Any] | None:
    """The figures a stage's own output file holds (``metrics: {file, keys}`` in conf/demo.yaml)."""
    m = spec.get("metrics")
    if not m:
        return None
    path = stage_dir / str(m.file)
    if not path.is_file():
        log.warning("stage output %s not found: no figures for the report", path)
        return {"missing": str(path)}
    data = json.loads(path.read_text())
    if m.get("keys"):
        return {k: _dig(data, k) for k in m["keys"]}
    flat = {k: v for k, v in data.items() if isinstance(v, (int, float, str, bool)) or v is None}
    return dict(list(flat.items())[:14])


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def _plot_recall(search: dict[str, dict[str, Any]], ks: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, m in search.items():
        ax.plot(ks, [m[f"recall@{k}"] for k in ks], marker="o", label=name)
    ax.set_xlabel("k")
    ax.set_ylabel("recall@k (gold papers)")
    ax.set_title("Search on the bundled AutoScholarQuery sample")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _selector_section(out: Path) -> list[str]:
    """The base and the tuned Selector on the held-out pairs, beside the zero-shot baselines."""
    names = ("eval_selector_base", "eval_selector_tuned", "eval_selector_embedding")
    found = {n: json.loads((out / n / "metrics.json").read_text())
             for n in names if (out / n / "metrics.json").is_file()}
    if not found:
        return []
    first = next(iter(found.values()))
    scorers = [(f"Selector: {d['meta'].get('name', n)}"
                + (f" ({d['metrics']['n']} of the pairs)" if d["metrics"]["n"] != first["metrics"]["n"] else ""),
                d["metrics"]) for n, d in found.items()]
    labels = first["meta"].get("baseline_labels", {})
    scorers += [(labels.get(b, b), m) for b, m in (first.get("baselines") or {}).items()]
    n = first["metrics"].get("n")
    verdict = ""
    for stage, what in (("eval_selector_tuned", "tuned SmolLM2 Selector"),
                        ("eval_selector_embedding", "embedding Selector (the CPU default)")):
        d = found.get(stage)
        if d is None or not d.get("baselines"):
            continue
        best_b = max(d["baselines"].items(), key=lambda kv: kv[1]["auc"])
        auc = d["metrics"]["auc"]
        dropped = d["meta"].get("excluded_fitted_pairs")
        on = f" on {d['metrics']['n']} pairs ({dropped} of queries it was fitted on left out)" if dropped else ""
        verdict += (f" The {what}'s AUC {auc:.3f}{on} is **{'above' if auc > best_b[1]['auc'] else 'below'}** the "
                    f"best zero-shot baseline on the same pairs ({labels.get(best_b[0], best_b[0])}, "
                    f"{best_b[1]['auc']:.3f}).")
    return ["", "## Selector on held-out pairs, beside zero-shot baselines", "",
            f"{n} (query, paper) pairs of queries not used for Selector training.{verdict}", "",
            *scorer_table(scorers)]


def _ppo_note(out: Path) -> str:
    """What the PPO stage did, read from its metrics.json (never assumed from the config)."""
    path = out / "ppo" / "metrics.json"
    if not path.is_file():
        return ""
    m = json.loads(path.read_text())
    steps, freeze = m["train"]["steps"], m["ppo"]["policy_freeze_steps"]
    ret = (f"session return {m['train']['session_return_first']:.3f} at step 1, "
           f"{m['train']['session_return_last']:.3f} at step {steps}" if m["train"].get("session_return_first")
           is not None else "")
    if steps <= freeze:
        return (f"**PPO stage: value warm-up only.** The policy was frozen for all {steps} steps "
                f"(ppo.policy_freeze_steps={freeze}, PaSa §5.1's first phase): the value model learned the session "
                f"returns ({ret}) and the policy after PPO is the SFT policy. Policy steps have not shown a held-out "
                "gain on real data: 32 steps from the shipped Crawler left its held-out crawler recall where it was "
                "(BM25 and hybrid search), with the embedded Selector's reward (which accepts every paper, so Eq. 2 "
                "pays for any paper and PPO learns to search more) and without it (docs/results/ppo_real_data.md, \"Real data, long "
                "enough to tell\"). The critic-free estimators (ppo.estimator=grpo|rloo, whole crawls with a group "
                "baseline) are proven on the known-answer tasks; on real queries all four estimators "
                "(grpo, rloo, paper_mc, gae) ran 30 steps at an equal rollout budget and none added held-out recall "
                "(three left every held-out query's recall unchanged, gae lost one gold paper; docs/results/ppo_estimators_real.md, \"Real "
                "queries: the four estimators\"), and the best of them (rloo) trained 100 steps on every request form "
                "plateaued: training gold hits a session 0.51 -> 0.94, held-out recall 0.472 -> 0.470 in the original "
                "phrasing and +0.002 to +0.017 in the request forms, every paired interval touching 0 (docs/results/ppo_estimators_real.md, "
                "\"The longer run\"). Every policy kept writing one search a crawl, where the verified teacher's gain "
                "comes from two or three; crawls forced to search twice (ppo.forced_members) found no more gold than "
                "free ones (0.65 vs 0.70 a crawl over 30 steps: docs/results/ppo_estimators_real.md, \"Forcing a second search\"), so the "
                "demo takes policy steps with none of them. "
                "`stage_specs.ppo` takes policy steps when ppo.policy_freeze_steps < ppo.total_steps. Training "
                "curves: ppo/training_curves.png.")
    return (f"PPO stage: {steps - freeze} policy update steps after {freeze} value warm-up steps ({ret}). "
            "Training curves: ppo/training_curves.png.")


def _shipped_crawler_section(asset_dir: Path | None = None) -> list[str]:
    """The shipped default Crawler against the search it wraps on held-out dev queries, in every request form:
    the tables `scripts/crawler_phrasings.sh` wrote beside the adapter (the shared corpus is
    not bundled, so the demo quotes them rather than re-running them)."""
    path = (asset_dir or Path(__file__).resolve().parent / "assets" / "crawler_adapter") / "evaluation.md"
    if not path.is_file():
        return []
    return ["", "## The shipped default Crawler vs search-only, held-out queries in researchers' phrasings", "",
            "Not re-run by the demo (it needs the shared corpus): `scholar_agents/assets/crawler_adapter/"
            "evaluation.md`, the adapter the demo's `pasa search` uses.", "", path.read_text().strip()]


def _pasa_section(out: Path) -> list[str]:
    """The held-out `eval pasa` rows: agents after SFT / PPO beside search-only, with intervals, both settings."""
    path = out / "eval_pasa" / "summary.json"
    if not path.is_file():
        return []
    data = json.loads(path.read_text())
    labels = {}
    for r in data["meta"].get("rows", []):
        labels[r["name"]] = r.get("label") or r["name"]
        labels[r["name"] + WHOLE_CORPUS_SUFFIX] = labels[r["name"]] + " [whole corpus]"
    lines = ["", "## PaSa on held-out queries: the agent after SFT and after PPO beside search-only", "",
             f"Queries: {data['meta'].get('queries')}. Setting: {data['meta'].get('setting')}. Search backend: "
             f"{data['meta'].get('search', '')}. Mean over queries with the "
             "95 % bootstrap interval in brackets.", "", markdown_table(data["summary"], labels)]
    if data.get("common_queries"):
        lines += [f"On the {data['common_queries']['n']} queries every row ran (the agent rows' queries):", "",
                  markdown_table(data["common_queries"]["summary"], labels)]
    if data.get("comparisons"):
        lines += ["### Crawler vs search-only, paired on the same queries (difference, 95 % bootstrap interval)", "",
                  comparisons_table(data["comparisons"], labels)]
    if data.get("crawler_pairs"):
        lines += ["### Crawler rows against each other (e.g. after PPO minus after SFT)", "",
                  crawler_pairs_table(data["crawler_pairs"], labels)]
    note = _ppo_note(out)
    if note:
        lines += [note]
    lines += ["", "Full report: [eval_pasa/report.md](eval_pasa/report.md)."]
    return lines


def _write_report(out: Path, cfg: DictConfig, stages: dict[str, Any], search: dict[str, Any],
                  select: dict[str, Any] | None, ks: list[int]) -> Path:
    total = sum(float(s.get("seconds", 0.0)) for s in stages.values())
    lines = ["# scholar-agents demo", "",
             f"**Wall time: {total / 60:.1f} min** (the stages' own times summed over every run that made them; "
             f"{os.cpu_count()} CPU cores here).", "",
             (f"Corpus: `{cfg.papers.name}` (bundled sample; citations for [Expand] from its full-text papers), "
             f"queries: `{Path(str(cfg.queries_file)).name}` (PaSa format), each searched **before its own date**. "
             f"Search rows and the base Selector: the first {cfg.n_queries} queries; training data (pairs, sessions, "
             f"PPO): the first {cfg.train_queries}; held-out evaluation: {cfg.eval_queries} queries from "
             f"#{cfg.eval_offset} (the agent rows on the first {cfg.agent_eval_queries} of them)."), "",
             "## Stages", "", "| stage | command | seconds |",
             "|---|---|---|"]
    for name, s in stages.items():
        lines.append(f"| {name} | `{s.get('command', '(in-process)')}` | {s.get('seconds', float('nan')):.1f} |")
    if search:
        lines += ["", "## Search (recall of the gold papers)", "",
                  "| backend | " + " | ".join(f"recall@{k}" for k in ks) + " |", "|---" * (len(ks) + 1) + "|"]
        for name, m in search.items():
            lines.append(f"| {name} | " + " | ".join(f"{m[f'recall@{k}']:.3f}" for k in ks) + " |")
        lines += ["", "![recall@k](search_recall.png)"]
    if select:
        lines += ["", "## Selector (untrained SmolLM2, P(\"True\") in one forward pass)", "",
                  (f"{select['pairs']} (query, hit) pairs, {select['gold_pairs']} gold; AUC of P(True) for gold vs "
                  f"other hits: **{select['auc']:.3f}**; selected {select['selected']} at threshold "
                  f"{cfg.selector.threshold} (precision {select['precision']:.3f}, recall {select['recall']:.3f}); "
                  f"{select['pairs_per_second']:.1f} pairs/s.")]
    lines += _pasa_section(out)
    lines += _shipped_crawler_section()
    lines += _selector_section(out)
    figures = {n: s["metrics"] for n, s in stages.items() if s.get("metrics")}
    if figures:
        lines += ["", "## Pipeline figures (each from the stage's own output file)", ""]
        for name, m in figures.items():
            lines.append(f"- **{name}**: " + ", ".join(f"{k} = {_fmt(v)}" for k, v in m.items()))
    plots = sorted(p.relative_to(out) for p in out.glob("*/**/*.png"))
    if plots:
        lines += ["", "## Plots written by the stages", ""] + [f"![{p}]({p})" for p in plots[:12]]
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(cfg: DictConfig) -> dict[str, Any]:
    out = run_dir(cfg)
    resume = Path(str(cfg.resume_dir)) if cfg.get("resume_dir") else None
    if resume is not None:
        out = resume.resolve()
    wanted = list(cfg.stages)
    unknown = [s for s in wanted if s not in cfg.stage_specs and s != "select"]
    if unknown:
        raise UsageError(f"unknown demo stages {unknown}; known: {list(cfg.stage_specs)} + ['select']")
    gold = {q["qid"]: set(q["answer_arxiv_id"]) for q in read_jsonl(str(cfg.queries_file))}
    ks = list(cfg.recall_ks)
    stages: dict[str, Any] = {}
    search: dict[str, Any] = {}
    select = None
    t0 = time.perf_counter()
    for name in wanted:
        stage_dir = out / name
        stage_dir.mkdir(parents=True, exist_ok=True)
        done = stage_dir / DONE
        if name == "select":
            src = out / str(cfg.select.search_stage) / "search_results.json"
            if not src.exists():
                raise ValueError(f"stage select needs the search stage {cfg.select.search_stage!r} to run first")
            if done.exists():
                select = json.loads(done.read_text())
            else:
                t = time.perf_counter()
                select = _select_stage(cfg, src, gold, stage_dir)
                select["seconds"] = time.perf_counter() - t
                done.write_text(json.dumps(select))
            stages[name] = {"seconds": select["seconds"], "command": "Selector P(True) over top hits"}
            continue
        spec = cfg.stage_specs[name]
        if done.exists():
            stages[name] = json.loads(done.read_text())
            stages[name]["metrics"] = _stage_metrics(spec, stage_dir)  # re-read: the report may ask for more now
            log.info("stage %s: done in a previous run, skipped", name)
        else:
            stages[name] = _run_command(name, spec, stage_dir, out) | {"command": "scholar " + " ".join(spec.command)}
            stages[name]["metrics"] = _stage_metrics(spec, stage_dir)
            done.write_text(json.dumps(stages[name]))
        if (stage_dir / "search_results.json").exists():
            search[name] = _search_metrics(stage_dir / "search_results.json", gold, ks)
    if search:
        _plot_recall(search, ks, out / "search_recall.png")
    report = {"stages": stages, "search": search, "select": select, "seconds": time.perf_counter() - t0,
              "config": OmegaConf.to_container(cfg, resolve=True)}
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    md = _write_report(out, cfg, stages, search, select, ks)
    print(f"\ndemo finished in {report['seconds']:.0f}s\nreport: {md}\nplots:  {out}/*.png\nrun dir: {out}")
    return report
