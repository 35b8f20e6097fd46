#!/usr/bin/env bash
# The one-GPU check (docs/cluster.md "One-H100 check"):
#   bash scripts/gpu_check.sh OUT_DIR [--budget-s S] [--only RUN,...] [--plan-only]   # or: make gpu-check; --help
# Runs the Slurm probe, train crawler_ppo and train selector_sft (full, LoRA) under torchrun --nproc_per_node 1, and
# the colocated-vLLM run where vllm imports, and writes OUT_DIR/gpu_check.json + gpu_check.md: per size and phase,
# peak CUDA memory beside `scholar plan`'s estimate, and each run's seconds beside its planned seconds.
# Budget: the whole command ends within GPU_CHECK_BUDGET_S (or --budget-s; default 480 s, a 600-s device command with
# room to spare) plus writing the report: counted from this script's start, a run starts only if its planned seconds
# (the table PLAN_S in scripts/gpu_check.py, also its timeout) fit what is left; one that does not fit is reported
# "skipped (budget)", never failed, and the exit status is 0 when every run that ran passed.
# GPU_CHECK_PROFILE=auto (default: gpu where CUDA is, else cpu) | gpu (refused without CUDA) | cpu (gloo, tiny models:
# the CI twin, tests/scripts/test_gpu_check.py). PYTHON=... picks the interpreter (default: python3).
# The packed dependencies: a bare GPU image lacks hydra, deepspeed, trl, datasets, bm25s and more. They travel in
# .gpu_pack/site-packages.tar.xz, which is git-ignored: build it with `make gpu-pack` on a machine with a package
# index, and send it with the tree (the device tool: carry: [".gpu_pack"]). Where it exists it is unpacked into a
# temporary folder whose site-packages goes first on PYTHONPATH; where it is missing the check runs only if PYTHON
# already imports those packages, and otherwise says in one line what to do (it never tries to build the pack).
set -euo pipefail
export GPU_CHECK_STARTED=${GPU_CHECK_STARTED:-$(date +%s.%N)}  # the budget's clock starts here
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi
OUT=${1:?usage: bash scripts/gpu_check.sh OUT_DIR [--budget-s S] [--plan-only] (--help: the budget, .gpu_pack)}
shift
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
PACK=${GPU_PACK:-$REPO/.gpu_pack/site-packages.tar.xz}  # GPU_PACK: another pack (tests)
NEEDS=(hydra omegaconf deepspeed trl datasets bm25s rapidfuzz)  # what the pack carries (scripts/gpu_pack_packages.txt)
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
if [[ ! -f "$PACK" ]]; then
  find='import importlib.util as u, sys; print(" ".join(m for m in sys.argv[1:] if u.find_spec(m) is None))'
  missing=$("$PYTHON" -c "$find" "${NEEDS[@]}")
  if [[ -n "$missing" ]]; then
    echo "gpu_check: $PACK is missing and $PYTHON cannot import $missing: build it with \`make gpu-pack\`" \
      "on a machine with a package index and carry it with the tree (device tool: carry: [\".gpu_pack\"])" >&2
    exit 2
  fi
fi
mkdir -p "$OUT"
"$PYTHON" "$REPO/scripts/gpu_check.py" "$OUT" "$@"
