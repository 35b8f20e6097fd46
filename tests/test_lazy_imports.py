"""Start-up imports: what every command loads (``config_schemas``, via Hydra's ConfigStore) must not pull in FAISS.

The lent H100 image has no faiss wheel: a command that never searches densely must start without it, and
every command pays FAISS's import time otherwise."""

import subprocess
import sys

import pytest

HEAVY_AT_STARTUP = ("faiss",)


@pytest.mark.parametrize("module", ["scholar_agents.config_schemas", "scholar_agents.cli",
                                    "scholar_agents.thought.memory", "scholar_agents.plan.commands",
                                    "scholar_agents.train.plan_runs"])
def test_startup_imports_leave_faiss_out(module):
    code = (f"import sys, {module}; "
            f"print(','.join(m for m in {HEAVY_AT_STARTUP!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing {module} imported {out.stdout.strip()} at module level"


def test_memory_still_builds_its_index(tmp_path):
    """FAISS is imported where it is used: the memory still normalises its embeddings with it."""
    import numpy as np

    from scholar_agents.thought.memory import _unit

    v = _unit(np.array([[3.0, 4.0]]), 2)
    assert np.allclose(v, [[0.6, 0.8]])
