"""The package's import graph: circles, imports that climb a floor, and the largest files.

    python scripts/import_graph.py            # the report (what docs/DEVELOPING.md "Layers" shows)
    python scripts/import_graph.py --check    # exit 1 on a circle or an unjustified upward import

Every ``import`` of a ``scholar_agents`` module counts, at module level or inside a function: a lazy import still
ties the two files together for a reader. The floors (``FLOORS``) are the layers of docs/DEVELOPING.md; an import
from a lower floor to a higher one is allowed only with a one-line ``# upward: <why>`` comment on the import line
or the line above it. tests/test_layers.py runs ``--check``.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "scholar_agents"

# Floor of each top-level part of the package (first path component under scholar_agents/), lowest first.
# A module may import from its own floor and below.
FLOORS: dict[str, int] = {
    "runtime": 0,      # cluster glue: preemption, collectives, CUDA memory, the Slurm probe (imports nothing of ours)
    "validation": 0,   # UsageError, input validators, the JSONL reader
    "typed_config": 0,  # config node -> dataclass, the one converter
    "llm": 1, "papers": 1,
    "pasa": 2, "thought": 2, "scipip": 2,
    "data_gen": 3, "plan": 3,
    "eval": 4,
    "train": 5,
    "config_schemas": 6, "demo": 6,
    "hydra_app": 7, "cli": 8, "__main__": 9,
}


def module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def part_of(mod: str) -> str:
    """The floor's key of a module: its first part under the package; any ``__main__`` is an entry point (top)."""
    parts = mod.split(".")
    if parts[-1] == "__main__":
        return "__main__"
    return parts[1] if len(parts) > 1 else "__init__"


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _resolve(mod: str, is_pkg: bool, node: ast.ImportFrom | ast.Import, known: set[str]) -> list[str]:
    """The package modules one import statement reads (``from a import b`` is ``a.b`` where that is a module)."""
    out: list[str] = []
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.startswith("scholar_agents"):
                out.append(alias.name)
        return [m for m in out if m in known]
    base = node.module or ""
    if node.level:
        pkg = mod.split(".") if is_pkg else mod.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join(pkg + ([base] if base else []))
    if not base.startswith("scholar_agents"):
        return []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in known else base)
    return [m for m in out if m in known]


def edges() -> list[tuple[str, str, int, bool]]:
    """(importer, imported, line, justified) for every import of a package module by a package module."""
    mods = modules()
    known = set(mods)
    found = []
    for mod, path in mods.items():
        lines = path.read_text().splitlines()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            near = " ".join(lines[max(0, node.lineno - 2): node.end_lineno or node.lineno])
            for target in _resolve(mod, path.name == "__init__.py", node, known):
                # a module importing its own package's API (``from scholar_agents.llm import Completion`` inside
                # llm/) is the package talking to itself, not an edge between two files
                if target != mod and not mod.startswith(target + "."):
                    found.append((mod, target, node.lineno, "# upward:" in near))
    return found


def circles(found: list[tuple[str, str, int, bool]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each a circle of imports."""
    graph: dict[str, set[str]] = {}
    for a, b, _, _ in found:
        graph.setdefault(a, set()).add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def upward(found: list[tuple[str, str, int, bool]]) -> list[tuple[str, str, int, bool]]:
    out = []
    for a, b, line, ok in found:
        fa, fb = FLOORS.get(part_of(a)), FLOORS.get(part_of(b))
        if fa is None or fb is None:
            continue
        if fb > fa:
            out.append((a, b, line, ok))
    return out


def unknown_parts() -> list[str]:
    return sorted({part_of(m) for m in modules()} - set(FLOORS) - {"__init__"})


def largest(n: int = 10) -> list[tuple[int, str]]:
    sizes = [(len(p.read_text().splitlines()), str(p.relative_to(ROOT))) for p in PACKAGE.rglob("*.py")]
    return sorted(sizes, reverse=True)[:n]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 on a circle or an unjustified upward import")
    args = ap.parse_args(argv)
    found = edges()
    circ = circles(found)
    up = upward(found)
    bad = [u for u in up if not u[3]]
    print(f"{len(modules())} modules, {len(found)} imports between them")
    print(f"circles: {len(circ)}")
    for c in circ:
        print("  " + " <-> ".join(c))
    print(f"upward imports: {len(up)} ({len(bad)} without a '# upward:' reason)")
    for a, b, line, ok in sorted(set(up)):
        print(f"  {'ok ' if ok else 'BAD'} {a}:{line} -> {b}")
    if unknown_parts():
        print(f"parts with no floor in FLOORS: {', '.join(unknown_parts())}")
    print("largest files:")
    for size, path in largest():
        print(f"  {size:5d}  {path}")
    if args.check and (circ or bad or unknown_parts()):
        return 1
    return 0


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the report quietly
    sys.exit(main())
