"""The package's floors (docs/DEVELOPING.md "Layers"): no import circle, no import that climbs a floor without a
one-line reason, and the ground floor (``runtime/``) importing nothing of the package above it."""

import importlib.util

from tests.paths import REPO


def _graph():
    spec = importlib.util.spec_from_file_location("import_graph", REPO / "scripts" / "import_graph.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


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
