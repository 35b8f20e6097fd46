"""`scholar llm serve`: one serving command for both installs. The real server start is what every
test on `tests/fixtures/vllm_server.py`'s servers runs (the fixture starts them with this command); here, the
command it builds, its refusals and that a key never reaches the printed line."""

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from scholar_agents.llm.serve import MODULE, server_command
from tests.paths import REPO


def _cfg(model_dir, **kw):
    base = {"model": str(model_dir), "served_model_name": None, "host": "127.0.0.1", "port": 8001, "dtype": "auto",
            "max_model_len": None, "seed": 0, "enforce_eager": None, "cpu_kv_cache_gib": 1,
            "api_key_env": "SCHOLAR_TEST_SERVE_KEY", "extra_args": []}
    return OmegaConf.create({**base, **kw})


def test_the_same_module_on_both_builds_eager_and_kv_cache_only_on_cpu(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    cpu, cpu_env = server_command(_cfg(tiny_model_dir, max_model_len=512), "cpu")
    gpu, gpu_env = server_command(_cfg(tiny_model_dir, extra_args=["--tensor-parallel-size", "2"]), "cuda")
    for argv in (cpu, gpu):
        assert argv[1:3] == ["-m", MODULE] and argv[argv.index("--model") + 1] == str(tiny_model_dir)
        assert argv[argv.index("--served-model-name") + 1] == tiny_model_dir.name
    assert "--enforce-eager" in cpu and "--enforce-eager" not in gpu
    assert cpu[cpu.index("--max-model-len") + 1] == "512" and "--max-model-len" not in gpu
    assert gpu[-2:] == ["--tensor-parallel-size", "2"]
    assert cpu_env["VLLM_CPU_KVCACHE_SPACE"] == "1" and "VLLM_CPU_KVCACHE_SPACE" not in gpu_env


def test_refuses_a_dir_without_a_model_and_a_public_host_without_a_key(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("SCHOLAR_TEST_SERVE_KEY", raising=False)
    with pytest.raises(ValueError, match="no config.json"):
        server_command(_cfg(tmp_path), "cpu")
    with pytest.raises(ValueError, match="set SCHOLAR_TEST_SERVE_KEY"):
        server_command(_cfg(tiny_model_dir, host="0.0.0.0"), "cpu")
    monkeypatch.setenv("SCHOLAR_TEST_SERVE_KEY", "s3cret")
    argv, _ = server_command(_cfg(tiny_model_dir, host="0.0.0.0"), "cpu")
    assert argv[argv.index("--api-key") + 1] == "${SCHOLAR_TEST_SERVE_KEY}"


def test_the_documented_command_composes_and_never_prints_the_key(tiny_model_dir, tmp_path):
    env = {**os.environ, "SCHOLAR_TEST_SERVE_KEY": "s3cret-value", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-m", "scholar_agents", "llm", "serve", f"model={tiny_model_dir}",
                          "api_key_env=SCHOLAR_TEST_SERVE_KEY", "host=0.0.0.0", "dry_run=true",
                          f"hydra.run.dir={tmp_path / 'run'}"], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert f"-m {MODULE} --model {tiny_model_dir}" in out.stdout and "--api-key '${SCHOLAR_TEST_SERVE_KEY}'" in out.stdout
    assert "s3cret-value" not in out.stdout + out.stderr
    assert "s3cret-value" not in "".join(p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*")
                                         if p.is_file())
