"""The package's one dtype map (``scholar_agents.llm.precision``): ``llm.dtype`` takes torch's names and the
aliases; the training settings (``sft.model_dtype``, ``ppo.model_dtype``, ``export.dtype``) torch's names only, each
refusing a bad name with its own setting in the message. (``auto`` on the CPU: tests/llm/test_factory.py.)"""

import pytest
import torch

from scholar_agents.llm.precision import DTYPE_NAMES, named_torch_dtype, resolve_dtype_name, resolve_torch_dtype
from scholar_agents.train.export.config import DTYPES, to_export_config
from scholar_agents.train.export.load import torch_dtype as export_dtype
from scholar_agents.train.ppo.models import model_dtype as ppo_dtype
from scholar_agents.train.sft import torch_dtype as sft_dtype

TORCH = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def test_llm_dtype_takes_the_aliases():
    aliases = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32"}
    for alias, name in {**aliases, **{n: n for n in DTYPE_NAMES}}.items():
        assert resolve_dtype_name(alias, "cpu") == name and resolve_torch_dtype(alias, "cuda") == TORCH[name]
    with pytest.raises(ValueError, match=r"^unknown dtype 'int3'; use auto, bfloat16, float16 or float32$"):
        resolve_dtype_name("int3", "cpu")


def test_the_training_settings_take_torchs_names_and_name_themselves_when_refusing():
    assert DTYPE_NAMES == tuple(TORCH) and DTYPES == ("auto", "float32", "bfloat16", "float16")
    for name, dtype in TORCH.items():
        assert named_torch_dtype(name, "x") == sft_dtype(name, use_cpu=True) == ppo_dtype(name) == dtype
        assert export_dtype(name) == dtype
    assert sft_dtype("auto", use_cpu=True) == torch.float32  # SFT's auto: fp32 master weights on the CPU
    for bad in ("bf16", "fp32", "int8", None):
        with pytest.raises(ValueError, match=rf"^model_dtype must be auto\|float32\|bfloat16\|float16, got {bad!r}$"):
            sft_dtype(bad, use_cpu=True)
        with pytest.raises(ValueError, match=rf"^ppo.model_dtype must be float32\|bfloat16\|float16, got {bad!r}$"):
            ppo_dtype(bad)
    with pytest.raises(ValueError, match=r"^ppo.model_dtype must be float32\|bfloat16\|float16, got 'auto'$"):
        ppo_dtype("auto")  # PPO has no auto
    with pytest.raises(ValueError, match=r"^export.dtype must be one of \('auto', 'float32', 'bfloat16', 'float16'\), "
                                         r"got 'bf16'$"):
        to_export_config({"source": "/m", "dtype": "bf16"})
