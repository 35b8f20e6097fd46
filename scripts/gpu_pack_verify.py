"""Check an extracted GPU pack (scripts/build_gpu_pack.sh) against the Python that will run it, before the check runs.

    python3 scripts/gpu_pack_verify.py <dir>/site-packages [--strict] [--import]

For every distribution in the pack, each of its requirements (Requires-Dist, markers evaluated here, no extras) must be
met by the pack or by this interpreter's own packages (the lent image: their versions there are not read ahead).
A missing distribution is an error (an import would fail); a version outside a bound is a warning, an error with
--strict (the image's newer releases usually work). --import imports each packed top-level module and prints where
it came from: it must be the pack, so that the pack is first on the path. Exit 1 on any error. Needs `packaging`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from importlib.metadata import Distribution, distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def _top_level_modules(dist: Distribution) -> list[str]:
    """The importable names a distribution installs: its top-level packages and modules, private ones excepted."""
    names = set()
    for f in dist.files or []:
        head = f.parts[0]
        if head.endswith((".dist-info", ".libs", ".pth")) or head in {"bin", "..", "pydevd_plugins"}:
            continue
        name = head.removesuffix(".py") if len(f.parts) == 1 else head
        if len(f.parts) == 1 and not head.endswith(".py"):
            continue  # a loose data file or an extension module named by its ABI tag: none of ours
        if not name.startswith("_") and name.isidentifier():
            names.add(name)
    return sorted(names)


def check(site: Path, strict: bool = False) -> tuple[list[str], list[str]]:
    """(errors, warnings), one line each."""
    packed = {canonicalize_name(d.metadata["Name"]): d for d in distributions(path=[str(site)])}
    if not packed:
        return [f"{site}: no distributions found (not an extracted pack's site-packages?)"], []
    others = [p for p in sys.path if Path(p or ".").resolve() != site.resolve()]
    available: dict[str, str] = {}
    for d in distributions(path=others):  # first on the path wins, as import does
        available.setdefault(canonicalize_name(d.metadata["Name"]), d.version)
    available.update({name: d.version for name, d in packed.items()})
    errors, warnings = [], []
    for name, dist in sorted(packed.items()):
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            have = available.get(canonicalize_name(req.name))
            where = "pack" if canonicalize_name(req.name) in packed else "image"
            if have is None:
                errors.append(f"{name} {dist.version} requires {req}: not installed")
            elif req.specifier and not req.specifier.contains(have, prereleases=True):
                (errors if strict else warnings).append(f"{name} {dist.version} requires {req}: {where} has {have}")
    return errors, warnings


def import_all(site: Path) -> list[str]:
    """Import every packed top-level module; errors for those that fail or load from outside the pack."""
    errors = []
    for dist in distributions(path=[str(site)]):
        for mod in _top_level_modules(dist):
            try:
                loaded = importlib.import_module(mod)
            except Exception as e:  # noqa: BLE001 - report every failure, one line each
                errors.append(f"import {mod} ({dist.metadata['Name']}): {type(e).__name__}: {e}")
                continue
            origin = Path(getattr(loaded, "__file__", None) or next(iter(getattr(loaded, "__path__", [])), "?"))
            print(f"import {mod}: {dist.metadata['Name']} {dist.version} {origin}")
            if site.resolve() not in origin.resolve().parents:
                errors.append(f"import {mod}: loaded from {origin}, not from the pack {site}")
    return errors


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("site", type=Path, help="the pack's extracted site-packages folder")
    ap.add_argument("--strict", action="store_true", help="a version outside a requirement's bound is an error")
    ap.add_argument("--import", dest="do_import", action="store_true", help="import every packed module")
    args = ap.parse_args(argv)
    if not args.site.is_dir():
        print(f"gpu_pack_verify: {args.site} is not a folder", file=sys.stderr)
        return 2
    if str(args.site) not in sys.path and str(args.site.resolve()) not in sys.path:
        sys.path.insert(0, str(args.site))  # as PYTHONPATH puts it on the device
    errors, warnings = check(args.site, args.strict)
    if args.do_import:
        errors += import_all(args.site)
    for w in warnings:
        print(f"warning: {w}")
    for e in errors:
        print(f"error: {e}")
    print(f"gpu_pack_verify: {len(errors)} error(s), {len(warnings)} warning(s) in {args.site}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
