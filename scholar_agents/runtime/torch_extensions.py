"""Stale build locks of torch's JIT extensions, named before they hang a run.

DeepSpeed JIT-compiles ops through ``torch.utils.cpp_extension`` (on CPU its shared-memory communication op, the
first time; 1-6 min on two busy cores). The build holds a ``lock`` file in the op's folder under
``$TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``); a build killed half-way leaves it behind and every
later run waits on it forever, silently. The lock holds no process id, so its age is the only sign: a lock older
than any build takes is stale."""

from __future__ import annotations

import os
import time
from pathlib import Path

STALE_AFTER_S = 20 * 60  # a build takes minutes; twenty without progress is a killed one


class StaleBuildLock(RuntimeError):
    """A JIT build's lock older than any build takes: the run would otherwise wait on it forever."""


def extensions_dir() -> Path:
    """Where torch builds JIT extensions (the same rule as ``torch.utils.cpp_extension``)."""
    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")


def stale_build_locks(root: Path | None = None, stale_after_s: float = STALE_AFTER_S,
                      now: float | None = None) -> list[tuple[Path, float]]:
    """Every ``lock`` under the extensions folder older than ``stale_after_s``, with its age in seconds."""
    root = extensions_dir() if root is None else root
    now = time.time() if now is None else now
    found = []
    for lock in sorted(root.glob("**/lock")) if root.is_dir() else []:
        try:
            age = now - lock.stat().st_mtime
        except FileNotFoundError:  # its build just finished
            continue
        if age > stale_after_s:
            found.append((lock, age))
    return found


def check_no_stale_build_lock(root: Path | None = None, stale_after_s: float = STALE_AFTER_S) -> None:
    """Raise :class:`StaleBuildLock` naming each stale lock, instead of letting the build wait on it forever."""
    stale = stale_build_locks(root, stale_after_s)
    if stale:
        names = "; ".join(f"{p} ({age / 60:.0f} min old)" for p, age in stale)
        raise StaleBuildLock(
            f"a torch extension build was killed half-way and left its lock: {names}. Every later build of that op "
            f"would wait on it forever. If no other build is running, delete the lock file(s) and run again.")
