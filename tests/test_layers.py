"""The package's floors (docs/DEVELOPING.md "Layers"): no import circle, no import that climbs a floor without a
one-line reason, and the ground floor (``runtime/``) importing nothing of the package above it. And outside the
package: no test module, script or benchmark imports a test module (what two share goes to tests/fixtures/)."""

import ast
from pathlib import Path

from tests.fixtures.script_loader import load_script
from tests.paths import REPO


def _graph():
    return load_script("import_graph")


def test_no_circles_and_no_unjustified_upward_imports():
    g = _graph()
    found = g.edges()
    assert len(found) > 500  # the walker sees the package (module-level and lazy imports alike)
    assert g.circles(found) == []
    assert [f"{a}:{line} -> {b}" for a, b, line, ok in g.upward(found) if not ok] == []
    assert g.unknown_parts() == [], "a new top-level part of the package needs its floor in FLOORS"


def test_the_ground_floor_imports_only_the_ground_floor():
    g = _graph()
    out = [(a, b) for a, b, _, _ in g.edges() if g.FLOORS.get(g.part_of(a)) == 0 and g.FLOORS.get(g.part_of(b)) != 0]
    assert out == []


def test_the_checker_sees_a_circle_and_a_climb():
    g = _graph()
    fake = [("scholar_agents.llm.a", "scholar_agents.train.b", 3, False),
            ("scholar_agents.train.b", "scholar_agents.llm.a", 5, False),
            ("scholar_agents.papers.c", "scholar_agents.eval.d", 9, True)]
    assert g.circles(fake) == [["scholar_agents.llm.a", "scholar_agents.train.b"]]
    up = g.upward(fake)
    assert [(a, ok) for a, _, _, ok in up] == [("scholar_agents.llm.a", False), ("scholar_agents.papers.c", True)]


def _is_helper(module: str) -> bool:
    """What a test may import from tests/: ``tests.paths``, ``tests.fixtures[.*]`` and any conftest."""
    parts = module.split(".")
    return module in ("tests", "tests.paths") or parts[:2] == ["tests", "fixtures"] or parts[-1] == "conftest"


def imports_of_test_modules(root: Path) -> list[str]:
    """``<file>:<line> imports <module>`` for every import, in tests/, scripts/ and bench/ under ``root``, of a module
    of tests/ that is not a helper (:func:`_is_helper`); package ``__init__``s are not test modules."""

    def test_module(name: str) -> bool:
        path = root.joinpath(*name.split("."))
        return name.split(".")[0] == "tests" and path.with_suffix(".py").is_file() and not _is_helper(name)

    found = []
    for folder in ("tests", "scripts", "bench"):
        for path in sorted((root / folder).rglob("*.py")):
            rel = path.relative_to(root)
            package = list(rel.with_suffix("").parts[:-1])
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:  # relative: from the importer's package
                        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                    # `from a import b` reads the module a.b where there is one, else a
                    names = [f"{base}.{a.name}" if test_module(f"{base}.{a.name}") else base for a in node.names]
                else:
                    continue
                found += [(str(rel), node.lineno, n) for n in dict.fromkeys(names) if test_module(n)]
    return [f"{rel}:{line} imports {n}" for rel, line, n in sorted(found)]


def test_no_test_module_is_imported_by_another_test_a_script_or_a_benchmark():
    assert imports_of_test_modules(REPO) == []


def test_the_test_import_checker_sees_each_way_of_importing_a_test_module(tmp_path):
    files = {
        "tests/__init__.py": "",
        "tests/paths.py": "",
        "tests/conftest.py": "",
        "tests/fixtures/__init__.py": "",
        "tests/fixtures/harness.py": "",
        "tests/a/__init__.py": "",
        "tests/a/test_two.py": "",
        "tests/a/test_one.py": "\n".join([
            "from tests.paths import REPO",                  # helpers: allowed
            "from tests.fixtures.harness import run",
            "from tests.fixtures import harness",
            "import tests.conftest",
            "from tests import a",                           # a package's __init__
            "from tests.a.test_two import shared",           # line 6
            "from tests.a import test_two",                  # line 7
            "from .test_two import shared",                  # line 8
            "def f():",
            "    import tests.a.test_two as t",               # line 10: a lazy import counts too
        ]),
        "scripts/measure.py": "import tests.a.test_two as harness\nimport tests.fixtures.harness\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert imports_of_test_modules(tmp_path) == [
        "scripts/measure.py:1 imports tests.a.test_two",
        "tests/a/test_one.py:6 imports tests.a.test_two",
        "tests/a/test_one.py:7 imports tests.a.test_two",
        "tests/a/test_one.py:8 imports tests.a.test_two",
        "tests/a/test_one.py:10 imports tests.a.test_two",
    ]



def test_package_imports_sit_at_module_top_unless_a_comment_says_why_not():
    """A function-local import hides what depends on what: it is kept only for a heavy optional dependency or a
    test's late lookup, and says so (``# lazy: ...``)."""
    assert [f"{mod}:{line}" for mod, line, ok in _graph().lazy_imports() if not ok] == []


def test_the_lazy_import_checker_wants_a_reason():
    known = {"scholar_agents.llm", "scholar_agents.llm.base", "scholar_agents.llm.hf_backend",
             "scholar_agents.llm.model_init", "scholar_agents.llm.sibling", "scholar_agents.train.sft"}
    source = "\n".join([
        "from scholar_agents.llm import base",           # module top: not lazy
        "def f():",
        "    from scholar_agents.llm import hf_backend",  # line 3: no reason
        "    # lazy: imports torch",
        "    from scholar_agents.llm import model_init",  # line 5: the reason above it
        "    from . import sibling  # lazy: a test's fake",  # line 6: the reason on the line
        "    import json",                                 # not ours
        "    import scholar_agents.train.sft",             # line 8: line 6's reason is not its own
    ])
    found = _graph().lazy_in_source(source, "scholar_agents.llm.user", False, known)
    assert found == [(3, False), (5, True), (6, True), (8, False)]
