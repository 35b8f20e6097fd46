#!/usr/bin/env bash
# `make gpu-pack`: what the one-H100 check (scripts/gpu_check.sh) needs beyond the lent GPU image, as ONE packed
# install folder that travels with the repo (the device copies at most 64 MiB; the repo is ~9 MiB).
#
#   .gpu_pack/site-packages.tar.xz   the packages of scripts/gpu_pack_packages.txt, installed for CPython 3.12 /
#                                    manylinux x86_64 into a folder named `site-packages`
#   .gpu_pack/MANIFEST.txt           wheel, version, bytes; totals (wheels, installed, packed)
#
# Use (on the device): tar -xJf .gpu_pack/site-packages.tar.xz -C "$tmp" && export PYTHONPATH="$tmp/site-packages:..."
# then `python3 scripts/gpu_pack_verify.py "$tmp/site-packages"` names any requirement the image does not meet.
# The folder must be called site-packages: dill (datasets' fingerprints) pickles by value any module outside a
# path of that name, and Dataset.from_list then breaks.
#
# Environment: PYTHON (runs pip and builds the sdists with --no-build-isolation: needs setuptools and wheel, and
# deepspeed's setup.py imports torch; default: the project venv's python where it exists), GPU_PACK_DIR (default
# .gpu_pack), GPU_PACK_PYTHON_VERSION (default 3.12, the image's), GPU_PACK_EXTRA (more name==version specs,
# space-separated, e.g. "pyarrow==26.0.1" should the image's pyarrow be older than datasets' >=24).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${GPU_PACK_DIR:-$REPO/.gpu_pack}"
if [[ -z "${PYTHON:-}" ]]; then
    PYTHON=python3
    [[ -x "$REPO/.venv/bin/python" ]] && PYTHON="$REPO/.venv/bin/python"
fi
PYVER="${GPU_PACK_PYTHON_VERSION:-3.12}"
if ! "$PYTHON" -c "import torch, setuptools, wheel" 2>/dev/null; then
    echo "build_gpu_pack: $PYTHON cannot import torch, setuptools and wheel (deepspeed's sdist is built with" \
        "--no-build-isolation and its setup.py imports torch): run make setup, or set PYTHON" >&2
    exit 2
fi
LIST="$REPO/scripts/gpu_pack_packages.txt"

wheels=() sdists=()
while read -r spec kind _; do
    [[ -z "$spec" || "$spec" == \#* ]] && continue
    [[ "$spec" == *==* ]] || { echo "build_gpu_pack: $LIST: '$spec' is not name==version" >&2; exit 2; }
    if [[ "$kind" == sdist ]]; then sdists+=("$spec"); else wheels+=("$spec"); fi
done <"$LIST"
read -r -a extra <<<"${GPU_PACK_EXTRA:-}"
wheels+=("${extra[@]}")

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/wheels" "$work/sdists" "$work/site-packages" "$DEST"

# Wheels for the image's interpreter, not this one (pip matches each manylinux_2_N tag exactly, so name them).
target=(--only-binary=:all: --python-version "$PYVER" --implementation cp)
for n in 17 24 25 26 27 28; do target+=(--platform "manylinux_2_${n}_x86_64"); done
target+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
pip=("$PYTHON" -m pip -q --disable-pip-version-check)

"${pip[@]}" download --no-deps "${target[@]}" -d "$work/wheels" "${wheels[@]}"
if ((${#sdists[@]})); then
    # No wheel on PyPI (antlr4 4.9.3, deepspeed): build a pure-Python one here. DS_BUILD_OPS=0: no prebuilt
    # kernels (DeepSpeed compiles an op just in time, with the image's nvcc and ninja, should one be used).
    "${pip[@]}" download --no-deps --no-binary=:all: --no-build-isolation -d "$work/sdists" "${sdists[@]}"
    DS_BUILD_OPS=0 "${pip[@]}" wheel --no-deps --no-build-isolation -w "$work/wheels" "$work"/sdists/*
fi

"${pip[@]}" install --no-deps --no-index --no-compile "${target[@]}" --target "$work/site-packages" \
    "$work"/wheels/*.whl

# Strip what no import needs: console scripts, byte code, and pyarrow's unused parts where GPU_PACK_EXTRA adds it.
site="$work/site-packages"
rm -rf "$site/bin"
find "$site" -name __pycache__ -type d -prune -exec rm -rf {} +
if [[ -d "$site/pyarrow" ]]; then
    rm -rf "$site/pyarrow/tests" "$site/pyarrow/include" "$site/pyarrow/src"
    rm -f "$site"/pyarrow/*flight* "$site"/pyarrow/*substrait* "$site"/pyarrow/_s3fs* "$site"/pyarrow/*.pxd \
        "$site"/pyarrow/*.pyx
fi

"$PYTHON" - "$work/wheels" "$site" "$DEST/MANIFEST.txt" <<'EOF'
import os, sys
from pathlib import Path

wheels, site, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
rows = sorted((w.name.split("-")[0], w.name.split("-")[1], w.stat().st_size, w.name) for w in wheels.glob("*.whl"))
installed = sum(f.stat().st_size for f in site.rglob("*") if f.is_file())
lines = ["# made by scripts/build_gpu_pack.sh (make gpu-pack); name version wheel_bytes wheel"]
lines += [f"{n} {v} {s} {w}" for n, v, s, w in rows]
lines.append(f"# total: {len(rows)} wheels, {sum(r[2] for r in rows)} bytes as wheels, {installed} bytes installed")
out.write_text("\n".join(lines) + "\n")
(site / "gpu_pack_manifest.txt").write_text(out.read_text())
EOF

# Reproducible order and owners; xz -9 (one thread: the best ratio).
tar -C "$work" --sort=name --owner=0 --group=0 --numeric-owner --mtime='2026-01-01 00:00Z' -cf - site-packages \
    | xz -9 -T1 >"$DEST/site-packages.tar.xz.tmp"
mv "$DEST/site-packages.tar.xz.tmp" "$DEST/site-packages.tar.xz"
packed=$(stat -c %s "$DEST/site-packages.tar.xz")
echo "# packed: $packed bytes ($DEST/site-packages.tar.xz)" >>"$DEST/MANIFEST.txt"
cat "$DEST/MANIFEST.txt"
mib=$(awk -v b="$packed" 'BEGIN { printf "%.1f MiB", b / 1048576 }')
echo "build_gpu_pack: $mib packed in $DEST/site-packages.tar.xz"
