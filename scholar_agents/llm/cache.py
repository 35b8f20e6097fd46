"""A persistent response cache (SQLite) in front of any backend, so interrupted data generation never pays twice.

Keys are sha256 over (model identity, rendered prompt, sampling parameters, sample index): the rendered text
rather than the chat messages, so a changed chat template is a different request. Sampled outputs
(temperature > 0) are cached too by default, keyed by seed and sample index: a resumed job then replays exactly
the samples it already drew. WAL mode lets several processes ON ONE HOST (pytest workers, a node's tasks) share one
file; tasks on different hosts write one file each and merge them (:func:`merge_caches`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from scholar_agents.llm.base import LLM, Completion, Generation, Prompt, SamplingParams, repetition_controls

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS completions (key TEXT PRIMARY KEY, value TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS prompts (key TEXT PRIMARY KEY, token_ids TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS next_token_probs (key TEXT PRIMARY KEY, probs TEXT NOT NULL, created REAL NOT NULL);
"""


def model_identity(name: str, path: str | None, *parts: str) -> str:
    """What the cache calls a model: its configured name, the backend/dtype parts that change outputs, and for
    a local checkpoint a fingerprint of its files, so that re-training into the same directory invalidates."""
    fields = [name, *parts]
    if path is not None and Path(path).is_dir():
        h = hashlib.sha256()
        for f in sorted(Path(path).iterdir()):
            if f.is_file() and (f.suffix in {".safetensors", ".bin", ".json", ".jinja"} or f.name == "merges.txt"):
                st = f.stat()
                h.update(f"{f.name}:{st.st_size}:{int(st.st_mtime)}".encode())
        fields.append(h.hexdigest()[:16])
    return "|".join(fields)


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class ResponseCache:
    """The SQLite file. Thread-safe (one connection behind a lock) and process-safe (WAL + busy timeout)."""

    def __init__(self, path: str | Path):
        self.path = Path(path).expanduser()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=120, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=120000")
        self._db.executescript(_SCHEMA)

    def get_many(self, table: str, keys: Sequence[str], column: str = "value") -> dict[str, str]:
        found: dict[str, str] = {}
        with self._lock:
            for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
                chunk = list(keys[start : start + 500])
                marks = ",".join("?" * len(chunk))
                for k, v in self._db.execute(f"SELECT key, {column} FROM {table} WHERE key IN ({marks})", chunk):
                    found[k] = v
        return found

    def put_many(self, table: str, rows: Sequence[tuple], n_columns: int) -> None:
        if not rows:
            return
        marks = ",".join("?" * n_columns)
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(f"INSERT OR REPLACE INTO {table} VALUES ({marks})", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedLLM(LLM):
    """The same ``LLM`` interface; only prompts (or samples) missing from the cache reach the wrapped backend.

    Misses are sent in chunks of ``flush_every`` prompts and written after each chunk, so a job killed half-way
    through one big call keeps what it already paid for.
    """

    def __init__(self, llm: LLM, path: str | Path, cache_sampled: bool = True, flush_every: int = 64):
        self.llm = llm
        self.cache = ResponseCache(path)
        self.cache_sampled = cache_sampled
        self.flush_every = max(1, flush_every)
        self.model_id = llm.model_id
        self.hits = 0
        self.misses = 0

    @property
    def tokenizer(self):
        return self.llm.tokenizer

    def __getattr__(self, name: str):
        # Backend-specific attributes (the hf model, the served model name, retry counts) stay reachable.
        if name == "llm":
            raise AttributeError(name)
        return getattr(self.llm, name)

    def render(self, prompt: Prompt) -> str:
        return self.llm.render(prompt)

    def prompt_token_ids(self, prompt: Prompt) -> list[int]:
        return self.llm.prompt_token_ids(prompt)

    # ---- generation ----

    def _sample_keys(self, rendered: str, raw: bool, params: SamplingParams) -> list[str]:
        request = {
            "model": self.model_id,
            "prompt": rendered,
            "raw": raw,  # raw strings and chats may tokenise differently (special tokens)
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stop": list(params.stop),
            "logprobs": params.logprobs,
            # Greedy output does not depend on the seed; sampled output is keyed by it.
            "seed": None if params.greedy else params.seed,
        }
        if params.constraint is not None:  # only when set: keys of unconstrained requests stay as they were
            request["constraint"] = params.constraint.cache_key()
        rep = repetition_controls(params, getattr(self.llm, "cfg", None))  # the preset's or the request's, when on
        if rep:
            request["repetition"] = rep
        return [_sha({**request, "sample": j}) for j in range(params.n)]

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams | None = None) -> list[Generation]:
        params = params or SamplingParams()
        if not params.greedy and not self.cache_sampled:
            return self.llm.generate(prompts, params)
        rendered = [self.render(p) for p in prompts]
        keys = [self._sample_keys(r, isinstance(p, str), params) for r, p in zip(rendered, prompts)]
        prompt_keys = [_sha({"model": self.model_id, "prompt": r, "raw": isinstance(p, str)})
                       for r, p in zip(rendered, prompts)]
        cached = self.cache.get_many("completions", [k for ks in keys for k in ks])
        cached_prompts = self.cache.get_many("prompts", prompt_keys, column="token_ids")

        results: list[Generation | None] = [None] * len(prompts)
        todo = []
        for i, ks in enumerate(keys):
            if all(k in cached for k in ks) and prompt_keys[i] in cached_prompts:
                self.hits += 1
                results[i] = Generation(
                    prompt_text=rendered[i],
                    prompt_token_ids=json.loads(cached_prompts[prompt_keys[i]]),
                    completions=[Completion(**json.loads(cached[k])) for k in ks],
                )
            else:
                self.misses += 1
                todo.append(i)

        for start in range(0, len(todo), self.flush_every):
            chunk = todo[start : start + self.flush_every]
            fresh = self.llm.generate([prompts[i] for i in chunk], params)
            now = time.time()
            rows, prompt_rows = [], []
            for i, gen in zip(chunk, fresh):
                # Samples already cached for this prompt (e.g. from a run with the same seed) win: a resumed job
                # must see the outputs it saw before.
                comps = [Completion(**json.loads(cached[k])) if k in cached else c
                         for k, c in zip(keys[i], gen.completions)]
                gen.completions = comps
                results[i] = gen
                rows += [(k, json.dumps(c.__dict__), now) for k, c in zip(keys[i], comps)]
                prompt_rows.append((prompt_keys[i], json.dumps(gen.prompt_token_ids)))
            self.cache.put_many("completions", rows, 3)
            self.cache.put_many("prompts", prompt_rows, 2)
        return results  # type: ignore[return-value]

    # ---- scoring ----

    def next_token_probs(self, prompts: Sequence[Prompt], candidates: Sequence[str]) -> np.ndarray:
        keys = [
            _sha({"model": self.model_id, "prompt": self.render(p), "raw": isinstance(p, str),
                  "next_token_probs": list(candidates)})
            for p in prompts
        ]
        cached = self.cache.get_many("next_token_probs", keys, column="probs")
        out = np.zeros((len(prompts), len(candidates)), dtype=np.float64)
        todo = []
        for i, k in enumerate(keys):
            if k in cached:
                self.hits += 1
                out[i] = json.loads(cached[k])
            else:
                self.misses += 1
                todo.append(i)
        for start in range(0, len(todo), self.flush_every):
            chunk = todo[start : start + self.flush_every]
            probs = np.asarray(self.llm.next_token_probs([prompts[i] for i in chunk], candidates), dtype=np.float64)
            out[chunk] = probs
            now = time.time()
            self.cache.put_many("next_token_probs", [(keys[i], json.dumps(p.tolist()), now)
                                                     for i, p in zip(chunk, probs)], 3)
        return out

    def close(self) -> None:
        log.info("llm cache %s: %d hits, %d misses", self.cache.path, self.hits, self.misses)
        self.cache.close()
        self.llm.close()


# ---- one cache per array task, merged at the end --------------------------------------------------------------
# SQLite's WAL needs shared memory between the processes that open a database, which hosts on a network file
# system do not have (https://www.sqlite.org/wal.html, "all processes using a database must be on the same host
# computer"). So Slurm array tasks on different nodes must not write one cache file on shared storage: each task
# writes its own cache on local disk, publishes a finished copy, and ONE process merges the copies.


def copy_cache_file(src: str | Path, dst: str | Path) -> bool:
    """Copy a closed cache file (its WAL checkpointed: :meth:`ResponseCache.close` / :func:`merge_caches` leave
    none) with plain file I/O, atomically (a temporary file, then rename). False when ``src`` does not exist.
    No SQLite connection is opened on either side, so ``dst`` may be on a network file system."""
    import os
    import shutil

    src, dst = Path(src).expanduser(), Path(dst).expanduser()
    if not src.is_file():
        return False
    if Path(f"{src}-wal").is_file() and Path(f"{src}-wal").stat().st_size > 0:
        log.warning("%s has a non-empty WAL (a writer is open?): copying the main file only", src)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)
    return True


def merge_caches(dst: str | Path, sources: Sequence[str | Path]) -> dict[str, int]:
    """Add every row of the ``sources`` cache files to the cache at ``dst`` (created when missing); rows whose key
    ``dst`` already has are kept as they are (the first answer to a request wins, as in :class:`CachedLLM`).
    Returns the rows added per table. Run it in ONE process (e.g. Thought-Retriever's merge phase)."""
    added = {"completions": 0, "prompts": 0, "next_token_probs": 0}
    cache = ResponseCache(dst)
    try:
        with cache._lock:
            for src in sources:
                cache._db.execute("ATTACH DATABASE ? AS src", (str(Path(src)),))
                try:
                    cache._db.execute("BEGIN IMMEDIATE")
                    try:
                        for table in added:
                            has = cache._db.execute("SELECT 1 FROM src.sqlite_master WHERE type='table' AND name=?",
                                                    (table,)).fetchone()
                            if has:
                                before = cache._db.total_changes
                                cache._db.execute(f"INSERT OR IGNORE INTO main.{table} SELECT * FROM src.{table}")
                                added[table] += cache._db.total_changes - before
                        cache._db.execute("COMMIT")
                    except BaseException:
                        cache._db.execute("ROLLBACK")
                        raise
                finally:
                    cache._db.execute("DETACH DATABASE src")
            cache._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the main file alone is now complete
    finally:
        cache.close()
    log.info("merged %d cache file(s) into %s: %s rows added", len(sources), dst, added)
    return added
