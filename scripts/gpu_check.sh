#!/usr/bin/env bash
# The one-GPU check (issue 28; docs/cluster.md "One-H100 check"):
#   bash scripts/gpu_check.sh OUT_DIR            # or: make gpu-check
# Runs the Slurm probe, train crawler_ppo and train selector_sft (full, LoRA) under torchrun --nproc_per_node 1 and
# writes OUT_DIR/gpu_check.json + gpu_check.md: per size and phase, peak CUDA memory beside `scholar plan`'s estimate.
# GPU_CHECK_PROFILE=auto (default: gpu where CUDA is, else cpu) | gpu (refused without CUDA) | cpu (gloo, tiny models:
# the CI twin, tests/scripts/test_gpu_check.py). PYTHON=... picks the interpreter (default: python3).
# Where .gpu_pack/site-packages.tar.xz exists (`make gpu-pack`: the packages a bare GPU image lacks), it is unpacked
# into a temporary folder whose site-packages goes first on PYTHONPATH, before anything else.
set -euo pipefail
OUT=${1:?usage: bash scripts/gpu_check.sh OUT_DIR}
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
PACK=${GPU_PACK:-$REPO/.gpu_pack/site-packages.tar.xz}  # GPU_PACK: another pack (tests)
path="$REPO"
if [[ -f "$PACK" ]]; then
  unpacked=$(mktemp -d)
  trap 'rm -rf "$unpacked"' EXIT
  tar -xJf "$PACK" -C "$unpacked"
  [[ -d "$unpacked/site-packages" ]] || { echo "gpu_check: $PACK has no top-level site-packages/" >&2; exit 2; }
  path="$unpacked/site-packages:$path"
  echo "gpu_check: packed dependencies from $PACK"
fi
export PYTHONPATH="$path${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
"$PYTHON" "$REPO/scripts/gpu_check.py" "$OUT"
