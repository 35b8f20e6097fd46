"""Keep JAX off the GPU where a dependency imports it behind our back.

``bm25s`` (BM25 search, the thought retriever, the arXiv API's stop words) runs a JAX top-k when its package is
imported, wherever JAX is installed (``bm25s/selection.py``). On a CUDA machine JAX's first operation starts its GPU
backend, which by default preallocates 75% of the GPU's memory for itself. Verified on one H100 (the lent image
has JAX): ``scripts/gpu_check.sh``'s PPO run went out of memory in DeepSpeed's ZeRO-3 set-up with 16 GiB allocated
by PyTorch and 78.4 GiB in use by the process (docs/cluster.md, "One-H100 check"). Our BM25 top-k runs on numpy
arrays of scores, so JAX gets the CPU, unless the user chose its platform (``JAX_PLATFORMS``) or imported JAX first.
"""

from __future__ import annotations

import os
import sys


def keep_jax_on_cpu() -> bool:
    """Call before importing a package that may import JAX. Returns True when this call decided JAX's platform
    (``JAX_PLATFORMS=cpu``), False when it was already decided (set by the user, or JAX already imported)."""
    if "jax" in sys.modules or "JAX_PLATFORMS" in os.environ:
        return False
    os.environ["JAX_PLATFORMS"] = "cpu"
    return True


def import_bm25s():
    """``bm25s``, imported with JAX kept on the CPU (above). Every import of bm25s in the package goes through here."""
    keep_jax_on_cpu()
    import bm25s

    return bm25s
