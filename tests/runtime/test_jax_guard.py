"""bm25s runs a JAX op at import time; on a CUDA machine that made JAX take 75% of the GPU (verified on one H100:
the PPO check went out of memory). Every import of bm25s goes through ``runtime.jax_guard.import_bm25s``."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

from tests.paths import REPO

PACKAGE = REPO / "scholar_agents"


def _jax_platforms_after(code: str, env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"} | env_extra
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport os; print(os.environ.get('JAX_PLATFORMS'))"],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=True)
    return out.stdout.strip().splitlines()[-1]


def test_bm25_search_keeps_jax_on_the_cpu():
    # the real entry point the crawl uses (BM25Search's tokenizer), in a fresh process
    code = "from scholar_agents.papers.bm25 import make_tokenizer; make_tokenizer()"
    assert _jax_platforms_after(code, {}) == "cpu"


def test_a_users_jax_platform_is_kept():
    code = "from scholar_agents.runtime.jax_guard import import_bm25s; import_bm25s()"
    assert _jax_platforms_after(code, {"JAX_PLATFORMS": "cuda"}) == "cuda"


def test_no_module_imports_bm25s_around_the_guard():
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "jax_guard.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n == "bm25s" or n.startswith("bm25s.") for n in names):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, f"import bm25s through runtime.jax_guard.import_bm25s: {offenders}"
