"""The packed install folder for the one-H100 check (scripts/build_gpu_pack.sh, `make gpu-pack`): its package list
covers what the check's commands import beyond the lent image, at the GPU lock's versions, and its verifier
(scripts/gpu_pack_verify.py) names what the image would lack. Building the pack itself needs PyPI: not run here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.fixtures.packaging import EXTRAS, gpu_lock_pins, norm_name, pin_of
from tests.paths import REPO

SCRIPTS = REPO / "scripts"


def _names(path: Path) -> dict[str, str]:
    """name -> version ('' where the file gives none) of a package list: comments and blank lines skipped."""
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            spec = line.split()[0]
            name, _, version = spec.partition("==")
            out[norm_name(name)] = version or (line.split()[1] if len(line.split()) > 1 else "")
    return out


PACK = _names(SCRIPTS / "gpu_pack_packages.txt")
IMAGE = _names(SCRIPTS / "gpu_image_packages.txt")

# What gpu_check.sh runs (`scholar plan`, `slurm probe`, `train crawler_ppo` with hf rollouts + BM25 + ZeRO-3,
# `train selector_sft` full and LoRA): the modules of those commands and the libraries they import lazily.
CHECK_MODULES = [
    "scholar_agents.cli", "scholar_agents.hydra_app", "scholar_agents.plan.commands", "scholar_agents.train.plan_runs",
    "scholar_agents.runtime.slurm_probe", "scholar_agents.train.crawler_ppo", "scholar_agents.train.ppo.trainer",
    "scholar_agents.train.selector.sft", "scholar_agents.llm.hf_backend", "scholar_agents.papers.bm25",
    "hydra", "deepspeed", "trl", "datasets", "bm25s", "peft", "accelerate", "transformers", "rapidfuzz", "faiss",
]

_PROBE = textwrap.dedent("""
    import importlib, json, sys
    from importlib.metadata import distributions
    from pathlib import Path
    for m in sys.argv[1:]:
        importlib.import_module(m)
    owner = {}
    for d in distributions():
        for f in d.files or []:
            owner[str(Path(d.locate_file(f)).resolve())] = d.metadata["Name"]
    used = set()
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if f and str(Path(f).resolve()) in owner:
            used.add(owner[str(Path(f).resolve())])
    print(json.dumps(sorted(used)))
""")


def test_pack_versions_are_the_gpu_lock_s():
    """One version set: the pack carries the GPU lock's versions (faiss-cpu: the `cpu` extra's pin instead)."""
    lock = gpu_lock_pins()
    drift = {n: (v, lock.get(n)) for n, v in PACK.items() if n != "faiss-cpu" and lock.get(n) != v}
    assert not drift, f"scripts/gpu_pack_packages.txt vs the GPU lock (pack, lock): {drift}"
    assert PACK["faiss-cpu"] == pin_of(EXTRAS["cpu"], "faiss-cpu")


def test_pack_covers_what_the_check_imports_beyond_the_image():
    """Every distribution whose modules the check's commands load must be in the image or in the pack; the pack
    carries nothing the commands do not load (except version-bounded pure-Python shadows of image packages)."""
    out = subprocess.run([sys.executable, "-c", _PROBE, *CHECK_MODULES], capture_output=True, text=True,
                         cwd=REPO, timeout=600, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    used = {norm_name(n) for n in json.loads(out.stdout.strip().splitlines()[-1])} - {"scholar-agents"}
    # httpcore imports trio (and with it outcome, sniffio) only when it is installed: here the `test` extra's selenium
    # brings it (the browser tests of `pasa serve`); the device has no test extra, so the check never loads them there
    used -= {"trio", "outcome", "sniffio"} - set(IMAGE) - set(PACK)
    missing = sorted(used - set(IMAGE) - set(PACK))
    assert not missing, f"the check imports these, in neither the image nor the pack: {missing}"
    unused = sorted(set(PACK) - used - set(IMAGE))
    assert not unused, f"packed but never imported by the check's commands: {unused}"


def test_image_list_is_the_device_readout():
    assert len(IMAGE) > 150 and IMAGE["torch"] == "2.11.0" and IMAGE["transformers"] == "5.17.0"
    assert "2026-11-17" in (SCRIPTS / "gpu_image_packages.txt").read_text()


def _fake_dist(site: Path, name: str, version: str, requires: list[str], module: str | None = None) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}",
            *[f"Requires-Dist: {r}" for r in requires]]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    files = [f"{name}-{version}.dist-info/METADATA,,"]
    if module:
        (site / f"{module}.py").write_text("VALUE = 1\n")
        files.append(f"{module}.py,,")
    (info / "RECORD").write_text("\n".join(files) + "\n")


def _verify(site: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / "gpu_pack_verify.py"), str(site), *args],
                          capture_output=True, text=True, timeout=120, check=False)


def test_verify_names_a_requirement_the_image_lacks(tmp_path):
    site = tmp_path / "site-packages"
    _fake_dist(site, "packedthing", "1.0", ["no-such-dist-anywhere>=1", "packaging", "other; extra == 'dev'"])
    out = _verify(site)
    assert out.returncode == 1, out.stdout
    assert "error: packedthing 1.0 requires no-such-dist-anywhere>=1: not installed" in out.stdout
    assert "other" not in out.stdout  # an extra's requirement is not needed


def test_verify_version_bound_is_a_warning_unless_strict(tmp_path):
    site = tmp_path / "site-packages"
    _fake_dist(site, "packedthing", "1.0", ["packaging<0.1", "packedother>=2"])
    _fake_dist(site, "packedother", "2.5", [])
    out = _verify(site)
    assert out.returncode == 0, out.stdout
    assert re.search(r"warning: packedthing 1.0 requires packaging<0.1: image has \S+", out.stdout)
    assert "packedother" not in out.stdout.split("gpu_pack_verify:")[0]  # met inside the pack
    assert _verify(site, "--strict").returncode == 1


def test_verify_import_reports_where_each_packed_module_loads_from(tmp_path):
    site = tmp_path / "site-packages"
    _fake_dist(site, "packedthing", "1.0", [], module="packedthing_mod")
    out = _verify(site, "--import")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"import packedthing_mod: packedthing 1.0 {site / 'packedthing_mod.py'}" in out.stdout
