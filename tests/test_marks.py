"""The fast set (`make test-fast`: not slow, vllm, slurm or browser) needs none of Slurm, vLLM or Chromium.

Checked statically, without running the suite: collect the fast set, then read each test's code and the code of the
fixtures it asks for (transitively; docstrings and comments do not count) for what starts one of those: a Slurm
command or submitit's Slurm executor, a vLLM engine or server, a browser. A test that needs one carries its mark
(pyproject.toml says what each mark means); this keeps `make test-fast` passing on a machine with none of them."""

import ast
import re
import subprocess
import sys
import textwrap

import pytest

from tests.paths import REPO, TESTS

FAST = "not slow and not vllm and not slurm and not browser"
NEEDS = {
    "slurm": [r"""cluster=['"]slurm['"]""", r"\bSlurmExecutor\b", r"\b(slurm|two_node)_cluster\b",
              r"""\[\s*['"](srun|sbatch|squeue|scontrol|sacct|salloc)['"]""", r"""which\(['"](srun|sbatch)['"]\)"""],
    "vllm": [r"\bvllm_server\b", r"\brunning_vllm_server\b",
             r"\bstart_selector_server\b", r"vllm\.entrypoints", r"^\s*(import|from) vllm\b", r"\bVLLMBackend\(",
             r"rollout_engine=vllm"],
    "browser": [r"\bbrowser\b", r"\bwebdriver\b", r"\bselenium\b", r"/usr/bin/chromium"],
}


def _code(fn: ast.FunctionDef) -> str:
    """A function's code without its docstring (ast drops comments)."""
    body = fn.body[1:] if (fn.body and isinstance(fn.body[0], ast.Expr)
                           and isinstance(fn.body[0].value, ast.Constant)
                           and isinstance(fn.body[0].value.value, str)) else fn.body
    clone = ast.FunctionDef(name=fn.name, args=fn.args, body=body or [ast.Pass()], decorator_list=[],
                            returns=None, type_params=[])
    return ast.unparse(ast.fix_missing_locations(clone))


def _functions(path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text())
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _fixture_defs() -> dict[str, ast.FunctionDef]:
    defs = {}
    for path in sorted((TESTS / "fixtures").glob("*.py")) + [TESTS / "conftest.py"]:
        defs.update(_functions(path))
    return defs


def needs(code_of_test: str, fixtures: dict[str, ast.FunctionDef], arg_names: list[str]) -> dict[str, str]:
    """{need: the line that shows it} for one test's code and the fixtures it reaches."""
    seen, todo, codes = set(), list(arg_names), [code_of_test]
    while todo:
        name = todo.pop()
        if name in seen or name not in fixtures:
            continue
        seen.add(name)
        fn = fixtures[name]
        codes.append(_code(fn))
        todo += [a.arg for a in fn.args.args]
    found = {}
    for need, patterns in NEEDS.items():
        for code in codes:
            for line in code.splitlines():
                if any(re.search(p, line) for p in patterns):
                    found.setdefault(need, line.strip())
    return found


def fast_set() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", FAST, "-p", "no:cacheprovider",
                          str(TESTS)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


@pytest.fixture(scope="module")
def fast_ids():
    return fast_set()


def test_the_fast_set_needs_no_slurm_vllm_or_browser(fast_ids):
    assert len(fast_ids) > 300  # the collection ran
    fixtures = _fixture_defs()
    cache: dict = {}
    offenders = []
    for node in fast_ids:
        rel, _, name = node.partition("::")
        if rel == "tests/test_marks.py":  # its own examples
            continue
        name = name.split("[")[0].split("::")[-1]
        path = REPO / rel
        if path not in cache:
            cache[path] = _functions(path)
        local = cache[path]
        fn = local.get(name)
        if fn is None:  # a method of a test class
            continue
        scope = {**fixtures, **{k: v for k, v in local.items() if k != name}}
        found = needs(_code(fn), scope, [a.arg for a in fn.args.args])
        offenders += [f"{node}: needs {need} ({line[:100]})" for need, line in found.items()]
    assert not offenders, "mark these tests (pyproject.toml [tool.pytest.ini_options] markers):\n" + "\n".join(offenders)


def test_the_check_sees_each_need():
    fixtures = {fn.name: fn for fn in ast.parse(textwrap.dedent('''
        def vllm_server(smollm2_dir):
            return running_vllm_server(smollm2_dir)
        def selenium_page(browser):
            return browser
    ''')).body}
    job = _code(ast.parse('def t(tmp_path):\n    submitit.AutoExecutor(cluster="slurm", folder=tmp_path)').body[0])
    assert set(needs(job, fixtures, ["tmp_path"])) == {"slurm"}
    assert set(needs("def t(): pass", fixtures, ["vllm_server"])) == {"vllm"}
    assert set(needs("def t(): pass", fixtures, ["selenium_page"])) == {"browser"}
    doc_only = _code(ast.parse('def t():\n    """runs srun and vllm_server in a browser"""\n    x = 1').body[0])
    assert needs(doc_only, fixtures, []) == {}
