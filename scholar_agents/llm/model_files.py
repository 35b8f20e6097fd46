"""Facts about a model directory read from its files, without loading it."""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path


def parameter_count(model_dir: str | Path) -> int | None:
    """The number of parameters in a directory's safetensors files, from their headers alone (the first 8 bytes
    give the JSON header's length; each tensor's shape is in it): a 7B model is counted in milliseconds. None when
    the directory holds no safetensors (a hub name, a .bin checkpoint)."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for f in files:
        with open(f, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        total += sum(math.prod(t["shape"]) for k, t in header.items() if k != "__metadata__")
    return total


def human_count(n: int | None) -> str:
    """135M, 1.7B, 7.6B: a parameter count as people write it."""
    if n is None:
        return "size unknown"
    if n >= 1e9:
        return f"{n / 1e9:.1f}B"
    if n >= 1e6:
        return f"{n / 1e6:.0f}M"
    return f"{n / 1e3:.0f}K"
