"""The package's import graph: circles, imports that climb a floor, and the largest files.

    python scripts/import_graph.py            # the report (what docs/DEVELOPING.md "Layers" shows)
    python scripts/import_graph.py --check    # exit 1 on a circle, an unjustified upward or lazy import

Every ``import`` of a ``scholar_agents`` module counts, at module level or inside a function: a lazy import still
ties the two files together for a reader. The floors (``FLOORS``) are the layers of docs/DEVELOPING.md; an import
from a lower floor to a higher one is allowed only with a one-line ``# upward: <why>`` comment on the import line
or the line above it. A package import inside a function hides what a file depends on: it is allowed only with a
``# lazy: <why>`` comment there (a heavy library kept out of start-up, a test's fake looked up late).
tests/test_layers.py runs ``--check``.
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


def _reason(lines: list[str], node: ast.stmt, tag: str) -> bool:
    """A ``tag`` comment (``# upward:``, ``# lazy:``) on the statement's lines or the line above them."""
    return tag in " ".join(lines[max(0, node.lineno - 2): node.end_lineno or node.lineno])


def lazy_in_source(source: str, mod: str, is_pkg: bool, known: set[str]) -> list[tuple[int, bool]]:
    """(line, justified) for every import of a package module inside a function of one module's source."""
    lines = source.splitlines()
    found = []
    for fn in ast.walk(ast.parse(source)):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and _resolve(mod, is_pkg, node, known):
                    found.append((node.lineno, _reason(lines, node, "# lazy:")))
    return sorted(set(found))  # a nested function's imports are walked from each enclosing one


def lazy_imports() -> list[tuple[str, int, bool]]:
    """(importer, line, justified) for every package import inside a function, over the package."""
    mods = modules()
    return [(mod, line, ok) for mod, path in mods.items()
            for line, ok in lazy_in_source(path.read_text(), mod, path.name == "__init__.py", set(mods))]


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
            for target in _resolve(mod, path.name == "__init__.py", node, known):
                # a module importing its own package's API (``from scholar_agents.llm import Completion`` inside
                # llm/) is the package talking to itself, not an edge between two files
                if target != mod and not mod.startswith(target + "."):
                    found.append((mod, target, node.lineno, _reason(lines, node, "# upward:")))
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
    ap.add_argument("--check", action="store_true",
                    help="exit 1 on a circle, an unjustified upward import or an unjustified lazy import")
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
    lazy = lazy_imports()
    bad_lazy = [x for x in lazy if not x[2]]
    print(f"package imports inside functions: {len(lazy)} ({len(bad_lazy)} without a '# lazy:' reason)")
    for mod, line, _ in bad_lazy:
        print(f"  BAD {mod}:{line}")
    if unknown_parts():
        print(f"parts with no floor in FLOORS: {', '.join(unknown_parts())}")
    print("largest files:")
    for size, path in largest():
        print(f"  {size:5d}  {path}")
    if args.check and (circ or bad or bad_lazy or unknown_parts()):
        return 1
    return 0


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the report quietly
    sys.exit(main())
