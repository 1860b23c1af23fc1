"""Import rules from docs/architecture.md, checked in a fresh interpreter and by reading the sources."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "llmcalc"
HEAVY = ("torch", "numpy", "pandas", "matplotlib", "fvcore", "transformers")


def heavy_modules_after(code: str) -> list[str]:
    found = f"sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))"
    probe = code + f"\nimport sys, json\nprint(json.dumps({found}), file=sys.stderr)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_import_llmcalc_loads_nothing_heavy():
    assert heavy_modules_after("import llmcalc") == []


@pytest.mark.parametrize("argv", [["params", "llama-3-8b"], ["params", "deepseek-v3", "--format", "json"], ["presets"]])
def test_analytic_commands_do_not_import_heavy_libraries(argv):
    code = f"import sys\nfrom llmcalc.cli import cli\ncli.main({argv!r}, prog_name='llmcalc')"
    assert heavy_modules_after(code) == []


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_analytic_is_standard_library_only():
    for path in sorted((PACKAGE / "analytic").glob("*.py")):
        outside = {n for n in _imports(path) if n not in sys.stdlib_module_names}
        assert not outside, f"{path.name} imports {outside}"


def test_core_modules_are_standard_library_only():
    for name in ("units.py", "spec.py", "hfconfig.py", "presets.py", "errors.py", "__init__.py"):
        outside = {n for n in _imports(PACKAGE / name) if n not in sys.stdlib_module_names}
        assert not outside, f"{name} imports {outside}"


def _relative_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {(node.module or "").split(".")[0] for node in ast.walk(tree) if isinstance(node,
                                                                                       ast.ImportFrom) and node.level}


def test_torch_only_in_profiling():
    for path in PACKAGE.rglob("*.py"):
        if "profiling" not in path.parts:
            assert not {"torch", "fvcore"} & _imports(path), f"{path} imports torch/fvcore"


def test_imports_flow_one_way():
    """analytic never imports views/report/profiling/cli; views never report/profiling/cli; report never
    profiling or cli; render only the vocabulary (docs/architecture.md)."""
    for path in (PACKAGE / "analytic").glob("*.py"):
        assert not {"report", "profiling", "cli", "views", "render", "fallback"} & _relative_imports(path), path
    for path in (PACKAGE / "views").glob("*.py"):
        assert not {"report", "profiling", "cli"} & _relative_imports(path), path
    for path in (PACKAGE / "report").glob("*.py"):
        assert not {"profiling", "cli"} & _relative_imports(path), path
    for path in (PACKAGE / "render").glob("*.py"):
        assert _relative_imports(path) <= {"", "vocabulary"}, path


def _module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    """Module -> the llmcalc modules it imports, at module level or inside a function (a function's import is
    still a dependency of its module)."""
    modules = {_module_name(p, package): p for p in package.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module
                for alias in node.names:
                    deps.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
        graph[name] = {d for d in deps if d in modules and d != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


# Circles being removed on another branch (h23-spec: hfconfig + hfconfig_ssm become one package); the list may
# only shrink: an entry that no longer is a circle fails the test, so it is deleted when fixed.
PENDING_CYCLES = [{"llmcalc.hfconfig", "llmcalc.hfconfig_ssm"}]


def test_no_import_cycle():
    cycles = import_cycles(import_graph())
    new = [sorted(c) for c in cycles if c not in PENDING_CYCLES]
    assert not new, f"import circles in llmcalc (module- or function-level imports): {new}"
    fixed = [sorted(c) for c in PENDING_CYCLES if c not in cycles]
    assert not fixed, f"no longer a circle: delete from PENDING_CYCLES: {fixed}"


def test_the_cycle_check_sees_cycles(tmp_path):
    pkg = tmp_path / "llmcalc"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from ..a import x\n")
    (pkg / "c.py").write_text("from . import a\n")
    assert import_cycles(import_graph(pkg)) == [{"llmcalc.a", "llmcalc.sub.b"}]


def test_cli_starts_with_click_and_the_tiny_modules_only():
    """llmcalc/cli/ imports at module level click, itself and the tiny modules; everything else inside the
    commands (`python -X importtime -m llmcalc params llama-3-8b` stays short)."""
    tiny = {"units", "validate", "dtypes", "errors", "vocabulary"}
    for path in sorted((PACKAGE / "cli").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level:
                top = (node.module or "").split(".")[0]
                if node.level == 1:
                    continue  # llmcalc.cli's own modules
                assert top in tiny, f"{path.name} imports ..{node.module} at start-up"
            elif isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                outside = {n.split(".")[0] for n in names if n} - set(sys.stdlib_module_names) - {"click"}
                assert not outside, f"{path.name} imports {outside} at start-up"
