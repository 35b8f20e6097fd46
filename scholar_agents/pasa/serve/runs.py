"""Run directories the Runs view opens — only under ``serve.runs_root`` — and what it reads from them:

- ``eval pasa``: ``per_query/<row>.jsonl`` (one line per query) and ``trajectories/<row>.jsonl``;
- ``pasa search``: ``results.json`` and ``trajectories.jsonl`` (one row, ``search``);
- ``train crawler_ppo``: ``eval_<tag>.jsonl`` (held-out crawls scored like ``eval pasa``'s agent rows) and
  ``trajectories_eval_<tag>.jsonl`` (those crawls; a row is one evaluation, e.g. ``eval_start`` vs ``eval_end``).
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Optional

from scholar_agents.validation import UsageError, read_jsonl

# the metric columns the table shows first (eval pasa's QueryMetrics names), then any other scalar
COLUMNS = ("crawler_recall", "precision", "recall", "recall_at_20", "recall_at_50", "recall_at_100", "n_queue",
           "n_returned", "actions", "sessions", "gen_tokens", "wall_s")


def resolve_under(root: Path, rel: str) -> Path:
    """``root / rel`` as an existing directory inside ``root``; anything else (``..``, an absolute path elsewhere,
    a symlink out of it) is refused with one line."""
    if rel is None or not str(rel).strip():
        raise UsageError("give a run directory (a path under the runs root)")
    if "\x00" in str(rel):
        raise UsageError("a run path may not contain NUL")
    base = root.resolve()
    path = (base / str(rel)).resolve()
    if path != base and base not in path.parents:
        raise UsageError(f"{rel!r} is outside the runs root: only run directories under it can be opened")
    if not path.is_dir():
        raise UsageError(f"{rel!r}: no such run directory under the runs root")
    return path


def run_kind(d: Path) -> Optional[str]:
    if (d / "per_query").is_dir():
        return "eval pasa"
    if (d / "results.json").is_file():
        return "pasa search"
    if any(d.glob("eval_*.jsonl")):
        return "ppo"
    return None


def find_runs(root: Path, max_depth: int = 4, limit: int = 300) -> list[dict]:
    """Run directories under ``root`` (newest first), at most ``max_depth`` levels down."""
    base = root.resolve()
    out = []
    if not base.is_dir():
        return out
    for dirpath, dirnames, _ in os.walk(base):
        d = Path(dirpath)
        depth = len(d.relative_to(base).parts)
        kind = run_kind(d)
        if kind:
            query, before = _first_query(d) if kind == "pasa search" else (None, None)
            out.append({"path": str(d.relative_to(base)) or ".", "kind": kind, "mtime": d.stat().st_mtime,
                        "query": query, "before": before})
            dirnames[:] = []  # a run's own sub-folders (per_query/, trajectories/) are not runs
        elif depth >= max_depth:
            dirnames[:] = []
        else:
            dirnames[:] = sorted(n for n in dirnames if not n.startswith("."))
    out.sort(key=lambda r: -r["mtime"])
    return out[:limit]


def _first_query(d: Path) -> tuple[Optional[str], Optional[str]]:
    """The question a `pasa search` run (or a page search) asked and its before-date, for the Runs list; None where
    unreadable."""
    try:
        results = json.loads((d / "results.json").read_text())
        first = results[0] if results else {}
        return (str(first.get("query") or "")[:200] or None), (first.get("before") or None)
    except (OSError, ValueError, AttributeError, IndexError, KeyError):
        return None, None


def collapse_repeats(found: list[dict]) -> list[dict]:
    """The Runs list with repeated page searches as one entry: the newest run of each (question, before-date),
    with ``repeats`` (how many runs asked it) and ``older`` (their paths, newest first). ``found`` is newest first
    (as :func:`find_runs` returns it); other runs pass unchanged."""
    out: list[dict] = []
    first: dict[tuple, dict] = {}
    for r in found:
        if r.get("kind") != "pasa search" or not r.get("query") or not str(r["path"]).startswith("page_searches/"):
            out.append(r)
            continue
        key = (" ".join(str(r["query"]).lower().split()), r.get("before"))
        if key in first:
            first[key]["repeats"] += 1
            first[key]["older"].append(r["path"])
            continue
        first[key] = {**r, "repeats": 1, "older": []}
        out.append(first[key])
    return out


def _jsonl(path: Path) -> list[dict]:
    """The records of a run's JSONL file; a malformed line is one UsageError naming the file by its name only (the
    Runs view shows it)."""
    try:
        return read_jsonl(path, name=path.name)
    except ValueError as e:
        raise UsageError(str(e)) from None


def load_rows(d: Path) -> dict[str, list[dict]]:
    """Row name -> per-query records (each with ``qid``, and ``query`` where the run recorded it)."""
    kind = run_kind(d)
    if kind == "eval pasa":
        return {p.stem: list(_jsonl(p)) for p in sorted((d / "per_query").glob("*.jsonl"))}
    if kind == "pasa search":
        results = json.loads((d / "results.json").read_text())
        rows = []
        for r in results:
            papers = r.get("papers") or []
            rows.append({"qid": r.get("qid"), "query": r.get("query"), "n_queue": len(papers),
                         "n_returned": sum(1 for p in papers if p.get("selected")), "actions": r.get("actions"),
                         "sessions": r.get("sessions"), "wall_s": round((r.get("crawl_seconds") or 0)
                                                                       + (r.get("select_seconds") or 0), 2)})
        return {"search": rows}
    if kind == "ppo":
        return {p.stem: list(_jsonl(p)) for p in sorted(d.glob("eval_*.jsonl"))}
    raise UsageError(f"{d.name}: not a run directory (no per_query/, results.json or eval_*.jsonl)")


def trajectory_file(d: Path, row: str) -> Optional[Path]:
    kind = run_kind(d)
    if kind in ("eval pasa", "ppo") and ("/" in row or "\\" in row or row.startswith(".")):
        raise UsageError(f"row {row!r}: not a row name")
    if kind == "eval pasa":
        p = d / "trajectories" / f"{row}.jsonl"
    elif kind == "ppo":
        p = d / f"trajectories_{row}.jsonl"
    elif kind == "pasa search":
        p = d / "trajectories.jsonl"
    else:
        return None
    return p if p.is_file() else None


def load_trajectories(d: Path, row: str, qid: str) -> list[dict]:
    """The trajectory records (one per ensemble run) of ``qid`` in ``row``; [] when the run kept none."""
    p = trajectory_file(d, row)
    if p is None:
        return []
    return [t for t in _jsonl(p) if str(t.get("qid")) == str(qid)]


# What each column means, shown under the Runs table (no hover needed)
COLUMN_HELP = {
    "crawler_recall": "crawler recall: gold papers in the crawl's queue / gold papers",
    "precision": "precision: gold among the papers the Selector selected",
    "recall": "recall: gold papers the Selector selected / gold papers",
    "recall_at_20": "recall@20: gold in the top 20 (search order, or the Selector's ranking of the queue)",
    "recall_at_50": "recall@50", "recall_at_100": "recall@100",
    "n_queue": "queue: papers the crawl found", "n_returned": "selected: papers the Selector kept",
    "actions": "actions: [Search] + [Expand] executed", "sessions": "sessions: crawler sessions run",
    "gen_tokens": "tokens: generated by the Crawler", "wall_s": "s: seconds for this query",
}
# Columns that mean nothing for a search-only row (no Crawler, no Selector): left blank, not shown as figures
NOT_FOR_SEARCH = ("crawler_recall", "precision", "recall", "n_returned", "actions", "sessions", "gen_tokens")


def row_info(d: Path, rows: list[str]) -> dict[str, dict]:
    """Each row's label and method, from what the run recorded: `eval pasa`'s ``summary.json`` (its ``rows``
    config) and ``per_query/<row>.row.json``; a PPO run's evaluations by their step."""
    info = {r: {"label": r, "method": None} for r in rows}
    kind = run_kind(d)
    if kind == "eval pasa":
        try:
            meta_rows = json.loads((d / "summary.json").read_text()).get("meta", {}).get("rows") or []
        except (OSError, ValueError):
            meta_rows = []
        for spec in meta_rows:
            if isinstance(spec, dict) and spec.get("name") in info:
                info[spec["name"]].update(label=spec.get("label") or spec["name"], method=spec.get("method"))
        for r in rows:
            if info[r]["method"] is None and (d / "per_query" / f"{r}.row.json").is_file():
                with contextlib.suppress(OSError, ValueError):
                    info[r]["method"] = json.loads((d / "per_query" / f"{r}.row.json").read_text()).get("row.method")
            if info[r]["method"] is None:
                info[r]["method"] = "search" if r.startswith("search") else "agent"
    elif kind == "ppo":
        for r in rows:
            tag = r.removeprefix("eval_")
            info[r].update(label="held-out, " + ("start" if tag == "start" else "end" if tag == "end" else
                                                 f"step {int(tag.removeprefix('step'))}" if tag.startswith("step")
                                                 and tag[4:].isdigit() else tag), method="agent")
    elif kind == "pasa search":
        for r in rows:
            info[r].update(label="the search", method="agent")
    return info


def row_means(d: Path, rows: dict[str, list[dict]], cols: list[str]) -> dict[str, dict]:
    """Each row's mean per column over its queries, with `eval pasa`'s 95 % bootstrap interval where the run wrote
    one (``summary.json``: ``<col>_ci``); other runs get the plain mean."""
    summary = {}
    if (d / "summary.json").is_file():
        with contextlib.suppress(OSError, ValueError):
            summary = json.loads((d / "summary.json").read_text()).get("summary") or {}
    out = {}
    for name, rs in rows.items():
        s = summary.get(name) or {}
        m = {}
        for c in cols:
            vals = [r[c] for r in rs if isinstance(r.get(c), (int, float))]
            mean = s.get(c, sum(vals) / len(vals) if vals else None)
            m[c] = {"mean": mean, "ci": s.get(f"{c}_ci")}
        out[name] = m
    return out


def table(rows: dict[str, list[dict]], questions: dict[str, str], info: Optional[dict[str, dict]] = None) -> dict:
    """The per-query metrics table: one line per query, each row's metrics side by side, plus the columns. Cells
    that mean nothing are left blank: a search-only row's Crawler and Selector columns, and a row's "seconds" when
    every query carries the same figure (the run recorded a mean, not a per-query time)."""
    info = info or {}
    cols = [c for c in COLUMNS if any(c in r for rs in rows.values() for r in rs)]
    blank = {}
    for name, rs in rows.items():
        drop = set(NOT_FOR_SEARCH) if (info.get(name) or {}).get("method") == "search" else set()
        secs = {r.get("wall_s") for r in rs if r.get("wall_s") is not None}
        if len(rs) > 1 and len(secs) == 1:
            drop.add("wall_s")
        blank[name] = drop
    by_q: dict[str, dict] = {}
    for name, rs in rows.items():
        for r in rs:
            q = by_q.setdefault(str(r.get("qid")), {"qid": str(r.get("qid")), "query": None, "rows": {}})
            q["query"] = q["query"] or r.get("query") or questions.get(str(r.get("qid")))
            q["rows"][name] = {c: (None if c in blank[name] else r.get(c)) for c in cols} | {
                k: r[k] for k in ("stopped_by", "grammar_errors", "fallback_searches") if k in r}
    return {"rows": list(rows), "columns": cols, "queries": list(by_q.values()),
            "column_help": {c: COLUMN_HELP.get(c, c) for c in cols}, "blank": {n: sorted(b) for n, b in blank.items()}}


def open_run(root: Path, path: str, questions: dict[str, str]) -> dict:
    """What the Runs view shows of one run directory: the per-query table, each row's label, method and mean, and
    which rows kept trajectories. Each row also names the run and row it reads (``info[row].path/row``), so a
    merged table (:func:`open_runs`) asks the right run for a crawl."""
    d = resolve_under(root, path)
    rows = load_rows(d)
    info = row_info(d, list(rows))
    for name in info:
        info[name].update(path=path, row=name)
    if run_kind(d) == "pasa search":
        for name in info:
            info[name].update(query=_first_query(d)[0], mtime=d.stat().st_mtime)
    tab = table(rows, questions, info)
    return {"path": path, "kind": run_kind(d), **tab, "info": info, "means": row_means(d, rows, tab["columns"]),
            "trees": {r: trajectory_file(d, r) is not None for r in rows}}


def open_runs(root: Path, paths: list[str], questions: dict[str, str]) -> dict:
    """Two (or more) runs in one table, rows side by side: each row renamed ``<i>:<row>`` (i = the run's place)
    and labelled with its run (a page search by its question). Queries line up by qid; runs of one query each (two
    page searches, two `pasa search` runs) line up on one line whatever their qids, since that query is what the
    user compares. Every cell keeps its own qid for the crawl it opens."""
    if len(paths) == 1:
        return open_run(root, paths[0], questions)
    opened = [open_run(root, p, questions) for p in paths]
    one_each = all(len(o["queries"]) == 1 for o in opened)
    rows, info, means, trees, blank, help_, columns = [], {}, {}, {}, {}, {}, []
    by_q: dict[str, dict] = {}
    for i, o in enumerate(opened, 1):
        for c in o["columns"]:
            if c not in columns:
                columns.append(c)
        help_.update(o["column_help"])
        for r in o["rows"]:
            name = f"{i}:{r}"
            rows.append(name)
            meta = dict(o["info"][r])
            if meta.get("query"):
                q = meta["query"]
                meta["label"] = f"{i}: \u201c{q[:48]}{'…' if len(q) > 48 else ''}\u201d"
            else:
                meta["label"] = f"{i}: {meta['label']} ({o['path']})"
            info[name], means[name], trees[name] = meta, o["means"][r], o["trees"][r]
            blank[name] = o["blank"].get(r, [])
        for q in o["queries"]:
            key = "compared" if one_each else q["qid"]
            line = by_q.setdefault(key, {"qid": key, "query": None, "queries": [], "rows": {}})
            if q.get("query") and q["query"] not in line["queries"]:
                line["queries"].append(q["query"])
            for r, cell in q["rows"].items():
                line["rows"][f"{i}:{r}"] = {**cell, "qid": q["qid"]}
    for line in by_q.values():
        line["query"] = "  vs  ".join(line.pop("queries")) or line["qid"]
    columns = [c for c in COLUMNS if c in columns]
    return {"path": " + ".join(paths), "paths": paths, "kind": " + ".join(o["kind"] for o in opened), "rows": rows,
            "columns": columns, "queries": list(by_q.values()), "column_help": {c: help_.get(c, c) for c in columns},
            "blank": blank, "info": info, "means": means, "trees": trees}


def load_ranked(d: Path, qid: str, k: int = 10) -> list[dict]:
    """The first ``k`` papers of a `pasa search` run's final list for ``qid`` (in the order the page showed them),
    for comparing two searches' lists side by side; [] for other runs."""
    if run_kind(d) != "pasa search":
        return []
    try:
        results = json.loads((d / "results.json").read_text())
    except (OSError, ValueError):
        return []
    for r in results:
        if str(r.get("qid")) == str(qid):
            return [{"paper_id": p.get("paper_id"), "title": p.get("title"), "score": p.get("score"),
                     "selected": bool(p.get("selected"))} for p in (r.get("papers") or [])[:k]]
    return []
