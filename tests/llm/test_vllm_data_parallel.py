"""How the vllm backend isolates data-parallel replicas (no engine started: the split is plain logic)."""

from __future__ import annotations

import os

import pytest

from scholar_agents.llm.vllm_backend import _replica_environments


def test_gpu_replicas_get_disjoint_tensor_parallel_groups(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")
    envs = _replica_environments(dp=2, tp=2, on_cpu=False)
    assert envs == [{"CUDA_VISIBLE_DEVICES": "4,5"}, {"CUDA_VISIBLE_DEVICES": "6,7"}]
    with pytest.raises(ValueError, match="needs 6 GPUs, 4 visible"):
        _replica_environments(dp=3, tp=2, on_cpu=False)


def test_cpu_replicas_get_disjoint_cores():
    cores = sorted(os.sched_getaffinity(0))
    envs = _replica_environments(dp=len(cores), tp=1, on_cpu=True)
    bound = [e["VLLM_CPU_OMP_THREADS_BIND"] for e in envs]
    assert bound == [str(c) for c in cores]
    with pytest.raises(ValueError, match="CPU cores"):
        _replica_environments(dp=len(cores) + 1, tp=1, on_cpu=True)
