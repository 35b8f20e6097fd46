"""The run directory of one `pasa search`: ``setting.json``, ``results.json``, ``results.md`` and
``trajectories.jsonl``. `scholar pasa search` writes it, and so does every search made in `pasa serve`'s page,
so the page's Runs view lists and compares both alike."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional, Sequence

from scholar_agents.pasa.agent import results_table
from scholar_agents.pasa.trajectory import write_trajectories


def write_search_run(out: Path, results: Sequence, setting: dict, top: Optional[int] = None) -> str:
    """Write the run files of ``results`` (``AgentResult``s) into ``out``; returns the printed tables."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "setting.json").write_text(json.dumps(setting, indent=1, default=str))
    (out / "results.json").write_text(json.dumps([r.to_dict() for r in results], indent=1, ensure_ascii=False))
    tables = "\n".join(results_table(r, top=top) for r in results)
    (out / "results.md").write_text(tables)
    write_trajectories(out / "trajectories.jsonl", [t for r in results for t in r.trajectories])
    return tables
