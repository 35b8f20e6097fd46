"""A JIT build killed half-way leaves a lock that makes every later DeepSpeed start wait forever: it is named."""

import os
import time

import pytest

from scholar_agents.runtime.torch_extensions import (StaleBuildLock, check_no_stale_build_lock, extensions_dir,
                                                     stale_build_locks)


def _lock(root, op, age_s):
    path = root / "py311_cpu" / op / "lock"
    path.parent.mkdir(parents=True)
    path.touch()
    t = time.time() - age_s
    os.utime(path, (t, t))
    return path


def test_an_old_lock_is_named_and_a_fresh_one_is_a_build_in_progress(tmp_path):
    old = _lock(tmp_path, "deepspeed_shm_comm", 3600)
    _lock(tmp_path, "cpu_adam", 30)
    assert [p for p, _ in stale_build_locks(tmp_path)] == [old]
    with pytest.raises(StaleBuildLock, match="deepspeed_shm_comm/lock \\(60 min old\\).*delete the lock"):
        check_no_stale_build_lock(tmp_path)


def test_no_folder_or_no_lock_passes(tmp_path):
    check_no_stale_build_lock(tmp_path / "absent")
    (tmp_path / "py311_cpu" / "op").mkdir(parents=True)
    check_no_stale_build_lock(tmp_path)


def test_the_folder_follows_torch(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert extensions_dir() == tmp_path
