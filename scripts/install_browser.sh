#!/usr/bin/env bash
# Debian's chromium + chromium-driver for the tests marked `browser` (tests/pasa/serve/test_browser.py: a real
# headless browser on `scholar pasa serve`), apt-installed as slurm/local_cluster.sh installs the Slurm packages.
# Idempotent; needs root when a package is missing. Selenium drives the system browser: nothing is downloaded.
set -euo pipefail
PACKAGES=(chromium chromium-driver)
missing=()
for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0
[[ $EUID -eq 0 ]] || { echo "missing Debian packages (${missing[*]}); as root: apt-get install ${missing[*]}" >&2; exit 1; }
echo "[install_browser] installing ${missing[*]} (apt)"
export DEBIAN_FRONTEND=noninteractive
log="${TMPDIR:-/tmp}/install_browser.apt.log"
apt-get update -q >"$log" 2>&1 || true
apt-get install -y -q --no-install-recommends "${missing[@]}" >>"$log" 2>&1 \
    || { echo "apt-get install failed, see $log" >&2; exit 1; }
