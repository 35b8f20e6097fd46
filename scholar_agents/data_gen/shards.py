"""Resumable data generation: work cut into shards, each written atomically with a done-marker.

A data run lives in a fixed directory (not Hydra's timestamped run dir) so that re-running the same command picks
up where it stopped: a shard whose marker exists and lists exactly the same item keys is read back instead of
recomputed (no LLM call at all); anything else is recomputed (cheap too: the LLM response cache answers the
prompts already seen). ``fingerprint.json`` records what the outputs depend on (model, prompts, inputs, seed);
a run with a different fingerprint refuses to mix its shards with the old ones unless ``overwrite``.
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from scholar_agents.llm import build_llm
from scholar_agents.runtime.preemption import PreemptionHandler
from scholar_agents.runtime.progress import progress_bar
from scholar_agents.validation import read_jsonl

log = logging.getLogger(__name__)


# Search settings that say how an index is obtained, not what it returns: a run with `search.rebuild=true` makes
# the same hits, so its shards stay valid for a later run without it.
_SEARCH_NOT_IN_FINGERPRINT = ("rebuild",)


def search_fingerprint(cfg) -> dict[str, Any] | None:
    """The ``search`` settings a data run's outputs depend on (for ``fingerprint.json``)."""
    if "search" not in cfg:
        return None
    return {k: v for k, v in dict(cfg.search).items() if k not in _SEARCH_NOT_IN_FINGERPRINT}


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    """Atomically (tmp + rename) write one JSON object per line; returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
            n += 1
    os.replace(tmp, path)
    return n


def write_json(path: str | Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, ensure_ascii=False, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


class ShardedRun:
    """``run.done(i, keys)`` → is shard ``i`` finished for these item keys; ``run.save(i, keys, records, stats)``
    writes it; ``run.load(i)`` reads it back."""

    def __init__(self, out_dir: str | Path, fingerprint: dict[str, Any], overwrite: bool = False):
        self.dir = Path(out_dir)
        self.shard_dir = self.dir / "shards"
        fp_path = self.dir / "fingerprint.json"
        fingerprint = json.loads(json.dumps(fingerprint, sort_keys=True, default=str))
        if fp_path.exists():
            old = json.loads(fp_path.read_text(encoding="utf-8"))
            if old != fingerprint:
                changed = sorted(k for k in set(old) | set(fingerprint) if old.get(k) != fingerprint.get(k))
                if not overwrite:
                    raise ValueError(
                        f"{self.dir} holds a data run with different settings ({', '.join(changed)}); "
                        "use another out_dir, or overwrite=true to discard its shards")
                log.warning("overwrite=true: discarding the shards of %s (changed: %s)", self.dir, changed)
                shutil.rmtree(self.shard_dir, ignore_errors=True)
        elif overwrite:
            shutil.rmtree(self.shard_dir, ignore_errors=True)
        self.shard_dir.mkdir(parents=True, exist_ok=True)
        write_json(fp_path, fingerprint)
        self.resumed = 0  # shards read back in this process
        self.computed = 0  # shards computed in this process

    def _paths(self, shard: int) -> tuple[Path, Path]:
        return self.shard_dir / f"{shard:05d}.jsonl", self.shard_dir / f"{shard:05d}.done"

    def done(self, shard: int, keys: Sequence[str]) -> bool:
        data, marker = self._paths(shard)
        if not (marker.exists() and data.exists()):
            return False
        try:
            info = json.loads(marker.read_text(encoding="utf-8"))
        except json.JSONDecodeError:
            return False
        return info.get("keys") == list(keys)

    def save(self, shard: int, keys: Sequence[str], records: Sequence[dict[str, Any]], stats: dict[str, Any]) -> None:
        data, marker = self._paths(shard)
        write_jsonl(data, records)
        write_json(marker, {"keys": list(keys), "records": len(records), "stats": stats})
        self.computed += 1

    def load(self, shard: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        data, marker = self._paths(shard)
        info = json.loads(marker.read_text(encoding="utf-8"))
        self.resumed += 1
        return read_jsonl(data), info.get("stats", {})


def shards_of(items: Sequence[Any], size: int) -> list[tuple[int, Sequence[Any]]]:
    """Fixed-size consecutive shards: the first shards of a run with ``limit`` are those of the full run."""
    if size < 1:
        raise ValueError(f"shard_size must be >= 1, got {size}")
    return [(i // size, items[i : i + size]) for i in range(0, len(items), size)]


def held_out_keys(keys: Sequence[str], fraction: float, seed: int) -> set[str]:
    """A seeded ``fraction`` of ``keys`` (user queries) held out for evaluation, so no query is in both files."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"eval_fraction must be in [0, 1), got {fraction}")
    keys = sorted(keys)
    n = round(len(keys) * fraction)
    return set(random.Random(f"{seed}/held_out").sample(keys, n)) if n else set()


class LazyLLM:
    """The configured LLM, built on first use: a re-run whose shards are all done never even loads the model."""

    def __init__(self, llm_cfg):
        self.cfg = llm_cfg
        self._llm = None

    def get(self):
        if self._llm is None:
            self._llm = build_llm(self.cfg)
        return self._llm

    @property
    def built(self) -> bool:
        return self._llm is not None

    def close(self) -> None:
        if self._llm is not None:
            self._llm.close()  # vLLM engines are separate processes: never leave them behind
            self._llm = None


def run_shards(run: ShardedRun, items: Sequence[Any], key: Callable[[Any], str], shard_size: int,
               compute: Callable[[list], tuple[list[dict[str, Any]], dict[str, Any]]], desc: str):
    """Every shard's records, computed or read back, and the counts (all shards / computed this run).

    SIGTERM and Slurm's warning signals (``runtime.preemption``) let the current shard finish and be saved, then
    the job leaves with the requeue exit code; the requeued run resumes from the done-markers. The caller closes
    its LLM in a ``finally`` (the exit is a ``SystemExit``)."""
    records: list[dict[str, Any]] = []
    total: Counter = Counter()
    computed: Counter = Counter()
    handler = PreemptionHandler.install()
    try:
        for shard, chunk in progress_bar(shards_of(items, shard_size), desc=desc, unit="shard"):
            keys = [key(x) for x in chunk]
            if run.done(shard, keys):
                recs, st = run.load(shard)
            else:
                recs, st = compute(list(chunk))
                run.save(shard, keys, recs, st)
                computed.update(st)
            records += recs
            total.update(st)
            if handler.should_stop(sync=False):
                log.warning("stopping after shard %d (%s); a re-run resumes from here", shard, handler.received)
                handler.exit_for_requeue()
    finally:
        handler.uninstall()
    return records, total, computed
