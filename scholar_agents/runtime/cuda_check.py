"""Which CUDA the GPU install is built for, which NVIDIA driver that needs, and the refusal of a GPU run without CUDA.

Two locks install GPU nodes (docs/cluster.md "Environment"): ``requirements/gpu-linux-x86_64-py312.lock`` (PyPI's
torch 2.13.0, a CUDA 13.0 build) and ``requirements/gpu-cu12-linux-x86_64-py312.lock`` (torch 2.10.0, CUDA 12.8, for
CUDA 12 drivers). :func:`lock_cuda` reads a lock's torch CUDA from its own pins, :func:`driver_needs` the drivers that
CUDA needs; ``scholar plan`` prints both (:func:`lock_lines`).

:func:`cuda_refusal` runs before every task (``hydra_app.task_environment`` raises it as a UsageError: one line,
exit 2): a config that asks for GPUs (:func:`gpu_request`) whose torch sees no CUDA stops there, naming the torch
build, its CUDA and the lock to install, instead of training on the CPU without a word (PPO picking gloo, SFT the
CPU, DeepSpeed its CPU accelerator). Where CUDA is there it logs one line: torch's CUDA, the driver, the locks' needs.
``cluster.require_cuda=false`` runs a GPU preset on the CPU on purpose (CPU twins); ``scholar plan`` sets it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

log = logging.getLogger(__name__)

REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements"  # beside the package in a checkout (-e install)
LOCK_CU13 = "requirements/gpu-linux-x86_64-py312.lock"
LOCK_CU12 = "requirements/gpu-cu12-linux-x86_64-py312.lock"
LOCKS = (LOCK_CU13, LOCK_CU12)

# The oldest Linux x86_64 NVIDIA driver per CUDA major, and per CUDA minor the driver of its toolkit's GA release.
# Sources (NVIDIA): "CUDA Compatibility", Minor Version Compatibility, Table 1: CUDA 13.x >= 580, CUDA 12.x >= 525
# (minor-version compatibility: binaries built with any 12.x run on a 525+ driver, with a limited feature set — no
# JIT of PTX newer than the driver, which flashinfer's and Triton's kernels may need); CUDA Toolkit Release Notes,
# Table 3 "CUDA Toolkit and Corresponding Driver Versions": 12.8 GA >= 570.26, 12.9 GA >= 575.51.03, 13.0 GA
# >= 580.65.06 (= full support of that minor). The data center branches: R535 and R570 serve CUDA 12.x, R580 13.x.
MIN_DRIVER = {12: "525.60.13", 13: "580"}
FULL_DRIVER = {"12.8": "570.26", "12.9": "575.51.03", "13.0": "580.65.06"}


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", version))


def driver_needs(cuda: str) -> tuple[Optional[str], Optional[str]]:
    """(the oldest driver that runs CUDA ``cuda`` at all, the one with full support of it); None where not tabled."""
    major = _version_tuple(cuda)[0]
    return MIN_DRIVER.get(major), FULL_DRIVER.get(".".join(cuda.split(".")[:2]))


def driver_text(cuda: str) -> str:
    """``NVIDIA driver >= 525.60.13 (>= 570.26 for all of CUDA 12.8)`` for a CUDA version."""
    minimum, full = driver_needs(cuda)
    if minimum is None:
        return "NVIDIA driver: see NVIDIA's CUDA Toolkit release notes"
    if full is None or full == minimum:
        return f"NVIDIA driver >= {minimum}"
    return f"NVIDIA driver >= {minimum} (>= {full} for all of CUDA {cuda})"


# --- the locks ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LockCuda:
    path: str
    torch: Optional[str]  # torch's pin
    cuda: Optional[str]  # CUDA of torch's build ("13.0", "12.8"), or the major ("12") when only that is known
    source: str  # the pin it was read from


def read_lock(path: Path) -> dict[str, tuple[str, set[str]]]:
    """``{name: (version, {packages it is required via})}`` of a ``uv pip compile`` lock (names lower-case)."""
    entries: dict[str, tuple[str, set[str]]] = {}
    current = None
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line)
        if m:
            current = re.sub(r"[-_.]+", "-", m.group(1)).lower()
            entries[current] = (m.group(2), set())
            continue
        via = re.match(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\(|$)", line)
        if current and via and via.group(1) != "via":
            entries[current][1].add(re.sub(r"[-_.]+", "-", via.group(1)).lower())
    return entries


def lock_cuda(path: Path | str) -> LockCuda:
    """The CUDA of the torch a lock installs, from the pins torch itself requires: ``cuda-toolkit`` (torch >= 2.11:
    13.0.3.0 -> 13.0), else ``nvidia-cuda-runtime-cuNN`` (torch <= 2.10: 12.8.90 -> 12.8), else any
    ``nvidia-*-cuNN`` (the major). Pins other packages bring (faiss-gpu-cu12's CUDA 12 runtime beside a CUDA 13
    torch) are not torch's."""
    p = Path(path)
    entries = read_lock(p if p.is_absolute() else REQUIREMENTS.parent / p)
    torch = entries.get("torch", (None, set()))[0]
    mine = {name: version for name, (version, via) in entries.items() if "torch" in via}
    if "cuda-toolkit" in mine:
        return LockCuda(str(path), torch, ".".join(mine["cuda-toolkit"].split(".")[:2]),
                        f"cuda-toolkit=={mine['cuda-toolkit']}")
    for name, version in sorted(mine.items()):
        if re.fullmatch(r"nvidia-cuda-runtime-cu\d+", name):
            return LockCuda(str(path), torch, ".".join(version.split(".")[:2]), f"{name}=={version}")
    for name, version in sorted(mine.items()):
        m = re.fullmatch(r"nvidia-.+-cu(\d+)", name)
        if m:
            return LockCuda(str(path), torch, m.group(1), f"{name}=={version}")
    return LockCuda(str(path), torch, None, "no CUDA package required by torch")


def lock_lines() -> list[str]:
    """One line per GPU lock: its torch, that torch's CUDA and the NVIDIA driver it needs (``scholar plan``)."""
    lines = []
    for rel in LOCKS:
        if not (REQUIREMENTS.parent / rel).is_file():
            lines.append(f"{rel}: not in this install (a checkout has it)")
            continue
        lc = lock_cuda(rel)
        if lc.cuda is None:
            lines.append(f"{rel}: torch {lc.torch}, CUDA unknown ({lc.source})")
        else:
            lines.append(f"{rel}: torch {lc.torch} for CUDA {lc.cuda} ({lc.source}): {driver_text(lc.cuda)}")
    return lines


def lock_for_driver(driver: Optional[str]) -> str:
    """The lock to install under ``driver`` (both, with their drivers, where it is unknown)."""
    if driver is None:
        return (f"install {LOCK_CU13} (CUDA 13.0, NVIDIA driver >= 580) or, on a CUDA 12 driver (>= 525), "
                f"{LOCK_CU12} (CUDA 12.8)")
    major = _version_tuple(driver)[0]
    if major >= 580:
        return f"driver {driver} runs CUDA 13: install {LOCK_CU13}"
    if major >= 525:
        return f"driver {driver} is a CUDA 12 driver (CUDA 13 needs >= 580): install {LOCK_CU12}"
    return f"driver {driver} is older than either lock needs (CUDA 12: >= 525): upgrade it"


# --- this machine -------------------------------------------------------------------------------------------------


def nvidia_driver() -> tuple[Optional[str], str]:
    """(the NVIDIA driver's version, where it was read or why there is none), without touching CUDA."""
    smi = shutil.which("nvidia-smi")
    if smi:
        out = None
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):  # a broken driver: try /proc next
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                                 text=True, timeout=30)
        first = out.stdout.strip().splitlines()[0].strip() if out is not None and out.stdout.strip() else ""
        if out is not None and out.returncode == 0 and re.fullmatch(r"\d+(\.\d+)*", first):
            return first, "nvidia-smi"
    proc = Path("/proc/driver/nvidia/version")
    if proc.is_file():
        m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?(\d+\.\d+(?:\.\d+)?)", proc.read_text())
        if m:
            return m.group(1), str(proc)
    return None, "no NVIDIA driver found (no nvidia-smi on PATH, no /proc/driver/nvidia/version)"


_PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import torch
    ok = torch.cuda.is_available()
    n = torch.cuda.device_count() if ok else 0
why = " ".join(str(w.message).split()) if caught else ""
print(json.dumps({"available": ok, "devices": n, "why": why}))
"""


def probe_cuda(timeout_s: float = 300) -> dict:
    """``{"available", "devices", "why"}`` of ``torch.cuda.is_available()``, asked in a child process: the check
    initialises the CUDA driver (``cuInit``, torch's "poison fork"), after which a process forked from this one
    (vLLM's engine workers) cannot use CUDA. ``why``: torch's own warning where CUDA does not initialise (e.g. "The
    NVIDIA driver on your system is too old (found version 12080)"). A child that does not answer in ``timeout_s``
    (a slow shared file system): asked in this process instead."""
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        import torch

        log.warning("the CUDA check in a child process took over %.0f s: asking torch in this process", timeout_s)
        ok = torch.cuda.is_available()
        return {"available": ok, "devices": torch.cuda.device_count() if ok else 0, "why": ""}
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        tail = " ".join(out.stderr.strip().splitlines()[-1:])
        return {"available": False, "devices": 0, "why": f"the CUDA check failed: {tail}"}


# --- the guard ----------------------------------------------------------------------------------------------------

_DEVICE_NODES = ("llm", "selector_llm", "judge_llm", "embedder")  # model nodes with a `device` setting


def gpu_request(cfg) -> Optional[str]:
    """Why a composed config runs on GPUs (the setting that says so), or None. ``cluster.require_cuda``: true / false
    decides alone; null (the default) = GPUs when ``cluster.gpus_per_node > 0`` (every experiment=* preset and
    cluster=h100_80gb / a6000_48gb), ``sft.use_cpu=false`` (sft=pasa_7b), or a model node on ``device=cuda[:N]``.
    There is no backend setting: the commands pick NCCL exactly where CUDA is available."""
    cluster = cfg.get("cluster") if hasattr(cfg, "get") else None
    if cluster is not None:
        required = cluster.get("require_cuda")
        if required is not None:
            return "cluster.require_cuda=true" if required else None
        gpus = int(cluster.get("gpus_per_node") or 0)
        if gpus > 0:
            return f"cluster={cluster.get('name')} ({gpus} GPUs per node)"
    sft = cfg.get("sft")
    if sft is not None and sft.get("use_cpu") is False:
        return "sft.use_cpu=false"
    for key in _DEVICE_NODES:
        node = cfg.get(key)
        device = node.get("device") if hasattr(node, "get") else None
        if isinstance(device, str) and device.startswith("cuda"):
            return f"{key}.device={device}"
    return None


def cuda_refusal(cfg) -> Optional[str]:
    """Before a task: the one-sentence refusal of a config that asks for GPUs where torch sees no CUDA (naming the
    torch build, its CUDA, the driver and the lock to install), or None — where CUDA is there after one log line of
    torch's CUDA, the driver and the locks' needs (and a warning where the driver is older than torch's CUDA minor
    needs for full support)."""
    why = gpu_request(cfg)
    if why is None:
        return None
    import torch

    build, cuda = torch.__version__, torch.version.cuda
    driver, driver_source = nvidia_driver()
    built = f"torch {build} (CUDA {cuda} build)" if cuda else f"torch {build} (CPU build)"
    found = f"NVIDIA driver {driver} ({driver_source})" if driver else driver_source
    anyway = "cluster.require_cuda=false runs it on the CPU on purpose"
    if cuda is None:
        return (f"{why} asks for GPUs, but {built} has no CUDA; {found}: {lock_for_driver(driver)}, then "
                f"`pip install --no-deps -e .` (docs/cluster.md \"Environment\"); {anyway}")
    probe = probe_cuda()
    minimum, full = driver_needs(cuda)
    if not probe["available"]:
        low = bool(driver and minimum and _version_tuple(driver) < _version_tuple(minimum))
        reason = f" (torch: {probe['why']})" if probe["why"] else ""
        fix = lock_for_driver(driver) if low or driver is None else \
            "check that the job was given GPUs (CUDA_VISIBLE_DEVICES, --gpus) and that nvidia-smi sees them"
        return (f"{why} asks for GPUs, but {built} sees no CUDA{reason}; {found}"
                f"{f', older than the {minimum} CUDA {cuda} needs' if low else ''}: {fix} "
                f"(docs/cluster.md \"Environment\"); {anyway}")
    log.info("CUDA for %s: %s sees %d GPU(s); %s; CUDA %s needs %s", why, built, probe["devices"], found, cuda,
             driver_text(cuda))
    log.info("GPU locks: %s", "; ".join(lock_lines()))
    if driver and full and _version_tuple(driver) < _version_tuple(full):
        log.warning("NVIDIA driver %s runs torch's CUDA %s through minor-version compatibility only (>= %s); kernels "
                    "compiled at run time from newer PTX (flashinfer, Triton) may fail: full support needs >= %s",
                    driver, cuda, minimum, full)
    return None
