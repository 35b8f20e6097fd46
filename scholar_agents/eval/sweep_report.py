"""``scholar sweep report sweep_dir=<multirun dir>``: one table and one figure for a Hydra sweep (``-m``), in the
style of PaSa Table 6 (reward coefficient α against crawler recall and crawler actions).

A Hydra multirun directory holds one subdirectory per job with ``.hydra/overrides.yaml`` (what this job was run
with) and whatever the job wrote. For each job we read its overrides, keep the ones that differ between jobs (the
swept parameters), and read its metrics from the first file matching ``metrics_files`` (``metrics.json`` by
default; trainers' ``*summary.json`` also match). Nested metrics are flattened with dots (``eval.recall``).
Jobs without a metrics file (failed, still running) are listed as such, never silently dropped.

Writes ``sweep_report.md``, ``sweep_report.json`` and ``sweep_report.png`` to the run directory.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import yaml
from omegaconf import DictConfig, OmegaConf

from scholar_agents.runtime.run_dir import run_dir

log = logging.getLogger(__name__)


@dataclass
class SweepRun:
    """One job of the sweep: its directory, swept parameter values, flattened metrics (None: no metrics file)."""

    job_dir: Path
    overrides: dict[str, Any]
    metrics: Optional[dict[str, Any]]
    metrics_file: Optional[Path] = None
    params: dict[str, Any] = field(default_factory=dict)  # the overrides that vary across the sweep

    @property
    def ok(self) -> bool:
        return self.metrics is not None


def _parse_value(text: str) -> Any:
    """An override's value as YAML would read it (``0.5`` -> 0.5, ``true`` -> True, ``abc`` -> "abc")."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def read_overrides(job_dir: Path) -> dict[str, Any]:
    path = job_dir / ".hydra" / "overrides.yaml"
    items = yaml.safe_load(path.read_text()) or []
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep:
            raise ValueError(f"{path}: override {item!r} is not key=value")
        out[key.lstrip("+~")] = _parse_value(value)
    return out


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


def find_metrics_file(job_dir: Path, patterns: Sequence[str]) -> Optional[Path]:
    """The first file (in pattern order) matching one of ``patterns`` in the job dir or one level below it."""
    candidates = sorted(p for p in job_dir.glob("*") if p.is_file())
    candidates += sorted(p for p in job_dir.glob("*/*") if p.is_file() and not p.parent.name.startswith("."))
    for pattern in patterns:
        for path in candidates:
            if fnmatch.fnmatch(path.name, pattern):
                return path
    return None


def resolve_sweep_dir(path: str | Path) -> Path:
    """A multirun dir, or a parent of several (``outputs/multirun/<task>``): then its most recent sweep."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ValueError(f"sweep_dir {p} does not exist")
    if (p / "multirun.yaml").exists() or any(p.glob("*/.hydra/overrides.yaml")):
        return p
    sweeps = sorted((d for d in p.iterdir() if (d / "multirun.yaml").exists()), key=lambda d: d.stat().st_mtime)
    if not sweeps:
        raise ValueError(f"{p} is not a Hydra multirun directory (no multirun.yaml, no */.hydra/overrides.yaml)")
    return sweeps[-1]


def collect_runs(sweep_dir: Path, metrics_files: Sequence[str]) -> list[SweepRun]:
    job_dirs = sorted({p.parent.parent for p in sweep_dir.rglob(".hydra/overrides.yaml")
                       if ".submitit" not in p.parts},
                      key=lambda d: (len(d.parts), int(d.name) if d.name.isdigit() else math.inf, d.name))
    runs = []
    for job_dir in job_dirs:
        mfile = find_metrics_file(job_dir, metrics_files)
        metrics = None
        if mfile is not None:
            try:
                raw = json.loads(mfile.read_text())
            except json.JSONDecodeError as e:
                log.error("%s is not valid JSON (%s): listed as missing", mfile, e)
                raw = None
            metrics = flatten(raw) if isinstance(raw, dict) else None
        runs.append(SweepRun(job_dir=job_dir, overrides=read_overrides(job_dir), metrics=metrics, metrics_file=mfile))
    # The swept parameters: overrides whose value is not the same in every job (all of them for a 1-job sweep).
    keys = list(dict.fromkeys(k for r in runs for k in r.overrides))
    swept = [k for k in keys if len({json.dumps(r.overrides.get(k), sort_keys=True, default=str) for r in runs}) > 1]
    swept = swept or keys
    for r in runs:
        r.params = {k: r.overrides.get(k) for k in swept}
    return runs


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))


def choose_metrics(runs: Sequence[SweepRun], requested: Optional[Sequence[str]], max_metrics: int) -> list[str]:
    """The requested metrics, or: numeric metrics every finished run has that differ between runs (all the
    common numeric ones if none differ), minus echoes of the swept parameters, at most ``max_metrics``."""
    ok = [r for r in runs if r.ok]
    if requested:
        for name in requested:
            if ok and not any(name in r.metrics for r in ok):
                raise ValueError(f"metric {name!r} is in no run's metrics; available: {sorted(ok[0].metrics)}")
        return list(requested)
    if not ok:
        return []
    common = [k for k in ok[0].metrics if all(_is_number(r.metrics.get(k)) for r in ok)]
    params = {k.split(".")[-1] for r in ok for k in r.params}
    common = [k for k in common if k.split(".")[-1] not in params]
    varying = [k for k in common if len({r.metrics[k] for r in ok}) > 1]
    return (varying or common)[:max_metrics]


def format_value(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"  # Table 6 style: 0.7227, 175.9
    return str(v)


def _sort_key(run: SweepRun) -> tuple:
    return tuple((0, float(v), "") if _is_number(v) else (1, 0.0, str(v)) for v in run.params.values())


def markdown_table(runs: Sequence[SweepRun], metrics: Sequence[str], labels: dict[str, str]) -> str:
    params = list(runs[0].params) if runs else []
    header = [labels.get(k, k) for k in params] + [labels.get(m, m) for m in metrics]
    show_status = any(not r.ok for r in runs)
    if show_status:
        header.append("status")
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for r in runs:
        cells = [format_value(r.params.get(k)) for k in params]
        cells += [format_value(r.metrics.get(m)) if r.ok else "–" for m in metrics]
        if show_status:
            cells.append("ok" if r.ok else "no metrics")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_sweep(runs: Sequence[SweepRun], metrics: Sequence[str], labels: dict[str, str], path: Path,
               title: str) -> Optional[Path]:
    """One panel per metric: a line over the swept value when one numeric parameter was swept (Table 6's α),
    else one bar per run."""
    ok = [r for r in runs if r.ok]
    metrics = [m for m in metrics if all(_is_number(r.metrics.get(m)) for r in ok)]
    if not ok or not metrics:
        log.warning("nothing numeric to plot")
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params = list(ok[0].params)
    numeric_x = len(params) == 1 and all(_is_number(r.params[params[0]]) for r in ok)
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        ys = [float(r.metrics[m]) for r in ok]
        if numeric_x:
            xs = [float(r.params[params[0]]) for r in ok]
            ax.plot(xs, ys, marker="o")
            ax.set_xlabel(labels.get(params[0], params[0]))
            if min(xs) > 0 and max(xs) / min(xs) >= 20:  # e.g. learning rates 1e-6 ... 1e-4
                ax.set_xscale("log")
            for x, y in zip(xs, ys):
                ax.annotate(format_value(y), (x, y), textcoords="offset points", xytext=(0, 6), ha="center",
                            fontsize=8)
        else:
            names = [", ".join(f"{labels.get(k, k)}={format_value(v)}" for k, v in r.params.items()) for r in ok]
            ax.bar(range(len(ok)), ys)
            ax.set_xticks(range(len(ok)), names, rotation=30, ha="right", fontsize=7)
        ax.set_title(labels.get(m, m))
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def build_report(sweep_dir: str | Path, out_dir: Path, metrics_files: Sequence[str] = ("metrics.json",),
                 metrics: Optional[Sequence[str]] = None, labels: Optional[dict[str, str]] = None,
                 max_metrics: int = 6, plot_metrics: int = 2, title: Optional[str] = None) -> dict[str, Any]:
    sweep = resolve_sweep_dir(sweep_dir)
    runs = collect_runs(sweep, metrics_files)
    if not runs:
        raise ValueError(f"{sweep}: no job directories (*/.hydra/overrides.yaml) found")
    labels = dict(labels or {})
    runs = sorted(runs, key=_sort_key)
    chosen = choose_metrics(runs, metrics, max_metrics)
    title = title or f"Sweep {sweep.name} ({sweep.parent.name})"
    table = markdown_table(runs, chosen, labels)
    n_ok = sum(r.ok for r in runs)
    out_dir.mkdir(parents=True, exist_ok=True)
    png = plot_sweep(runs, chosen[:plot_metrics], labels, out_dir / "sweep_report.png", title)
    md = [f"# {title}", "", f"Sweep directory: `{sweep}`  ", f"Runs: {len(runs)} ({n_ok} with metrics)", "",
          table, ""]
    if png is not None:
        md += [f"![sweep]({png.name})", ""]
    missing = [r for r in runs if not r.ok]
    if missing:
        md += ["Runs without metrics (failed or still running; see each job's log):", ""]
        md += [f"- `{r.job_dir}`" for r in missing] + [""]
    (out_dir / "sweep_report.md").write_text("\n".join(md))
    rows = [{"job_dir": str(r.job_dir), "params": r.params, "metrics_file": str(r.metrics_file) if r.metrics_file else None,
             "metrics": {m: r.metrics.get(m) for m in chosen} if r.ok else None} for r in runs]
    summary = {"sweep_dir": str(sweep), "runs": len(runs), "runs_with_metrics": n_ok, "params": list(runs[0].params),
               "metrics": chosen, "rows": rows, "table": table,
               "png": str(png) if png else None, "report": str(out_dir / "sweep_report.md")}
    (out_dir / "sweep_report.json").write_text(json.dumps(summary, indent=2, default=str))
    return summary


def sweep_report(cfg: DictConfig) -> dict:
    r = cfg.report
    summary = build_report(
        sweep_dir=cfg.sweep_dir, out_dir=run_dir(cfg),
        metrics_files=list(r.metrics_files), metrics=list(r.metrics) if r.metrics else None,
        labels=OmegaConf.to_container(r.labels) if r.labels else None, max_metrics=int(r.max_metrics),
        plot_metrics=int(r.plot_metrics), title=r.title)
    print(summary["table"])
    log.info("sweep report: %d runs (%d with metrics) -> %s", summary["runs"], summary["runs_with_metrics"],
             summary["report"])
    return summary
